// Job types as a producer knows them: for each type name, the queue its handler runs on and the zod schema of its
// payload. The same rule applies wherever a job is enqueued — the ops API and app code (Keel's
// shared/jobs/typedEnqueue.ts, from the registered handlers) and this client (from the map you give it): the queue
// defaults to the handler's, another queue is refused, and the payload must pass the schema (the parsed value is
// what is stored). A wrong payload for a typed client is a compile error too (JobInput below).
import type { z } from 'zod';
import { ValidationError, type OnParentFailure, type ParentRef } from './rules.js';

export const DEFAULT_QUEUE = 'default';

export interface JobTypeSpec {
  readonly queue?: string | undefined; // the queue jobs of this type run on (their handler's)
  readonly payload?: z.ZodType | undefined; // the handler's payload schema
}

export type JobTypeMap = Readonly<Record<string, JobTypeSpec>>;

// What a producer passes for a payload: the schema's input (before defaults and transforms).
export type PayloadOf<S extends JobTypeSpec> = [NonNullable<S['payload']>] extends [never]
  ? unknown
  : NonNullable<S['payload']> extends z.ZodType
    ? z.input<NonNullable<S['payload']>>
    : unknown;

// Everything of a job but its type and payload.
export interface JobOptions {
  queue?: string; // default: the type's queue, else "default"
  priority?: number; // higher runs first, -1,000,000 to 1,000,000
  delayMs?: number; // or runAt, not both
  runAt?: Date;
  tags?: string[];
  idempotencyKey?: string; // unique among hot jobs of the same queue and type
  maxAttempts?: number;
  expiresAt?: Date;
  after?: ParentRef[]; // waits for these jobs (ids, or { index } in the same batch): a flow
  onFailure?: OnParentFailure; // with after: when a parent is dead-lettered (default 'deadLetter')
}

type JobOfType<M extends JobTypeMap, K extends keyof M & string> = JobOptions & {
  type: K;
} & (undefined extends PayloadOf<M[K]> ? { payload?: PayloadOf<M[K]> } : { payload: PayloadOf<M[K]> });

// One job for a client typed by the map M: a union over its types, so `payload` is checked against `type`.
export type JobInput<M extends JobTypeMap = JobTypeMap> = { [K in keyof M & string]: JobOfType<M, K> }[keyof M &
  string];

// Keeps the literal type names and schemas of a map written inline: jobTypes({ 'invoice.send': { payload: ... } }).
export function jobTypes<const M extends JobTypeMap>(map: M): M {
  return map;
}

// The shape of a Keel handler definition (defineHandler) as far as a producer needs it.
export interface HandlerLike {
  readonly type: string;
  readonly options: JobTypeSpec;
}

export type JobTypesOf<H extends readonly HandlerLike[]> = {
  [D in H[number] as D['type']]: { queue?: string; payload: D['options']['payload'] };
};

// The job type map of handler definitions a producer can import (a monorepo, a shared package of handlers).
export function jobTypesFrom<const H extends readonly HandlerLike[]>(...handlers: H): JobTypesOf<H> {
  const map: Record<string, JobTypeSpec> = {};
  for (const h of handlers) map[h.type] = { queue: h.options.queue, payload: h.options.payload };
  return map as JobTypesOf<H>;
}

function field(prefix: string, name: string): string {
  return prefix ? `${prefix}.${name}` : name;
}

function issuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `.${String(p)}`;
  return out;
}

// Applies a job type's rules to one job: the queue (default the type's, another one refused) and the payload
// (parsed by the schema; ValidationError naming "payload.amount", with the prefix "jobs[2]" in a batch).
export function applyJobType<J extends { type: string; queue?: string | undefined; payload?: unknown }>(
  spec: JobTypeSpec,
  job: J,
  prefix: string,
): J & { queue: string } {
  const queue = job.queue ?? spec.queue ?? DEFAULT_QUEUE;
  if (spec.queue && queue !== spec.queue) {
    throw new ValidationError(
      field(prefix, 'queue'),
      `jobs of type "${job.type}" run on queue "${spec.queue}" (its handler's queue), not "${queue}"`,
    );
  }
  let payload = job.payload;
  if (spec.payload) {
    const r = spec.payload.safeParse(job.payload);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new ValidationError(field(prefix, `payload${issuePath(issue.path)}`), issue.message);
    }
    payload = r.data;
    // The parsed value is what is stored, and the worker checks the stored payload with the same schema before the
    // handler runs. A schema whose output it does not accept again, or changes again (a type-changing or
    // non-idempotent transform), would fail every such job as fatal at run time: refuse it here, where it is seen.
    const again = spec.payload.safeParse(payload);
    if (!again.success || JSON.stringify(again.data) !== JSON.stringify(payload)) {
      throw new ValidationError(
        field(prefix, 'payload'),
        `the payload schema of job type "${job.type}" does not give back its own output when the worker checks ` +
          'the stored payload again (a transform that changes the type or the value): make its transforms ' +
          'idempotent, or move them into the handler',
      );
    }
  }
  return { ...job, queue, ...(payload !== undefined ? { payload } : {}) };
}

// A type the map does not name: refused when the client was given a map (the ops API refuses it too, unless
// KEEL_ALLOW_UNKNOWN_JOB_TYPES).
export function unknownTypeError(
  prefix: string,
  type: unknown,
  known: readonly string[],
  hint: string,
): ValidationError {
  return new ValidationError(
    field(prefix, 'type'),
    `no handler is registered for job type "${String(type)}" (registered: ${known.join(', ') || 'none'}); ${hint}`,
  );
}

// Field prefix for job i of a call: none for a single job, jobs[i] in a batch (as the ops API names them).
export function jobPrefix(i: number, count: number): string {
  return count === 1 ? '' : `jobs[${i}]`;
}

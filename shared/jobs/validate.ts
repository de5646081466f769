// Validation shared by every engine: bad input is refused before it reaches a database, naming the field at fault.
import { z } from 'zod';
import type { EnqueueRequest, QueueSettingsPatch } from './contract.js';

export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024;
// Jobs per enqueueMany call (the ops API's batch body takes as many): one procedure call, one transaction.
export const MAX_BATCH = 20_000;

export class ValidationError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'ValidationError';
  }
}

const name = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_.:-]+$/, 'letters, digits and _ . : - only');

// Text a database can store: no NUL (PostgreSQL text and jsonb refuse U+0000) and well-formed UTF-16 (a lone
// surrogate has no UTF-8 form; jsonb refuses its \uD8xx escape). Returns why not, or null.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export function textProblem(s: string): string | null {
  if (s.includes('\u0000')) return 'must not contain the NUL character (\\u0000)';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (it contains a lone surrogate)';
  return null;
}

// The first string or object key inside a JSON value that textProblem refuses: its path and why. Iterative, so a
// deeply nested payload cannot overflow the stack.
export function jsonTextProblem(value: unknown): { path: (string | number)[]; message: string } | null {
  interface Node {
    v: unknown;
    key: string | number | null;
    parent: Node | null;
  }
  const pathOf = (n: Node | null, last?: string): (string | number)[] => {
    const out: (string | number)[] = last !== undefined ? [last] : [];
    for (let at = n; at && at.key !== null; at = at.parent) out.unshift(at.key);
    return out;
  };
  const stack: Node[] = [{ v: value, key: null, parent: null }];
  while (stack.length > 0) {
    const node = stack.pop()!;
    const v = node.v;
    if (typeof v === 'string') {
      const m = textProblem(v);
      if (m) return { path: pathOf(node), message: m };
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], key: i, parent: node });
    } else if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v);
      for (const [k] of entries) {
        const km = textProblem(k);
        if (km) return { path: pathOf(node, k), message: `key ${km}` };
      }
      for (let i = entries.length - 1; i >= 0; i--)
        stack.push({ v: entries[i]![1], key: entries[i]![0], parent: node });
    }
  }
  return null;
}

const storableText = z.string().superRefine((v, ctx) => {
  const m = textProblem(v);
  if (m) ctx.addIssue({ code: 'custom', message: m });
});
const storableJson = z.unknown().superRefine((v, ctx) => {
  const r = jsonTextProblem(v);
  if (r) ctx.addIssue({ code: 'custom', message: r.message, path: r.path });
});

const enqueueSchema = z
  .object({
    queue: name,
    type: name,
    payload: storableJson.optional(),
    priority: z.number().finite().int().min(-1_000_000).max(1_000_000).optional(),
    delayMs: z
      .number()
      .finite()
      .int()
      .min(0)
      .max(366 * 24 * 3600 * 1000)
      .optional(),
    runAt: z.date().optional(),
    tags: z
      .array(storableText.pipe(z.string().min(1).max(64)))
      .max(16)
      .optional(),
    idempotencyKey: storableText.pipe(z.string().min(1).max(200)).optional(),
    maxAttempts: z.number().finite().int().min(1).max(1000).optional(),
    expiresAt: z.date().optional(),
  })
  .strict()
  .refine((j) => !(j.delayMs !== undefined && j.runAt !== undefined), {
    message: 'give delayMs or runAt, not both',
    path: ['runAt'],
  });

function firstIssue(err: z.ZodError, prefix: string): ValidationError {
  const issue = err.issues[0]!;
  const path = issue.path.length
    ? issue.path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i ? `.${String(p)}` : String(p))).join('')
    : '(root)';
  return new ValidationError(prefix ? `${prefix}.${path}` : path, issueMessage(issue));
}

// zod says "expected number, received number" for Infinity/NaN (e.g. JSON's 1e400): say what is wrong.
export function issueMessage(issue: { code: string; message: string; expected?: unknown; received?: unknown }): string {
  if (
    issue.code === 'invalid_type' &&
    issue.expected === 'number' &&
    (issue.received === 'Infinity' || issue.received === 'NaN' || /received number$/.test(issue.message))
  ) {
    return 'must be a finite number (this one is out of range)';
  }
  return issue.message;
}

// The same rules as enqueueSchema, checked by hand: a 20,000-job batch validates in milliseconds instead of a second.
// Anything it does not accept goes through the schema, which gives the error message (so the two must agree on what
// is valid; test/jobs/validate.test.ts compares them).
const ENQUEUE_KEYS = new Set([
  'queue',
  'type',
  'payload',
  'priority',
  'delayMs',
  'runAt',
  'tags',
  'idempotencyKey',
  'maxAttempts',
  'expiresAt',
]);
const NAME_RE = /^[A-Za-z0-9_.:-]+$/;
const isName = (v: unknown) => typeof v === 'string' && v.length >= 1 && v.length <= 128 && NAME_RE.test(v);
const intIn = (v: unknown, min: number, max: number) =>
  v === undefined || (Number.isInteger(v) && (v as number) >= min && (v as number) <= max);
const dateOk = (v: unknown) => v === undefined || (v instanceof Date && !Number.isNaN(v.getTime()));
const strLen = (v: unknown, max: number) =>
  typeof v === 'string' && v.length >= 1 && v.length <= max && textProblem(v) === null;
export function plainValid(job: unknown): boolean {
  if (typeof job !== 'object' || job === null || Array.isArray(job) || Object.getPrototypeOf(job) !== Object.prototype)
    return false;
  const j = job as Record<string, unknown>;
  for (const k of Object.keys(j)) if (!ENQUEUE_KEYS.has(k)) return false;
  if (!isName(j.queue) || !isName(j.type)) return false;
  if (
    !intIn(j.priority, -1_000_000, 1_000_000) ||
    !intIn(j.delayMs, 0, 366 * 24 * 3600 * 1000) ||
    !intIn(j.maxAttempts, 1, 1000)
  )
    return false;
  if (!dateOk(j.runAt) || !dateOk(j.expiresAt)) return false;
  if (j.delayMs !== undefined && j.runAt !== undefined) return false;
  if (j.payload !== undefined && jsonTextProblem(j.payload) !== null) return false;
  if (j.idempotencyKey !== undefined && !strLen(j.idempotencyKey, 200)) return false;
  if (j.tags !== undefined) {
    if (!Array.isArray(j.tags) || j.tags.length > 16) return false;
    for (const t of j.tags) if (!strLen(t, 64)) return false;
  }
  return true;
}

// Returns the JSON document an engine stores for each job; throws ValidationError naming e.g. "jobs[3].payload".
export function prepareEnqueue(
  jobs: EnqueueRequest[],
  maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES,
): Record<string, unknown>[] {
  if (!Array.isArray(jobs)) throw new ValidationError('jobs', 'must be an array');
  if (jobs.length > MAX_BATCH)
    throw new ValidationError('jobs', `at most ${MAX_BATCH} jobs per batch (got ${jobs.length})`);
  return jobs.map((job, i) => {
    const prefix = jobs.length === 1 ? '' : `jobs[${i}]`;
    let j: z.infer<typeof enqueueSchema>;
    if (plainValid(job)) j = job as z.infer<typeof enqueueSchema>;
    else {
      const parsed = enqueueSchema.safeParse(job);
      if (!parsed.success) throw firstIssue(parsed.error, prefix);
      j = parsed.data;
    }
    let payloadText: string | undefined;
    try {
      payloadText = JSON.stringify(j.payload ?? null);
    } catch (err) {
      throw new ValidationError(
        prefix ? `${prefix}.payload` : 'payload',
        `is not JSON-serialisable: ${(err as Error).message}`,
      );
    }
    const size = Buffer.byteLength(payloadText ?? 'null', 'utf8');
    if (size > maxPayloadBytes) {
      throw new ValidationError(
        prefix ? `${prefix}.payload` : 'payload',
        `is ${size} bytes of JSON; the limit is ${maxPayloadBytes} bytes (KEEL_MAX_PAYLOAD_BYTES)`,
      );
    }
    return {
      queue: j.queue,
      type: j.type,
      payload: j.payload ?? null,
      priority: j.priority ?? 0,
      ...(j.runAt ? { runAt: j.runAt.toISOString() } : {}),
      ...(j.delayMs !== undefined ? { delayMs: j.delayMs } : {}),
      tags: j.tags ?? [],
      ...(j.idempotencyKey !== undefined ? { idempotencyKey: j.idempotencyKey } : {}),
      ...(j.maxAttempts !== undefined ? { maxAttempts: j.maxAttempts } : {}),
      ...(j.expiresAt ? { expiresAt: j.expiresAt.toISOString() } : {}),
    };
  });
}

const patchSchema = z
  .object({
    paused: z.boolean().optional(),
    maxConcurrency: z.number().finite().int().min(0).max(100_000).nullable().optional(),
    zombieTimeoutSeconds: z
      .number()
      .finite()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .optional(),
    zombiePolicy: z.enum(['dlq', 'retry']).optional(),
    maxAttempts: z.number().finite().int().min(1).max(1000).optional(),
    archiveRetentionSeconds: z.number().finite().int().min(60).optional(),
    dlqRetentionSeconds: z.number().finite().int().min(60).optional(),
    metricsRetentionSeconds: z.number().finite().int().min(60).optional(),
  })
  .strict();

export function validateQueuePatch(queue: string, patch: QueueSettingsPatch): QueueSettingsPatch {
  const n = name.safeParse(queue);
  if (!n.success) throw firstIssue(n.error, 'name');
  const parsed = patchSchema.safeParse(patch);
  if (!parsed.success) throw firstIssue(parsed.error, '');
  return parsed.data;
}

export function assertPositiveInt(field: string, value: number, max = 100_000): void {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new ValidationError(field, `must be an integer from 1 to ${max} (got ${value})`);
  }
}

const JOB_ID = /^[1-9][0-9]{0,18}$/;
const MAX_BIGINT = 9223372036854775807n;
// A positive 64-bit id as a decimal string: anything else can name no job in any engine.
export function isJobId(value: unknown): value is string {
  return typeof value === 'string' && JOB_ID.test(value) && BigInt(value) <= MAX_BIGINT;
}

export function assertJobId(field: string, value: unknown): string {
  if (!isJobId(value)) throw new ValidationError(field, 'must be a job id (a positive integer as a string)');
  return value;
}

// The handlers' per-type max attempts as the JSON object the rescue procedures take (null when there are none).
export function typeMaxAttemptsJson(byType: Readonly<Record<string, number>> | undefined): string | null {
  if (!byType) return null;
  const entries = Object.entries(byType);
  if (entries.length === 0) return null;
  for (const [type, n] of entries) {
    const t = name.safeParse(type);
    if (!t.success) throw new ValidationError(`maxAttemptsByType.${type}`, 'is not a valid job type');
    assertPositiveInt(`maxAttemptsByType.${type}`, n, 1000);
  }
  return JSON.stringify(Object.fromEntries(entries));
}

const SCHEDULE_NAME = /^[A-Za-z0-9_.:-]{1,100}$/;
export function assertScheduleName(field: string, value: unknown): string {
  if (typeof value !== 'string' || !SCHEDULE_NAME.test(value))
    throw new ValidationError(field, 'must be a schedule name (1-100 letters, digits and _ . : -)');
  return value;
}

export function assertTick(field: string, value: unknown): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new ValidationError(field, 'must be a valid Date');
  return value;
}

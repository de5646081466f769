// The rules every job to enqueue must pass, defined once for Keel and for this client: every limit (LIMITS), the
// zod schemas of a job's fields, and prepareEnqueue, which checks a batch and returns the JSON documents
// keel.enqueue_many / keel.EnqueueMany store. Keel's shared/jobs/validate.ts re-exports this module (it imports
// nothing but zod), so the ops API, the job stores and a producer using this package refuse the same input with
// the same field and message.
import { z } from 'zod';

// Keys starting with this are the scheduler's own (schedule:<name>:<tick>); Keel's shared/jobs/contract.ts holds
// the same constant for the stores (test/jobs/validate.test.ts checks that the two agree).
export const SCHEDULE_KEY_PREFIX = 'schedule:';

// Every limit on what the job domain accepts, defined once: the stores' argument checks, the ops API's request
// schemas (shared/ops/schemas.ts), the queue messages and the handler definitions read them from here.
const DAY_SECONDS = 24 * 3600;
export const LIMITS = {
  nameLength: 128, // queue and job type names
  scheduleNameLength: 100,
  batchJobs: 20_000, // jobs per enqueueMany call (and per ops API batch body): one procedure call, one transaction
  payloadBytes: 256 * 1024, // serialized payload, the default of KEEL_MAX_PAYLOAD_BYTES
  // Arrays and objects nested in a payload. JSON.stringify and the engines' JSON parsers recurse once per level: a
  // 256 KB body holds 100,000 levels, past V8's stack (~4,000 levels) and PostgreSQL's (~50,000), so without a bound
  // the depth decided between a 201 and a 500. 128 is inside every one of them (SQL Server's JSON functions too).
  payloadDepth: 128,
  maxPayloadBytesSetting: 16 * 1024 * 1024, // the most KEEL_MAX_PAYLOAD_BYTES may allow
  priority: 1_000_000, // from -priority to +priority
  delayMs: 366 * DAY_SECONDS * 1000,
  tags: 16,
  tagLength: 64,
  idempotencyKeyLength: 200,
  maxAttempts: 1000,
  maxConcurrency: 100_000,
  zombieTimeoutSeconds: 7 * DAY_SECONDS,
  // Retention settings are int columns on SQL Server; ten years keeps them far inside its range.
  minRetentionSeconds: 60,
  maxRetentionSeconds: 10 * 366 * DAY_SECONDS,
  claimJobs: 10_000, // jobs per claimNext call
  rescueJobs: 10_000, // jobs per rescueZombies call (KEEL_MAINT_RESCUE_BATCH)
  resurrectJobs: 1000, // jobs per resurrectByFilter call
  purgeBatchRows: 10_000, // rows per purge call: one short transaction (KEEL_MAINT_PURGE_BATCH)
  searchJobs: 500, // jobs per searchJobs page
  searchTextLength: 200,
  metricsWindowMinutes: 7 * 24 * 60,
  lastErrorChars: 4000, // of a failed attempt's error, as the processor stores it (retry, fail, interrupt)
  countCap: 1_000_000, // rows one bounded count reads at most (countJobs, dlqGroups): past it the count says "at least"
  dlqGroups: 500, // groups per dlqGroups page
  parents: 1000, // parents one job may wait for (after)
} as const;

export const DEFAULT_MAX_PAYLOAD_BYTES = LIMITS.payloadBytes;
export const MAX_BATCH = LIMITS.batchJobs;

export class ValidationError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'ValidationError';
  }
}

export const NAME_PATTERN = /^[A-Za-z0-9_.:-]+$/;
export const NAME_CHARS = 'letters, digits and _ . : - only';
// A queue or job type name.
export const jobName = z.string().min(1).max(LIMITS.nameLength).regex(NAME_PATTERN, NAME_CHARS);
// Text a database can store: no NUL (PostgreSQL text and jsonb refuse U+0000) and well-formed UTF-16 (a lone
// surrogate has no UTF-8 form; jsonb refuses its \uD8xx escape). Returns why not, or null.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export function textProblem(s: string): string | null {
  if (s.includes('\u0000')) return 'must not contain the NUL character (\\u0000)';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (it contains a lone surrogate)';
  return null;
}

// The same text made storable where it must not be refused (a failed attempt's error, a ctx.log line): each NUL and
// lone surrogate as U+FFFD.
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');
export function toStorableText(s: string): string {
  return textProblem(s) === null ? s : s.replace(/\u0000/g, '\uFFFD').replace(LONE_SURROGATES, '\uFFFD');
}

// The first string or object key inside a JSON value that textProblem refuses, number that is not finite (JSON
// has no Infinity or NaN: `1e400` in a request parses to Infinity, and JSON.stringify would store it as null), integer
// that is not a safe one, or BigInt: its path and why; or, at the value's own path, that it nests arrays and objects deeper than LIMITS.payloadDepth.
// Iterative, so a deeply nested payload cannot overflow the stack here.
// An integer past 2^53 is not one JSON carries faithfully: a double cannot hold every one (2^53 + 1 is 2^53), so the
// value may already have lost digits in the producer, and other readers of the payload (a .NET long, a Python int)
// take the digits JSON.stringify prints for the number meant. Ids and amounts that large go as strings. From 1e21 on,
// JSON.stringify prints a number in exponent form ("1e+21"), which every reader takes as the double it is: those
// (Number.MAX_VALUE) stay allowed. The ops API refuses the same in its request text (shared/ops/jsonText.ts).
const UNSAFE_INTEGER = `must be a safe integer (at most ${Number.MAX_SAFE_INTEGER} = 2^53 - 1 either way; a larger number may already have lost digits): send it as a string`;
// JSON.stringify throws "Do not know how to serialize a BigInt", naming no field.
const BIGINT =
  'is a BigInt, which JSON cannot carry: send it as a string (String(n)), or as a number if it is a safe integer';

// What is wrong with one string, number or BigInt of a JSON value (jsonTextProblem's rules for a value that holds no
// other), or null.
export function jsonScalarProblem(v: unknown): string | null {
  if (typeof v === 'string') return textProblem(v);
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return 'must be a finite number (JSON has no Infinity or NaN; 1e400 overflows)';
    if (!Number.isSafeInteger(v) && Math.abs(v) < 1e21 && Number.isInteger(v)) return UNSAFE_INTEGER;
    return null;
  }
  return typeof v === 'bigint' ? BIGINT : null;
}
export const JSON_TOO_DEEP = `must not nest arrays and objects more than ${LIMITS.payloadDepth} levels deep`;

export function jsonTextProblem(value: unknown): { path: (string | number)[]; message: string } | null {
  interface Node {
    v: unknown;
    key: string | number | null;
    parent: Node | null;
    depth: number; // containers around v
  }
  const pathOf = (n: Node | null, last?: string): (string | number)[] => {
    const out: (string | number)[] = last !== undefined ? [last] : [];
    for (let at = n; at && at.key !== null; at = at.parent) out.unshift(at.key);
    return out;
  };
  const stack: Node[] = [{ v: value, key: null, parent: null, depth: 0 }];
  const tooDeep = { path: [], message: JSON_TOO_DEEP };
  while (stack.length > 0) {
    const node = stack.pop()!;
    const v = node.v;
    const depth = node.depth + 1;
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'bigint') {
      const m = jsonScalarProblem(v);
      if (m) return { path: pathOf(node), message: m };
    } else if (Array.isArray(v)) {
      if (depth > LIMITS.payloadDepth) return tooDeep;
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], key: i, parent: node, depth });
    } else if (v !== null && typeof v === 'object') {
      if (depth > LIMITS.payloadDepth) return tooDeep;
      const entries = Object.entries(v);
      for (const [k] of entries) {
        const km = textProblem(k);
        if (km) return { path: pathOf(node, k), message: `key ${km}` };
      }
      for (let i = entries.length - 1; i >= 0; i--)
        stack.push({ v: entries[i]![1], key: entries[i]![0], parent: node, depth });
    }
  }
  return null;
}

// Text and JSON a database can store (no NUL, no lone surrogate).
export const storableText = (min: number, max: number) =>
  z
    .string()
    .min(min)
    .max(max)
    .superRefine((v, ctx) => {
      const m = textProblem(v);
      if (m) ctx.addIssue({ code: 'custom', message: m });
    });
export const storableJson = z.unknown().superRefine((v, ctx) => {
  const r = jsonTextProblem(v);
  if (r) ctx.addIssue({ code: 'custom', message: r.message, path: r.path });
});

export const int = (min: number, max: number) => z.number().int().min(min).max(max);

// Flows (docs/jobs.md, "Flows"): what a waiting job does when one of its parents is dead-lettered. 'deadLetter' (the
// default) sends it to the DLQ as 'parent_failed', and resurrecting the parent brings it back; 'skip' sends it to
// the DLQ as 'skipped' (not a failure); 'run' counts the failed parent as finished.
export const ON_PARENT_FAILURE = ['skip', 'run', 'deadLetter'] as const;
export type OnParentFailure = (typeof ON_PARENT_FAILURE)[number];
// A parent: a job id, or { index } naming an earlier job of the same enqueueMany batch (a flow in one call).
export type ParentRef = string | { index: number };
export const parentRef = z.union([
  z.string().regex(/^[1-9][0-9]{0,18}$/, 'must be a job id (a positive integer as a string) or { index: n }'),
  z.strictObject({ index: int(0, LIMITS.batchJobs - 1) }),
]);

// The fields of one job to enqueue, except its dates (Date in the store, ISO text in the ops API) and whether a
// queue is required (the ops API falls back to the handler's queue).
export const enqueueFields = {
  queue: jobName,
  type: jobName,
  payload: storableJson.optional(),
  priority: int(-LIMITS.priority, LIMITS.priority).optional(),
  delayMs: int(0, LIMITS.delayMs).optional(),
  tags: z.array(storableText(1, LIMITS.tagLength)).max(LIMITS.tags).optional(),
  idempotencyKey: storableText(1, LIMITS.idempotencyKeyLength).optional(),
  maxAttempts: int(1, LIMITS.maxAttempts).optional(),
  after: z.array(parentRef).max(LIMITS.parents).optional(),
  onFailure: z.enum(ON_PARENT_FAILURE).optional(),
};
export const NOT_BOTH_DELAY_AND_RUN_AT = {
  message: 'give delayMs or runAt, not both',
  path: ['runAt'],
};

// The instants every engine stores: SQL Server's datetime2 holds years 1 to 9999, and PostgreSQL reads no year 0
// (1 BC) nor a six-digit year in the ISO text a job's dates travel as. Outside them the insert failed: a 500.
export const DATE_RANGE = {
  min: new Date('0001-01-01T00:00:00.000Z'),
  max: new Date('9999-12-31T23:59:59.999Z'),
} as const;
const storableDate = z
  .date()
  .min(DATE_RANGE.min, 'must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (UTC)')
  .max(DATE_RANGE.max, 'must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (UTC)');

const enqueueSchema = z
  .strictObject({ ...enqueueFields, runAt: storableDate.optional(), expiresAt: storableDate.optional() })
  .refine((j) => !(j.delayMs !== undefined && j.runAt !== undefined), NOT_BOTH_DELAY_AND_RUN_AT);

export function firstIssue(err: z.ZodError, prefix: string): ValidationError {
  const issue = err.issues[0]!;
  return new ValidationError(fieldPath(prefix, issue.path), issueMessage(issue));
}

// A field's name in the API's style: "payload.items[3].qty" for the prefix "payload" and the path items, 3, qty.
export function fieldPath(prefix: string, keys: readonly PropertyKey[]): string {
  const path = keys.map((p, i) => (typeof p === 'number' ? `[${p}]` : i ? `.${String(p)}` : String(p))).join('');
  return prefix && path ? `${prefix}${path.startsWith('[') ? '' : '.'}${path}` : prefix || path || '(root)';
}

// zod says "expected number, received number" for Infinity/NaN (e.g. JSON's 1e400): say what is wrong.
export function issueMessage(issue: { code: string; message: string; expected?: unknown; received?: unknown }): string {
  if (
    issue.code === 'invalid_type' &&
    issue.expected === 'number' &&
    (issue.received === 'Infinity' || issue.received === 'NaN' || /received (number|Infinity|NaN)$/.test(issue.message))
  ) {
    return 'must be a finite number (this one is out of range)';
  }
  return issue.message;
}

// The same rules as enqueueSchema, checked by hand: a 20,000-job batch validates in milliseconds instead of a second.
// Anything it does not accept goes through the schema, which gives the error message (so the two must agree on what
// is valid; test/jobs/validate.test.ts compares them).
const ENQUEUE_KEYS = new Set([...Object.keys(enqueueFields), 'runAt', 'expiresAt']);
const isName = (v: unknown) =>
  typeof v === 'string' && v.length >= 1 && v.length <= LIMITS.nameLength && NAME_PATTERN.test(v);
const intIn = (v: unknown, min: number, max: number) =>
  v === undefined || (Number.isInteger(v) && (v as number) >= min && (v as number) <= max);
const dateOk = (v: unknown) =>
  v === undefined ||
  (v instanceof Date && v.getTime() >= DATE_RANGE.min.getTime() && v.getTime() <= DATE_RANGE.max.getTime());
const strLen = (v: unknown, max: number) =>
  typeof v === 'string' && v.length >= 1 && v.length <= max && textProblem(v) === null;
export function plainValid(job: unknown): boolean {
  if (typeof job !== 'object' || job === null || Array.isArray(job) || Object.getPrototypeOf(job) !== Object.prototype)
    return false;
  const j = job as Record<string, unknown>;
  for (const k of Object.keys(j)) if (!ENQUEUE_KEYS.has(k)) return false;
  if (!isName(j.queue) || !isName(j.type)) return false;
  if (
    !intIn(j.priority, -LIMITS.priority, LIMITS.priority) ||
    !intIn(j.delayMs, 0, LIMITS.delayMs) ||
    !intIn(j.maxAttempts, 1, LIMITS.maxAttempts)
  )
    return false;
  if (!dateOk(j.runAt) || !dateOk(j.expiresAt)) return false;
  if (j.after !== undefined || j.onFailure !== undefined) return false; // a flow's job: checked by the schema
  if (j.delayMs !== undefined && j.runAt !== undefined) return false;
  if (j.payload !== undefined && jsonTextProblem(j.payload) !== null) return false;
  if (j.idempotencyKey !== undefined && !strLen(j.idempotencyKey, LIMITS.idempotencyKeyLength)) return false;
  if (j.tags !== undefined) {
    if (!Array.isArray(j.tags) || j.tags.length > LIMITS.tags) return false;
    for (const t of j.tags) if (!strLen(t, LIMITS.tagLength)) return false;
  }
  return true;
}
export const RESERVED_KEY_MESSAGE = `keys starting with "${SCHEDULE_KEY_PREFIX}" are reserved for the scheduler`;

// One job to enqueue, as the stores take it (Keel's EnqueueRequest has the same shape).
export interface EnqueueJob {
  queue: string;
  type: string;
  payload?: unknown;
  priority?: number;
  delayMs?: number;
  runAt?: Date;
  tags?: string[];
  idempotencyKey?: string;
  maxAttempts?: number;
  expiresAt?: Date;
  after?: ParentRef[]; // waits until these jobs have finished (docs/jobs.md, "Flows")
  onFailure?: OnParentFailure; // with after: what happens when a parent is dead-lettered (default 'deadLetter')
}

// Returns the JSON document an engine stores for each job; throws ValidationError naming e.g. "jobs[3].payload".
// Keys starting with "schedule:" are refused unless scheduleKeys (fireSchedule, the scheduler's own jobs).
export function prepareEnqueue(
  jobs: readonly EnqueueJob[],
  maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES,
  opts: { scheduleKeys?: boolean } = {},
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
    if (!opts.scheduleKeys && j.idempotencyKey?.startsWith(SCHEDULE_KEY_PREFIX))
      throw new ValidationError(prefix ? `${prefix}.idempotencyKey` : 'idempotencyKey', RESERVED_KEY_MESSAGE);
    const field = (name: string) => (prefix ? `${prefix}.${name}` : name);
    // A job may wait only for jobs that exist before it (ids) or come earlier in its batch: a flow has no cycle.
    j.after?.forEach((p, k) => {
      if (typeof p === 'object' && p.index >= i)
        throw new ValidationError(
          field(`after[${k}]`),
          i === 0
            ? 'names a job of this batch, but the first job has no earlier job to wait for'
            : `{ index: ${p.index} } must name an earlier job of this batch (0 to ${i - 1}); a job cannot wait for itself or a later job`,
        );
    });
    if (j.onFailure !== undefined && !j.after?.length)
      throw new ValidationError(field('onFailure'), 'applies only to a job with parents (after)');
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
      ...(j.after?.length ? { after: j.after } : {}),
      ...(j.onFailure !== undefined ? { onFailure: j.onFailure } : {}),
    };
  });
}

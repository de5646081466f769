// The job domain's one validation module: every limit (LIMITS), the zod schemas built from them, and the argument
// checks of the JobStore contract (STORE_ARGUMENT_CHECKS, applied once for every engine by storeBase.ts). Bad input
// is refused before it reaches a database, naming the field at fault. The ops API's request schemas, the queue
// messages and the handler definitions build on the same schemas.
import { z } from 'zod';
import {
  AUDIT_AUTH_METHODS,
  AUDIT_OUTCOMES,
  AUDIT_TEXT_LIMITS,
  DLQ_REASONS,
  HOT_STATES,
  JOB_LOCATIONS,
  PURGE_TARGETS,
  TEXT_SEARCH_SCAN_ROWS_MAX,
  ZOMBIE_POLICIES,
  SCHEDULE_KEY_PREFIX,
  type EnqueueRequest,
  type JobStore,
  type LeaseRef,
  type QueueSettingsPatch,
} from './contract.js';

// Every limit on what the job domain accepts, defined once: the stores' argument checks, the ops API's request
// schemas (shared/ops/schemas.ts), the queue messages and the handler definitions read them from here.
const DAY_SECONDS = 24 * 3600;
export const LIMITS = {
  nameLength: 128, // queue and job type names
  scheduleNameLength: 100,
  batchJobs: 20_000, // jobs per enqueueMany call (and per ops API batch body): one procedure call, one transaction
  payloadBytes: 256 * 1024, // serialized payload, the default of KEEL_MAX_PAYLOAD_BYTES
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
  purgeCountCap: 1_000_000, // rows a purge preview counts at most (index-only, in SQL)
  purgeBatchRows: 10_000, // rows per purge call: one short transaction (KEEL_MAINT_PURGE_BATCH)
  searchJobs: 500, // jobs per searchJobs page
  searchTextLength: 200,
  metricsWindowMinutes: 7 * 24 * 60,
} as const;

const AUDIT_LEVELS = ['reader', 'producer', 'operator'] as const;

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
const NAME_CHARS = 'letters, digits and _ . : - only';
// A queue or job type name.
export const jobName = z.string().min(1).max(LIMITS.nameLength).regex(NAME_PATTERN, NAME_CHARS);
export const scheduleName = z.string().min(1).max(LIMITS.scheduleNameLength).regex(NAME_PATTERN, NAME_CHARS);

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

const JOB_ID = /^[1-9][0-9]{0,18}$/;
const MAX_BIGINT = 9223372036854775807n; // the largest id any engine can hold
// A positive 64-bit id as a decimal string: anything else can name no job in any engine.
export function isJobId(value: unknown): value is string {
  // Fewer than 19 digits always fit a bigint; only a 19-digit id needs the comparison (and its BigInt).
  return typeof value === 'string' && JOB_ID.test(value) && (value.length < 19 || BigInt(value) <= MAX_BIGINT);
}
export const jobId = z
  .string()
  .regex(JOB_ID, 'must be a job id (a positive integer)')
  .refine(
    (v) => !JOB_ID.test(v) || BigInt(v) <= MAX_BIGINT,
    `must be a job id (a positive integer up to ${MAX_BIGINT})`,
  );

export const UUID_PATTERN = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
export const batchId = z.string().regex(UUID_PATTERN, 'must be a batch id (a UUID)');
// A lease id is a UUID minted by a claim: anything else can hold no lease (and SQL Server's uniqueidentifier
// conversion ignores characters after the 36th, so '<a real lease>junk' must never reach it).
export function isLeaseRef(ref: LeaseRef): boolean {
  return isJobId(ref.jobId) && typeof ref.leaseId === 'string' && UUID_PATTERN.test(ref.leaseId);
}

export const dlqReason = z.enum(DLQ_REASONS);
export const jobLocation = z.enum(JOB_LOCATIONS);
export const hotState = z.enum(HOT_STATES);
export const purgeTarget = z.enum(PURGE_TARGETS);
export const zombiePolicy = z.enum(ZOMBIE_POLICIES);

const int = (min: number, max: number) => z.number().int().min(min).max(max);

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
};
export const NOT_BOTH_DELAY_AND_RUN_AT = {
  message: 'give delayMs or runAt, not both',
  path: ['runAt'],
};

const enqueueSchema = z
  .strictObject({ ...enqueueFields, runAt: z.date().optional(), expiresAt: z.date().optional() })
  .refine((j) => !(j.delayMs !== undefined && j.runAt !== undefined), NOT_BOTH_DELAY_AND_RUN_AT);

// The settings a queue patch may change (the ops API adds descriptions and "at least one").
const retentionSeconds = int(LIMITS.minRetentionSeconds, LIMITS.maxRetentionSeconds);
export const queuePatchFields = {
  paused: z.boolean().optional(),
  maxConcurrency: int(0, LIMITS.maxConcurrency).nullable().optional(),
  zombieTimeoutSeconds: int(1, LIMITS.zombieTimeoutSeconds).optional(),
  zombiePolicy: zombiePolicy.optional(),
  maxAttempts: int(1, LIMITS.maxAttempts).optional(),
  archiveRetentionSeconds: retentionSeconds.optional(),
  dlqRetentionSeconds: retentionSeconds.optional(),
  metricsRetentionSeconds: retentionSeconds.optional(),
};
const patchSchema = z.strictObject(queuePatchFields);

function firstIssue(err: z.ZodError, prefix: string): ValidationError {
  const issue = err.issues[0]!;
  const path = issue.path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i ? `.${String(p)}` : String(p))).join('');
  const field = prefix && path ? `${prefix}${path.startsWith('[') ? '' : '.'}${path}` : prefix || path || '(root)';
  return new ValidationError(field, issueMessage(issue));
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
    !intIn(j.priority, -LIMITS.priority, LIMITS.priority) ||
    !intIn(j.delayMs, 0, LIMITS.delayMs) ||
    !intIn(j.maxAttempts, 1, LIMITS.maxAttempts)
  )
    return false;
  if (!dateOk(j.runAt) || !dateOk(j.expiresAt)) return false;
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

// Returns the JSON document an engine stores for each job; throws ValidationError naming e.g. "jobs[3].payload".
// Keys starting with "schedule:" are refused unless scheduleKeys (fireSchedule, the scheduler's own jobs).
export function prepareEnqueue(
  jobs: EnqueueRequest[],
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

export function validateQueuePatch(queue: string, patch: QueueSettingsPatch): QueueSettingsPatch {
  const n = jobName.safeParse(queue);
  if (!n.success) throw firstIssue(n.error, 'name');
  const parsed = patchSchema.safeParse(patch);
  if (!parsed.success) throw firstIssue(parsed.error, '');
  return parsed.data;
}

export function assertPositiveInt(field: string, value: number, max: number): void {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new ValidationError(field, `must be an integer from 1 to ${max} (got ${value})`);
  }
}

export function assertJobId(field: string, value: unknown): string {
  if (!isJobId(value)) throw new ValidationError(field, 'must be a job id (a positive integer as a string)');
  return value;
}

function assertOneOf<T extends string>(field: string, value: unknown, allowed: readonly T[]): void {
  if (!allowed.includes(value as T)) throw new ValidationError(field, `must be one of ${allowed.join(', ')}`);
}

function assertText(field: string, value: unknown, max: number): void {
  const t = storableText(1, max).safeParse(value);
  if (!t.success) throw firstIssue(t.error, field);
}

function assertName(field: string, value: unknown): void {
  const n = jobName.safeParse(value);
  if (!n.success) throw firstIssue(n.error, field);
}

// The handlers' per-type max attempts, checked: each a job type and an attempt count.
function assertTypeMaxAttempts(byType: Readonly<Record<string, number>> | undefined): void {
  for (const [type, n] of Object.entries(byType ?? {})) {
    if (!jobName.safeParse(type).success)
      throw new ValidationError(`maxAttemptsByType.${type}`, 'is not a valid job type');
    assertPositiveInt(`maxAttemptsByType.${type}`, n, LIMITS.maxAttempts);
  }
}

// The handlers' per-type max attempts as the JSON object the rescue procedures take (null when there are none).
export function typeMaxAttemptsJson(byType: Readonly<Record<string, number>> | undefined): string | null {
  return byType && Object.keys(byType).length > 0 ? JSON.stringify(byType) : null;
}

export function assertScheduleName(field: string, value: unknown): string {
  if (!scheduleName.safeParse(value).success)
    throw new ValidationError(
      field,
      `must be a schedule name (1-${LIMITS.scheduleNameLength} letters, digits and _ . : -)`,
    );
  return value as string;
}

export function assertTick(field: string, value: unknown): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new ValidationError(field, 'must be a valid Date');
  return value;
}

// ---------------------------------------------------------------------------------------------------------------
// The JobStore contract's argument checks, one per operation, applied to every engine's store at the contract
// boundary (storeBase.ts) before the engine's own code runs. A check throws ValidationError naming the argument at
// fault, or returns { answer } when the arguments can name no job (an id that is no job id, a lease that is no
// UUID): the operation's not-found answer, without a round trip. Enqueued jobs are checked by prepareEnqueue, which
// the stores call with their own payload limit (KEEL_MAX_PAYLOAD_BYTES).
export type StoreOperation = Exclude<keyof JobStore, 'engine' | 'close'>;
type Method<Op extends StoreOperation> = JobStore[Op] extends (...args: infer A) => Promise<infer R>
  ? { args: A; answer: R }
  : never;
export type ArgumentCheck<Op extends StoreOperation> = (
  ...args: Method<Op>['args']
) => { answer: Method<Op>['answer'] } | undefined;

const leaseLost = (ref: LeaseRef) => (isLeaseRef(ref) ? undefined : { answer: 'lease_lost' as const });

export const STORE_ARGUMENT_CHECKS: { [Op in StoreOperation]: ArgumentCheck<Op> | null } = {
  enqueue: null,
  enqueueMany: null,
  claimNext: (opts) => {
    assertPositiveInt('limit', opts.limit, LIMITS.claimJobs);
    return undefined;
  },
  claimAndStart: (opts) => {
    assertPositiveInt('limit', opts.limit, LIMITS.claimJobs);
    return undefined;
  },
  claimById: (id) => (isJobId(id) ? undefined : { answer: null }),
  start: null, // startMany per ref: a ref that can hold no lease is lease_lost (isLeaseRef)
  startMany: null,
  heartbeat: (ref) => (isLeaseRef(ref) ? undefined : { answer: { status: 'lease_lost', cancelRequested: false } }),
  complete: null, // completeMany per ref, as startMany
  completeMany: null,
  retry: (ref, runAt) => {
    assertTick('runAt', runAt);
    return leaseLost(ref);
  },
  fail: (ref, reason) => {
    assertOneOf('reason', reason, DLQ_REASONS);
    return leaseLost(ref);
  },
  release: leaseLost,
  interrupt: leaseLost,
  cancel: (id) => (isJobId(id) ? undefined : { answer: 'not_found' }),
  rescueZombies: (limit, byType) => {
    assertPositiveInt('limit', limit, LIMITS.rescueJobs);
    assertTypeMaxAttempts(byType);
    return undefined;
  },
  resurrect: (ids) => {
    if (!Array.isArray(ids)) throw new ValidationError('jobIds', 'must be an array');
    ids.forEach((id, i) => assertJobId(`jobIds[${i}]`, id));
    return undefined;
  },
  resurrectByFilter: (filter) => {
    assertPositiveInt('limit', filter.limit, LIMITS.resurrectJobs);
    if (filter.reason !== undefined) assertOneOf('reason', filter.reason, DLQ_REASONS);
    if (filter.queue !== undefined) assertName('queue', filter.queue);
    if (filter.type !== undefined) assertName('type', filter.type);
    if (filter.failedAfter !== undefined) assertTick('failedAfter', filter.failedAfter);
    if (filter.failedBefore !== undefined) assertTick('failedBefore', filter.failedBefore);
    return undefined;
  },
  purge: (target, queue, olderThan, batchSize) => {
    assertOneOf('target', target, PURGE_TARGETS);
    if (queue !== null) assertName('queue', queue);
    assertTick('olderThan', olderThan);
    assertPositiveInt('batchSize', batchSize, LIMITS.purgeBatchRows);
    return undefined;
  },
  countPurgeable: (target, queue, olderThan, cap) => {
    assertOneOf('target', target, PURGE_TARGETS);
    if (queue !== null) assertName('queue', queue);
    assertTick('olderThan', olderThan);
    assertPositiveInt('cap', cap, LIMITS.purgeCountCap);
    return undefined;
  },
  stats: null,
  metrics: (windowMinutes, queue) => {
    assertPositiveInt('windowMinutes', windowMinutes, LIMITS.metricsWindowMinutes);
    if (queue !== undefined) assertName('queue', queue);
    return undefined;
  },
  // A name no queue can have names none (and is never cut to a column's length to match another).
  getQueue: (name) => (jobName.safeParse(name).success ? undefined : { answer: null }),
  listQueues: null,
  updateQueue: (name, patch) => {
    validateQueuePatch(name, patch);
    return undefined;
  },
  getJob: (id) => (isJobId(id) ? undefined : { answer: null }),
  searchJobs: (search) => {
    assertOneOf('location', search.location, JOB_LOCATIONS);
    assertPositiveInt('limit', search.limit, LIMITS.searchJobs);
    if (search.afterId !== undefined) assertJobId('afterId', search.afterId);
    if (search.queue !== undefined) assertName('queue', search.queue);
    if (search.type !== undefined) assertName('type', search.type);
    if (search.state !== undefined) assertOneOf('state', search.state, HOT_STATES);
    if (search.reason !== undefined) assertOneOf('reason', search.reason, DLQ_REASONS);
    if (search.from !== undefined) assertTick('from', search.from);
    if (search.to !== undefined) assertTick('to', search.to);
    // Longer text would be cut to the engine's parameter size and match something else.
    if (search.tag !== undefined) assertText('tag', search.tag, LIMITS.tagLength);
    if (search.text !== undefined) assertText('text', search.text, LIMITS.searchTextLength);
    if (search.scanRows !== undefined) {
      // Only archive and DLQ searches scan a bounded number of rows (rows.ts: searchScanRows).
      if (search.location === 'hot') throw new ValidationError('scanRows', 'applies to archive and DLQ searches only');
      assertPositiveInt('scanRows', search.scanRows, TEXT_SEARCH_SCAN_ROWS_MAX);
    }
    return undefined;
  },
  listSchedules: (name) => {
    if (name !== undefined) assertScheduleName('name', name);
    return undefined;
  },
  setSchedulePaused: (name) => {
    assertScheduleName('name', name);
    return undefined;
  },
  fireSchedule: (name, expectedTick, tick) => {
    assertScheduleName('name', name);
    if (expectedTick !== null) assertTick('expectedTick', expectedTick);
    assertTick('tick', tick);
    return undefined;
  },
  recordAudit: (e) => {
    assertOneOf('authMethod', e.authMethod, AUDIT_AUTH_METHODS);
    assertOneOf('channel', e.channel, ['key', 'console'] as const);
    if (e.role !== null) assertOneOf('role', e.role, AUDIT_LEVELS);
    assertOneOf('requiredRole', e.requiredRole, AUDIT_LEVELS);
    assertOneOf('outcome', e.outcome, ['started', 'refused'] as const);
    assertText('httpMethod', e.httpMethod, 8);
    for (const [field, max] of Object.entries(AUDIT_TEXT_LIMITS)) {
      const v = (e as unknown as Record<string, unknown>)[field];
      if (field === 'action' || v !== null) assertText(field, v, max);
    }
    return undefined;
  },
  finishAudit: (id, outcome) => {
    assertJobId('id', id);
    assertOneOf('outcome', outcome, ['ok', 'failed'] as const);
    return undefined;
  },
  searchAudit: (search) => {
    assertPositiveInt('limit', search.limit, LIMITS.searchJobs);
    if (search.scanRows !== undefined) assertPositiveInt('scanRows', search.scanRows, TEXT_SEARCH_SCAN_ROWS_MAX);
    if (search.beforeId !== undefined) assertJobId('beforeId', search.beforeId);
    if (search.from !== undefined) assertTick('from', search.from);
    if (search.to !== undefined) assertTick('to', search.to);
    if (search.outcome !== undefined) assertOneOf('outcome', search.outcome, AUDIT_OUTCOMES);
    if (search.principal !== undefined) assertText('principal', search.principal, AUDIT_TEXT_LIMITS.principalName);
    if (search.action !== undefined) assertText('action', search.action, AUDIT_TEXT_LIMITS.action);
    if (search.target !== undefined) assertText('target', search.target, AUDIT_TEXT_LIMITS.target);
    return undefined;
  },
  purgeAudit: (olderThan, batchSize) => {
    assertTick('olderThan', olderThan);
    assertPositiveInt('batchSize', batchSize, LIMITS.purgeBatchRows);
    return undefined;
  },
};

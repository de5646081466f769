// The job domain's one validation module: every limit (LIMITS), the zod schemas built from them, and the argument
// checks of the JobStore contract (STORE_ARGUMENT_CHECKS, applied once for every engine by storeBase.ts). Bad input
// is refused before it reaches a database, naming the field at fault. The ops API's request schemas, the queue
// messages and the handler definitions build on the same schemas. The rules of a job to enqueue (LIMITS, the field
// schemas, prepareEnqueue) live in the client package (packages/client/src/rules.ts), which producers in other
// applications use too; they are re-exported here, so the app has one validation module.
import { z } from 'zod';
import { JOB_LOG_LINES_LIMIT } from './jobLog.js';
import {
  firstIssue,
  int,
  jobName,
  LIMITS,
  NAME_CHARS,
  NAME_PATTERN,
  storableText,
  ValidationError,
} from '../../packages/client/src/rules.js';
import {
  AUDIT_AUTH_METHODS,
  AUDIT_OUTCOMES,
  AUDIT_TEXT_LIMITS,
  DLQ_REASONS,
  FAIL_REASONS,
  HOT_STATES,
  JOB_LOCATIONS,
  PURGE_TARGETS,
  TEXT_SEARCH_SCAN_ROWS_MAX,
  WORKER_QUEUES_MAX,
  WORKER_TEXT_LIMITS,
  ZOMBIE_POLICIES,
  type JobStore,
  type LeaseRef,
  type QueueSettingsExpected,
  type QueueSettingsPatch,
} from './contract.js';

export {
  DATE_RANGE,
  DEFAULT_MAX_PAYLOAD_BYTES,
  enqueueFields,
  fieldPath,
  issueMessage,
  jobName,
  jsonScalarProblem,
  jsonTextProblem,
  JSON_TOO_DEEP,
  LIMITS,
  MAX_BATCH,
  NAME_PATTERN,
  NOT_BOTH_DELAY_AND_RUN_AT,
  plainValid,
  prepareEnqueue,
  RESERVED_KEY_MESSAGE,
  storableJson,
  storableText,
  textProblem,
  toStorableText,
  ValidationError,
} from '../../packages/client/src/rules.js';

const AUDIT_LEVELS = ['reader', 'producer', 'operator'] as const;

export const scheduleName = z.string().min(1).max(LIMITS.scheduleNameLength).regex(NAME_PATTERN, NAME_CHARS);

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

// What a caller may say it saw (QueueSettingsExpected): any value a settings row can hold, the limits not applied (a
// row set outside the API may hold a value they refuse, and the caller compares with what it was shown).
const seenInt = z.number().int().min(-2147483648).max(2147483647);
const queueExpectedFields = {
  maxConcurrency: seenInt.nullable().optional(),
  zombieTimeoutSeconds: seenInt.optional(),
  zombiePolicy: zombiePolicy.optional(),
  maxAttempts: seenInt.optional(),
  archiveRetentionSeconds: seenInt.optional(),
  dlqRetentionSeconds: seenInt.optional(),
  metricsRetentionSeconds: seenInt.optional(),
};
export const queueExpectedSchema = z
  .strictObject(queueExpectedFields)
  .refine((e) => Object.keys(e).length > 0, { message: 'name at least one setting' });

export function validateQueuePatch(
  queue: string,
  patch: QueueSettingsPatch,
  expected?: QueueSettingsExpected,
): QueueSettingsPatch {
  const n = jobName.safeParse(queue);
  if (!n.success) throw firstIssue(n.error, 'name');
  const parsed = patchSchema.safeParse(patch);
  if (!parsed.success) throw firstIssue(parsed.error, '');
  if (expected !== undefined) {
    const e = queueExpectedSchema.safeParse(expected);
    if (!e.success) throw firstIssue(e.error, 'expected');
  }
  return parsed.data;
}

// What only the database can check of a batch's flows (a parent that does not exist; and, for other sessions'
// producers, every after/onFailure rule) comes back as "jobs[i].after[k]: message": the contract's ValidationError,
// the field named as prepareEnqueue names it (no "jobs[0]." for a single job). Null for any other message.
export function flowRefusal(message: string | undefined, count: number): ValidationError | null {
  const m = /^jobs\[(\d+)\]\.((?:after|onFailure)[^:]*): (.*)$/s.exec(message ?? '');
  if (!m) return null;
  return new ValidationError(count === 1 ? m[2]! : `jobs[${m[1]}].${m[2]}`, m[3]!);
}

// The longest retry delay a store takes (ten years): the processor clamps its backoff and RetryAfterError to it.
export const MAX_RETRY_DELAY_MS = 10 * 365 * 24 * 3600 * 1000;

export function assertDelayMs(field: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_RETRY_DELAY_MS)
    throw new ValidationError(field, `must be an integer from 0 to ${MAX_RETRY_DELAY_MS} (got ${String(value)})`);
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
  pickDue: (_queues, limit) => {
    assertPositiveInt('limit', limit, LIMITS.claimJobs);
    return undefined;
  },
  claimById: (id) => (isJobId(id) ? undefined : { answer: null }),
  start: null, // startMany per ref: a ref that can hold no lease is lease_lost (isLeaseRef)
  startMany: null,
  heartbeat: (ref) => (isLeaseRef(ref) ? undefined : { answer: { status: 'lease_lost', cancelRequested: false } }),
  heartbeatMany: (refs) => {
    if (!Array.isArray(refs)) throw new ValidationError('refs', 'must be an array of leases');
    return refs.length === 0 ? { answer: [] } : undefined; // per ref, a lease that can name no job is lost (isLeaseRef)
  },
  complete: null, // completeMany per ref, as startMany; a resultJson that is not JSON is refused by the database
  completeMany: null,
  reportProgress: leaseLost, // the progress itself was normalized by normalizeProgress (shared/jobs/progress.ts)
  appendJobLog: (ref, lines, maxLines) => {
    if (!Array.isArray(lines)) throw new ValidationError('lines', 'must be an array of job log lines');
    assertPositiveInt('maxLines', maxLines, JOB_LOG_LINES_LIMIT);
    return leaseLost(ref);
  },
  retry: (ref, when) => {
    if (when instanceof Date || typeof when !== 'object' || when === null) assertTick('runAt', when);
    else assertDelayMs('delayMs', when.delayMs);
    return leaseLost(ref);
  },
  fail: (ref, reason) => {
    assertOneOf('reason', reason, FAIL_REASONS);
    return leaseLost(ref);
  },
  release: leaseLost,
  interrupt: leaseLost,
  cancel: (id) => (isJobId(id) ? undefined : { answer: 'not_found' }),
  cancelMany: (ids) => {
    if (!Array.isArray(ids)) throw new ValidationError('jobIds', 'must be an array');
    return ids.length === 0 ? { answer: [] } : undefined;
  },
  jobLinks: (id) => (isJobId(id) ? undefined : { answer: [] }),
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
  stats: null,
  metrics: (windowMinutes, queue) => {
    assertPositiveInt('windowMinutes', windowMinutes, LIMITS.metricsWindowMinutes);
    if (queue !== undefined) assertName('queue', queue);
    return undefined;
  },
  // A name no queue can have names none (and is never cut to a column's length to match another).
  getQueue: (name) => (jobName.safeParse(name).success ? undefined : { answer: null }),
  listQueues: null,
  updateQueue: (name, patch, expected) => {
    validateQueuePatch(name, patch, expected);
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
    if (search.priority !== undefined && !(Number.isInteger(search.priority) && Math.abs(search.priority) <= 1_000_000))
      throw new ValidationError('priority', 'must be an integer from -1000000 to 1000000');
    if (search.idempotencyKey !== undefined) assertText('idempotencyKey', search.idempotencyKey, 200);
    if (search.order !== undefined) assertOneOf('order', search.order, ['newest', 'oldest'] as const);
    if (search.scanRows !== undefined) {
      // Only archive and DLQ searches scan a bounded number of rows (rows.ts: searchScanRows).
      if (search.location === 'hot') throw new ValidationError('scanRows', 'applies to archive and DLQ searches only');
      assertPositiveInt('scanRows', search.scanRows, TEXT_SEARCH_SCAN_ROWS_MAX);
    }
    // No id lies above the largest an engine holds: the engines' "afterId + 1" would overflow bigint (a 500).
    if (search.order === 'oldest' && search.afterId === MAX_BIGINT.toString())
      return { answer: { items: [], nextAfterId: null, scanBounded: false } };
    return undefined;
  },
  countJobs: (c) => {
    assertOneOf('location', c.location, JOB_LOCATIONS);
    assertPositiveInt('cap', c.cap, LIMITS.countCap);
    if (c.queue !== undefined) assertName('queue', c.queue);
    if (c.type !== undefined) assertName('type', c.type);
    if (c.tag !== undefined) assertText('tag', c.tag, LIMITS.tagLength);
    if (c.state !== undefined) assertOneOf('state', c.state, HOT_STATES);
    if (c.reason !== undefined) assertOneOf('reason', c.reason, DLQ_REASONS);
    if (c.from !== undefined) assertTick('from', c.from);
    if (c.to !== undefined) assertTick('to', c.to);
    return undefined;
  },
  dlqGroups: (queue, offset, limit, scanRows) => {
    if (queue !== null) assertName('queue', queue);
    if (!Number.isInteger(offset) || offset < 0) throw new ValidationError('offset', 'must be a non-negative integer');
    assertPositiveInt('limit', limit, LIMITS.dlqGroups);
    assertPositiveInt('scanRows', scanRows, LIMITS.countCap);
    return undefined;
  },
  listWorkers: null,
  registerWorker: (w) => {
    const L = WORKER_TEXT_LIMITS;
    assertText('workerId', w.workerId, L.workerId);
    assertText('host', w.host, L.host);
    if (w.instanceId !== null) assertText('instanceId', w.instanceId, L.instanceId);
    assertText('appVersion', w.appVersion, L.appVersion);
    if (w.buildId !== null) assertText('buildId', w.buildId, L.buildId);
    if (!Number.isInteger(w.pid) || w.pid < 0 || w.pid > 2_147_483_647)
      throw new ValidationError('pid', 'must be a non-negative integer');
    if (w.queues !== null) {
      if (!Array.isArray(w.queues) || w.queues.length > WORKER_QUEUES_MAX)
        throw new ValidationError('queues', `must be null (every queue) or at most ${WORKER_QUEUES_MAX} queue names`);
      w.queues.forEach((q, i) => assertName(`queues[${i}]`, q));
    }
    assertPositiveInt('concurrency', w.concurrency, 1_000_000);
    assertTick('startedAt', w.startedAt);
    if (!Number.isSafeInteger(w.jobsDone) || w.jobsDone < 0)
      throw new ValidationError('jobsDone', 'must be a non-negative integer');
    return undefined;
  },
  // An id no worker can have names none.
  deregisterWorker: (workerId) =>
    storableText(1, WORKER_TEXT_LIMITS.workerId).safeParse(workerId).success ? undefined : { answer: false },
  pruneWorkers: (olderThan) => {
    assertTick('olderThan', olderThan);
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

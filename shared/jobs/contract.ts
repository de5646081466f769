// The job store contract: the one interface every engine (PostgreSQL, SQL Server) implements.
import type { JobProgress } from './progress.js';
import type { JobLogLine } from './jobLog.js';
import type { JobAttempt } from './attempts.js';
import type { OnParentFailure, ParentRef } from '../../packages/client/src/rules.js';
// Every owner-scoped call takes (jobId, leaseId); a stale lease is reported as 'lease_lost', never thrown.

export type JobId = string; // bigint in the database; strings keep 64-bit ids exact in JavaScript
export type LeaseId = string; // uuid minted by each claim

// 'waiting': a flow's job whose parents have not all finished (after); no claim sees it (docs/jobs.md, "Flows").
export const HOT_STATES = ['pending', 'fetched', 'processing', 'waiting'] as const;
export type HotState = (typeof HOT_STATES)[number];
// The reasons a handler or the engine's own moves give (fail() takes these), then the two only a flow gives: a parent
// was dead-lettered and the job's onFailure was 'deadLetter' ('parent_failed') or 'skip' ('skipped').
export const FAIL_REASONS = ['exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired'] as const;
export type FailReason = (typeof FAIL_REASONS)[number];
export const DLQ_REASONS = [...FAIL_REASONS, 'parent_failed', 'skipped'] as const;
export type DlqReason = (typeof DLQ_REASONS)[number];
export const ZOMBIE_POLICIES = ['dlq', 'retry'] as const;
export type ZombiePolicy = (typeof ZOMBIE_POLICIES)[number];
// How the processor ended one attempt of a job (telemetry's handler outcome).
export const JOB_OUTCOMES = ['succeeded', 'retried', 'dead_lettered', 'lease_lost', 'released'] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];
export const JOB_LOCATIONS = ['hot', 'archive', 'dlq'] as const;
export type JobLocation = (typeof JOB_LOCATIONS)[number];

export interface EnqueueRequest {
  queue: string;
  type: string;
  payload?: unknown; // any JSON value; serialized size is limited (LIMITS.payloadBytes in validate.ts, KEEL_MAX_PAYLOAD_BYTES)
  priority?: number; // higher runs first; default 0
  delayMs?: number; // mutually exclusive with runAt
  runAt?: Date;
  tags?: string[];
  // Unique among hot jobs of the same queue and type. Enqueued again with the same payload: a duplicate (the held
  // job's id); with another payload: IdempotencyConflictError, nothing enqueued. "schedule:..." is the scheduler's.
  idempotencyKey?: string;
  maxAttempts?: number; // overrides the queue's max_attempts
  expiresAt?: Date; // not started by then -> DLQ 'expired'
  // Flows: the job waits (state 'waiting') until these jobs have finished: job ids, or { index } naming an earlier
  // job of the same enqueueMany call. A missing parent refuses the batch (ValidationError "jobs[i].after[k]").
  after?: ParentRef[];
  onFailure?: OnParentFailure; // when a parent is dead-lettered; default 'deadLetter' (docs/jobs.md, "Flows")
}

export interface EnqueueResult {
  id: JobId;
  // true: a hot job of the same queue and type held the idempotency key, with the same payload; id is that job's
  duplicate: boolean;
}

// Keys reserved for the scheduler's jobs (schedule:<name>:<tick>): only fireSchedule may enqueue them.
export const SCHEDULE_KEY_PREFIX = 'schedule:';

// A job's idempotency key is held by a hot job of its queue and type with another payload (or, for fireSchedule, by
// a job the schedule did not enqueue): a conflict, never a silent duplicate. The whole batch was refused.
export class IdempotencyConflictError extends Error {
  constructor(
    readonly index: number, // the job's place in the batch
    readonly queue: string,
    readonly type: string,
    readonly idempotencyKey: string,
  ) {
    super(
      `idempotency key "${idempotencyKey}" is already held by a hot job of queue "${queue}" and type "${type}" ` +
        'with another payload',
    );
    this.name = 'IdempotencyConflictError';
  }

  // The field at fault, as ValidationError names it: "idempotencyKey" for one job, "jobs[i].idempotencyKey" in a batch.
  field(count: number): string {
    return count === 1 ? 'idempotencyKey' : `jobs[${this.index}].idempotencyKey`;
  }
}

export interface ClaimedJob {
  id: JobId;
  leaseId: LeaseId;
  queue: string;
  type: string;
  payload: unknown;
  priority: number;
  attempts: number; // attempts already started before this claim
  maxAttempts: number | null; // job override; null = queue setting
  queueMaxAttempts: number;
  idempotencyKey: string | null;
  tags: string[];
  runAt: Date;
  createdAt: Date;
  leaseExpiresAt: Date;
  // The queue's zombie timeout as the claim read it: how long a started job may go without a heartbeat before the
  // zombie rescue takes it back. The processor stops the handler before that much time passes without a confirmed
  // heartbeat (its lease's deadline: docs/jobs.md, "Leases and heartbeats").
  queueZombieTimeoutSeconds: number;
}

// A job claimed and started in one step (claimAndStart): already 'processing' under its lease, this attempt counted.
export interface StartedJob extends ClaimedJob {
  attempt: number; // the attempt now running (1-based): attempts + 1
}

export type OwnerResult = 'ok' | 'lease_lost';

export interface StartResult {
  status: OwnerResult;
  attempt: number; // the attempt number now running (1-based), 0 when lease_lost
}

export interface HeartbeatResult {
  status: OwnerResult;
  cancelRequested: boolean;
  // 'ok': the queue's zombie timeout as it is now, which the rescue judges this beat by (a store that does not say
  // leaves it out: the timeout the claim read stays the job's).
  zombieTimeoutSeconds?: number;
}

// When a retried job is due again: at a time, or `delayMs` from the database server's clock (the processor's
// backoff: a worker's clock may be skewed from the server's, whose clock every claim's due test reads).
export type RetryWhen = Date | { delayMs: number };

export interface LeaseRef {
  jobId: JobId;
  leaseId: LeaseId;
}

// A completion: the lease, and the JSON text of what the handler returned (resultJson in shared/jobs/progress.ts),
// stored on the archive row by the same move; absent when it returned nothing.
export interface CompleteRef extends LeaseRef {
  resultJson?: string;
}

// complete/completeMany: 'cancelled' = the job's cancel was requested while it ran, so the move took it to the DLQ
// as 'cancelled' instead of the archive (the answer the cancel route gave, 'cancel_requested', always ends so).
export type CompleteResult = OwnerResult | 'cancelled';

export interface OwnerResultById {
  jobId: JobId;
  status: CompleteResult;
}

export type CancelResult = 'cancelled' | 'cancel_requested' | 'not_found';

export interface CancelResultById {
  jobId: JobId;
  result: CancelResult;
}

// cancelMany sends its ids to the store in chunks of this many, one short transaction each.
export const CANCEL_MANY_CHUNK = 250;

export interface RescueResult {
  releasedFetched: number; // fetched past lease -> pending
  retried: number; // processing past heartbeat timeout -> pending (policy retry, attempts left)
  deadLettered: number; // -> DLQ zombie / cancelled
  expired: number; // pending past expires_at -> DLQ expired
}

export interface ResurrectFilter {
  queue?: string;
  type?: string;
  reason?: DlqReason;
  failedAfter?: Date;
  failedBefore?: Date;
  limit: number;
  dryRun?: boolean;
}

export interface ResurrectResult {
  ids: JobId[]; // resurrected (or, on dry run, the ones that would be)
  dryRun: boolean;
}

export const PURGE_TARGETS = ['archive', 'dlq', 'metrics'] as const;
export type PurgeTarget = (typeof PURGE_TARGETS)[number];

export interface QueueSettings {
  name: string;
  paused: boolean;
  maxConcurrency: number | null; // global across all hosts; null = unlimited
  zombieTimeoutSeconds: number;
  zombiePolicy: ZombiePolicy;
  maxAttempts: number;
  archiveRetentionSeconds: number;
  dlqRetentionSeconds: number;
  metricsRetentionSeconds: number;
}

export type QueueSettingsPatch = Partial<Omit<QueueSettings, 'name'>>;

// A settings change's compare-and-set: the values the caller last saw (a queue without settings has the defaults).
// Compared with the row under the change's own lock, so a change made meanwhile by anyone is never overwritten unseen.
export const QUEUE_EXPECT_FIELDS = [
  'maxConcurrency',
  'zombieTimeoutSeconds',
  'zombiePolicy',
  'maxAttempts',
  'archiveRetentionSeconds',
  'dlqRetentionSeconds',
  'metricsRetentionSeconds',
] as const;
export type QueueExpectField = (typeof QUEUE_EXPECT_FIELDS)[number];
export type QueueSettingsExpected = Partial<Pick<QueueSettings, QueueExpectField>>;

// A settings change's answer: the row after this call's change, and whether this call created it (decided where the
// row is inserted, so of two instances creating a queue at once exactly one is told created). conflict: the first
// expected field (in name order) whose value differed; then nothing was changed and the row is the current one.
// unchanged: expected differed, but the row already held every value the patch sets (a retry of a change that
// applied, its answer lost): a success that wrote nothing (no conflict; the row is the current one).
export interface QueueSettingsChange extends QueueSettings {
  created: boolean;
  conflict?: QueueExpectField;
  unchanged?: true;
}

// Cheap at any table size (a stats read must not scan a table, whatever its size): pending, fetched, processing, dlq and the totals are counters kept exact in the
// transaction of every change; oldestDueAgeMs is the first entry of the pending run_at index; due counts at most
// STATS_DUE_COUNT_CAP index entries (docs/operations.md).
export interface QueueStats {
  queue: string;
  pending: number;
  // Pending jobs whose runAt has come. Exact (dueExact true) when fewer than STATS_DUE_COUNT_CAP pending jobs of the
  // queue are due or fewer than that many are not yet due; otherwise due is STATS_DUE_COUNT_CAP, meaning "at least".
  due: number;
  dueExact: boolean;
  fetched: number;
  processing: number;
  waiting: number; // a flow's jobs whose parents have not all finished (not due, not counted in pending)
  dlq: number;
  oldestDueAgeMs: number | null; // queue lag: age of the oldest due pending job
  succeeded: number;
  failed: number;
  retried: number;
  cancelled: number;
  zombie: number;
  resurrected: number;
}

export const STATS_DUE_COUNT_CAP = 1000;

export interface MetricBucket {
  bucketStart: Date;
  queue: string;
  outcome: 'succeeded' | 'failed';
  reason: string; // '' for succeeded
  count: number;
  totalDurationMs: number;
  maxDurationMs: number;
}

// One end of a flow's edge (JobStore.jobLinks): a parent the job waits (or waited) for, or a child that waits for it.
export interface JobLink {
  relation: 'parent' | 'child';
  id: JobId;
  type: string | null; // null: the job is no longer stored (retention purged it)
  queue: string | null;
  location: JobLocation | null;
  state: HotState | 'succeeded' | 'dead' | null;
  // what the parent's final move told the child: 'succeeded', 'failed', or null while the parent is unfinished
  outcome: 'succeeded' | 'failed' | null;
  result?: unknown; // a parent's archived result (parents only; undefined: it returned nothing)
}

export interface JobRecord {
  id: JobId;
  location: JobLocation;
  queue: string;
  type: string;
  payload: unknown;
  priority: number;
  state: HotState | 'succeeded' | 'dead';
  attempts: number;
  idempotencyKey: string | null;
  tags: string[];
  createdAt: Date;
  runAt: Date | null;
  startedAt: Date | null;
  finishedAt: Date | null; // archive finished_at / dlq failed_at
  durationMs: number | null;
  reason: DlqReason | null;
  lastError: string | null;
  cancelRequested: boolean;
  leaseId: LeaseId | null;
  workerId: string | null;
  progress: JobProgress | null; // hot jobs: the running (or last) attempt's latest ctx.progress()
  // archived jobs: what the handler returned (undefined: returned nothing). getJob only: searches leave it out.
  result?: unknown;
  logs?: JobLogLine[]; // the job's own ctx.log lines, oldest first (newest KEEL_JOB_LOG_LINES); getJob only
  // The attempts that ended without success, oldest first (newest JOB_ATTEMPTS_KEPT); getJob only. jobTimeline()
  // adds the archived success or the running attempt.
  attemptLog?: JobAttempt[];
  maxAttempts: number | null; // the job's own limit; null: its type's, else its queue's applies
  leaseExpiresAt: Date | null; // hot jobs: when the claim's lease runs out
  heartbeatAt: Date | null; // hot jobs: the running attempt's last heartbeat
}

// What a search and a bounded count filter on.
export interface JobFilter {
  location: JobLocation;
  queue?: string;
  type?: string;
  tag?: string;
  state?: HotState;
  reason?: DlqReason;
  from?: Date; // created (hot) / finished (archive) / failed (dlq) at or after
  to?: Date;
}

export interface JobSearch extends JobFilter {
  text?: string; // substring of payload text or last error
  priority?: number; // exactly this priority
  idempotencyKey?: string; // exactly this key: the jobs that share it (per queue and type)
  order?: 'newest' | 'oldest'; // by id; default newest first
  afterId?: JobId; // keyset paging: ids past this one in the chosen order (lower when newest first)
  // Archive and DLQ searches (with or without text) examine at most this many rows per call (the next ids below
  // afterId; default TEXT_SEARCH_SCAN_ROWS, at most TEXT_SEARCH_SCAN_ROWS_MAX), so they cost the same at any table
  // size. Allowed only on those searches.
  scanRows?: number;
  limit: number;
}

// A bounded count (JobStore.countJobs): the search filters without text or paging, and the most rows to count.
export interface JobCount extends JobFilter {
  cap: number;
}

// matched is exact when exact is true, else a lower bound ("at least matched"); asOf is the store's clock.
export interface CountResult {
  matched: number;
  exact: boolean;
  asOf: Date;
}

// One group of dead letters (reason x type x queue), counted in SQL; totals over all groups of the read.
export interface DlqGroup {
  reason: DlqReason;
  type: string;
  queue: string;
  jobs: number;
  newestFailedAt: Date;
}

// The groups of the newest scanRows dead letters (JobStore.dlqGroups): more is true when the DLQ holds older ones
// that were not counted, and then totalGroups and totalJobs are lower bounds.
export interface DlqGroupPage {
  groups: DlqGroup[];
  totalGroups: number;
  totalJobs: number;
  more: boolean;
}

// What a processor reports of itself to the worker registry (keel.workers, V012): registered when it starts, refreshed
// at most every KEEL_WORKER_REFRESH_MS while it does something, removed on a graceful stop.
export interface WorkerRegistration {
  workerId: string;
  host: string; // the machine's host name
  instanceId: string | null; // the hosting instance (WEBSITE_INSTANCE_ID on Azure Functions)
  pid: number;
  appVersion: string; // package.json's version
  buildId: string | null; // KEEL_BUILD_ID
  queues: string[] | null; // the queues its dispatcher serves; null: every queue
  concurrency: number; // KEEL_DISPATCH_CONCURRENCY
  startedAt: Date;
  jobsDone: number; // jobs it finished since it started
}

// A registry row as read back: the registration and when the server last heard from it.
export interface WorkerRegistryRow extends Omit<WorkerRegistration, 'workerId'> {
  lastSeenAt: Date;
}

// The registry's bounds on what a worker reports (the columns' widths on every engine).
export const WORKER_TEXT_LIMITS = {
  workerId: 200,
  host: 256,
  instanceId: 128,
  appVersion: 64,
  buildId: 128,
} as const;
export const WORKER_QUEUES_MAX = 100;

// A worker as listWorkers shows it: its registration (null when only leases name it: a process that never registered,
// or whose row was pruned) and, from the hot rows' leases, the jobs it holds and its oldest and newest sign of life.
export interface WorkerInfo extends WorkerLeases {
  registration: WorkerRegistryRow | null;
}

// A worker as the hot rows' leases show it: the jobs it holds and its oldest and newest sign of life.
export interface WorkerLeases {
  workerId: string;
  jobsHeld: number;
  processing: number;
  queues: string[];
  oldestHeartbeatAt: Date | null;
  newestHeartbeatAt: Date | null;
  earliestLeaseExpiresAt: Date | null;
  asOf: Date;
}

export const TEXT_SEARCH_SCAN_ROWS = 20_000;
export const TEXT_SEARCH_SCAN_ROWS_MAX = 100_000;

export interface JobPage {
  items: JobRecord[]; // newest first, at most limit
  // Pass as afterId for the next page; null when nothing is left below. A page that stopped at its scan bound has a
  // nextAfterId even with fewer items than limit (or none): more may match further down.
  nextAfterId: JobId | null;
  scanBounded: boolean; // this page stopped at scanRows examined rows
}

// A recurring schedule's shared state (the definition itself lives in code: handlers/, defineSchedule).
export interface ScheduleState {
  name: string;
  paused: boolean;
  lastTick: Date | null; // the latest tick already handled (enqueued or passed over)
  resumedAt: Date | null; // ticks at or before this were passed while paused: never run
  lastJobId: JobId | null;
  updatedAt: Date;
}

export type FireStatus = 'fired' | 'lost' | 'paused';

export interface FireResult {
  status: FireStatus; // lost: another instance moved lastTick first; nothing was enqueued
  jobs: EnqueueResult[];
}

// What tells a long-running Worker (shared/jobs/producer.ts) that jobs arrived, so it claims at once instead of at
// its next poll; an engine may provide one (PostgreSQL: LISTEN/NOTIFY on enqueue, engines/postgres/wakeups.ts).
export interface WakeupSource {
  // Calls onWake whenever jobs of one of these queues may have become due; returns an unsubscribe.
  subscribe(queues: string[], onWake: () => void): Promise<() => Promise<void>>;
}

export interface ClaimOptions {
  workerId: string;
  queues: string[];
  limit: number;
  leaseSeconds?: number; // fetched lease; default 60 (a started job is kept by its heartbeats instead)
}

// The ops audit trail (sql/<engine>/V030): one record per write of the ops API and per refused call.
export const AUDIT_AUTH_METHODS = ['key', 'principal', 'local', 'none'] as const;
export type AuditAuthMethod = (typeof AUDIT_AUTH_METHODS)[number];
export const AUDIT_OUTCOMES = ['started', 'ok', 'refused', 'failed'] as const;
export type AuditOutcome = (typeof AUDIT_OUTCOMES)[number];
export type AuditLevel = 'reader' | 'producer' | 'operator';

// Column widths (both engines): the ops router truncates to these, so a long name or reason cannot fail the insert.
export const AUDIT_TEXT_LIMITS = {
  principalId: 128,
  principalName: 256,
  tenantId: 64,
  appId: 64,
  action: 64,
  target: 400,
  summary: 2000,
  reason: 1000,
  requestId: 128,
  clientIp: 64,
} as const;

export interface AuditEntry {
  principalId: string | null;
  principalName: string | null;
  tenantId: string | null;
  appId: string | null;
  authMethod: AuditAuthMethod;
  channel: 'key' | 'console';
  role: AuditLevel | null; // the highest level the caller held
  requiredRole: AuditLevel;
  httpMethod: string;
  action: string;
  target: string | null;
  summary: string | null;
  outcome: 'started' | 'refused'; // 'started': finished by finishAudit
  status: number | null;
  reason: string | null;
  affected: number | null;
  requestId: string | null;
  clientIp: string | null;
}

export interface AuditRecord extends Omit<AuditEntry, 'outcome'> {
  id: string;
  at: Date;
  outcome: AuditOutcome;
  finishedAt: Date | null;
}

export interface AuditSearch {
  from?: Date;
  to?: Date;
  principal?: string; // object id or name
  action?: string;
  target?: string;
  outcome?: AuditOutcome;
  beforeId?: string;
  scanRows?: number; // rows examined at most (default AUDIT_SCAN_ROWS_DEFAULT, up to TEXT_SEARCH_SCAN_ROWS_MAX)
  limit: number;
}

export const AUDIT_SCAN_ROWS_DEFAULT = 10_000;

export interface AuditPage {
  items: AuditRecord[]; // newest first
  nextBeforeId: string | null; // pass as beforeId for the next page; null when nothing is left below
  scanBounded: boolean; // the page stopped at scanRows examined rows: more may match below nextBeforeId
}

export interface JobStore {
  readonly engine: string;
  // Both throw IdempotencyConflictError (nothing enqueued) when a key is held with another payload, and refuse keys
  // starting with SCHEDULE_KEY_PREFIX (ValidationError).
  enqueue(job: EnqueueRequest): Promise<EnqueueResult>;
  enqueueMany(jobs: EnqueueRequest[]): Promise<EnqueueResult[]>;
  claimNext(opts: ClaimOptions): Promise<ClaimedJob[]>;
  claimById(jobId: JobId, workerId: string, leaseSeconds?: number): Promise<ClaimedJob | null>;
  // claimNext and start in one statement: the same jobs claimNext would pick (priority, due time, pause,
  // maxConcurrency, expiry), returned already processing. For callers that run what they claim at once.
  claimAndStart(opts: ClaimOptions): Promise<StartedJob[]>;
  // The ids of the due jobs claimNext would take now (priority, due time, pause, maxConcurrency's free slots,
  // expiry; at most limit), in claim order, left pending: nothing is claimed. One transaction under the claims' pause
  // barrier, so a pause that answered saw none of them held. For posting their queue messages (the dispatcher's
  // post mode, a freed slot's hand-on, resume), where the job is claimed by the runner that gets the message.
  pickDue(queues: string[], limit: number): Promise<JobId[]>;
  start(ref: LeaseRef): Promise<StartResult>;
  startMany(refs: LeaseRef[]): Promise<(StartResult & { jobId: JobId })[]>;
  heartbeat(ref: LeaseRef): Promise<HeartbeatResult>;
  // heartbeat for many running attempts in one store call (the processor's beat timer: one call a tick, not one a
  // job), fenced per ref by its lease: per ref, in the order given, what heartbeat would answer.
  heartbeatMany(refs: LeaseRef[]): Promise<(HeartbeatResult & { jobId: JobId })[]>;
  complete(ref: CompleteRef): Promise<CompleteResult>;
  completeMany(refs: CompleteRef[]): Promise<OwnerResultById[]>;
  // The running attempt's progress, under its lease (the processor throttles it: KEEL_PROGRESS_INTERVAL_MS).
  reportProgress(ref: LeaseRef, progress: JobProgress): Promise<OwnerResult>;
  // Lines of the job's own log (ctx.log) appended under the lease, fetched or processing; the job keeps its newest
  // maxLines lines across attempts, and every move carries them.
  appendJobLog(ref: LeaseRef, lines: JobLogLine[], maxLines: number): Promise<OwnerResult>;
  // retry, fail and interrupt answer 'cancelled' when the job's cancel was requested while it ran and the move
  // therefore dead-lettered it as 'cancelled' (instead of pending again, or the DLQ with another reason).
  retry(ref: LeaseRef, when: RetryWhen, error: string): Promise<CompleteResult>;
  fail(ref: LeaseRef, reason: DlqReason, error: string): Promise<CompleteResult>; // FAIL_REASONS only (checked)
  release(ref: LeaseRef): Promise<OwnerResult>;
  // A started job handed back by a graceful shutdown: pending now, its attempt given back (not a failure, not a
  // retry); dead-lettered as 'cancelled' instead when its cancel was requested.
  interrupt(ref: LeaseRef, error: string): Promise<CompleteResult>;
  cancel(jobId: JobId): Promise<CancelResult>;
  // cancel for many ids (the ops API's cancel by selection): per distinct id, in the order given, what cancel would
  // answer; CANCEL_MANY_CHUNK ids per transaction (one store call each), an id that can name no job 'not_found'.
  cancelMany(jobIds: JobId[]): Promise<CancelResultById[]>;
  // maxAttemptsByType: the handlers' own limits ({type: n}); a rescued job's limit is its own, else its type's, else
  // its queue's — the same rule the processor applies (HandlerRegistry.maxAttemptsByType()).
  rescueZombies(limit: number, maxAttemptsByType?: Readonly<Record<string, number>>): Promise<RescueResult>;
  resurrect(jobIds: JobId[]): Promise<JobId[]>;
  resurrectByFilter(filter: ResurrectFilter): Promise<ResurrectResult>;
  // One batch of rows older than the cutoff (queue: one queue's rows, null: all); returns rows deleted.
  purge(target: PurgeTarget, queue: string | null, olderThan: Date, batchSize: number): Promise<number>;
  stats(): Promise<QueueStats[]>;
  metrics(windowMinutes: number, queue?: string): Promise<MetricBucket[]>;
  getQueue(name: string): Promise<QueueSettings | null>;
  listQueues(): Promise<QueueSettings[]>;
  updateQueue(name: string, patch: QueueSettingsPatch, expected?: QueueSettingsExpected): Promise<QueueSettingsChange>;
  getJob(jobId: JobId): Promise<JobRecord | null>;
  // A flow's edges of one job: its parents in the order of its after list (with their results), then its children
  // (the first 1,000 by id). Empty for a job in no flow.
  jobLinks(jobId: JobId): Promise<JobLink[]>;
  // Recurring schedules: state by name (all when name is omitted); pause/resume; and the compare-and-set that moves
  // lastTick from expectedTick to tick and enqueues the tick's jobs in one transaction (exactly once per tick).
  // Its jobs may carry "schedule:" keys; a key held by a job the schedule did not enqueue is an
  // IdempotencyConflictError and the tick is not recorded.
  listSchedules(name?: string): Promise<ScheduleState[]>;
  setSchedulePaused(name: string, paused: boolean): Promise<ScheduleState>;
  fireSchedule(name: string, expectedTick: Date | null, tick: Date, jobs: EnqueueRequest[]): Promise<FireResult>;
  searchJobs(search: JobSearch): Promise<JobPage>;
  // The ops audit trail: add a record (returns its id); close a 'started' one once (false when it is not started);
  // search newest first, bounded; delete one batch recorded before olderThan (returns rows deleted).
  recordAudit(entry: AuditEntry): Promise<string>;
  finishAudit(
    id: string,
    outcome: 'ok' | 'failed',
    status: number | null,
    reason: string | null,
    affected: number | null,
  ): Promise<boolean>;
  searchAudit(search: AuditSearch): Promise<AuditPage>;
  purgeAudit(olderThan: Date, batchSize: number): Promise<number>;
  // Console reads: a bounded count for previews, dead letters grouped (a page of groups, largest first), and the
  // workers: the registry's and those holding leases on hot jobs.
  countJobs(count: JobCount): Promise<CountResult>;
  dlqGroups(queue: string | null, offset: number, limit: number, scanRows: number): Promise<DlqGroupPage>;
  listWorkers(): Promise<WorkerInfo[]>;
  // The worker registry: add or refresh a processor's row (returns the server's time it was seen at); remove it on a
  // graceful stop (false: there was none); delete the rows not seen since olderThan (returns how many).
  registerWorker(w: WorkerRegistration): Promise<Date>;
  deregisterWorker(workerId: string): Promise<boolean>;
  pruneWorkers(olderThan: Date): Promise<number>;
  close(): Promise<void>;
}

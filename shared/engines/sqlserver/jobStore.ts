// The SQL Server / Azure SQL job store: every operation is one call of a keel.* stored procedure (sql/sqlserver/),
// with typed parameters named after JOB_PROCEDURES (PascalCase). Input is never spliced into SQL text.
import sql from 'mssql';
import path from 'node:path';
import { sqlDir } from '../../config/sqlDir.js';
import type {
  CompleteRef,
  CompleteResult,
  CancelResult,
  CancelResultById,
  ClaimOptions,
  ClaimedJob,
  DlqReason,
  EnqueueRequest,
  EnqueueResult,
  HeartbeatResult,
  JobId,
  JobLink,
  JobPage,
  JobRecord,
  JobSearch,
  JobStore,
  LeaseRef,
  RetryWhen,
  MetricBucket,
  OwnerResult,
  OwnerResultById,
  PurgeTarget,
  QueueSettings,
  QueueSettingsChange,
  QueueExpectField,
  QueueSettingsExpected,
  QueueSettingsPatch,
  QueueStats,
  RescueResult,
  ResurrectFilter,
  ResurrectResult,
  StartResult,
  StartedJob,
  FireResult,
  ScheduleState,
  JobCount,
  JobFilter,
  CountResult,
  DlqGroupPage,
  WorkerInfo,
  WorkerRegistration,
} from '../../jobs/contract.js';
import { BatchBackedJobStore } from '../../jobs/storeBase.js';
import { AUDIT_SCAN_ROWS_DEFAULT, IdempotencyConflictError } from '../../jobs/contract.js';
import type { AuditEntry, AuditPage, AuditSearch } from '../../jobs/contract.js';
import {
  camelKeys,
  toClaimedJob,
  toStartedJob,
  toJobRecord,
  toJobLink,
  toJobPage,
  searchScanRows,
  toMetricBucket,
  toQueueSettings,
  toQueueStats,
  toRescueResult,
  type RowCodec,
  toFireResult,
  toScheduleState,
  toAuditPage,
  toCountResult,
  toDlqGroupPage,
  toWorkerInfo,
  toBeatsByRef,
} from '../../jobs/rows.js';
import type { JobProcedure } from '../../jobs/procedures.js';
import {
  SQLSERVER_PARAMS,
  assertProcedureParams,
  sqlServerProcedureName,
  type ParamType,
  type ProcedureParams,
} from './procedures.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  flowRefusal,
  isLeaseRef,
  prepareEnqueue,
  typeMaxAttemptsJson,
} from '../../jobs/validate.js';
import { resultsByIdJson, type JobProgress } from '../../jobs/progress.js';
import type { JobLogLine } from '../../jobs/jobLog.js';
import { SqlServerPool, sharedSqlServerPool, type PoolOptions } from './pool.js';
import { isOutcomeUnknown, withSqlRetry, type RetryOptions, type RetryPolicy } from './retry.js';
import { migrateSqlServer } from './migrate.js';
import { assertSqlServerReady } from './startupCheck.js';

// The packaged folder; KEEL_SQL_DIR, when set, names another sql/ folder (`sqlRoot` below).
export const SQLSERVER_SQL_DIR = path.join(sqlDir(), 'sqlserver');

export async function migrateSqlServerJobs(pool: sql.ConnectionPool, log?: (line: string) => void, sqlRoot?: string) {
  const dir = sqlRoot === undefined ? SQLSERVER_SQL_DIR : path.join(sqlDir(sqlRoot), 'sqlserver');
  return migrateSqlServer(pool, { dir, log });
}

// ---------------------------------------------------------------------------------------------------------------
type Row = Record<string, unknown>;

// The arguments of JOB_FILTER_PARAMS (SearchJobs and CountJobs).
const filterArgs = (f: JobFilter) => ({
  Location: f.location,
  Queue: f.queue ?? null,
  Type: f.type ?? null,
  Tag: f.tag ?? null,
  State: f.state ?? null,
  Reason: f.reason ?? null,
  From: f.from ?? null,
  To: f.to ?? null,
});

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const json = (v: unknown): unknown => (v === null || v === undefined ? null : JSON.parse(String(v)));
const tags = (v: unknown): string[] => (v === null || v === undefined ? [] : (JSON.parse(String(v)) as string[]));

// JSON payload and tags travel as nvarchar text; everything else is mapped as for every engine (shared/jobs/rows.ts).
const MSSQL_CODEC: RowCodec = { payload: json, tags };
const claimed = (row: Row): ClaimedJob => toClaimedJob(camelKeys(row), MSSQL_CODEC);
const started = (row: Row): StartedJob => toStartedJob(camelKeys(row), MSSQL_CODEC);
const queueSettings = (row: Row): QueueSettings => toQueueSettings(camelKeys(row));
const jobRecord = (row: Row): JobRecord => toJobRecord(camelKeys(row), MSSQL_CODEC);

function leasesJson(refs: LeaseRef[]): string {
  return JSON.stringify(refs.map((r) => ({ jobId: r.jobId, leaseId: r.leaseId })));
}

export interface SqlServerStoreOptions extends PoolOptions {
  poolSize?: number; // connections (default 10)
  // Apply sql/sqlserver migrations at connect. Default false: in Azure the app's identity has only keel_executor
  // (EXECUTE on schema keel) and cannot run DDL; install the schema with `npm run migrate` (docs/sqlserver.md).
  migrate?: boolean;
  sqlDir?: string; // the sql/ folder to migrate from (KEEL_SQL_DIR); the packaged one by default
  shared?: boolean; // use the process-wide pool for this connection (Functions host); default false
  maxPayloadBytes?: number;
  retry?: RetryOptions;
}

// EnqueueJobs and FireSchedule refuse a key held with another payload (or by a job the schedule did not enqueue)
// with error 50025, the message ending in a JSON object naming the job: the contract's IdempotencyConflictError.
const IDEMPOTENCY_CONFLICT = 50025;
// EnqueueJobs refuses a flow it cannot take with 50027 (a parent that does not exist, a bad after/onFailure) or
// 50028 (a scheduled job with parents), "jobs[i].after[k]: ...": the contract's ValidationError (flowRefusal).
function flowRefused(err: unknown, count: number): unknown {
  const e = err as { number?: number; message?: string };
  return ((e?.number === 50027 || e?.number === 50028) && flowRefusal(e.message, count)) || err;
}
function idempotencyConflict(err: unknown): unknown {
  const e = err as { number?: number; message?: string };
  const at = e?.number === IDEMPOTENCY_CONFLICT ? (e.message?.indexOf('{"index":') ?? -1) : -1;
  if (at < 0) return err;
  try {
    const d = JSON.parse(e.message!.slice(at)) as {
      index: number;
      queue: string;
      type: string;
      idempotencyKey: string;
    };
    return new IdempotencyConflictError(d.index, d.queue, d.type, d.idempotencyKey);
  } catch {
    return err;
  }
}

export class SqlServerJobStore extends BatchBackedJobStore implements JobStore {
  readonly engine = 'sqlserver';

  private constructor(
    readonly pools: SqlServerPool,
    private readonly maxPayloadBytes: number,
    private readonly retryOptions: RetryOptions,
    private readonly ownsPool: boolean,
  ) {
    super();
  }

  static async connect(connection: string, opts: SqlServerStoreOptions = {}): Promise<SqlServerJobStore> {
    const poolOpts: PoolOptions = { ...opts, max: opts.poolSize ?? opts.max ?? 10 };
    const pools = opts.shared ? sharedSqlServerPool(connection, poolOpts) : SqlServerPool.create(connection, poolOpts);
    try {
      const pool = await pools.get();
      if (opts.migrate) await migrateSqlServerJobs(pool, undefined, opts.sqlDir);
      // Fail fast, naming the setting: READ_COMMITTED_SNAPSHOT, compatibility level, EXECUTE (startupCheck.ts).
      await assertSqlServerReady(pool);
    } catch (err) {
      if (!opts.shared) await pools.close().catch(() => undefined);
      throw err;
    }
    return new SqlServerJobStore(
      pools,
      opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES,
      opts.retry ?? {},
      !opts.shared,
    );
  }

  // Runs keel.<Proc> with typed parameters; `params` must name exactly the procedure's parameters, in order.
  async call<P extends JobProcedure>(proc: P, params: ProcedureParams<P>, policy: RetryPolicy): Promise<Row[]> {
    const entries = Object.entries(params as Record<string, unknown>);
    assertProcedureParams(
      proc,
      entries.map(([name]) => name),
    );
    const types = SQLSERVER_PARAMS[proc] as Record<string, ParamType>;
    return withSqlRetry(
      policy,
      async () => {
        const request = await this.pools.request();
        for (const [name, value] of entries) request.input(name, types[name]!, value ?? null);
        const result = await request.execute<Row>(sqlServerProcedureName(proc));
        return (result.recordset ?? []) as Row[];
      },
      this.retryOptions,
    );
  }

  // A move whose reply was lost: where the job is now says what happened (never repeat the move blindly).
  private async locate(jobId: JobId): Promise<JobRecord | null> {
    return this.getJob(jobId);
  }

  async enqueueMany(jobs: EnqueueRequest[]): Promise<EnqueueResult[]> {
    const docs = prepareEnqueue(jobs, this.maxPayloadBytes);
    if (docs.length === 0) return [];
    // Safe to re-run only when every job carries an idempotency key: a second run finds the first run's jobs.
    const policy: RetryPolicy = docs.every((d) => typeof d.idempotencyKey === 'string') ? 'safe' : 'once';
    const rows = await this.call('enqueue_many', { Jobs: JSON.stringify(docs) }, policy).catch((err: unknown) => {
      throw flowRefused(idempotencyConflict(err), docs.length);
    });
    return rows.map((r) => ({ id: String(r.JobId), duplicate: Boolean(r.Duplicate) }));
  }

  async claimNext(opts: ClaimOptions): Promise<ClaimedJob[]> {
    if (opts.queues.length === 0) return [];
    const rows = await this.call(
      'claim_next',
      {
        WorkerId: opts.workerId,
        Queues: JSON.stringify(opts.queues),
        Limit: opts.limit,
        LeaseSeconds: opts.leaseSeconds ?? 60,
      },
      'once',
    );
    return rows.map(claimed);
  }

  // 'safe': it changes nothing (the picked rows stay pending), so a lost reply is simply asked again.
  async pickDue(queues: string[], limit: number): Promise<JobId[]> {
    if (queues.length === 0) return [];
    const rows = await this.call('pick_due', { Queues: JSON.stringify(queues), Limit: limit }, 'safe');
    return rows.map((r) => String(r.JobId));
  }

  // 'once', as claimNext: a lost reply leaves the jobs processing under leases nobody holds; no heartbeat comes, so
  // zombie rescue takes them back after the queue's heartbeat timeout (that attempt counted).
  async claimAndStart(opts: ClaimOptions): Promise<StartedJob[]> {
    if (opts.queues.length === 0) return [];
    const rows = await this.call(
      'claim_and_start',
      {
        WorkerId: opts.workerId,
        Queues: JSON.stringify(opts.queues),
        Limit: opts.limit,
        LeaseSeconds: opts.leaseSeconds ?? 60,
      },
      'once',
    );
    return rows.map(started);
  }

  async claimById(jobId: JobId, workerId: string, leaseSeconds = 60): Promise<ClaimedJob | null> {
    const rows = await this.call(
      'claim_by_id',
      { JobId: jobId, WorkerId: workerId, LeaseSeconds: leaseSeconds },
      'once',
    );
    return rows[0] ? claimed(rows[0]) : null;
  }

  async startMany(refs: LeaseRef[]): Promise<(StartResult & { jobId: JobId })[]> {
    if (refs.length === 0) return [];
    // A malformed lease id is 'lease_lost' without a round trip, as in every other owner-scoped call (isLeaseRef).
    const valid = refs.filter(isLeaseRef);
    let byId = new Map<string, Row>();
    if (valid.length) {
      try {
        const rows = await this.call('start_many', { Leases: leasesJson(valid) }, 'once');
        byId = new Map(rows.map((r) => [String(r.JobId), r]));
      } catch (err) {
        if (!isOutcomeUnknown(err)) throw err;
        // Lost reply: a job processing under our lease was started by this call (the lease is ours alone).
        for (const ref of valid) {
          const job = await this.locate(ref.jobId);
          if (job?.location === 'hot' && job.state === 'processing' && job.leaseId === ref.leaseId.toLowerCase()) {
            byId.set(ref.jobId, { JobId: ref.jobId, Status: 'ok', Attempt: job.attempts });
          } else if (job?.location === 'hot' && job.state === 'fetched' && job.leaseId === ref.leaseId.toLowerCase()) {
            throw err; // not started, still ours: the caller may start it again
          }
        }
      }
    }
    return refs.map((ref) => {
      const r = byId.get(ref.jobId);
      return r && r.Status === 'ok'
        ? { jobId: ref.jobId, status: 'ok' as const, attempt: num(r.Attempt) }
        : { jobId: ref.jobId, status: 'lease_lost' as const, attempt: 0 };
    });
  }

  async heartbeat(ref: LeaseRef): Promise<HeartbeatResult> {
    const [r] = await this.call('heartbeat', { JobId: ref.jobId, LeaseId: ref.leaseId }, 'safe');
    return r!.Status === 'ok'
      ? {
          status: 'ok',
          cancelRequested: Boolean(r!.CancelRequested),
          zombieTimeoutSeconds: num(r!.ZombieTimeoutSeconds),
        }
      : { status: r!.Status as OwnerResult, cancelRequested: false };
  }

  // 'safe', as heartbeat: a beat sent twice is one beat.
  async heartbeatMany(refs: LeaseRef[]): Promise<(HeartbeatResult & { jobId: JobId })[]> {
    const valid = refs.filter(isLeaseRef);
    const rows = valid.length ? await this.call('heartbeat_many', { Leases: leasesJson(valid) }, 'safe') : [];
    return toBeatsByRef(refs, rows, ['JobId', 'LeaseId', 'CancelRequested', 'ZombieTimeoutSeconds']);
  }

  async reportProgress(ref: LeaseRef, progress: JobProgress): Promise<OwnerResult> {
    const [r] = await this.call(
      'report_progress',
      { JobId: ref.jobId, LeaseId: ref.leaseId, Progress: JSON.stringify(progress) },
      'safe', // idempotent: writing the same progress twice is the same as once
    );
    return r!.Result as OwnerResult;
  }

  async appendJobLog(ref: LeaseRef, lines: JobLogLine[], maxLines: number): Promise<OwnerResult> {
    const [r] = await this.call(
      'append_job_log',
      { JobId: ref.jobId, LeaseId: ref.leaseId, Lines: JSON.stringify(lines), MaxLines: maxLines },
      'once', // an append whose reply was lost may have happened: never sent twice
    );
    return r!.Result as OwnerResult;
  }

  async completeMany(refs: CompleteRef[]): Promise<OwnerResultById[]> {
    if (refs.length === 0) return [];
    const valid = refs.filter(isLeaseRef);
    const done = new Map<string, 'ok' | 'cancelled'>();
    if (valid.length) {
      try {
        const rows = await this.call(
          'complete_many',
          { Leases: leasesJson(valid), Results: resultsByIdJson(valid) },
          'once',
        );
        for (const r of rows) if (r.Status === 'ok' || r.Status === 'cancelled') done.set(String(r.JobId), r.Status);
      } catch (err) {
        if (!isOutcomeUnknown(err)) throw err;
        for (const ref of valid) {
          const job = await this.locate(ref.jobId);
          if (job?.location === 'archive') done.set(ref.jobId, 'ok');
          else if (job?.location === 'dlq' && job.reason === 'cancelled') done.set(ref.jobId, 'cancelled');
          else if (job?.location === 'hot' && job.leaseId === ref.leaseId.toLowerCase()) throw err; // nothing moved
        }
      }
    }
    return refs.map((ref) => ({ jobId: ref.jobId, status: done.get(ref.jobId) ?? 'lease_lost' }));
  }

  // Single-job owner-scoped move with lost-reply resolution: `moved` says from the job's record whether the move
  // happened; a job still held under our lease in its old state means nothing happened (the error is re-thrown).
  // `cancelWins`: the move dead-letters the job as 'cancelled' when its cancel was requested (retry, interrupt, a
  // fail with another reason), and answers 'cancelled' then, from the record too.
  // A ref that can hold no lease never gets here: the contract boundary answers it (STORE_ARGUMENT_CHECKS).
  private async ownerMove(
    ref: LeaseRef,
    run: (leaseId: string) => Promise<Row[]>,
    moved: (job: JobRecord | null) => boolean,
    unchanged: (job: JobRecord) => boolean,
    cancelWins = false,
  ): Promise<CompleteResult> {
    try {
      const [r] = await run(ref.leaseId);
      return r!.Status as CompleteResult;
    } catch (err) {
      if (!isOutcomeUnknown(err)) throw err;
      const job = await this.locate(ref.jobId);
      if (job?.location === 'hot' && job.leaseId === ref.leaseId.toLowerCase() && unchanged(job)) throw err;
      if (!moved(job)) return 'lease_lost';
      return cancelWins && job?.location === 'dlq' && job.reason === 'cancelled' ? 'cancelled' : 'ok';
    }
  }

  async retry(ref: LeaseRef, when: RetryWhen, error: string): Promise<CompleteResult> {
    const [runAt, delayMs] = when instanceof Date ? [when, null] : [null, when.delayMs];
    return this.ownerMove(
      ref,
      (leaseId) =>
        this.call(
          'retry',
          { JobId: ref.jobId, LeaseId: leaseId, RunAt: runAt, Error: error, DelayMs: delayMs },
          'once',
        ),
      (job) =>
        (job?.location === 'hot' && job.state === 'pending') || (job?.location === 'dlq' && job.reason === 'cancelled'),
      (job) => job.state === 'processing',
      true,
    );
  }

  async fail(ref: LeaseRef, reason: DlqReason, error: string): Promise<CompleteResult> {
    return this.ownerMove(
      ref,
      (leaseId) => this.call('fail', { JobId: ref.jobId, LeaseId: leaseId, Reason: reason, Error: error }, 'once'),
      (job) => job?.location === 'dlq' && (job.reason === reason || job.reason === 'cancelled'),
      (job) => job.state === 'fetched' || job.state === 'processing',
      reason !== 'cancelled',
    );
  }

  async release(ref: LeaseRef): Promise<OwnerResult> {
    // Release never dead-letters (its procedure answers 'ok' or 'lease_lost'; cancelWins is off).
    return this.ownerMove(
      ref,
      (leaseId) => this.call('release', { JobId: ref.jobId, LeaseId: leaseId }, 'once'),
      (job) => job?.location === 'hot' && job.state === 'pending',
      (job) => job.state === 'fetched',
    ) as Promise<OwnerResult>;
  }

  async interrupt(ref: LeaseRef, error: string): Promise<CompleteResult> {
    return this.ownerMove(
      ref,
      (leaseId) => this.call('interrupt', { JobId: ref.jobId, LeaseId: leaseId, Error: error }, 'once'),
      (job) =>
        (job?.location === 'hot' && job.state === 'pending') || (job?.location === 'dlq' && job.reason === 'cancelled'),
      (job) => job.state === 'processing',
      true,
    );
  }

  async cancel(jobId: JobId): Promise<CancelResult> {
    try {
      const [r] = await this.call('cancel', { JobId: jobId }, 'once');
      return r!.Status as CancelResult;
    } catch (err) {
      if (!isOutcomeUnknown(err)) throw err;
      const job = await this.locate(jobId);
      if (job?.location === 'dlq' && job.reason === 'cancelled') return 'cancelled';
      if (job?.location === 'hot' && job.cancelRequested) return 'cancel_requested';
      throw err;
    }
  }

  protected async cancelChunk(ids: JobId[]): Promise<CancelResultById[]> {
    try {
      const rows = await this.call('cancel_many', { JobIds: JSON.stringify(ids) }, 'once');
      return rows.map((r) => ({ jobId: String(r.JobId), result: r.Status as CancelResult }));
    } catch (err) {
      if (!isOutcomeUnknown(err)) throw err;
      // The reply was lost: each job says where the cancel took it (as cancel does); a job it did not reach throws.
      const out: CancelResultById[] = [];
      for (const jobId of ids) {
        const job = await this.locate(jobId);
        if (job?.location === 'dlq' && job.reason === 'cancelled') out.push({ jobId, result: 'cancelled' });
        else if (job?.location === 'hot' && job.cancelRequested) out.push({ jobId, result: 'cancel_requested' });
        else if (!job) out.push({ jobId, result: 'not_found' });
        else throw err;
      }
      return out;
    }
  }

  async rescueZombies(limit: number, maxAttemptsByType?: Readonly<Record<string, number>>): Promise<RescueResult> {
    const byType = typeMaxAttemptsJson(maxAttemptsByType);
    // A bounded, idempotent sweep: running it again after a lost reply only sweeps again.
    const [r] = await this.call('rescue_zombies', { Limit: limit, TypeMaxAttempts: byType }, 'safe');
    return toRescueResult(camelKeys(r!));
  }

  async resurrect(jobIds: JobId[]): Promise<JobId[]> {
    if (jobIds.length === 0) return [];
    const rows = await this.call('resurrect', { JobIds: JSON.stringify(jobIds) }, 'once');
    return rows.map((r) => String(r.JobId));
  }

  async resurrectByFilter(filter: ResurrectFilter): Promise<ResurrectResult> {
    const dryRun = filter.dryRun ?? true;
    const rows = await this.call(
      'resurrect_by_filter',
      {
        Queue: filter.queue ?? null,
        Type: filter.type ?? null,
        Reason: filter.reason ?? null,
        FailedAfter: filter.failedAfter ?? null,
        FailedBefore: filter.failedBefore ?? null,
        Limit: filter.limit,
        DryRun: dryRun,
      },
      dryRun ? 'safe' : 'once',
    );
    return { ids: rows.map((r) => String(r.JobId)), dryRun };
  }

  async purge(target: PurgeTarget, queue: string | null, olderThan: Date, batchSize: number): Promise<number> {
    const [r] = await this.call(
      'purge',
      { Target: target, Queue: queue, OlderThan: olderThan, BatchSize: batchSize },
      'safe',
    );
    return num(r!.Deleted);
  }

  async stats(): Promise<QueueStats[]> {
    const rows = await this.call('stats', {}, 'safe');
    return rows.map((r) => toQueueStats(camelKeys(r)));
  }

  async metrics(windowMinutes: number, queue?: string): Promise<MetricBucket[]> {
    const rows = await this.call('metrics', { WindowMinutes: windowMinutes, Queue: queue ?? null }, 'safe');
    return rows.map((r) => toMetricBucket(camelKeys(r)));
  }

  async listSchedules(name?: string): Promise<ScheduleState[]> {
    return (await this.call('list_schedules', { Name: name ?? null }, 'safe')).map((r) =>
      toScheduleState(camelKeys(r)),
    );
  }

  async setSchedulePaused(name: string, paused: boolean): Promise<ScheduleState> {
    // Absolute: setting it twice is setting it once (a second resume does not move resumedAt: it was not paused).
    const [r] = await this.call('set_schedule_paused', { Name: name, Paused: paused === true }, 'safe');
    return toScheduleState(camelKeys(r!));
  }

  async fireSchedule(name: string, expectedTick: Date | null, tick: Date, jobs: EnqueueRequest[]): Promise<FireResult> {
    const docs = jobs.length ? prepareEnqueue(jobs, this.maxPayloadBytes, { scheduleKeys: true }) : [];
    // Safe to repeat after a lost reply: the compare-and-set makes a second run 'lost', enqueuing nothing.
    const rows = await this.call(
      'fire_schedule',
      { Name: name, ExpectedTick: expectedTick, Tick: tick, Jobs: JSON.stringify(docs) },
      'safe',
    ).catch((err: unknown) => {
      throw idempotencyConflict(err);
    });
    return toFireResult(rows.map(camelKeys));
  }

  async getQueue(name: string): Promise<QueueSettings | null> {
    const rows = await this.call('list_queues', { Name: name }, 'safe');
    return rows[0] ? queueSettings(rows[0]) : null;
  }

  async listQueues(): Promise<QueueSettings[]> {
    return (await this.call('list_queues', { Name: null }, 'safe')).map(queueSettings);
  }

  async updateQueue(
    name: string,
    patch: QueueSettingsPatch,
    expected?: QueueSettingsExpected,
  ): Promise<QueueSettingsChange> {
    // Absolute values: applying them twice is applying them once (a retry that follows a lost answer may say
    // created: false for the row its first attempt created; with expected, the first attempt's change makes the
    // expected values stale, and the procedure answers unchanged, not a conflict, as the row holds what was sent).
    const rows = await this.call(
      'update_queue',
      {
        Name: name,
        Paused: patch.paused ?? null,
        MaxConcurrency: patch.maxConcurrency ?? null,
        ClearMaxConcurrency: patch.maxConcurrency === null,
        ZombieTimeoutSeconds: patch.zombieTimeoutSeconds ?? null,
        ZombiePolicy: patch.zombiePolicy ?? null,
        MaxAttempts: patch.maxAttempts ?? null,
        ArchiveRetentionSeconds: patch.archiveRetentionSeconds ?? null,
        DlqRetentionSeconds: patch.dlqRetentionSeconds ?? null,
        MetricsRetentionSeconds: patch.metricsRetentionSeconds ?? null,
        Expected: expected === undefined ? null : JSON.stringify(expected),
      },
      'safe',
    );
    const r = rows[0]!;
    return {
      ...queueSettings(r),
      created: r.Created === true || r.Created === 1,
      ...(r.Conflict ? { conflict: r.Conflict as QueueExpectField } : {}),
      ...(r.Unchanged === true || r.Unchanged === 1 ? { unchanged: true as const } : {}),
    };
  }

  async getJob(jobId: JobId): Promise<JobRecord | null> {
    const rows = await this.call('get_job', { JobId: jobId }, 'safe');
    return rows[0] ? jobRecord(rows[0]) : null;
  }

  async jobLinks(jobId: JobId): Promise<JobLink[]> {
    const rows = await this.call('job_links', { JobId: jobId }, 'safe');
    return rows.map((r) => toJobLink(r, MSSQL_CODEC));
  }

  async searchJobs(s: JobSearch): Promise<JobPage> {
    const scanRows = searchScanRows(s);
    const rows = await this.call(
      'search_jobs',
      {
        ...filterArgs(s),
        Text: s.text ?? null,
        AfterId: s.afterId ?? null,
        ScanRows: scanRows,
        Limit: s.limit,
        Priority: s.priority ?? null,
        IdempotencyKey: s.idempotencyKey ?? null,
        Oldest: s.order === 'oldest',
      },
      'safe',
    );
    return toJobPage(rows, s.limit, jobRecord);
  }

  // Not retried: a retry after a lost reply would add a second row for one call.
  async recordAudit(e: AuditEntry): Promise<string> {
    const [r] = await this.call(
      'record_audit',
      {
        PrincipalId: e.principalId,
        PrincipalName: e.principalName,
        TenantId: e.tenantId,
        AppId: e.appId,
        AuthMethod: e.authMethod,
        Channel: e.channel,
        Role: e.role,
        RequiredRole: e.requiredRole,
        HttpMethod: e.httpMethod,
        Action: e.action,
        Target: e.target,
        Summary: e.summary,
        Outcome: e.outcome,
        Status: e.status,
        Reason: e.reason,
        Affected: e.affected,
        RequestId: e.requestId,
        ClientIp: e.clientIp,
      },
      'once',
    );
    return String(r!.Result);
  }

  // Safe to repeat: only a started row changes, once.
  async finishAudit(
    id: string,
    outcome: 'ok' | 'failed',
    status: number | null,
    reason: string | null,
    affected: number | null,
  ): Promise<boolean> {
    const [r] = await this.call(
      'finish_audit',
      { Id: id, Outcome: outcome, Status: status, Reason: reason, Affected: affected },
      'safe',
    );
    return r!.Result === true || r!.Result === 1;
  }

  async searchAudit(s: AuditSearch): Promise<AuditPage> {
    const rows = await this.call(
      'search_audit',
      {
        From: s.from ?? null,
        To: s.to ?? null,
        Principal: s.principal ?? null,
        Action: s.action ?? null,
        Target: s.target ?? null,
        Outcome: s.outcome ?? null,
        BeforeId: s.beforeId ?? null,
        ScanRows: s.scanRows ?? AUDIT_SCAN_ROWS_DEFAULT,
        Limit: s.limit,
      },
      'safe',
    );
    return toAuditPage(rows, s.limit);
  }

  async purgeAudit(olderThan: Date, batchSize: number): Promise<number> {
    const [r] = await this.call('purge_audit', { OlderThan: olderThan, BatchSize: batchSize }, 'safe');
    return num(r!.Result);
  }

  async countJobs(c: JobCount): Promise<CountResult> {
    const [r] = await this.call('count_jobs', { ...filterArgs(c), Cap: c.cap }, 'safe');
    return toCountResult(camelKeys(r!));
  }

  async dlqGroups(queue: string | null, offset: number, limit: number, scanRows: number): Promise<DlqGroupPage> {
    const rows = await this.call(
      'dlq_groups',
      { Queue: queue, Offset: offset, Limit: limit, ScanRows: scanRows },
      'safe',
    );
    return toDlqGroupPage(rows.map(camelKeys));
  }

  async listWorkers(): Promise<WorkerInfo[]> {
    return (await this.call('list_workers', {}, 'safe')).map((r) => toWorkerInfo(camelKeys(r)));
  }

  // 'safe': an upsert of the same row; run twice, it is seen twice.
  async registerWorker(w: WorkerRegistration): Promise<Date> {
    const [r] = await this.call(
      'register_worker',
      {
        WorkerId: w.workerId,
        Host: w.host,
        InstanceId: w.instanceId,
        Pid: w.pid,
        AppVersion: w.appVersion,
        BuildId: w.buildId,
        Queues: w.queues === null ? null : w.queues.join(','),
        Concurrency: w.concurrency,
        StartedAt: w.startedAt,
        JobsDone: w.jobsDone,
      },
      'safe',
    );
    return r!.Result as Date;
  }

  // 'safe': a repeated delete finds nothing (false), but the row is gone either way.
  async deregisterWorker(workerId: string): Promise<boolean> {
    const [r] = await this.call('deregister_worker', { WorkerId: workerId }, 'safe');
    return r!.Result === true || r!.Result === 1;
  }

  async pruneWorkers(olderThan: Date): Promise<number> {
    const [r] = await this.call('prune_workers', { OlderThan: olderThan }, 'safe');
    return num(r!.Result);
  }

  async close(): Promise<void> {
    if (this.ownsPool) await this.pools.close();
  }
}

// The PostgreSQL job store: every operation is one call of a keel.* function (sql/postgres/), parameters bound.
import { createHash } from 'node:crypto';
import pg from 'pg';
import { poolErrorLogger } from '../poolErrors.js';
import { readCommittedOptions } from './readCommitted.js';
import path from 'node:path';
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
  camelRows,
  toClaimedJob,
  toStartedJobs,
  toJobRecord,
  toJobLink,
  toJobPage,
  searchScanRows,
  toMetricBucket,
  toQueueSettings,
  toQueueStats,
  toRescueResult,
  type Row,
  type RowCodec,
  toFireResult,
  toScheduleState,
  toAuditPage,
  toCountResult,
  toDlqGroupPage,
  toWorkerInfo,
  toBeatsByRef,
} from '../../jobs/rows.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  isLeaseRef,
  prepareEnqueue,
  typeMaxAttemptsJson,
  flowRefusal,
} from '../../jobs/validate.js';
import { resultsByIdJson, type JobProgress } from '../../jobs/progress.js';
import type { JobLogLine } from '../../jobs/jobLog.js';
import { migrate } from './migrate.js';
import { postgresCall, type PostgresArgs } from './procedures.js';
import type { JobProcedure } from '../../jobs/procedures.js';
import { sqlDir } from '../../config/sqlDir.js';

// bigint (int8) as string, never a lossy number; numeric counts we convert explicitly.
pg.types.setTypeParser(20, (v) => v);

// int8[] (job ids: enqueue_many's, complete_many's) as arrays of strings, as pg's own parser reads them, without its
// walk of every character and a trim per element: ~0.8 us an element, so ~1 us a job of the drain's Node CPU
// (bench/README.md, runs 410-429). The shape these functions answer (one dimension, no NULL, no quotes) is split;
// anything else goes to pg's parser.
const textParser = pg.types.getTypeParser as (oid: number, format: 'text') => (v: string) => unknown;
const pgInt8Array = textParser(1016, 'text');
export function parseInt8Array(v: string): unknown {
  if (v === '{}') return [];
  if (v.charCodeAt(0) === 123 && v.indexOf('{', 1) < 0 && v.indexOf('N') < 0 && v.indexOf('"') < 0) {
    return v.slice(1, -1).split(',');
  }
  return pgInt8Array(v);
}
// text[] (a job's tags) the same way: pg's parser makes a parser object, two arrays and an object per character
// (a claimed job with two short tags: ~850 B and ~2 us of it, against ~140 B split; claim_and_start answers NULL for
// no tags, so untagged jobs never get here; bench/README.md, runs 540-559).
// PostgreSQL's array output quotes every element that is empty, is NULL in any case, or holds a brace, a comma, a
// quote, a backslash or white space, and writes the SQL NULL as a bare NULL: so without a quote, a nested brace or a
// NULL, the elements are the text between the commas. Anything else goes to pg's parser.
const pgTextArray = textParser(1009, 'text');
export function parseTextArray(v: string): unknown {
  if (v === '{}') return [];
  if (v.charCodeAt(0) === 123 && v.indexOf('{', 1) < 0 && v.indexOf('"') < 0 && v.indexOf('NULL') < 0) {
    return v.slice(1, -1).split(',');
  }
  return pgTextArray(v);
}
// Passed with every query of the store (pg's per-query `types`): the process-wide parsers stay pg's.
const STORE_TEXT_PARSERS = new Map<number, (v: string) => unknown>([
  [1016, parseInt8Array],
  [1009, parseTextArray],
]);
const STORE_TYPES = {
  getTypeParser: ((oid: number, format?: string) =>
    (format !== 'binary' && STORE_TEXT_PARSERS.get(oid)) ||
    (pg.types.getTypeParser as (oid: number, format?: string) => unknown)(
      oid,
      format,
    )) as typeof pg.types.getTypeParser,
};

// The packaged folder; a runtime with KEEL_SQL_DIR set migrates from there instead (PostgresStoreOptions.sqlDir).
export const POSTGRES_SQL_DIR = path.join(sqlDir(), 'postgres');
// The application's role: EXECUTE on the public keel functions only (sql/postgres/roles/keel_executor.sql).
export const POSTGRES_EXECUTOR_ROLE = 'keel_executor';
// Then the producers' role: EXECUTE on enqueue_many only (roles/keel_producer.sql).
const roleScripts = (dir: string) => [
  path.join(dir, 'roles', 'keel_executor.sql'),
  path.join(dir, 'roles', 'keel_producer.sql'),
];
export const POSTGRES_ROLE_SCRIPTS = roleScripts(POSTGRES_SQL_DIR);

// enqueue_many and fire_schedule refuse a key held with another payload with 23505 on this constraint, the detail a
// JSON object naming the job (R__010_jobs_functions.sql): the contract's IdempotencyConflictError.
function idempotencyConflict(err: unknown): unknown {
  const e = err as { code?: string; constraint?: string; detail?: string };
  if (e?.code !== '23505' || e.constraint !== 'jobs_hot_idempotency_scope' || !e.detail) return err;
  try {
    const d = JSON.parse(e.detail) as { index: number; queue: string; type: string; idempotencyKey: string };
    return new IdempotencyConflictError(d.index, d.queue, d.type, d.idempotencyKey);
  } catch {
    return err;
  }
}

// A flow refused by the database (22023 "jobs[i].after[k]: ..."): the contract's ValidationError (flowRefusal).
function flowRefused(err: unknown, count: number): unknown {
  const e = err as { code?: string; message?: string };
  return (e?.code === '22023' && flowRefusal(e.message, count)) || err;
}

// record_audit's arguments from an entry (the same names, snake_case).
function auditArgs(e: AuditEntry): PostgresArgs<'record_audit'> {
  return {
    principal_id: e.principalId,
    principal_name: e.principalName,
    tenant_id: e.tenantId,
    app_id: e.appId,
    auth_method: e.authMethod,
    channel: e.channel,
    role: e.role,
    required_role: e.requiredRole,
    http_method: e.httpMethod,
    action: e.action,
    target: e.target,
    summary: e.summary,
    outcome: e.outcome,
    status: e.status,
    reason: e.reason,
    affected: e.affected,
    request_id: e.requestId,
    client_ip: e.clientIp,
  };
}

export interface PostgresStoreOptions {
  poolSize?: number;
  poolIdleMs?: number; // how long an unused pool connection is kept (KEEL_PG_POOL_IDLE_MS; default 60 s)
  migrate?: boolean; // apply sql/postgres migrations at connect (default true)
  // Connect as the schema owner for the migrations (default: the store's own URL). The store's URL is the application's
  // login, a member of keel_executor, which may only execute the public functions and so cannot migrate.
  migrateUrl?: string;
  sqlDir?: string; // the sql/ folder to migrate from (KEEL_SQL_DIR); the packaged one by default
  maxPayloadBytes?: number;
  applicationName?: string;
}

// `sqlRoot`: the sql/ folder (KEEL_SQL_DIR when set); the packaged one by default.
export async function migratePostgres(pool: pg.Pool, sqlRoot?: string) {
  const dir = sqlRoot === undefined ? POSTGRES_SQL_DIR : path.join(sqlDir(sqlRoot), 'postgres');
  return migrate(pool, { dir, ledger: 'keel.schema_migrations', always: roleScripts(dir) });
}

// Fails fast, naming the setting, when the store's login cannot run Keel: the schema is not installed, or the login
// may not execute the keel functions (not a member of keel_executor, docs/postgres.md).
export async function assertPostgresReady(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query(
    // From the catalogs (readable by every login) and by oid, so a login without USAGE on keel gets an answer.
    `select current_user as login, p.oid is not null as installed,
            coalesce(has_schema_privilege(n.oid, 'usage') and has_function_privilege(p.oid, 'execute'), false) as can_execute
     from (select 1) as one
     left join pg_namespace n on n.nspname = 'keel'
     left join pg_proc p on p.pronamespace = n.oid and p.proname = 'get_job'
     limit 1`,
  );
  const r = rows[0] as { login: string; installed: boolean; can_execute: boolean };
  if (!r.installed) {
    throw new Error(
      `KEEL_PG_URL: the keel schema is not installed in this database; run npm run migrate as its owner, or set KEEL_PG_MIGRATE_URL to the owner's URL so the app migrates at startup (docs/postgres.md)`,
    );
  }
  if (!r.can_execute) {
    throw new Error(
      `KEEL_PG_URL: login ${r.login} may not execute the keel functions; grant it the role: GRANT keel_executor TO ${r.login}; (docs/postgres.md)`,
    );
  }
}

// The arguments of JOB_FILTER_PARAMS (search_jobs and count_jobs).
const filterArgs = (f: JobFilter) => ({
  location: f.location,
  queue: f.queue ?? null,
  type: f.type ?? null,
  tag: f.tag ?? null,
  state: f.state ?? null,
  reason: f.reason ?? null,
  from: f.from ?? null,
  to: f.to ?? null,
});

// pg returns jsonb decoded and text[] as arrays already.
const PG_CODEC: RowCodec = { payload: (v) => v, tags: (v) => (v as string[] | null) ?? [] };
const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));

// Only well-formed refs come here (isLeaseRef: digits and a UUID), so the JSON is written without an escaping pass.
function leasesJson(refs: LeaseRef[]): string {
  return `[${refs.map((r) => `{"jobId":${r.jobId},"leaseId":"${r.leaseId}"}`).join(',')}]`;
}

// A named statement's name: the procedure and a digest of its text, so two texts (two Keel versions on one server
// connection, behind a pooler) never share a name.
const statementNames = new Map<string, string>();
function statementName(proc: string, text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `keel_${proc}_${createHash('sha256').update(text).digest('hex').slice(0, 12)}`;
    statementNames.set(text, name);
  }
  return name;
}

// A named statement the server connection could not run as one; the call failed before anything ran (at Parse or
// Bind): 26000 "prepared statement ... does not exist" and 42P05 "... already exists" (a transaction-mode pooler that
// hands each call another server connection), 0A000 "cached plan must not change result type" (a migration changed
// what the function returns).
function notPreparable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return (
    e?.code === '26000' ||
    e?.code === '42P05' ||
    (e?.code === '0A000' && typeof e.message === 'string' && e.message.includes('cached plan'))
  );
}

// The job store's statement timeout when the user sets none: every job function is an index-bounded move or read
// (a 20,000-job enqueue under a second).
export const STORE_STATEMENT_TIMEOUT_MS = 60_000;

export interface StoreStatementTimeout {
  ms: number; // 0: none
  // 'keel': STORE_STATEMENT_TIMEOUT_MS, since the session got none but the server's default; otherwise where the
  // user's came from, as pg_settings.source names it ('client': the URL's options=-c statement_timeout=…; 'user',
  // 'database', 'database user': ALTER ROLE / ALTER DATABASE … SET; 'configuration file', 'command line': the server's)
  source: string;
}

// The statement timeout the store's sessions run under (docs/operations.md, "The job store's statement timeout"):
// one set by the user anywhere PostgreSQL takes one wins; Keel's own only where none was. Read once when the store
// opens, on a session of its own URL and login (a role's or a database's setting applies per login and database).
export async function storeStatementTimeout(url: string, applicationName: string): Promise<StoreStatementTimeout> {
  const client = new pg.Client({
    ...readCommittedOptions(url), // as the store's pool connects: the same options reach it
    application_name: applicationName,
    connectionTimeoutMillis: 10_000,
    query_timeout: 15_000,
  });
  client.on('error', () => undefined); // a cut while reading fails the query below, which throws
  await client.connect();
  try {
    const { rows } = await client.query<{ ms: string; source: string }>(
      `select setting as ms, source from pg_settings where name = 'statement_timeout'`,
    );
    const r = rows[0]!;
    return r.source === 'default'
      ? { ms: STORE_STATEMENT_TIMEOUT_MS, source: 'keel' }
      : { ms: Number(r.ms), source: r.source };
  } finally {
    await client.end().catch(() => undefined);
  }
}

// Each pool connection, as it opens: Keel's default statement timeout where the session got none but the server's
// default (a session setting, so a role's, a database's or the URL's own outranks it: pg_settings.source is then not
// 'default'), and the client's bound on its calls 5 s past the session's timeout (none where it has none). Per
// connection, not once at connect: a setting the user makes or removes while the store runs (ALTER ROLE … SET) reaches
// the connections opened after it, as PostgreSQL applies it to new sessions; a startup parameter, as before, outranked
// it until the app restarted.
const SESSION_TIMEOUT_SQL = `select source, setting, set_config('statement_timeout', $1, false) as keel from pg_settings
  where name = 'statement_timeout' and source = 'default'
  union all select source, setting, null from pg_settings where name = 'statement_timeout' and source <> 'default'`;

async function applySessionTimeout(client: pg.ClientBase): Promise<void> {
  const { rows } = await client.query<{ setting: string; keel: string | null }>(SESSION_TIMEOUT_SQL, [
    String(STORE_STATEMENT_TIMEOUT_MS),
  ]);
  const r = rows[0];
  if (!r) return;
  const ms = r.keel !== null ? STORE_STATEMENT_TIMEOUT_MS : Number(r.setting);
  // pg reads a call's bound when the call is made (config.query_timeout || connectionParameters.query_timeout).
  (client as unknown as { connectionParameters: { query_timeout?: number } }).connectionParameters.query_timeout =
    ms > 0 ? ms + 5_000 : 0;
}

export class PostgresJobStore extends BatchBackedJobStore implements JobStore {
  readonly engine = 'postgres';
  // Whether the Worker's statements go named (hotQuery); off for good after one that could not.
  private named = true;

  private constructor(
    readonly pool: pg.Pool,
    private readonly maxPayloadBytes: number,
  ) {
    super();
  }

  static async connect(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresJobStore> {
    // Every call is bounded: a connect that gets no answer fails in 10 s; the server cancels a statement after the
    // session's statement_timeout (STORE_STATEMENT_TIMEOUT_MS unless the user set one: storeStatementTimeout); a
    // server or network that goes silent fails the call 5 s after that, and the pool drops that connection. A call
    // that fails so is like a lost connection: a move either committed or rolled back, and the lease fencing decides
    // what happens next.
    const timeout = await storeStatementTimeout(url, opts.applicationName ?? 'keel');
    const pool = new pg.Pool({
      ...readCommittedOptions(url), // every session READ COMMITTED, whatever the database's default (readCommitted.ts)
      max: opts.poolSize ?? 10,
      idleTimeoutMillis: opts.poolIdleMs ?? 60_000,
      application_name: opts.applicationName ?? 'keel',
      connectionTimeoutMillis: 10_000,
      // The client's bound of applySessionTimeout's own call, from the setting as the store opened (each connection's
      // own once that call answers). None past a user's own "no statement timeout" (0): the user asked for
      // statements unbounded.
      ...(timeout.ms > 0 ? { query_timeout: timeout.ms + 5_000 } : {}),
      keepAlive: true,
      // Keel's default timeout where the user set none, per connection (SESSION_TIMEOUT_SQL), before the pool hands
      // the connection to any call (pg-pool awaits the promise; a failure ends the connection and fails that call).
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- pg-pool awaits it; its typing says void
      onConnect: applySessionTimeout,
    });
    // An idle client whose server connection dies must not crash the process; the pool replaces it.
    pool.on('error', poolErrorLogger('postgres', 'control', `job store pool (${opts.applicationName ?? 'keel'})`));
    try {
      if (opts.migrate ?? true) {
        if (opts.migrateUrl && opts.migrateUrl !== url) {
          const owner = new pg.Pool({ connectionString: opts.migrateUrl, max: 1, application_name: 'keel-migrate' });
          owner.on('error', poolErrorLogger('postgres', 'migration', 'migration pool (keel-migrate)'));
          try {
            await migratePostgres(owner, opts.sqlDir);
          } finally {
            await owner.end();
          }
        } else {
          await migratePostgres(pool, opts.sqlDir);
        }
      }
      await assertPostgresReady(pool);
    } catch (err) {
      await pool.end();
      throw err;
    }
    return new PostgresJobStore(pool, opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES);
  }

  // Runs keel.<proc> with exactly its parameters (POSTGRES_FUNCTIONS); result rows with camelCase keys
  // (job_id -> jobId), for the shared mappers in shared/jobs/rows.ts. `named`: one of the claim loop's statements
  // (hotQuery).
  private async call<P extends JobProcedure>(proc: P, args: PostgresArgs<P>, named = false): Promise<Row[]> {
    const result = await this.hotQuery(proc, args, named);
    return camelRows(
      result.fields.map((f) => f.name),
      result.rows,
    );
  }

  async enqueueMany(jobs: EnqueueRequest[]): Promise<EnqueueResult[]> {
    const docs = prepareEnqueue(jobs, this.maxPayloadBytes);
    if (docs.length === 0) return [];
    // One row of two arrays parallel to the input: the ids and whether each was a duplicate.
    const [r] = await this.call('enqueue_many', { jobs: JSON.stringify(docs) }).catch((err: unknown) => {
      throw flowRefused(idempotencyConflict(err), docs.length);
    });
    const ids = r!.jobIds as string[];
    const duplicates = r!.duplicates as boolean[];
    return ids.map((id, i) => ({ id, duplicate: duplicates[i] === true }));
  }

  async claimNext(opts: ClaimOptions): Promise<ClaimedJob[]> {
    const rows = await this.call('claim_next', {
      worker_id: opts.workerId,
      queues: opts.queues,
      limit: opts.limit,
      lease_seconds: opts.leaseSeconds ?? 60,
    });
    return rows.map((r) => toClaimedJob(r, PG_CODEC));
  }

  async pickDue(queues: string[], limit: number): Promise<JobId[]> {
    const rows = await this.call('pick_due', { queues, limit });
    return rows.map((r) => String(r.jobId));
  }

  // The claim loop's statements, one each per batch of jobs (claim_and_start, complete_many), as named statements:
  // each server connection parses and plans them once instead of on every call (bench/README.md, runs 240-249: the
  // server's CPU per job). A call the connection could not run named (notPreparable: it failed before anything ran)
  // is run again unnamed, and this store sends every later one unnamed. Every other call goes unnamed (named: false).
  private async hotQuery<P extends JobProcedure>(
    proc: P,
    args: PostgresArgs<P>,
    named = true,
  ): Promise<pg.QueryResult<unknown[]>> {
    const { text, values } = postgresCall(proc, args);
    if (named && this.named) {
      try {
        return await this.pool.query<unknown[]>({
          name: statementName(proc, text),
          text,
          values,
          rowMode: 'array',
          types: STORE_TYPES,
        });
      } catch (err) {
        if (!notPreparable(err)) throw err;
        this.named = false;
      }
    }
    return this.pool.query<unknown[]>({ text, values, rowMode: 'array', types: STORE_TYPES });
  }

  async claimAndStart(opts: ClaimOptions): Promise<StartedJob[]> {
    const result = await this.hotQuery('claim_and_start', {
      worker_id: opts.workerId,
      queues: opts.queues,
      limit: opts.limit,
      lease_seconds: opts.leaseSeconds ?? 60,
    });
    return toStartedJobs(
      result.fields.map((f) => f.name),
      result.rows,
      PG_CODEC,
    );
  }

  async claimById(jobId: JobId, workerId: string, leaseSeconds = 60): Promise<ClaimedJob | null> {
    const rows = await this.call('claim_by_id', { job_id: jobId, worker_id: workerId, lease_seconds: leaseSeconds });
    return rows[0] ? toClaimedJob(rows[0], PG_CODEC) : null;
  }

  async startMany(refs: LeaseRef[]): Promise<(StartResult & { jobId: JobId })[]> {
    if (refs.length === 0) return [];
    const valid = refs.filter(isLeaseRef);
    const rows = valid.length ? await this.call('start_many', { leases: leasesJson(valid) }) : [];
    const byId = new Map(rows.map((r) => [String(r.jobId), r]));
    return refs.map((ref) => {
      const r = byId.get(ref.jobId);
      return r && r.status === 'ok'
        ? { jobId: ref.jobId, status: 'ok' as const, attempt: num(r.attempt) }
        : { jobId: ref.jobId, status: 'lease_lost' as const, attempt: 0 };
    });
  }

  async heartbeat(ref: LeaseRef): Promise<HeartbeatResult> {
    const [r] = await this.call('heartbeat', { job_id: ref.jobId, lease_id: ref.leaseId });
    return r!.status === 'ok'
      ? {
          status: 'ok',
          cancelRequested: Boolean(r!.cancelRequested),
          zombieTimeoutSeconds: num(r!.zombieTimeoutSeconds),
        }
      : { status: r!.status as OwnerResult, cancelRequested: false };
  }

  async heartbeatMany(refs: LeaseRef[]): Promise<(HeartbeatResult & { jobId: JobId })[]> {
    const valid = refs.filter(isLeaseRef);
    const rows = valid.length ? await this.call('heartbeat_many', { leases: leasesJson(valid) }) : [];
    return toBeatsByRef(refs, rows, ['jobId', 'leaseId', 'cancelRequested', 'zombieTimeoutSeconds']);
  }

  async completeMany(refs: CompleteRef[]): Promise<OwnerResultById[]> {
    if (refs.length === 0) return [];
    const valid = refs.filter(isLeaseRef);
    // One row: the ids archived and the ids dead-lettered as cancelled; any other job was not owned (lease_lost).
    const [moved] = valid.length
      ? await this.call('complete_many', { leases: leasesJson(valid), results: resultsByIdJson(valid) }, true)
      : [];
    const ok = new Set(moved?.ok as string[] | undefined);
    const cancelled = new Set(moved?.cancelled as string[] | undefined);
    return refs.map((ref) => ({
      jobId: ref.jobId,
      status: ok.has(ref.jobId) ? 'ok' : cancelled.has(ref.jobId) ? 'cancelled' : 'lease_lost',
    }));
  }

  async appendJobLog(ref: LeaseRef, lines: JobLogLine[], maxLines: number): Promise<OwnerResult> {
    const [r] = await this.call('append_job_log', {
      job_id: ref.jobId,
      lease_id: ref.leaseId,
      lines: JSON.stringify(lines),
      max_lines: maxLines,
    });
    return r!.result as OwnerResult;
  }

  async reportProgress(ref: LeaseRef, progress: JobProgress): Promise<OwnerResult> {
    const [r] = await this.call('report_progress', {
      job_id: ref.jobId,
      lease_id: ref.leaseId,
      progress: JSON.stringify(progress),
    });
    return r!.result as OwnerResult;
  }

  async retry(ref: LeaseRef, when: RetryWhen, error: string): Promise<CompleteResult> {
    const [at, delayMs] = when instanceof Date ? [when, null] : [null, when.delayMs];
    const [r] = await this.call('retry', {
      job_id: ref.jobId,
      lease_id: ref.leaseId,
      run_at: at,
      error,
      delay_ms: delayMs,
    });
    return r!.result as CompleteResult;
  }

  async fail(ref: LeaseRef, reason: DlqReason, error: string): Promise<CompleteResult> {
    const [r] = await this.call('fail', { job_id: ref.jobId, lease_id: ref.leaseId, reason, error });
    return r!.result as CompleteResult;
  }

  async release(ref: LeaseRef): Promise<OwnerResult> {
    const [r] = await this.call('release', { job_id: ref.jobId, lease_id: ref.leaseId });
    return r!.result as OwnerResult;
  }

  async interrupt(ref: LeaseRef, error: string): Promise<CompleteResult> {
    const [r] = await this.call('interrupt', { job_id: ref.jobId, lease_id: ref.leaseId, error });
    return r!.result as CompleteResult;
  }

  async cancel(jobId: JobId): Promise<CancelResult> {
    const [r] = await this.call('cancel', { job_id: jobId });
    return r!.result as CancelResult;
  }

  protected async cancelChunk(ids: JobId[]): Promise<CancelResultById[]> {
    const rows = await this.call('cancel_many', { job_ids: ids });
    return rows.map((r) => ({ jobId: String(r.jobId), result: r.status as CancelResult }));
  }

  async rescueZombies(limit: number, maxAttemptsByType?: Readonly<Record<string, number>>): Promise<RescueResult> {
    const byType = typeMaxAttemptsJson(maxAttemptsByType);
    const [r] = await this.call('rescue_zombies', { limit, type_max_attempts: byType });
    return toRescueResult(r!);
  }

  async resurrect(jobIds: JobId[]): Promise<JobId[]> {
    if (jobIds.length === 0) return [];
    const rows = await this.call('resurrect', { job_ids: jobIds });
    return rows.map((r) => String(r.jobId));
  }

  async resurrectByFilter(filter: ResurrectFilter): Promise<ResurrectResult> {
    const dryRun = filter.dryRun ?? true;
    const rows = await this.call('resurrect_by_filter', {
      queue: filter.queue ?? null,
      type: filter.type ?? null,
      reason: filter.reason ?? null,
      failed_after: filter.failedAfter ?? null,
      failed_before: filter.failedBefore ?? null,
      limit: filter.limit,
      dry_run: dryRun,
    });
    return { ids: rows.map((r) => String(r.jobId)), dryRun };
  }

  async purge(target: PurgeTarget, queue: string | null, olderThan: Date, batchSize: number): Promise<number> {
    const [r] = await this.call('purge', { target, queue, older_than: olderThan, batch_size: batchSize });
    return num(r!.result);
  }

  async stats(): Promise<QueueStats[]> {
    return (await this.call('stats', {})).map(toQueueStats);
  }

  async metrics(windowMinutes: number, queue?: string): Promise<MetricBucket[]> {
    return (await this.call('metrics', { window_minutes: windowMinutes, queue: queue ?? null })).map(toMetricBucket);
  }

  async getQueue(name: string): Promise<QueueSettings | null> {
    const rows = await this.call('list_queues', { name });
    return rows[0] ? toQueueSettings(rows[0]) : null;
  }

  async listQueues(): Promise<QueueSettings[]> {
    return (await this.call('list_queues', { name: null })).map(toQueueSettings);
  }

  async updateQueue(
    name: string,
    patch: QueueSettingsPatch,
    expected?: QueueSettingsExpected,
  ): Promise<QueueSettingsChange> {
    const rows = await this.call('update_queue', {
      name,
      paused: patch.paused ?? null,
      max_concurrency: patch.maxConcurrency ?? null,
      clear_max_concurrency: patch.maxConcurrency === null,
      zombie_timeout_seconds: patch.zombieTimeoutSeconds ?? null,
      zombie_policy: patch.zombiePolicy ?? null,
      max_attempts: patch.maxAttempts ?? null,
      archive_retention_seconds: patch.archiveRetentionSeconds ?? null,
      dlq_retention_seconds: patch.dlqRetentionSeconds ?? null,
      metrics_retention_seconds: patch.metricsRetentionSeconds ?? null,
      expected: expected === undefined ? null : JSON.stringify(expected),
    });
    const r = rows[0]!;
    return {
      ...toQueueSettings(r),
      created: r.created === true,
      ...(r.conflict ? { conflict: r.conflict as QueueExpectField } : {}),
      ...(r.unchanged === true ? { unchanged: true as const } : {}),
    };
  }

  async listSchedules(name?: string): Promise<ScheduleState[]> {
    return (await this.call('list_schedules', { name: name ?? null })).map(toScheduleState);
  }

  async setSchedulePaused(name: string, paused: boolean): Promise<ScheduleState> {
    const [r] = await this.call('set_schedule_paused', { name, paused: paused === true });
    return toScheduleState(r!);
  }

  async fireSchedule(name: string, expectedTick: Date | null, tick: Date, jobs: EnqueueRequest[]): Promise<FireResult> {
    const docs = jobs.length ? prepareEnqueue(jobs, this.maxPayloadBytes, { scheduleKeys: true }) : [];
    const rows = await this.call('fire_schedule', {
      name,
      expected_tick: expectedTick,
      tick,
      jobs: JSON.stringify(docs),
    }).catch((err: unknown) => {
      throw idempotencyConflict(err);
    });
    return toFireResult(rows);
  }

  async getJob(jobId: JobId): Promise<JobRecord | null> {
    const rows = await this.call('get_job', { job_id: jobId });
    return rows[0] ? toJobRecord(rows[0], PG_CODEC) : null;
  }

  async jobLinks(jobId: JobId): Promise<JobLink[]> {
    const rows = await this.call('job_links', { job_id: jobId });
    return rows.map((r) => toJobLink(r, PG_CODEC));
  }

  async searchJobs(s: JobSearch): Promise<JobPage> {
    const rows = await this.call('search_jobs', {
      ...filterArgs(s),
      text: s.text ?? null,
      after_id: s.afterId ?? null,
      scan_rows: searchScanRows(s),
      limit: s.limit,
      priority: s.priority ?? null,
      idempotency_key: s.idempotencyKey ?? null,
      oldest: s.order === 'oldest',
    });
    return toJobPage(rows, s.limit, (r) => toJobRecord(r, PG_CODEC));
  }

  async recordAudit(e: AuditEntry): Promise<string> {
    const [r] = await this.call('record_audit', auditArgs(e));
    return String(r!.result);
  }

  async finishAudit(
    id: string,
    outcome: 'ok' | 'failed',
    status: number | null,
    reason: string | null,
    affected: number | null,
  ): Promise<boolean> {
    const [r] = await this.call('finish_audit', { id, outcome, status, reason, affected });
    return r!.result === true;
  }

  async searchAudit(s: AuditSearch): Promise<AuditPage> {
    const rows = await this.call('search_audit', {
      from: s.from ?? null,
      to: s.to ?? null,
      principal: s.principal ?? null,
      action: s.action ?? null,
      target: s.target ?? null,
      outcome: s.outcome ?? null,
      before_id: s.beforeId ?? null,
      scan_rows: s.scanRows ?? AUDIT_SCAN_ROWS_DEFAULT,
      limit: s.limit,
    });
    return toAuditPage(rows, s.limit);
  }

  async purgeAudit(olderThan: Date, batchSize: number): Promise<number> {
    const [r] = await this.call('purge_audit', { older_than: olderThan, batch_size: batchSize });
    return num(r!.result);
  }

  async countJobs(c: JobCount): Promise<CountResult> {
    const [r] = await this.call('count_jobs', { ...filterArgs(c), cap: c.cap });
    return toCountResult(r!);
  }

  async dlqGroups(queue: string | null, offset: number, limit: number, scanRows: number): Promise<DlqGroupPage> {
    return toDlqGroupPage(await this.call('dlq_groups', { queue, offset, limit, scan_rows: scanRows }));
  }

  async listWorkers(): Promise<WorkerInfo[]> {
    return (await this.call('list_workers', {})).map(toWorkerInfo);
  }

  async registerWorker(w: WorkerRegistration): Promise<Date> {
    const [r] = await this.call('register_worker', {
      worker_id: w.workerId,
      host: w.host,
      instance_id: w.instanceId,
      pid: w.pid,
      app_version: w.appVersion,
      build_id: w.buildId,
      queues: w.queues === null ? null : w.queues.join(','),
      concurrency: w.concurrency,
      started_at: w.startedAt,
      jobs_done: w.jobsDone,
    });
    return r!.result as Date;
  }

  async deregisterWorker(workerId: string): Promise<boolean> {
    const [r] = await this.call('deregister_worker', { worker_id: workerId });
    return r!.result === true;
  }

  async pruneWorkers(olderThan: Date): Promise<number> {
    const [r] = await this.call('prune_workers', { older_than: olderThan });
    return num(r!.result);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

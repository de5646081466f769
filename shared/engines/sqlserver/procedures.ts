// The SQL Server side of JOB_PROCEDURES (shared/jobs/procedures.ts), as PostgreSQL's is in its procedures.ts: per
// procedure, the SQL type of each parameter, and the procedure's name and parameter check. The job store
// (jobStore.ts) calls through it; the parity test compares it with the declarations in sql/sqlserver.
import sql from 'mssql';
import { JOB_PROCEDURES, pascalCase, type JobProcedure, type Pascal } from '../../jobs/procedures.js';

// Parameters: per procedure, the SQL type of each parameter, in declaration order. The names are JOB_PROCEDURES'
// names in PascalCase; the parity test (test/engines/parity.test.ts) and call() both check that.
export type ParamType = Parameters<sql.Request['input']>[1];

type ParamNames<P extends JobProcedure> = Pascal<(typeof JOB_PROCEDURES)[P][number]>;
export type ProcedureParams<P extends JobProcedure> = { [K in ParamNames<P>]: unknown };
type ParamTypes = { [P in JobProcedure]: { [K in ParamNames<P>]: ParamType } };

const MAX = sql.MAX;
// The parameters of JOB_FILTER_PARAMS (SearchJobs and CountJobs).
const JOB_FILTER = {
  Location: sql.VarChar(10),
  Queue: sql.NVarChar(128),
  Type: sql.NVarChar(256),
  Tag: sql.NVarChar(64),
  State: sql.VarChar(10),
  Reason: sql.VarChar(16),
  From: sql.DateTime2(3),
  To: sql.DateTime2(3),
};
export const SQLSERVER_PARAMS: ParamTypes = {
  enqueue_many: { Jobs: sql.NVarChar(MAX) },
  claim_next: { WorkerId: sql.NVarChar(200), Queues: sql.NVarChar(MAX), Limit: sql.Int, LeaseSeconds: sql.Int },
  claim_by_id: { JobId: sql.BigInt, WorkerId: sql.NVarChar(200), LeaseSeconds: sql.Int },
  claim_and_start: { WorkerId: sql.NVarChar(200), Queues: sql.NVarChar(MAX), Limit: sql.Int, LeaseSeconds: sql.Int },
  pick_due: { Queues: sql.NVarChar(MAX), Limit: sql.Int },
  start_many: { Leases: sql.NVarChar(MAX) },
  heartbeat: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier },
  heartbeat_many: { Leases: sql.NVarChar(MAX) },
  complete_many: { Leases: sql.NVarChar(MAX), Results: sql.NVarChar(MAX) },
  report_progress: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier, Progress: sql.NVarChar(MAX) },
  append_job_log: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier, Lines: sql.NVarChar(MAX), MaxLines: sql.Int },
  retry: {
    JobId: sql.BigInt,
    LeaseId: sql.UniqueIdentifier,
    RunAt: sql.DateTime2(3),
    Error: sql.NVarChar(MAX),
    DelayMs: sql.BigInt,
  },
  fail: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier, Reason: sql.VarChar(16), Error: sql.NVarChar(MAX) },
  release: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier },
  interrupt: { JobId: sql.BigInt, LeaseId: sql.UniqueIdentifier, Error: sql.NVarChar(MAX) },
  cancel: { JobId: sql.BigInt },
  cancel_many: { JobIds: sql.NVarChar(MAX) },
  rescue_zombies: { Limit: sql.Int, TypeMaxAttempts: sql.NVarChar(MAX) },
  resurrect: { JobIds: sql.NVarChar(MAX) },
  resurrect_by_filter: {
    Queue: sql.NVarChar(128),
    Type: sql.NVarChar(256),
    Reason: sql.VarChar(16),
    FailedAfter: sql.DateTime2(3),
    FailedBefore: sql.DateTime2(3),
    Limit: sql.Int,
    DryRun: sql.Bit,
  },
  purge: { Target: sql.VarChar(10), Queue: sql.NVarChar(128), OlderThan: sql.DateTime2(3), BatchSize: sql.Int },
  stats: {},
  metrics: { WindowMinutes: sql.Int, Queue: sql.NVarChar(128) },
  list_queues: { Name: sql.NVarChar(128) },
  count_jobs: { ...JOB_FILTER, Cap: sql.Int },
  dlq_groups: { Queue: sql.NVarChar(128), Offset: sql.Int, Limit: sql.Int, ScanRows: sql.Int },
  list_workers: {},
  register_worker: {
    WorkerId: sql.NVarChar(200),
    Host: sql.NVarChar(256),
    InstanceId: sql.NVarChar(128),
    Pid: sql.Int,
    AppVersion: sql.NVarChar(64),
    BuildId: sql.NVarChar(128),
    Queues: sql.NVarChar(MAX),
    Concurrency: sql.Int,
    StartedAt: sql.DateTime2(3),
    JobsDone: sql.BigInt,
  },
  deregister_worker: { WorkerId: sql.NVarChar(200) },
  prune_workers: { OlderThan: sql.DateTime2(3) },
  list_schedules: { Name: sql.NVarChar(100) },
  set_schedule_paused: { Name: sql.NVarChar(100), Paused: sql.Bit },
  fire_schedule: {
    Name: sql.NVarChar(100),
    ExpectedTick: sql.DateTime2(3),
    Tick: sql.DateTime2(3),
    Jobs: sql.NVarChar(MAX),
  },
  update_queue: {
    Name: sql.NVarChar(128),
    Paused: sql.Bit,
    MaxConcurrency: sql.Int,
    ClearMaxConcurrency: sql.Bit,
    ZombieTimeoutSeconds: sql.Int,
    ZombiePolicy: sql.VarChar(8),
    MaxAttempts: sql.Int,
    ArchiveRetentionSeconds: sql.Int,
    DlqRetentionSeconds: sql.Int,
    MetricsRetentionSeconds: sql.Int,
    Expected: sql.NVarChar(MAX),
  },
  get_job: { JobId: sql.BigInt },
  job_links: { JobId: sql.BigInt },
  search_jobs: {
    ...JOB_FILTER,
    Text: sql.NVarChar(400),
    AfterId: sql.BigInt,
    ScanRows: sql.Int,
    Limit: sql.Int,
    Priority: sql.Int,
    IdempotencyKey: sql.NVarChar(400),
    Oldest: sql.Bit,
  },
  record_audit: {
    PrincipalId: sql.NVarChar(128),
    PrincipalName: sql.NVarChar(256),
    TenantId: sql.NVarChar(64),
    AppId: sql.NVarChar(64),
    AuthMethod: sql.VarChar(10),
    Channel: sql.VarChar(8),
    Role: sql.VarChar(10),
    RequiredRole: sql.VarChar(10),
    HttpMethod: sql.VarChar(8),
    Action: sql.NVarChar(64),
    Target: sql.NVarChar(400),
    Summary: sql.NVarChar(2000),
    Outcome: sql.VarChar(8),
    Status: sql.Int,
    Reason: sql.NVarChar(1000),
    Affected: sql.BigInt,
    RequestId: sql.NVarChar(128),
    ClientIp: sql.NVarChar(64),
  },
  finish_audit: {
    Id: sql.BigInt,
    Outcome: sql.VarChar(8),
    Status: sql.Int,
    Reason: sql.NVarChar(1000),
    Affected: sql.BigInt,
  },
  search_audit: {
    From: sql.DateTime2(3),
    To: sql.DateTime2(3),
    Principal: sql.NVarChar(256),
    Action: sql.NVarChar(64),
    Target: sql.NVarChar(400),
    Outcome: sql.VarChar(8),
    BeforeId: sql.BigInt,
    ScanRows: sql.Int,
    Limit: sql.Int,
  },
  purge_audit: { OlderThan: sql.DateTime2(3), BatchSize: sql.Int },
};

export function sqlServerProcedureName(proc: JobProcedure): string {
  return `keel.${pascalCase(proc)}`;
}

// Throws unless `names` are exactly the procedure's parameters, in order.
export function assertProcedureParams(proc: JobProcedure, names: readonly string[]): void {
  const expected = JOB_PROCEDURES[proc].map(pascalCase);
  if (names.length !== expected.length || names.some((n, i) => n !== expected[i])) {
    throw new Error(
      `${sqlServerProcedureName(proc)} takes (${expected.map((n) => '@' + n).join(', ')}), got (${names.map((n) => '@' + n).join(', ')})`,
    );
  }
}

// The database procedure behind each JobStore operation, with its parameters in call order.
// Engines name them by convention: PostgreSQL keel.<snake_name>(p_<param>), SQL Server keel.<PascalName> @<PascalParam>.
// Each engine's store calls through a typed table derived from this one (POSTGRES_FUNCTIONS, SQLSERVER_PARAMS);
// test/engines/parity.test.ts compares those tables with what the engines declare.
import type { JobStore } from './contract.js';

// The filter a search and a bounded count share (JobFilter), in call order.
const JOB_FILTER_PARAMS = ['location', 'queue', 'type', 'tag', 'state', 'reason', 'from', 'to'] as const;

export const JOB_PROCEDURES = {
  enqueue_many: ['jobs'],
  claim_next: ['worker_id', 'queues', 'limit', 'lease_seconds'],
  claim_by_id: ['job_id', 'worker_id', 'lease_seconds'],
  claim_and_start: ['worker_id', 'queues', 'limit', 'lease_seconds'],
  pick_due: ['queues', 'limit'],
  start_many: ['leases'],
  heartbeat: ['job_id', 'lease_id'],
  heartbeat_many: ['leases'],
  complete_many: ['leases', 'results'],
  report_progress: ['job_id', 'lease_id', 'progress'],
  append_job_log: ['job_id', 'lease_id', 'lines', 'max_lines'],
  retry: ['job_id', 'lease_id', 'run_at', 'error', 'delay_ms'],
  fail: ['job_id', 'lease_id', 'reason', 'error'],
  release: ['job_id', 'lease_id'],
  interrupt: ['job_id', 'lease_id', 'error'],
  cancel: ['job_id'],
  cancel_many: ['job_ids'],
  rescue_zombies: ['limit', 'type_max_attempts'],
  resurrect: ['job_ids'],
  resurrect_by_filter: ['queue', 'type', 'reason', 'failed_after', 'failed_before', 'limit', 'dry_run'],
  purge: ['target', 'queue', 'older_than', 'batch_size'],
  stats: [],
  metrics: ['window_minutes', 'queue'],
  list_queues: ['name'],
  update_queue: [
    'name',
    'paused',
    'max_concurrency',
    'clear_max_concurrency',
    'zombie_timeout_seconds',
    'zombie_policy',
    'max_attempts',
    'archive_retention_seconds',
    'dlq_retention_seconds',
    'metrics_retention_seconds',
    'expected',
  ],
  get_job: ['job_id'],
  job_links: ['job_id'],
  search_jobs: [
    ...JOB_FILTER_PARAMS,
    'text',
    'after_id',
    'scan_rows',
    'limit',
    'priority',
    'idempotency_key',
    'oldest',
  ],
  count_jobs: [...JOB_FILTER_PARAMS, 'cap'],
  dlq_groups: ['queue', 'offset', 'limit', 'scan_rows'],
  list_workers: [],
  register_worker: [
    'worker_id',
    'host',
    'instance_id',
    'pid',
    'app_version',
    'build_id',
    'queues',
    'concurrency',
    'started_at',
    'jobs_done',
  ],
  deregister_worker: ['worker_id'],
  prune_workers: ['older_than'],
  list_schedules: ['name'],
  set_schedule_paused: ['name', 'paused'],
  fire_schedule: ['name', 'expected_tick', 'tick', 'jobs'],
  record_audit: [
    'principal_id',
    'principal_name',
    'tenant_id',
    'app_id',
    'auth_method',
    'channel',
    'role',
    'required_role',
    'http_method',
    'action',
    'target',
    'summary',
    'outcome',
    'status',
    'reason',
    'affected',
    'request_id',
    'client_ip',
  ],
  finish_audit: ['id', 'outcome', 'status', 'reason', 'affected'],
  search_audit: ['from', 'to', 'principal', 'action', 'target', 'outcome', 'before_id', 'scan_rows', 'limit'],
  purge_audit: ['older_than', 'batch_size'],
} as const satisfies Record<string, readonly string[]>;

export type JobProcedure = keyof typeof JOB_PROCEDURES;

type StoreOperation = Exclude<keyof JobStore, 'engine' | 'close'>;

// Which procedure serves each operation of the interface (several operations may share one).
export const OPERATION_PROCEDURE: Record<StoreOperation, JobProcedure> = {
  enqueue: 'enqueue_many',
  enqueueMany: 'enqueue_many',
  claimNext: 'claim_next',
  claimById: 'claim_by_id',
  claimAndStart: 'claim_and_start',
  pickDue: 'pick_due',
  start: 'start_many',
  startMany: 'start_many',
  heartbeat: 'heartbeat',
  heartbeatMany: 'heartbeat_many',
  complete: 'complete_many',
  completeMany: 'complete_many',
  reportProgress: 'report_progress',
  appendJobLog: 'append_job_log',
  retry: 'retry',
  fail: 'fail',
  release: 'release',
  interrupt: 'interrupt',
  cancel: 'cancel',
  cancelMany: 'cancel_many',
  rescueZombies: 'rescue_zombies',
  resurrect: 'resurrect',
  resurrectByFilter: 'resurrect_by_filter',
  purge: 'purge',
  stats: 'stats',
  metrics: 'metrics',
  getQueue: 'list_queues',
  listQueues: 'list_queues',
  updateQueue: 'update_queue',
  getJob: 'get_job',
  jobLinks: 'job_links',
  searchJobs: 'search_jobs',
  countJobs: 'count_jobs',
  dlqGroups: 'dlq_groups',
  listWorkers: 'list_workers',
  registerWorker: 'register_worker',
  deregisterWorker: 'deregister_worker',
  pruneWorkers: 'prune_workers',
  listSchedules: 'list_schedules',
  setSchedulePaused: 'set_schedule_paused',
  fireSchedule: 'fire_schedule',
  recordAudit: 'record_audit',
  finishAudit: 'finish_audit',
  searchAudit: 'search_audit',
  purgeAudit: 'purge_audit',
};

// pascalCase at the type level: 'lease_id' -> 'LeaseId'.
export type Pascal<S extends string> = S extends `${infer H}_${infer T}`
  ? `${Capitalize<H>}${Pascal<T>}`
  : Capitalize<S>;

export function pascalCase(snake: string): string {
  return snake
    .split('_')
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');
}

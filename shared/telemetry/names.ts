// Metric and event names and the closed sets of dimension values Keel emits.
//
// These strings are a contract: the alert rules in infra/modules/alerts.bicep query them by name in
// App Insights (customMetrics.name / customEvents.name), docs/telemetry.md lists them, and
// test/telemetry/telemetry.test.ts checks that every `keel.*` name the alert KQL uses is defined here.
// Renaming one is a breaking change for dashboards and alerts.

/** OpenTelemetry instrument names (App Insights `customMetrics.name`). */
export const METRICS = {
  /** counter; dims queue, type. Jobs written to JobsHot. */
  jobsEnqueued: 'keel.jobs.enqueued',
  /** counter; dims queue, type. Jobs moved Hot → Archive. */
  jobsCompleted: 'keel.jobs.completed',
  /** histogram (ms); dims queue, type. Duration recorded in the archive row for completed jobs. */
  jobDuration: 'keel.jobs.duration',
  /** counter; dims queue, type. Jobs put back to pending with a later run_at. */
  jobsRetried: 'keel.jobs.retried',
  /** counter; dims queue, type, reason. Jobs moved Hot → DLQ. */
  jobsDeadLettered: 'keel.jobs.dead_lettered',
  /** counter; dims queue, type, operation. Owner-scoped statements that matched zero rows. */
  leaseLost: 'keel.jobs.lease_lost',
  /** counter; dims action (retried | dead_lettered | released). Jobs handled by zombie rescue. */
  zombiesRescued: 'keel.jobs.zombies_rescued',
  /** histogram (ms); dims queue, type, outcome. Wall time of the handler call. */
  handlerDuration: 'keel.handler.duration',
  /** observable gauge (ms); dims queue. Age of the oldest due pending job, as last reported. */
  queueLag: 'keel.queue.lag',
  /** counter; dims transfer, state. Batch state transitions. */
  transferBatches: 'keel.transfer.batches',
  /** counter; dims transfer. Rows applied to the target. */
  rowsTransferred: 'keel.transfer.rows',
  /** counter; dims transfer, outcome. Results of reconciliation. */
  reconcileOutcomes: 'keel.transfer.reconcile',
  /** counter; dims outcome (succeeded | failed). Maintenance timer runs. */
  maintenanceRuns: 'keel.maintenance.runs',
  /** histogram (ms); dims outcome. Maintenance timer run time. */
  maintenanceDuration: 'keel.maintenance.duration',
  /**
   * observable gauge (s); dims transfer. How long the transfer's target has been behind its source: seconds since
   * its last commit while the source has rows it has not committed, 0 when the last look found nothing new.
   */
  transferFreshness: 'keel.transfer.freshness',
  /**
   * observable gauge (rows); dims transfer. Rows at the source after the transfer's last committed window, counted
   * up to KEEL_TRANSFER_ROWS_BEHIND_CAP (a capped count reads as the cap), reported with the freshness: 0 when
   * caught up; not reported when not counted.
   */
  transferRowsBehind: 'keel.transfer.rows_behind',
  /** counter; dims engine, role. Connection errors a database pool recovered from (a pooled connection died). */
  poolErrors: 'keel.db.pool_errors',
  /** counter; dims schedule. Scheduler passes in which one schedule failed (the others of the pass still ran). */
  scheduleFailures: 'keel.schedules.failed',
} as const;

export type MetricName = (typeof METRICS)[keyof typeof METRICS];

/** Custom event names (App Insights `customEvents.name`). Events carry ids; metrics never do. */
export const EVENTS = {
  /** One per job moved to the DLQ: queue, type, reason, jobId. */
  jobDeadLettered: 'keel.job.dead_lettered',
  /**
   * One per attempt a process ended without running it, no handler for the job's type being registered there (an
   * older instance in a rolling deploy): queue, type, jobId, outcome (retried, or dead_lettered once exhausted).
   */
  jobTypeNotRegistered: 'keel.job.type_not_registered',
  /** One per observation of a batch whose outcome is unknown: transfer, batchId, source, outcome?, unresolvedForMs?. */
  batchUnresolved: 'keel.transfer.batch_unresolved',
  /** One per ops audit record (a write's outcome, or a refusal): the record's fields (docs/operations.md). */
  opsAudit: 'keel.ops.audit',
  /** One per batch that failed (terminal error or abandon; its window released): transfer, batchId, code. */
  batchFailed: 'keel.transfer.batch_failed',
  /** One per failed scheduled start (timer or catch-up could not create a batch, e.g. schema drift): transfer, source, code, message. */
  startFailed: 'keel.transfer.start_failed',
  /** One per scheduled key-set comparison (keyCompareSchedule): transfer, windows, goneAtSource, deleted, applied. */
  keysGone: 'keel.transfer.keys_gone',
} as const;

export type EventName = (typeof EVENTS)[keyof typeof EVENTS];

/** The attribute that makes the Azure Monitor exporter send a log record as a customEvent. */
export const CUSTOM_EVENT_NAME_ATTRIBUTE = 'microsoft.custom_event.name';

/** OpenTelemetry meter / logger scope name. */
export const INSTRUMENTATION_SCOPE = 'keel';

/** Dimension (attribute) keys. They become `customDimensions.<key>` in App Insights. */
export const DIM = {
  queue: 'queue',
  type: 'type',
  reason: 'reason',
  outcome: 'outcome',
  operation: 'operation',
  action: 'action',
  transfer: 'transfer',
  state: 'state',
  engine: 'engine',
  role: 'role',
  schedule: 'schedule',
} as const;

/** Value used for anything outside a closed set or beyond the distinct-value cap. */
export const OTHER = 'other';

// The closed sets that are domain values are the domain's own (telemetry imports them, never redeclares them):
// contract.ts and transfer/types.ts import nothing at run time, so telemetry stays a leaf every layer may use.
export { DLQ_REASONS as DEAD_LETTER_REASONS, type DlqReason as DeadLetterReason } from '../jobs/contract.js';
/** How a handler call ended: the job processor's JobOutcome. */
export { JOB_OUTCOMES as HANDLER_OUTCOMES, type JobOutcome as HandlerOutcome } from '../jobs/contract.js';
export { BATCH_STATES, type BatchState } from '../transfer/types.js';
export { RECONCILE_RESULTS, type ReconcileResult } from '../transfer/types.js';

// 'expired': no store call found the lease gone; the worker gave the job up, no heartbeat confirmed within its lease.
export const LEASE_OPERATIONS = [
  'start',
  'heartbeat',
  'complete',
  'retry',
  'fail',
  'release',
  'interrupt',
  'expired',
] as const;
export type LeaseOperation = (typeof LEASE_OPERATIONS)[number];

/** What a database pool serves: the control database (jobs, journal), a migration run, or a transfer endpoint. */
export const POOL_ROLES = ['control', 'migration', 'transfer'] as const;
export type PoolRole = (typeof POOL_ROLES)[number];

export const ZOMBIE_ACTIONS = ['retried', 'dead_lettered', 'released'] as const;
export type ZombieAction = (typeof ZOMBIE_ACTIONS)[number];

export const RUN_OUTCOMES = ['succeeded', 'failed'] as const;
export type RunOutcome = (typeof RUN_OUTCOMES)[number];

// The typed telemetry facade: the only surface the rest of Keel calls.
//
// It is built on the OpenTelemetry API (meters for metrics, the logs API for App Insights custom events)
// and knows nothing about App Insights beyond the custom-event attribute. The providers are injectable:
// production binds the global providers that `useAzureMonitor` installs (see init.ts); tests pass an SDK
// MeterProvider with an in-memory exporter. Every method is total: bad input is clamped or dropped and
// no exception ever leaves the facade, so a telemetry problem can never fail a job or a transfer.

import {
  diag,
  metrics,
  ValueType,
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  type MeterProvider,
  type ObservableResult,
} from '@opentelemetry/api';
import { logs, SeverityNumber, type Logger, type LoggerProvider } from '@opentelemetry/api-logs';
import {
  BATCH_STATES,
  CUSTOM_EVENT_NAME_ATTRIBUTE,
  DEAD_LETTER_REASONS,
  DIM,
  EVENTS,
  HANDLER_OUTCOMES,
  INSTRUMENTATION_SCOPE,
  LEASE_OPERATIONS,
  METRICS,
  POOL_ROLES,
  RECONCILE_RESULTS,
  RUN_OUTCOMES,
  type BatchState,
  type DeadLetterReason,
  type EventName,
  type HandlerOutcome,
  type LeaseOperation,
  type PoolRole,
  type ReconcileResult,
  type RunOutcome,
} from './names.js';
import {
  closedSet,
  DEFAULT_CARDINALITY_LIMITS,
  DimensionLimiter,
  normalizeValue,
  type CardinalityLimits,
} from './cardinality.js';

export interface JobDims {
  queue: string;
  type: string;
}

/** What Keel reports. Every method is synchronous, cheap, and never throws. */
export interface KeelTelemetry {
  /** `n` jobs of one queue and type were enqueued (default 1). */
  jobEnqueued(dims: JobDims, n?: number): void;
  /** A job moved Hot → Archive; `durationMs` is the duration the archive row records. */
  jobCompleted(dims: JobDims & { durationMs: number }): void;
  /** A job was scheduled for another attempt. */
  jobRetried(dims: JobDims): void;
  /** A job moved Hot → DLQ. Metric (no id) plus a `keel.job.dead_lettered` event (with the id). */
  jobDeadLettered(dims: JobDims & { reason: DeadLetterReason; jobId: string }): void;
  /** An attempt ended unrun, its type having no handler here: a `keel.job.type_not_registered` event (with the id). */
  jobTypeNotRegistered(dims: JobDims & { jobId: string; outcome: HandlerOutcome }): void;
  /** An owner-scoped statement affected zero rows: this worker no longer owns the job. */
  leaseLost(dims: JobDims & { operation: LeaseOperation }): void;
  /** One zombie-rescue sweep's result (counts; zeros are not recorded). */
  zombiesRescued(counts: { retried: number; deadLettered: number; releasedFetched: number }): void;
  /** Wall time of one handler call and how it ended. */
  handlerDuration(dims: JobDims & { outcome: HandlerOutcome; durationMs: number }): void;
  /** Age of the oldest due pending job of a queue (null or 0 when none). Reported as a gauge. */
  queueLag(dims: { queue: string; lagMs: number | null }): void;
  /** A batch entered `state`. With `state: 'unresolved'` and a `batchId`, also a `keel.transfer.batch_unresolved` event. */
  transferBatchState(dims: { transfer: string; state: BatchState; batchId?: string }): void;
  /** `rows` rows were applied to the target by one batch. */
  rowsTransferred(dims: { transfer: string; rows: number }): void;
  /**
   * The outcome of reconciling one batch. When `unresolved` (an apply still holds the claim) or `failed`
   * (no verdict could be reached), the batch stays unresolved: also a `keel.transfer.batch_unresolved`
   * event with the batch id and, if known, how long the batch has been unresolved (`unresolvedForMs`,
   * e.g. now minus the time the batch entered applying/unresolved).
   */
  reconcileOutcome(dims: {
    transfer: string;
    outcome: ReconcileResult;
    batchId: string;
    unresolvedForMs?: number;
  }): void;
  /** A batch failed (window released): a `keel.transfer.batch_failed` event. */
  transferBatchFailed(dims: { transfer: string; batchId: string; code: string }): void;
  /** The timer or catch-up could not create a transfer's next batch: a `keel.transfer.start_failed` event. */
  transferStartFailed(dims: { transfer: string; source: 'timer' | 'catchup'; code: string; message: string }): void;
  /**
   * A scheduled key-set comparison ran: a `keel.transfer.keys_gone` event with the target keys found gone at the
   * source and the rows it deleted (deleted < goneAtSource: deletes left on the target).
   */
  transferKeysGone(dims: {
    transfer: string;
    windows: number;
    goneAtSource: number;
    deleted: number;
    applied: boolean;
  }): void;
  /**
   * The transfer's target is behind since `behindSince` (epoch ms; its last commit, or its first batch), or caught
   * up (null). Reported as the `keel.transfer.freshness` gauge, in seconds, growing until the next report.
   * `rowsBehind`: rows at the source past the last committed window (counted up to a cap), as the
   * `keel.transfer.rows_behind` gauge; 0 when caught up; left unreported when absent or null (not counted).
   */
  transferFreshness(dims: { transfer: string; behindSince: number | null; rowsBehind?: number | null }): void;
  /** One maintenance timer run finished (outcome defaults to succeeded). */
  maintenanceRun(dims: { durationMs: number; outcome?: RunOutcome }): void;
  /** A database pool reported a connection error it recovers from (the `error` event of shared/engines/poolErrors.ts). */
  poolError(dims: { engine: string; role: PoolRole }): void;
  /**
   * One ops audit record (the database row is the record; this is its copy in App Insights): a `keel.ops.audit`
   * event with its fields, text cut to 200 characters (the summary to 2,000). Null fields are left out.
   */
  opsAudit(record: Readonly<Record<string, string | number | boolean | null>>): void;
  /** One schedule failed in a scheduler pass (the pass went on with the others). */
  scheduleFailed(dims: { schedule: string }): void;
}

export interface TelemetryOptions {
  /** Defaults to the global MeterProvider of @opentelemetry/api at the time of creation. */
  meterProvider?: MeterProvider;
  /** Defaults to the global LoggerProvider of @opentelemetry/api-logs at the time of creation. */
  loggerProvider?: LoggerProvider;
  limits?: Partial<CardinalityLimits>;
  /** A queue-lag or transfer-freshness value not refreshed for this long stops being reported (default 15 minutes). */
  queueLagTtlMs?: number;
  /** Clock for the queue-lag TTL (tests). */
  now?: () => number;
}

export const DEFAULT_QUEUE_LAG_TTL_MS = 15 * 60_000;

interface Instruments {
  jobsEnqueued: Counter;
  jobsCompleted: Counter;
  jobDuration: Histogram;
  jobsRetried: Counter;
  jobsDeadLettered: Counter;
  leaseLost: Counter;
  zombiesRescued: Counter;
  handlerDuration: Histogram;
  transferBatches: Counter;
  rowsTransferred: Counter;
  reconcileOutcomes: Counter;
  maintenanceRuns: Counter;
  maintenanceDuration: Histogram;
  poolErrors: Counter;
  scheduleFailures: Counter;
}

function createInstruments(meter: Meter): Instruments {
  const counter = (name: string, description: string, unit = '{item}') =>
    meter.createCounter(name, { description, unit, valueType: ValueType.INT });
  const histogram = (name: string, description: string) =>
    meter.createHistogram(name, { description, unit: 'ms', valueType: ValueType.DOUBLE });
  return {
    jobsEnqueued: counter(METRICS.jobsEnqueued, 'Jobs enqueued', '{job}'),
    jobsCompleted: counter(METRICS.jobsCompleted, 'Jobs moved to the archive', '{job}'),
    jobDuration: histogram(METRICS.jobDuration, 'Recorded duration of completed jobs'),
    jobsRetried: counter(METRICS.jobsRetried, 'Jobs scheduled for another attempt', '{job}'),
    jobsDeadLettered: counter(METRICS.jobsDeadLettered, 'Jobs moved to the dead-letter queue', '{job}'),
    leaseLost: counter(METRICS.leaseLost, 'Owner-scoped statements that found the lease gone', '{conflict}'),
    zombiesRescued: counter(METRICS.zombiesRescued, 'Jobs rescued from dead workers', '{job}'),
    handlerDuration: histogram(METRICS.handlerDuration, 'Job handler wall time'),
    transferBatches: counter(METRICS.transferBatches, 'Transfer batch state transitions', '{batch}'),
    rowsTransferred: counter(METRICS.rowsTransferred, 'Rows applied to the transfer target', '{row}'),
    reconcileOutcomes: counter(METRICS.reconcileOutcomes, 'Transfer batch reconciliation outcomes', '{batch}'),
    maintenanceRuns: counter(METRICS.maintenanceRuns, 'Maintenance timer runs', '{run}'),
    maintenanceDuration: histogram(METRICS.maintenanceDuration, 'Maintenance timer run time'),
    poolErrors: counter(
      METRICS.poolErrors,
      'Database pool connection errors (the pool replaced the connection)',
      '{error}',
    ),
    scheduleFailures: counter(METRICS.scheduleFailures, 'Schedules that failed in a scheduler pass', '{schedule}'),
  };
}

/** A non-negative finite number, or undefined. */
function measure(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** A positive integer count, or undefined (zero and junk are not recorded). */
function count(value: unknown): number | undefined {
  const v = measure(value);
  if (v === undefined) return undefined;
  const n = Math.floor(v);
  return n > 0 ? n : undefined;
}

/** Wraps every method so that no exception escapes the facade. */
function guarded<T extends object>(impl: T): T {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(impl) as (keyof T & string)[]) {
    const fn = impl[key];
    if (typeof fn !== 'function') continue;
    out[key] = (...args: unknown[]) => {
      try {
        (fn as (...a: unknown[]) => unknown).apply(impl, args);
      } catch (err) {
        diag.warn(`keel telemetry: ${key} failed`, err);
      }
    };
  }
  return out as T;
}

/**
 * Builds a facade on the given (or global) providers. Instruments are created once here; call it after
 * the providers exist. The process-wide facade in index.ts rebinds itself when `initTelemetry` runs.
 */
export function createTelemetry(options: TelemetryOptions = {}): KeelTelemetry {
  // The API singletons return no-op providers until something (useAzureMonitor) registers real ones.
  const meterProvider = options.meterProvider ?? metrics.getMeterProvider();
  const loggerProvider = options.loggerProvider ?? logs.getLoggerProvider();
  const limits: CardinalityLimits = { ...DEFAULT_CARDINALITY_LIMITS, ...options.limits };
  const ttl = options.queueLagTtlMs ?? DEFAULT_QUEUE_LAG_TTL_MS;
  const now = options.now ?? Date.now;
  const limiter = new DimensionLimiter(limits);
  const meter = meterProvider.getMeter(INSTRUMENTATION_SCOPE);
  const logger: Logger = loggerProvider.getLogger(INSTRUMENTATION_SCOPE);
  const m = createInstruments(meter);

  const queue = (v: unknown) => limiter.admit(DIM.queue, v);
  const type = (v: unknown) => limiter.admit(DIM.type, v);
  const transfer = (v: unknown) => limiter.admit(DIM.transfer, v);
  const jobAttrs = (d: JobDims): Attributes => ({ [DIM.queue]: queue(d.queue), [DIM.type]: type(d.type) });
  /** Ids and free text on events: bounded length, never a metric dimension. */
  const text = (v: unknown) => normalizeValue(v, 200);

  const emitEvent = (name: EventName, attributes: Attributes) => {
    logger.emit({
      severityNumber: SeverityNumber.INFO,
      severityText: 'INFO',
      body: name,
      attributes: { ...attributes, [CUSTOM_EVENT_NAME_ATTRIBUTE]: name },
    });
  };

  // Queue lag: the latest value per queue, observed at each collection until it goes stale.
  const lag = new Map<string, { lagMs: number; at: number }>();
  meter
    .createObservableGauge(METRICS.queueLag, {
      description: 'Age of the oldest due pending job',
      unit: 'ms',
      valueType: ValueType.DOUBLE,
    })
    .addCallback((result: ObservableResult) => {
      const t = now();
      for (const [q, entry] of lag) {
        if (t - entry.at > ttl) {
          lag.delete(q);
          continue;
        }
        result.observe(entry.lagMs, { [DIM.queue]: q });
      }
    });

  // Freshness: per transfer, since when its target is behind (null: caught up), observed at each collection until
  // it is not refreshed for the TTL (another instance may have reported a commit since; the alert takes the latest).
  const behind = new Map<string, { since: number | null; at: number }>();
  meter
    .createObservableGauge(METRICS.transferFreshness, {
      description: 'Seconds the transfer target has been behind its source (0: caught up)',
      unit: 's',
      valueType: ValueType.DOUBLE,
    })
    .addCallback((result: ObservableResult) => {
      const t = now();
      for (const [name, { since, at }] of behind) {
        if (t - at > ttl) {
          behind.delete(name);
          continue;
        }
        result.observe(since === null ? 0 : Math.max(0, Math.round((t - since) / 1000)), { [DIM.transfer]: name });
      }
    });

  // Rows behind: per transfer, the latest count reported with the freshness, until it goes stale like it.
  const rowsBehind = new Map<string, { rows: number; at: number }>();
  meter
    .createObservableGauge(METRICS.transferRowsBehind, {
      description: 'Rows at the source after the last committed window (capped count; 0: caught up)',
      unit: '{row}',
      valueType: ValueType.DOUBLE,
    })
    .addCallback((result: ObservableResult) => {
      const t = now();
      for (const [name, { rows, at }] of rowsBehind) {
        if (t - at > ttl) {
          rowsBehind.delete(name);
          continue;
        }
        result.observe(rows, { [DIM.transfer]: name });
      }
    });

  const unresolvedEvent = (
    source: 'reconcile' | 'state',
    d: { transfer: string; batchId: string; unresolvedForMs?: number },
    outcome?: string,
  ) => {
    const attributes: Attributes = {
      [DIM.transfer]: transfer(d.transfer),
      batchId: text(d.batchId),
      source,
    };
    if (outcome !== undefined) attributes[DIM.outcome] = outcome;
    const age = measure(d.unresolvedForMs);
    if (age !== undefined) attributes.unresolvedForMs = Math.round(age);
    emitEvent(EVENTS.batchUnresolved, attributes);
  };

  return guarded<KeelTelemetry>({
    jobEnqueued(d, n = 1) {
      const k = count(n);
      if (k !== undefined) m.jobsEnqueued.add(k, jobAttrs(d));
    },
    jobCompleted(d) {
      const attrs = jobAttrs(d);
      m.jobsCompleted.add(1, attrs);
      const ms = measure(d.durationMs);
      if (ms !== undefined) m.jobDuration.record(ms, attrs);
    },
    jobRetried(d) {
      m.jobsRetried.add(1, jobAttrs(d));
    },
    jobDeadLettered(d) {
      const reason = closedSet(DEAD_LETTER_REASONS, d.reason);
      const attrs = { ...jobAttrs(d), [DIM.reason]: reason };
      m.jobsDeadLettered.add(1, attrs);
      emitEvent(EVENTS.jobDeadLettered, { ...attrs, jobId: text(d.jobId) });
    },
    jobTypeNotRegistered(d) {
      emitEvent(EVENTS.jobTypeNotRegistered, {
        ...jobAttrs(d),
        [DIM.outcome]: closedSet(HANDLER_OUTCOMES, d.outcome),
        jobId: text(d.jobId),
      });
    },
    leaseLost(d) {
      m.leaseLost.add(1, { ...jobAttrs(d), [DIM.operation]: closedSet(LEASE_OPERATIONS, d.operation) });
    },
    zombiesRescued(c) {
      const pairs: [string, unknown][] = [
        ['retried', c.retried],
        ['dead_lettered', c.deadLettered],
        ['released', c.releasedFetched],
      ];
      for (const [action, value] of pairs) {
        const k = count(value);
        if (k !== undefined) m.zombiesRescued.add(k, { [DIM.action]: action });
      }
    },
    handlerDuration(d) {
      const ms = measure(d.durationMs);
      if (ms === undefined) return;
      m.handlerDuration.record(ms, { ...jobAttrs(d), [DIM.outcome]: closedSet(HANDLER_OUTCOMES, d.outcome) });
    },
    queueLag(d) {
      const q = queue(d.queue);
      lag.set(q, { lagMs: measure(d.lagMs) ?? 0, at: now() });
    },
    transferBatchState(d) {
      const state = closedSet(BATCH_STATES, d.state);
      m.transferBatches.add(1, { [DIM.transfer]: transfer(d.transfer), [DIM.state]: state });
      if (state === 'unresolved' && d.batchId !== undefined) {
        unresolvedEvent('state', { transfer: d.transfer, batchId: d.batchId });
      }
    },
    rowsTransferred(d) {
      const k = count(d.rows);
      if (k !== undefined) m.rowsTransferred.add(k, { [DIM.transfer]: transfer(d.transfer) });
    },
    reconcileOutcome(d) {
      const outcome = closedSet(RECONCILE_RESULTS, d.outcome);
      m.reconcileOutcomes.add(1, { [DIM.transfer]: transfer(d.transfer), [DIM.outcome]: outcome });
      // Both leave the batch unresolved: blocked by an open apply, or no verdict could be reached.
      if (outcome === 'unresolved' || outcome === 'failed') unresolvedEvent('reconcile', d, outcome);
    },
    transferBatchFailed(d) {
      emitEvent(EVENTS.batchFailed, {
        [DIM.transfer]: transfer(d.transfer),
        batchId: text(d.batchId),
        code: text(d.code),
      });
    },
    transferStartFailed(d) {
      emitEvent(EVENTS.startFailed, {
        [DIM.transfer]: transfer(d.transfer),
        source: d.source === 'catchup' ? 'catchup' : 'timer',
        code: text(d.code),
        message: text(d.message),
      });
    },
    transferKeysGone(d) {
      emitEvent(EVENTS.keysGone, {
        [DIM.transfer]: transfer(d.transfer),
        windows: d.windows,
        goneAtSource: d.goneAtSource,
        deleted: d.deleted,
        applied: d.applied,
      });
    },
    transferFreshness(d) {
      const since = d.behindSince === null ? null : measure(d.behindSince);
      const name = transfer(d.transfer);
      behind.set(name, { since: since ?? null, at: now() });
      // Caught up is 0 rows; behind without a count is not reported (an older count would be a guess).
      const rows = d.behindSince === null ? 0 : d.rowsBehind == null ? undefined : measure(d.rowsBehind);
      if (rows !== undefined) rowsBehind.set(name, { rows: Math.floor(rows), at: now() });
      else rowsBehind.delete(name);
    },
    maintenanceRun(d) {
      const attrs = { [DIM.outcome]: closedSet(RUN_OUTCOMES, d.outcome ?? 'succeeded') };
      m.maintenanceRuns.add(1, attrs);
      const ms = measure(d.durationMs);
      if (ms !== undefined) m.maintenanceDuration.record(ms, attrs);
    },
    opsAudit(record) {
      const attributes: Attributes = {};
      for (const [k, v] of Object.entries(record)) {
        if (v === null || v === undefined) continue;
        attributes[k] = typeof v === 'string' ? normalizeValue(v, k === 'summary' ? 2000 : 200) : v;
      }
      emitEvent(EVENTS.opsAudit, attributes);
    },
    poolError(d) {
      m.poolErrors.add(1, {
        [DIM.engine]: limiter.admit(DIM.engine, d.engine),
        [DIM.role]: closedSet(POOL_ROLES, d.role),
      });
    },
    scheduleFailed(d) {
      // Schedule names are declared in code (handlers/), a small set; the limiter still caps them.
      m.scheduleFailures.add(1, { [DIM.schedule]: limiter.admit(DIM.schedule, d.schedule) });
    },
  });
}

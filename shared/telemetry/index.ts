// Keel telemetry: the facade the rest of Keel calls, and its one-time setup.
//
//   import { initTelemetry, telemetry } from '../shared/telemetry/index.js';
//   initTelemetry(env);                    // once, at app start (functions/setup.ts passes the process environment)
//   telemetry.jobCompleted({ queue, type, durationMs });
//
// Without APPLICATIONINSIGHTS_CONNECTION_STRING, initTelemetry(env) returns { enabled: false } and every
// telemetry call is a valid no-op. Names and dimensions: ./names.ts and docs/telemetry.md.

import { createTelemetry, type KeelTelemetry, type TelemetryOptions } from './facade.js';
import { initTelemetryOnce, type TelemetryEnv, type TelemetryState } from './init.js';

export * from './names.js';
export {
  createTelemetry,
  DEFAULT_QUEUE_LAG_TTL_MS,
  type JobDims,
  type KeelTelemetry,
  type TelemetryOptions,
} from './facade.js';
export { DEFAULT_CARDINALITY_LIMITS, DimensionLimiter, type CardinalityLimits } from './cardinality.js';
export {
  flushTelemetry,
  instrumentDriver,
  instrumentedDrivers,
  type InstrumentedDriver,
  parseAuthenticationString,
  registerDatabaseInstrumentations,
  type DatabaseInstrumentationOptions,
  shutdownTelemetry,
  TELEMETRY_SETTINGS,
  type TelemetryEnv,
  type TelemetryState,
} from './init.js';

let current: KeelTelemetry | undefined;

function active(): KeelTelemetry {
  current ??= createTelemetry();
  return current;
}

/**
 * Sets up Application Insights from the environment, once per process (later calls return the first
 * result). Call it at app start, before the first function runs.
 */
export function initTelemetry(env: TelemetryEnv): TelemetryState {
  return initTelemetryOnce(env, {
    // Instruments created before the global providers existed are no-ops: rebuild them on the real ones.
    onEnabled: () => {
      current = createTelemetry();
    },
  });
}

/**
 * Points the process-wide `telemetry` facade at explicit providers (tests: an SDK MeterProvider with an
 * in-memory exporter). Without options it rebinds to the global providers. Returns the bound facade.
 */
export function bindTelemetry(options: TelemetryOptions = {}): KeelTelemetry {
  current = createTelemetry(options);
  return current;
}

/** The process-wide facade. Its methods never throw and are no-ops when telemetry is off. */
export const telemetry: KeelTelemetry = {
  jobEnqueued: (dims, n) => active().jobEnqueued(dims, n),
  jobCompleted: (dims) => active().jobCompleted(dims),
  jobRetried: (dims) => active().jobRetried(dims),
  jobDeadLettered: (dims) => active().jobDeadLettered(dims),
  jobTypeNotRegistered: (dims) => active().jobTypeNotRegistered(dims),
  leaseLost: (dims) => active().leaseLost(dims),
  zombiesRescued: (counts) => active().zombiesRescued(counts),
  handlerDuration: (dims) => active().handlerDuration(dims),
  queueLag: (dims) => active().queueLag(dims),
  transferBatchState: (dims) => active().transferBatchState(dims),
  rowsTransferred: (dims) => active().rowsTransferred(dims),
  reconcileOutcome: (dims) => active().reconcileOutcome(dims),
  transferBatchFailed: (dims) => active().transferBatchFailed(dims),
  transferStartFailed: (dims) => active().transferStartFailed(dims),
  transferKeysGone: (dims) => active().transferKeysGone(dims),
  transferFreshness: (dims) => active().transferFreshness(dims),
  maintenanceRun: (dims) => active().maintenanceRun(dims),
  poolError: (dims) => active().poolError(dims),
  opsAudit: (record) => active().opsAudit(record),
  scheduleFailed: (dims) => active().scheduleFailed(dims),
};

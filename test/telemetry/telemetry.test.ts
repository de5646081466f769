// The telemetry facade, observed through in-memory OpenTelemetry exporters: the names and dimensions that
// the alert rules depend on, bounded cardinality, events with ids, correlation with the invocation's
// trace context (including a real `pg` dependency span), and that without a connection string nothing
// is set up and every call is a harmless no-op.

import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { context, metrics, ROOT_CONTEXT, trace, TraceFlags, type Context, type SpanContext } from '@opentelemetry/api';
import { logs } from '@opentelemetry/api-logs';
import {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type DataPoint,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import {
  InMemoryLogRecordExporter,
  LoggerProvider,
  SimpleLogRecordProcessor,
  type ReadableLogRecord,
} from '@opentelemetry/sdk-logs';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import pg from 'pg';
import {
  bindTelemetry,
  createTelemetry,
  CUSTOM_EVENT_NAME_ATTRIBUTE,
  EVENTS,
  flushTelemetry,
  initTelemetry,
  METRICS,
  OTHER,
  parseAuthenticationString,
  registerDatabaseInstrumentations,
  shutdownTelemetry,
  telemetry,
  type KeelTelemetry,
  type TelemetryOptions,
} from '../../shared/telemetry/index.js';
import { adminUrl } from '../support/pg.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { processorTelemetry } from '../../shared/app/telemetryHooks.js';
import type { ClaimedJob } from '../../shared/jobs/contract.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..', '..');

interface Harness {
  t: KeelTelemetry;
  collect(): Promise<MetricData[]>;
  events(): ReadableLogRecord[];
  shutdown(): Promise<void>;
}

function harness(options: Omit<TelemetryOptions, 'meterProvider' | 'loggerProvider'> = {}): Harness {
  // DELTA, as the Azure Monitor metric exporter selects for counters, histograms and gauges.
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const logExporter = new InMemoryLogRecordExporter();
  const loggerProvider = new LoggerProvider({ processors: [new SimpleLogRecordProcessor({ exporter: logExporter })] });
  const t = createTelemetry({ ...options, meterProvider, loggerProvider });
  return {
    t,
    async collect() {
      metricExporter.reset();
      await reader.forceFlush();
      return metricExporter.getMetrics().flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics));
    },
    events: () => logExporter.getFinishedLogRecords(),
    async shutdown() {
      await meterProvider.shutdown();
      await loggerProvider.shutdown();
    },
  };
}

function metric(all: MetricData[], name: string): MetricData {
  const found = all.find((m) => m.descriptor.name === name);
  if (!found) throw new Error(`metric ${name} not exported; got ${all.map((m) => m.descriptor.name).join(', ')}`);
  return found;
}

/** Data points as { attrs, value } where value is the sum (counter), count+sum (histogram) or gauge value. */
function points(m: MetricData): { attrs: Record<string, unknown>; value: number; count?: number }[] {
  return (m.dataPoints as DataPoint<unknown>[]).map((dp) => {
    if (m.dataPointType === DataPointType.HISTOGRAM) {
      const h = dp.value as { count: number; sum?: number };
      return { attrs: { ...dp.attributes }, value: h.sum ?? 0, count: h.count };
    }
    return { attrs: { ...dp.attributes }, value: dp.value as number };
  });
}

describe('telemetry facade (in-memory exporters)', () => {
  let h: Harness;
  afterEach(async () => {
    await h?.shutdown();
  });

  it('emits every metric with its exact name and bounded dimensions', async () => {
    h = harness();
    const { t } = h;
    t.jobEnqueued({ queue: 'email', type: 'send' });
    t.jobEnqueued({ queue: 'email', type: 'send' }, 4);
    t.jobCompleted({ queue: 'email', type: 'send', durationMs: 120 });
    t.jobRetried({ queue: 'email', type: 'send' });
    t.jobDeadLettered({ queue: 'email', type: 'send', reason: 'exhausted', jobId: 'j-1' });
    t.leaseLost({ queue: 'email', type: 'send', operation: 'complete' });
    t.zombiesRescued({ retried: 2, deadLettered: 1, releasedFetched: 0 });
    t.handlerDuration({ queue: 'email', type: 'send', outcome: 'succeeded', durationMs: 40 });
    t.handlerDuration({ queue: 'email', type: 'send', outcome: 'succeeded', durationMs: 60 });
    t.queueLag({ queue: 'email', lagMs: 5_000 });
    t.transferBatchState({ transfer: 'orders', state: 'staged' });
    t.rowsTransferred({ transfer: 'orders', rows: 1_000 });
    t.reconcileOutcome({ transfer: 'orders', outcome: 'committed', batchId: 'b-1' });
    t.maintenanceRun({ durationMs: 250 });
    t.poolError({ engine: 'postgres', role: 'control' });
    t.poolError({ engine: 'postgres', role: 'control' });
    t.poolError({ engine: 'sqlserver', role: 'transfer' });

    const all = await h.collect();
    const job = { queue: 'email', type: 'send' };
    expect(points(metric(all, METRICS.jobsEnqueued))).toEqual([{ attrs: job, value: 5 }]);
    expect(points(metric(all, METRICS.jobsCompleted))).toEqual([{ attrs: job, value: 1 }]);
    expect(points(metric(all, METRICS.jobDuration))).toEqual([{ attrs: job, value: 120, count: 1 }]);
    expect(points(metric(all, METRICS.jobsRetried))).toEqual([{ attrs: job, value: 1 }]);
    expect(points(metric(all, METRICS.jobsDeadLettered))).toEqual([
      { attrs: { ...job, reason: 'exhausted' }, value: 1 },
    ]);
    expect(points(metric(all, METRICS.leaseLost))).toEqual([{ attrs: { ...job, operation: 'complete' }, value: 1 }]);
    expect(points(metric(all, METRICS.zombiesRescued))).toEqual(
      expect.arrayContaining([
        { attrs: { action: 'retried' }, value: 2 },
        { attrs: { action: 'dead_lettered' }, value: 1 },
      ]),
    );
    expect(points(metric(all, METRICS.zombiesRescued))).toHaveLength(2); // zero is not recorded
    expect(points(metric(all, METRICS.handlerDuration))).toEqual([
      { attrs: { ...job, outcome: 'succeeded' }, value: 100, count: 2 },
    ]);
    expect(points(metric(all, METRICS.queueLag))).toEqual([{ attrs: { queue: 'email' }, value: 5_000 }]);
    expect(points(metric(all, METRICS.transferBatches))).toEqual([
      { attrs: { transfer: 'orders', state: 'staged' }, value: 1 },
    ]);
    expect(points(metric(all, METRICS.rowsTransferred))).toEqual([{ attrs: { transfer: 'orders' }, value: 1_000 }]);
    expect(points(metric(all, METRICS.reconcileOutcomes))).toEqual([
      { attrs: { transfer: 'orders', outcome: 'committed' }, value: 1 },
    ]);
    expect(points(metric(all, METRICS.maintenanceRuns))).toEqual([{ attrs: { outcome: 'succeeded' }, value: 1 }]);
    expect(points(metric(all, METRICS.maintenanceDuration))).toEqual([
      { attrs: { outcome: 'succeeded' }, value: 250, count: 1 },
    ]);
    expect(points(metric(all, METRICS.poolErrors))).toEqual(
      expect.arrayContaining([
        { attrs: { engine: 'postgres', role: 'control' }, value: 2 },
        { attrs: { engine: 'sqlserver', role: 'transfer' }, value: 1 },
      ]),
    );
    expect(points(metric(all, METRICS.poolErrors))).toHaveLength(2);
    expect(metric(all, METRICS.handlerDuration).descriptor.unit).toBe('ms');
    expect(metric(all, METRICS.queueLag).descriptor.unit).toBe('ms');

    // Metrics never carry ids.
    for (const m of all) for (const p of points(m)) expect(Object.keys(p.attrs)).not.toContain('jobId');
    for (const m of all) for (const p of points(m)) expect(Object.keys(p.attrs)).not.toContain('batchId');
  });

  it('sends each ops audit record as a keel.ops.audit event: nulls left out, text bounded, no forged lines', async () => {
    h = harness();
    h.t.opsAudit({
      id: '7',
      action: 'cancelJob',
      principalName: 'ada\n{"forged":true}',
      target: 'job:42',
      outcome: 'ok',
      status: 200,
      affected: 1,
      reason: null,
      summary: 'x'.repeat(5000),
    });
    const [event] = h.events().map((e) => e.attributes);
    expect(event).toMatchObject({
      [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.opsAudit,
      id: '7',
      action: 'cancelJob',
      principalName: 'ada{"forged":true}',
      target: 'job:42',
      outcome: 'ok',
      status: 200,
      affected: 1,
    });
    expect(event).not.toHaveProperty('reason');
    expect(String(event!.summary)).toHaveLength(2000);
  });

  it('sends a custom event with the id for each DLQ move and each unresolved batch', async () => {
    h = harness();
    h.t.jobDeadLettered({ queue: 'email', type: 'send', reason: 'zombie', jobId: 'job-42' });
    h.t.reconcileOutcome({ transfer: 'orders', outcome: 'unresolved', batchId: 'batch-7', unresolvedForMs: 600_000 });
    h.t.transferBatchState({ transfer: 'orders', state: 'unresolved', batchId: 'batch-8' });
    h.t.transferBatchState({ transfer: 'orders', state: 'committed', batchId: 'batch-9' });
    h.t.reconcileOutcome({ transfer: 'orders', outcome: 'committed', batchId: 'batch-10' });
    h.t.reconcileOutcome({ transfer: 'orders', outcome: 'not_applied', batchId: 'batch-11' });
    h.t.reconcileOutcome({ transfer: 'orders', outcome: 'failed', batchId: 'batch-12' });

    const events = h.events().map((e) => e.attributes);
    expect(events).toEqual([
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.jobDeadLettered,
        queue: 'email',
        type: 'send',
        reason: 'zombie',
        jobId: 'job-42',
      },
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.batchUnresolved,
        transfer: 'orders',
        batchId: 'batch-7',
        source: 'reconcile',
        outcome: 'unresolved',
        unresolvedForMs: 600_000,
      },
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.batchUnresolved,
        transfer: 'orders',
        batchId: 'batch-8',
        source: 'state',
      },
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.batchUnresolved,
        transfer: 'orders',
        batchId: 'batch-12',
        source: 'reconcile',
        outcome: 'failed',
      },
    ]);
    const all = await h.collect();
    expect(points(metric(all, METRICS.reconcileOutcomes))).toEqual(
      expect.arrayContaining([
        { attrs: { transfer: 'orders', outcome: 'unresolved' }, value: 1 },
        { attrs: { transfer: 'orders', outcome: 'committed' }, value: 1 },
      ]),
    );
  });

  it('events carry the trace context active at the call (the function invocation)', async () => {
    h = harness();
    const invocation: SpanContext = {
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    };
    // The Azure Functions pre-invocation hook of the distro runs the handler in exactly such a context.
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    try {
      const ctx: Context = trace.setSpanContext(ROOT_CONTEXT, invocation);
      await context.with(ctx, async () => {
        await Promise.resolve();
        h.t.jobDeadLettered({ queue: 'q', type: 't', reason: 'fatal', jobId: 'j' });
      });
    } finally {
      context.disable();
    }
    const [event] = h.events();
    expect(event?.spanContext?.traceId).toBe(invocation.traceId);
    expect(event?.spanContext?.spanId).toBe(invocation.spanId);
  });

  it('caps free-form dimensions: long values truncated, new values beyond the cap become "other"', async () => {
    h = harness({ limits: { maxDistinctValues: 3, maxValueLength: 10 } });
    for (let i = 0; i < 6; i++) h.t.jobEnqueued({ queue: `q${i}`, type: 'x' });
    h.t.jobEnqueued({ queue: 'q0', type: 'x' }); // already admitted: keeps its name
    h.t.jobRetried({ queue: 'a-very-long-queue-name-indeed', type: 'x' });
    h.t.rowsTransferred({ transfer: '', rows: 3 });

    const all = await h.collect();
    const enq = points(metric(all, METRICS.jobsEnqueued));
    expect(enq).toEqual(
      expect.arrayContaining([
        { attrs: { queue: 'q0', type: 'x' }, value: 2 },
        { attrs: { queue: 'q1', type: 'x' }, value: 1 },
        { attrs: { queue: 'q2', type: 'x' }, value: 1 },
        { attrs: { queue: OTHER, type: 'x' }, value: 3 },
      ]),
    );
    expect(enq).toHaveLength(4);
    // The cap was reached, so even a truncated new name is "other".
    expect(points(metric(all, METRICS.jobsRetried))).toEqual([{ attrs: { queue: OTHER, type: 'x' }, value: 1 }]);
    expect(points(metric(all, METRICS.rowsTransferred))).toEqual([{ attrs: { transfer: 'unknown' }, value: 3 }]);

    const h2 = harness({ limits: { maxValueLength: 10 } });
    h2.t.jobRetried({ queue: 'a-very-long-queue-name-indeed', type: 'x' });
    expect(points(metric(await h2.collect(), METRICS.jobsRetried))).toEqual([
      { attrs: { queue: 'a-very-lon', type: 'x' }, value: 1 },
    ]);
    await h2.shutdown();
  });

  it('maps values outside the closed sets to "other" and drops junk numbers without throwing', async () => {
    h = harness();
    const loose = h.t as unknown as Record<string, (arg: unknown, n?: unknown) => void>;
    loose.jobDeadLettered!({ queue: 'q', type: 't', reason: 'because', jobId: 'j' });
    loose.leaseLost!({ queue: 'q', type: 't', operation: 'teleport' });
    loose.handlerDuration!({ queue: 'q', type: 't', outcome: 'meh', durationMs: 5 });
    loose.transferBatchState!({ transfer: 'x', state: 'weird' });
    loose.handlerDuration!({ queue: 'q', type: 't', outcome: 'succeeded', durationMs: Number.NaN });
    loose.handlerDuration!({ queue: 'q', type: 't', outcome: 'succeeded', durationMs: -1 });
    loose.jobEnqueued!({ queue: 'q', type: 't' }, -3);
    loose.rowsTransferred!({ transfer: 'x', rows: 'many' });
    loose.poolError!({ engine: 'postgres', role: 'a pool named by its URL' });
    expect(() => loose.jobCompleted!(undefined)).not.toThrow();
    expect(() => loose.queueLag!(null)).not.toThrow();

    const all = await h.collect();
    expect(points(metric(all, METRICS.jobsDeadLettered))[0]?.attrs.reason).toBe(OTHER);
    expect(points(metric(all, METRICS.leaseLost))[0]?.attrs.operation).toBe(OTHER);
    expect(points(metric(all, METRICS.handlerDuration))).toEqual([
      { attrs: { queue: 'q', type: 't', outcome: OTHER }, value: 5, count: 1 },
    ]);
    expect(points(metric(all, METRICS.transferBatches))[0]?.attrs.state).toBe(OTHER);
    expect(points(metric(all, METRICS.poolErrors))).toEqual([{ attrs: { engine: 'postgres', role: OTHER }, value: 1 }]);
    expect(all.find((m) => m.descriptor.name === METRICS.jobsEnqueued)?.dataPoints ?? []).toHaveLength(0);
    expect(all.find((m) => m.descriptor.name === METRICS.rowsTransferred)?.dataPoints ?? []).toHaveLength(0);
  });

  it('reports queue lag as a gauge of the latest value per queue, dropped when stale', async () => {
    let now = 1_000_000;
    h = harness({ now: () => now, queueLagTtlMs: 60_000 });
    h.t.queueLag({ queue: 'a', lagMs: 100 });
    h.t.queueLag({ queue: 'a', lagMs: 900 });
    h.t.queueLag({ queue: 'b', lagMs: null });
    expect(points(metric(await h.collect(), METRICS.queueLag))).toEqual(
      expect.arrayContaining([
        { attrs: { queue: 'a' }, value: 900 },
        { attrs: { queue: 'b' }, value: 0 },
      ]),
    );
    now += 30_000;
    h.t.queueLag({ queue: 'b', lagMs: 50 });
    now += 40_000; // a is now 70 s old, b 40 s
    expect(points(metric(await h.collect(), METRICS.queueLag))).toEqual([{ attrs: { queue: 'b' }, value: 50 }]);
  });

  it('transfer freshness: seconds behind since the last commit, growing between reports, 0 when caught up, dropped when stale', async () => {
    let now = 10_000_000;
    h = harness({ now: () => now, queueLagTtlMs: 600_000 });
    h.t.transferFreshness({ transfer: 'orders', behindSince: now - 120_000 });
    h.t.transferFreshness({ transfer: 'lines', behindSince: null });
    expect(points(metric(await h.collect(), METRICS.transferFreshness))).toEqual(
      expect.arrayContaining([
        { attrs: { transfer: 'orders' }, value: 120 },
        { attrs: { transfer: 'lines' }, value: 0 },
      ]),
    );
    now += 300_000; // no new report: orders is 5 minutes further behind
    expect(points(metric(await h.collect(), METRICS.transferFreshness))).toEqual(
      expect.arrayContaining([{ attrs: { transfer: 'orders' }, value: 420 }]),
    );
    now += 400_000; // both reports older than the TTL
    const stale = (await h.collect()).find((m) => m.descriptor.name === METRICS.transferFreshness);
    expect(stale?.dataPoints ?? []).toHaveLength(0);
  });

  it('transfer rows behind: the count reported with the freshness, 0 when caught up, absent when not counted, dropped when stale', async () => {
    let now = 10_000_000;
    h = harness({ now: () => now, queueLagTtlMs: 600_000 });
    h.t.transferFreshness({ transfer: 'orders', behindSince: now - 120_000, rowsBehind: 250_000 });
    h.t.transferFreshness({ transfer: 'lines', behindSince: null });
    h.t.transferFreshness({ transfer: 'notes', behindSince: now - 60_000 }); // behind, not counted
    expect(points(metric(await h.collect(), METRICS.transferRowsBehind))).toEqual(
      expect.arrayContaining([
        { attrs: { transfer: 'orders' }, value: 250_000 },
        { attrs: { transfer: 'lines' }, value: 0 },
      ]),
    );
    expect(points(metric(await h.collect(), METRICS.transferRowsBehind))).toHaveLength(2);
    // A later report without a count drops the old count instead of repeating it.
    h.t.transferFreshness({ transfer: 'orders', behindSince: now - 130_000, rowsBehind: null });
    expect(points(metric(await h.collect(), METRICS.transferRowsBehind))).toEqual([
      { attrs: { transfer: 'lines' }, value: 0 },
    ]);
    now += 700_000; // older than the TTL
    const stale = (await h.collect()).find((m) => m.descriptor.name === METRICS.transferRowsBehind);
    expect(stale?.dataPoints ?? []).toHaveLength(0);
  });

  it('failed batches and failed scheduled starts are events with the transfer and the code', async () => {
    h = harness();
    h.t.transferBatchFailed({ transfer: 'orders', batchId: 'b-1', code: 'schema_drift' });
    h.t.transferStartFailed({ transfer: 'orders', source: 'timer', code: 'schema_drift', message: 'drifted' });
    h.t.transferKeysGone({ transfer: 'orders', windows: 3, goneAtSource: 2, deleted: 0, applied: false });
    expect(h.events().map((e) => e.attributes)).toEqual([
      { [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.batchFailed, transfer: 'orders', batchId: 'b-1', code: 'schema_drift' },
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.startFailed,
        transfer: 'orders',
        source: 'timer',
        code: 'schema_drift',
        message: 'drifted',
      },
      {
        [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.keysGone,
        transfer: 'orders',
        windows: 3,
        goneAtSource: 2,
        deleted: 0,
        applied: false,
      },
    ]);
  });

  // The processor's hook: an attempt ended unrun for want of a handler (an older instance in a rolling deploy) says
  // so with an event naming the job, beside the ordinary retried / dead-lettered metrics.
  it('an attempt of a type with no handler here is a keel.job.type_not_registered event, with its outcome', async () => {
    const logExporter = new InMemoryLogRecordExporter();
    const loggerProvider = new LoggerProvider({
      processors: [new SimpleLogRecordProcessor({ exporter: logExporter })],
    });
    bindTelemetry({ loggerProvider });
    try {
      const job = { id: 'j-9', queue: 'email', type: 'new.type' } as ClaimedJob;
      const base = { job, durationMs: 1, attempt: 1 };
      processorTelemetry.onOutcome!({ ...base, outcome: 'retried', unregisteredType: true });
      processorTelemetry.onOutcome!({ ...base, outcome: 'dead_lettered', reason: 'exhausted', unregisteredType: true });
      processorTelemetry.onOutcome!({ ...base, outcome: 'retried' }); // an ordinary retry: no such event
      const events = logExporter.getFinishedLogRecords().map((e) => e.attributes);
      const notRegistered = { [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.jobTypeNotRegistered, queue: 'email' };
      expect(events).toEqual([
        { ...notRegistered, type: 'new.type', outcome: 'retried', jobId: 'j-9' },
        { ...notRegistered, type: 'new.type', outcome: 'dead_lettered', jobId: 'j-9' },
        {
          [CUSTOM_EVENT_NAME_ATTRIBUTE]: EVENTS.jobDeadLettered,
          queue: 'email',
          type: 'new.type',
          reason: 'exhausted',
          jobId: 'j-9',
        },
      ]);
    } finally {
      bindTelemetry();
      await loggerProvider.shutdown();
    }
  });

  it('the process-wide facade can be bound to injected providers', async () => {
    const metricExporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
    const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    bindTelemetry({ meterProvider });
    telemetry.jobCompleted({ queue: 'bound', type: 't', durationMs: 1 });
    await reader.forceFlush();
    const names = metricExporter
      .getMetrics()
      .flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
      .filter((m) => m.dataPoints.length > 0)
      .map((m) => m.descriptor.name);
    expect(names).toEqual(expect.arrayContaining([METRICS.jobsCompleted, METRICS.jobDuration]));
    bindTelemetry();
    await meterProvider.shutdown();
    h = harness();
  });
});

describe('pool error events', () => {
  it('a pooled connection that dies while idle is logged with what the pool serves and counted by engine and role', async () => {
    const metricExporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
    const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    bindTelemetry({ meterProvider });
    const lines: string[] = [];
    const pool = new pg.Pool({ connectionString: adminUrl(), max: 1 });
    pool.on(
      'error',
      poolErrorLogger('postgres', 'control', 'test pool (idle kill)', (l) => lines.push(l)),
    );
    const other = new pg.Client({ connectionString: adminUrl() });
    other.on('error', poolErrorLogger('postgres', 'control', 'test client'));
    try {
      const client = await pool.connect();
      const pid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      client.release(); // idle in the pool now
      const errored = new Promise<void>((resolve) => pool.once('error', () => resolve()));
      await other.connect();
      await other.query('select pg_terminate_backend($1)', [pid]);
      await errored;
      expect(lines).toEqual([
        expect.stringMatching(
          /^keel postgres test pool \(idle kill\): connection error .*the pool replaces the connection/,
        ),
      ]);
      await reader.forceFlush();
      const counted = metricExporter
        .getMetrics()
        .flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
        .filter((m) => m.descriptor.name === METRICS.poolErrors);
      expect(counted.flatMap((m) => points(m))).toEqual([{ attrs: { engine: 'postgres', role: 'control' }, value: 1 }]);
    } finally {
      bindTelemetry();
      await other.end();
      await pool.end();
      await meterProvider.shutdown();
    }
  });
});

describe('database dependencies in traces', () => {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  let unregister: (() => void) | undefined;

  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    unregister = registerDatabaseInstrumentations({ tracerProvider, drivers: ['pg', 'tedious', 'oracledb'] });
  });
  afterAll(async () => {
    unregister?.();
    context.disable();
    await tracerProvider.shutdown();
  });

  it('a pg query inside an invocation is a child span of the invocation (ESM-imported driver)', async () => {
    const invocation: SpanContext = {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    };
    const client = new pg.Client({ connectionString: adminUrl() });
    await context.with(trace.setSpanContext(ROOT_CONTEXT, invocation), async () => {
      await client.connect();
      try {
        await client.query('select 1 as one');
      } finally {
        await client.end();
      }
    });
    const query = spans
      .getFinishedSpans()
      .find((s) => s.attributes['db.system'] === 'postgresql' || s.attributes['db.system.name'] === 'postgresql');
    expect(
      query,
      spans
        .getFinishedSpans()
        .map((s) => s.name)
        .join(', '),
    ).toBeDefined();
    expect(query!.spanContext().traceId).toBe(invocation.traceId);
    expect(query!.parentSpanContext?.spanId).toBe(invocation.spanId);
  });

  it('the mssql (tedious) and oracledb drivers are patched too', async () => {
    const { createRequire } = await import('node:module');
    const req = createRequire(import.meta.url);
    const tedious = req('tedious') as { Connection: { prototype: Record<string, { __wrapped?: boolean }> } };
    expect(tedious.Connection.prototype.execSql?.__wrapped).toBe(true);
    const oracledb = (await import('oracledb')).default as unknown as {
      traceHandler: { getTraceInstance(): unknown };
    };
    expect(oracledb.traceHandler.getTraceInstance()).toBeTruthy();
  });
});

describe('without a connection string', () => {
  it('initTelemetry() is off, idempotent, touches no network, and calls are harmless no-ops', async () => {
    const fetchSpy = vi.spyOn(globalThis, 'fetch');
    const meterBefore = metrics.getMeterProvider();
    const loggerBefore = logs.getLoggerProvider();
    const env = { PATH: process.env.PATH, APPLICATIONINSIGHTS_CONNECTION_STRING: '   ' };
    expect(initTelemetry(env)).toEqual({ enabled: false });
    expect(initTelemetry({})).toEqual({ enabled: false });
    bindTelemetry(); // the global (no-op) providers, as in production when disabled
    expect(metrics.getMeterProvider()).toBe(meterBefore);
    expect(logs.getLoggerProvider()).toBe(loggerBefore);

    expect(() => {
      telemetry.jobEnqueued({ queue: 'q', type: 't' }, 3);
      telemetry.jobCompleted({ queue: 'q', type: 't', durationMs: 10 });
      telemetry.jobRetried({ queue: 'q', type: 't' });
      telemetry.jobDeadLettered({ queue: 'q', type: 't', reason: 'fatal', jobId: 'j' });
      telemetry.leaseLost({ queue: 'q', type: 't', operation: 'heartbeat' });
      telemetry.zombiesRescued({ retried: 1, deadLettered: 1, releasedFetched: 1 });
      telemetry.handlerDuration({ queue: 'q', type: 't', outcome: 'dead_lettered', durationMs: 3 });
      telemetry.queueLag({ queue: 'q', lagMs: 1 });
      telemetry.transferBatchState({ transfer: 'x', state: 'unresolved', batchId: 'b' });
      telemetry.rowsTransferred({ transfer: 'x', rows: 5 });
      telemetry.reconcileOutcome({ transfer: 'x', outcome: 'unresolved', batchId: 'b' });
      telemetry.maintenanceRun({ durationMs: 1 });
    }).not.toThrow();
    await expect(flushTelemetry()).resolves.toBeUndefined();
    await expect(shutdownTelemetry()).resolves.toBeUndefined();
    expect(fetchSpy).not.toHaveBeenCalled();
    fetchSpy.mockRestore();
    // Application Insights was never even loaded (it is required lazily, only with a connection string).
    const { createRequire } = await import('node:module');
    const loaded = Object.keys(createRequire(import.meta.url).cache);
    expect(loaded.filter((k) => k.includes(`${path.sep}applicationinsights${path.sep}`))).toEqual([]);
    expect(loaded.filter((k) => k.includes(`${path.sep}@azure${path.sep}monitor-opentelemetry`))).toEqual([]);
  });

  it('KEEL_TELEMETRY_ENABLED=false keeps it off even with a connection string', async () => {
    await shutdownTelemetry();
    expect(
      initTelemetry({
        APPLICATIONINSIGHTS_CONNECTION_STRING: 'InstrumentationKey=00000000-0000-0000-0000-000000000000',
        KEEL_TELEMETRY_ENABLED: 'false',
      }),
    ).toEqual({ enabled: false });
    await shutdownTelemetry();
  });

  it('parses the Entra authentication string the infrastructure sets', () => {
    expect(parseAuthenticationString(undefined)).toEqual({ aad: false });
    expect(parseAuthenticationString('Authorization=AAD;ClientId=abc')).toEqual({ aad: true, clientId: 'abc' });
    expect(parseAuthenticationString('Authorization=AAD')).toEqual({ aad: true });
  });
});

describe('alert rules use the emitted names', () => {
  it('every keel.* name in the Bicep alert queries is a metric or event this module emits', () => {
    const dir = path.join(repoRoot, 'infra', 'modules');
    const namesIn = (text: string) => new Set(text.match(/'keel\.[a-z_.]+[a-z_]'/g)?.map((s) => s.slice(1, -1)) ?? []);
    const known = new Set<string>([...Object.values(METRICS), ...Object.values(EVENTS)]);
    // Every module (the alert rules, the workbook) queries only names Keel emits.
    for (const f of readdirSync(dir).filter((x) => x.endsWith('.bicep'))) {
      for (const name of namesIn(readFileSync(path.join(dir, f), 'utf8')))
        expect(known, `${f} queries unknown name ${name}`).toContain(name);
    }
    const used = namesIn(readFileSync(path.join(dir, 'alerts.bicep'), 'utf8'));
    // The alerts of the issue: DLQ growth and rate, zombies, lease-lost spikes, unresolved batches, failed batches,
    // failed scheduled transfer starts, keys gone at the source (scheduled key comparisons), transfer freshness, queue lag, maintenance not running (function failures
    // come from the host's requests table).
    expect([...used].sort()).toEqual(
      [
        METRICS.jobsDeadLettered,
        METRICS.jobsCompleted,
        METRICS.zombiesRescued,
        METRICS.leaseLost,
        EVENTS.batchUnresolved,
        EVENTS.batchFailed,
        EVENTS.startFailed,
        EVENTS.keysGone,
        METRICS.transferFreshness,
        METRICS.transferRowsBehind,
        METRICS.queueLag,
        METRICS.maintenanceRuns,
      ].sort(),
    );
  });
});

// Ops routes the console watches: dead letters grouped in SQL, the workers holding leases, and warnings (a stale
// heartbeat, a queue lagging, a DLQ growing) against thresholds that are settings (KEEL_WARN_*).
import { z } from 'zod';
import type { WorkerLeases } from '../jobs/contract.js';
import { LIMITS } from '../jobs/validate.js';
import type { Settings } from '../config/settings.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

const qInt = (min: number, max: number, def: number) =>
  z
    .string()
    .regex(/^\d+$/, 'must be a non-negative integer')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .default(def)
    .meta({ type: 'integer', minimum: min, maximum: max, description: `integer, default ${def}`, pattern: undefined });

const groupsQuery = z.strictObject({
  queue: s.name.optional(),
  offset: qInt(0, 1_000_000, 0),
  limit: qInt(1, LIMITS.dlqGroups, 50),
});

const DLQ_WINDOW_MINUTES = 15;

function thresholds(settings: Settings) {
  return {
    staleHeartbeatMs: settings.KEEL_WARN_STALE_HEARTBEAT_MS,
    queueLagMs: settings.KEEL_WARN_QUEUE_LAG_MS,
    dlqPer15Min: settings.KEEL_WARN_DLQ_PER_15_MIN,
  };
}

function describeWorker(w: WorkerLeases, staleMs: number): Record<string, unknown> {
  const ageMs = w.oldestHeartbeatAt ? Math.max(0, w.asOf.getTime() - w.oldestHeartbeatAt.getTime()) : null;
  return {
    workerId: w.workerId,
    jobsHeld: w.jobsHeld,
    processing: w.processing,
    queues: w.queues,
    oldestHeartbeatAt: w.oldestHeartbeatAt?.toISOString() ?? null,
    newestHeartbeatAt: w.newestHeartbeatAt?.toISOString() ?? null,
    earliestLeaseExpiresAt: w.earliestLeaseExpiresAt?.toISOString() ?? null,
    heartbeatAgeMs: ageMs,
    stale: ageMs !== null && ageMs > staleMs,
  };
}

export const watchRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/dlq/groups',
    operationId: 'dlqGroups',
    summary:
      'Dead letters grouped by reason, type and queue, counted in SQL over the whole DLQ (or one queue); largest first, paged by offset',
    tag: 'dlq',
    role: 'reader',
    query: groupsQuery,
    responses: { 200: 'a page of groups with the number of groups and of dead letters' },
    async handle({ rt, query }) {
      const page = await rt.store.dlqGroups(query.queue ?? null, query.offset, query.limit);
      return {
        body: {
          queue: query.queue ?? null,
          offset: query.offset,
          limit: query.limit,
          totalGroups: page.totalGroups,
          totalJobs: page.totalJobs,
          items: page.groups.map((g) => ({ ...g, newestFailedAt: g.newestFailedAt.toISOString() })),
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/workers',
    operationId: 'listWorkers',
    summary:
      "Workers holding leases on hot jobs (from the rows' lease holders): jobs held, oldest and newest sign of life, earliest lease expiry; stale past KEEL_WARN_STALE_HEARTBEAT_MS",
    tag: 'stats',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'workers holding jobs, the stalest first' },
    async handle({ rt }) {
      const t = thresholds(rt.settings);
      const workers = await rt.store.listWorkers();
      return {
        body: {
          thisWorker: rt.workerId,
          thresholds: t,
          items: workers.map((w) => describeWorker(w, t.staleHeartbeatMs)),
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/warnings',
    operationId: 'warnings',
    summary:
      'What needs a look: workers with a stale heartbeat, queues whose oldest due job waited past a bound, queues dead-lettering fast (thresholds: KEEL_WARN_* settings)',
    tag: 'stats',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'warnings (empty: nothing over its threshold) and the thresholds' },
    async handle({ rt }) {
      const t = thresholds(rt.settings);
      const [workers, stats, buckets] = await Promise.all([
        rt.store.listWorkers(),
        rt.store.stats(),
        rt.store.metrics(DLQ_WINDOW_MINUTES),
      ]);
      const items: Record<string, unknown>[] = [];
      for (const w of workers) {
        const d = describeWorker(w, t.staleHeartbeatMs);
        if (d.stale)
          items.push({
            kind: 'stale_heartbeat',
            workerId: w.workerId,
            queues: w.queues,
            jobsHeld: w.jobsHeld,
            ageMs: d.heartbeatAgeMs,
            message: `worker ${w.workerId} holds ${w.jobsHeld} job(s) with no heartbeat for ${Math.round(Number(d.heartbeatAgeMs) / 1000)} s (bound ${t.staleHeartbeatMs / 1000} s); rescue moves them once the queue's zombie timeout passes`,
          });
      }
      for (const q of stats) {
        if (q.oldestDueAgeMs !== null && q.oldestDueAgeMs > t.queueLagMs)
          items.push({
            kind: 'queue_lag',
            queue: q.queue,
            lagMs: q.oldestDueAgeMs,
            message: `queue ${q.queue}: the oldest due job has waited ${Math.round(q.oldestDueAgeMs / 1000)} s (bound ${t.queueLagMs / 1000} s)`,
          });
      }
      const failed = new Map<string, number>();
      for (const b of buckets) if (b.outcome === 'failed') failed.set(b.queue, (failed.get(b.queue) ?? 0) + b.count);
      for (const [queue, n] of failed) {
        if (n >= t.dlqPer15Min)
          items.push({
            kind: 'dlq_growing',
            queue,
            count: n,
            message: `queue ${queue}: ${n} job(s) dead-lettered in the last ${DLQ_WINDOW_MINUTES} minutes (bound ${t.dlqPer15Min})`,
          });
      }
      return { body: { thresholds: t, items } };
    },
  }),
];

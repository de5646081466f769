// Ops routes the console watches: the workers (the registry's processors and the lease holders), and warnings (a
// stale heartbeat, a worker silent while holding jobs, a queue lagging, a DLQ growing) against thresholds that are
// settings (KEEL_WARN_*, KEEL_WORKER_REFRESH_MS).
import type { WorkerInfo } from '../jobs/contract.js';
import type { Settings } from '../config/settings.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

const DLQ_WINDOW_MINUTES = 15;

function thresholds(settings: Settings) {
  return {
    staleHeartbeatMs: settings.KEEL_WARN_STALE_HEARTBEAT_MS,
    queueLagMs: settings.KEEL_WARN_QUEUE_LAG_MS,
    dlqPer15Min: settings.KEEL_WARN_DLQ_PER_15_MIN,
    // A worker refreshes its registry row at most every KEEL_WORKER_REFRESH_MS while it does something: one not seen
    // for twice that is silent (live: seen within it).
    workerSilentMs: 2 * settings.KEEL_WORKER_REFRESH_MS,
    workerRetentionMs: settings.KEEL_WORKER_RETENTION_MS,
  };
}

type Thresholds = ReturnType<typeof thresholds>;

// live: registered and seen within workerSilentMs; silent: registered, not seen since; unregistered: only the
// leases name it (a process that never registered, or whose row was pruned).
function workerStatus(w: WorkerInfo, t: Thresholds): 'live' | 'silent' | 'unregistered' {
  if (!w.registration) return 'unregistered';
  return w.asOf.getTime() - w.registration.lastSeenAt.getTime() <= t.workerSilentMs ? 'live' : 'silent';
}

function describeWorker(w: WorkerInfo, t: Thresholds): Record<string, unknown> {
  const ageMs = w.oldestHeartbeatAt ? Math.max(0, w.asOf.getTime() - w.oldestHeartbeatAt.getTime()) : null;
  const reg = w.registration;
  return {
    workerId: w.workerId,
    status: workerStatus(w, t),
    idle: w.jobsHeld === 0,
    host: reg?.host ?? null,
    instanceId: reg?.instanceId ?? null,
    pid: reg?.pid ?? null,
    appVersion: reg?.appVersion ?? null,
    buildId: reg?.buildId ?? null,
    queuesServed: reg ? reg.queues : null, // null: every queue (or not registered)
    concurrency: reg?.concurrency ?? null,
    jobsDone: reg?.jobsDone ?? null,
    startedAt: reg?.startedAt.toISOString() ?? null,
    lastSeenAt: reg?.lastSeenAt.toISOString() ?? null,
    lastSeenAgeMs: reg ? Math.max(0, w.asOf.getTime() - reg.lastSeenAt.getTime()) : null,
    jobsHeld: w.jobsHeld,
    processing: w.processing,
    queues: w.queues,
    oldestHeartbeatAt: w.oldestHeartbeatAt?.toISOString() ?? null,
    newestHeartbeatAt: w.newestHeartbeatAt?.toISOString() ?? null,
    earliestLeaseExpiresAt: w.earliestLeaseExpiresAt?.toISOString() ?? null,
    heartbeatAgeMs: ageMs,
    stale: ageMs !== null && ageMs > t.staleHeartbeatMs,
  };
}

// The versions the live workers run: one entry per app version and build id, with how many run it.
function liveVersions(
  items: Record<string, unknown>[],
): { appVersion: string; buildId: string | null; workers: number }[] {
  const byKey = new Map<string, { appVersion: string; buildId: string | null; workers: number }>();
  for (const w of items) {
    if (w.status !== 'live') continue;
    const key = `${String(w.appVersion)}\u0000${String(w.buildId)}`;
    const v = byKey.get(key) ?? {
      appVersion: String(w.appVersion),
      buildId: (w.buildId as string | null) ?? null,
      workers: 0,
    };
    v.workers++;
    byKey.set(key, v);
  }
  // The most run first; on a tie the newest version first (numeric-aware: 0.10.0 is newer than 0.9.0).
  return [...byKey.values()].sort(
    (a, b) => b.workers - a.workers || b.appVersion.localeCompare(a.appVersion, 'en', { numeric: true }),
  );
}

export const watchRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/workers',
    operationId: 'listWorkers',
    summary:
      'The job processors: every worker of the registry (host, instance, app version and build, queues served, concurrency, started, last seen; live, silent past twice KEEL_WORKER_REFRESH_MS, kept until KEEL_WORKER_RETENTION_MS) and every lease holder (jobs held, oldest and newest sign of life, earliest lease expiry; stale past KEEL_WARN_STALE_HEARTBEAT_MS). Idle workers (holding nothing) are listed',
    tag: 'stats',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'workers: lease holders first, the stalest first; then the idle, the most recently seen first' },
    async handle({ rt }) {
      const t = thresholds(rt.settings);
      const workers = await rt.store.listWorkers();
      const items = workers.map((w) => describeWorker(w, t));
      return {
        body: {
          thisWorker: rt.workerId,
          thresholds: t,
          counts: {
            live: items.filter((w) => w.status === 'live').length,
            silent: items.filter((w) => w.status === 'silent').length,
            unregistered: items.filter((w) => w.status === 'unregistered').length,
            idle: items.filter((w) => w.status === 'live' && w.idle).length,
          },
          versions: liveVersions(items),
          items,
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/warnings',
    operationId: 'warnings',
    summary:
      'What needs a look: workers with a stale heartbeat, workers silent while holding jobs, queues whose oldest due job waited past a bound, queues dead-lettering fast (thresholds: KEEL_WARN_* settings)',
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
        const d = describeWorker(w, t);
        // Silent while holding jobs: a working process refreshes its row at least every KEEL_WORKER_REFRESH_MS
        // (its jobs' heartbeats do), so this one has died, hangs, or cannot reach the database.
        if (d.status === 'silent' && w.jobsHeld > 0)
          items.push({
            kind: 'stale_worker',
            workerId: w.workerId,
            host: d.host,
            appVersion: d.appVersion,
            queues: w.queues,
            jobsHeld: w.jobsHeld,
            ageMs: d.lastSeenAgeMs,
            message: `worker ${w.workerId} (${String(d.host)}, version ${String(d.appVersion)}) holds ${w.jobsHeld} job(s) but has not reported for ${Math.round(Number(d.lastSeenAgeMs) / 1000)} s (bound ${t.workerSilentMs / 1000} s): it may have died or hung; rescue returns its jobs once the queue's zombie timeout passes`,
          });
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

// The maintenance pass: zombie rescue until quiet, then retention purges, every step bounded in batches so a timer
// that fires twice, or a pass that is cut short, is harmless.
import type { JobStore, PurgeTarget, RescueResult } from './contract.js';
import { LIMITS } from './validate.js';

export interface MaintenanceOptions {
  rescueBatch?: number; // rows per rescue call (default 500)
  purgeBatch?: number; // rows per purge call (default 1000)
  maxBatches?: number; // per step, so one pass stays bounded (default 20)
  now?: Date; // the retention purges' clock (default the store's: storeClock)
  maxAttemptsByType?: Readonly<Record<string, number>>; // the handlers' own limits (HandlerRegistry.maxAttemptsByType())
  auditRetentionDays?: number; // ops audit rows older than this are deleted (default 365, KEEL_OPS_AUDIT_RETENTION_DAYS)
  purge?: boolean; // run the retention purges (default true); false: zombie rescue only
  // Worker registry rows not seen for this long are deleted with the purges (default 1 hour,
  // KEEL_WORKER_RETENTION_MS): processes that died without stopping.
  workerRetentionMs?: number;
}

export const DEFAULT_WORKER_RETENTION_MS = 3_600_000;

export const DEFAULT_AUDIT_RETENTION_DAYS = 365;

export interface MaintenanceReport {
  rescued: RescueResult;
  purged: Record<PurgeTarget, number>;
  auditPurged: number; // ops audit rows past their retention
  workersPruned: number; // worker registry rows not seen within KEEL_WORKER_RETENTION_MS
  batches: number;
  durationMs: number;
  complete: boolean; // false when a step hit maxBatches: more work is left for the next pass
  purgeRan: boolean; // false: the purges were not due this pass (MaintenanceOptions.purge)
}

export interface PurgeRun {
  deleted: number;
  batches: number;
  mayHaveMore: boolean; // the budget ran out with the last batch full
}

// Deletes `target` rows older than `olderThan` (one queue, or every queue when null) in calls of batchSize rows,
// at most maxBatches calls, so one run stays bounded. The maintenance pass and the ops API's purge both use it.
export async function purgeInBatches(
  store: JobStore,
  target: PurgeTarget,
  queue: string | null,
  olderThan: Date,
  batchSize: number,
  maxBatches: number,
): Promise<PurgeRun> {
  let deleted = 0;
  let batches = 0;
  let last = 0;
  while (batches < maxBatches) {
    last = await store.purge(target, queue, olderThan, batchSize);
    batches++;
    deleted += last;
    if (last < batchSize) break;
  }
  return { deleted, batches, mayHaveMore: batches === 0 ? maxBatches === 0 : last === batchSize };
}

// What a purge of target older than olderThan would delete now, deleting nothing: archive and DLQ rows counted in
// SQL up to cap (exact, else "at least"); metric buckets counted among those of the longest metrics window, the
// only ones the store returns. Shared by the purge's dry run and the preview of a lowered retention.
export type PurgePreview =
  | { kind: 'rows'; matched: number; exact: boolean; asOf: Date }
  | { kind: 'buckets'; matched: number; windowMinutes: number };

export async function previewPurge(
  store: JobStore,
  target: PurgeTarget,
  queue: string | null,
  olderThan: Date,
  cap: number,
): Promise<PurgePreview> {
  if (target === 'metrics') {
    const windowMinutes = LIMITS.metricsWindowMinutes;
    const buckets = await store.metrics(windowMinutes, queue ?? undefined);
    return { kind: 'buckets', matched: buckets.filter((b) => b.bucketStart < olderThan).length, windowMinutes };
  }
  const counted = await store.countJobs({ location: target, to: olderThan, cap, ...(queue ? { queue } : {}) });
  return { kind: 'rows', matched: counted.matched, exact: counted.exact, asOf: counted.asOf };
}

// The store's clock (its database server's), as a bounded count answers it (asOf) on every engine: a count of at
// most one dead letter, one short read.
export async function storeClock(store: JobStore): Promise<Date> {
  return (await store.countJobs({ location: 'dlq', cap: 1 })).asOf;
}

export async function runMaintenance(store: JobStore, opts: MaintenanceOptions = {}): Promise<MaintenanceReport> {
  const started = Date.now();
  const rescueBatch = opts.rescueBatch ?? 500;
  const purgeBatch = opts.purgeBatch ?? 1000;
  const maxBatches = opts.maxBatches ?? 20;
  const rescued: RescueResult = { releasedFetched: 0, retried: 0, deadLettered: 0, expired: 0 };
  const purged: Record<PurgeTarget, number> = { archive: 0, dlq: 0, metrics: 0 };
  let batches = 0;
  let complete = true;

  for (let i = 0; ; i++) {
    if (i >= maxBatches) {
      complete = false;
      break;
    }
    const r = await store.rescueZombies(rescueBatch, opts.maxAttemptsByType);
    batches++;
    rescued.releasedFetched += r.releasedFetched;
    rescued.retried += r.retried;
    rescued.deadLettered += r.deadLettered;
    rescued.expired += r.expired;
    const moved = Math.max(r.releasedFetched, r.retried + r.deadLettered, r.expired);
    if (moved < rescueBatch) break;
  }

  const purgeRan = opts.purge ?? true;
  // The retention cutoffs are the store's clock (the database server's, which wrote every finished_at, failed_at,
  // bucket minute, audit time and worker's last_seen_at), read once a pass, not this host's: a host whose clock ran
  // ahead of the server's purged rows before their retention (and pruned live workers), by as much as it was ahead.
  const now = opts.now ?? (purgeRan ? await storeClock(store) : new Date());
  for (const queue of purgeRan ? await store.listQueues() : []) {
    const cutoffs: [PurgeTarget, number][] = [
      ['archive', queue.archiveRetentionSeconds],
      ['dlq', queue.dlqRetentionSeconds],
      ['metrics', queue.metricsRetentionSeconds],
    ];
    for (const [target, seconds] of cutoffs) {
      const olderThan = new Date(now.getTime() - seconds * 1000);
      const run = await purgeInBatches(store, target, queue.name, olderThan, purgeBatch, maxBatches);
      batches += run.batches;
      purged[target] += run.deleted;
      if (run.mayHaveMore) complete = false;
    }
  }

  // The ops audit trail: one retention for the whole table (the audit is not per queue); with the other purges.
  const auditCutoff = new Date(now.getTime() - (opts.auditRetentionDays ?? DEFAULT_AUDIT_RETENTION_DAYS) * 86_400_000);
  let auditPurged = 0;
  for (let i = 0; purgeRan; i++) {
    if (i >= maxBatches) {
      complete = false;
      break;
    }
    const n = await store.purgeAudit(auditCutoff, purgeBatch);
    batches++;
    auditPurged += n;
    if (n < purgeBatch) break;
  }
  // The worker registry: one delete of the rows not seen lately (a row per process: small), with the other purges.
  let workersPruned = 0;
  if (purgeRan) {
    const retention = opts.workerRetentionMs ?? DEFAULT_WORKER_RETENTION_MS;
    workersPruned = await store.pruneWorkers(new Date(now.getTime() - retention));
    batches++;
  }
  return { rescued, purged, auditPurged, workersPruned, batches, durationMs: Date.now() - started, complete, purgeRan };
}

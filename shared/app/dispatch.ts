// What the timers do, kept out of functions/ so the functions stay thin and tests can call it directly.
import { runMaintenance, type MaintenanceReport } from '../jobs/maintenance.js';
import { runSchedules, type SchedulePassItem } from '../jobs/scheduler.js';
import type { JobOutcome } from '../jobs/processor.js';
import { postJobs, type Logger } from './jobs.js';
import type { Runtime } from './runtime.js';
import { maintenanceTelemetry, reconcileTelemetry, scheduleFailedTelemetry } from './telemetryHooks.js';
import { isStalled, resumeStalled } from './transfers.js';
import { baseTransferName } from '../transfer/service.js';

export interface DispatchResult {
  mode: 'run' | 'post';
  queues: number;
  processed: number;
  outcomes: Partial<Record<JobOutcome, number>>;
  posted: number;
  durationMs: number;
}

async function dispatchQueues(rt: Runtime): Promise<string[]> {
  if (rt.settings.KEEL_DISPATCH_QUEUES.length > 0) return rt.settings.KEEL_DISPATCH_QUEUES;
  return (await rt.store.listQueues()).filter((q) => !q.paused).map((q) => q.name);
}

export async function dispatchDueJobs(rt: Runtime, log: Logger): Promise<DispatchResult> {
  const started = Date.now();
  const queues = await dispatchQueues(rt);
  const mode = rt.settings.KEEL_DISPATCH_MODE;
  if (queues.length === 0)
    return { mode, queues: 0, processed: 0, outcomes: {}, posted: 0, durationMs: Date.now() - started };
  if (mode === 'run') {
    const r = await rt.processor.drain({
      queues,
      budgetMs: rt.settings.KEEL_DISPATCH_BUDGET_MS,
      concurrency: rt.settings.KEEL_DISPATCH_CONCURRENCY,
    });
    const outcomes = Object.fromEntries(Object.entries(r.outcomes).filter(([, n]) => n > 0));
    return {
      mode,
      queues: queues.length,
      processed: r.processed,
      outcomes,
      posted: 0,
      durationMs: Date.now() - started,
    };
  }
  // post: claim (which honours pause, global max concurrency and due time), release, and post the ids, so the
  // queue-triggered runner scales out with the storage queue. Claims are short: a crash between claim and release
  // leaves fetched rows that zombie rescue returns to pending when their lease expires.
  const claimed = await rt.store.claimNext({
    workerId: rt.workerId,
    queues,
    limit: rt.settings.KEEL_DISPATCH_POST_LIMIT,
    leaseSeconds: rt.settings.KEEL_LEASE_SECONDS,
  });
  const released: string[] = [];
  for (const job of claimed) {
    if ((await rt.store.release({ jobId: job.id, leaseId: job.leaseId })) === 'ok') released.push(job.id);
  }
  const posted = await postJobs(rt, released, log);
  return {
    mode,
    queues: queues.length,
    processed: 0,
    outcomes: { released: released.length },
    posted,
    durationMs: Date.now() - started,
  };
}

export interface MaintenancePassReport {
  jobs: MaintenanceReport;
  transfers: { reconciled: number; detail: unknown } | 'not configured';
}

export async function runMaintenancePass(rt: Runtime, log: Logger): Promise<MaintenancePassReport> {
  const started = Date.now();
  let jobs: MaintenanceReport;
  try {
    jobs = await runMaintenance(rt.store, {
      rescueBatch: rt.settings.KEEL_MAINT_RESCUE_BATCH,
      purgeBatch: rt.settings.KEEL_MAINT_PURGE_BATCH,
      maxBatches: rt.settings.KEEL_MAINT_MAX_BATCHES,
      maxAttemptsByType: rt.registry.maxAttemptsByType(),
    });
  } catch (err) {
    maintenanceTelemetry(null, Date.now() - started, null);
    throw err;
  }
  const stats = await rt.store.stats().catch(() => null);
  maintenanceTelemetry(jobs, Date.now() - started, stats);
  let transfers: MaintenancePassReport['transfers'] = 'not configured';
  if (rt.transfers) {
    try {
      const views = await rt.transfers.reconcileStale(
        rt.settings.KEEL_TRANSFER_STALE_MS,
        rt.settings.KEEL_TRANSFER_RECONCILE_LIMIT,
      );
      const resumed = new Set<string>();
      for (const v of views) {
        reconcileTelemetry(v);
        // Known not applied and stuck (its retry chain ended or its message was lost): post it again now rather
        // than at the next transfer timer tick.
        if (
          isStalled(rt, v) &&
          !(await rt.transfers.isPaused(baseTransferName(v.transfer))) &&
          (await resumeStalled(rt, v, log))
        )
          resumed.add(v.batchId);
      }
      transfers = {
        reconciled: views.length,
        detail: views.map((v) => ({
          batchId: v.batchId,
          transfer: v.transfer,
          state: v.state,
          status: v.status,
          ...(resumed.has(v.batchId) ? { resumed: true } : {}),
        })),
      };
    } catch (err) {
      // Job maintenance already ran (and is reported above); a transfer target being down fails this run visibly.
      log.error(`maintenance: reconciling stale transfer batches failed: ${(err as Error).message}`);
      throw err;
    }
  }
  return { jobs, transfers };
}

// A pass that rescued, purged and reconciled nothing and left no work for the next one: the usual pass of an idle
// app, logged at debug (like the Functions host at its default level, the local host drops it) instead of one line
// at information every pass.
export function maintenanceDidNothing(report: MaintenancePassReport): boolean {
  const { jobs, transfers } = report;
  const counts = [...Object.values(jobs.rescued), ...Object.values(jobs.purged)];
  return (
    jobs.complete && counts.every((n) => n === 0) && (transfers === 'not configured' || transfers.reconciled === 0)
  );
}

export interface SchedulerPassReport {
  schedules: SchedulePassItem[];
  enqueued: number;
  posted: number;
}

// The scheduler timer: enqueue the due ticks of every recurring schedule (exactly once across instances), then post
// the new jobs' messages so the queue runner starts them at once (the dispatcher covers a lost message).
export async function runSchedulerPass(rt: Runtime, log: Logger, now: Date = new Date()): Promise<SchedulerPassReport> {
  const schedules = await runSchedules(rt.store, rt.registry, rt.schedules, now);
  for (const s of schedules) {
    if (s.status !== 'failed') continue;
    // The other schedules of the pass ran; this one is tried again next pass (its last tick did not move).
    log.error(`schedule ${s.name} failed in this pass (the other schedules ran; retried next pass): ${s.error}`);
    scheduleFailedTelemetry(s.name);
  }
  const ids = schedules.flatMap((s) => s.enqueued);
  const posted = ids.length ? await postJobs(rt, ids, log) : 0;
  return { schedules, enqueued: ids.length, posted };
}

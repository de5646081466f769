// The timer passes (dispatcher, maintenance, scheduler): what the timers do, kept out of functions/ so the functions
// stay thin and tests can call it directly.
import { runMaintenance, type MaintenanceReport } from '../jobs/maintenance.js';
import { ncrontab, type Ncrontab } from './ncrontab.js';
import { runSchedules, type ScheduleMemory, type SchedulePassItem } from '../jobs/scheduler.js';
import type { ScheduleDefinition } from '../jobs/define.js';
import type { JobOutcome } from '../jobs/processor.js';
import { postJobs, postWhenDue, type Logger } from './enqueue.js';
import { handOnDrained, pickAndPost } from './slots.js';
import type { Runtime } from './runtime.js';
import { maintenanceTelemetry, reconcileTelemetry, scheduleFailedTelemetry } from './telemetryHooks.js';
import { isStalled, resumeStalled } from './transferSteps.js';
import { baseTransferName } from '../transfer/chains.js';
import { JOURNAL_LIMIT_MAX } from '../transfer/journalProcedures.js';

export interface DispatchResult {
  mode: 'run' | 'post';
  queues: number;
  processed: number;
  outcomes: Partial<Record<JobOutcome, number>>;
  posted: number;
  durationMs: number;
}

// The probe: one store call (stats: per queue, how many pending jobs are due, from the counters and an index seek per
// priority level) names the queues with work due now; with none, the tick ends there, so an idle tick costs the
// database that one call. Only queues with due jobs are claimed from (the claim itself skips a paused queue or one at
// its concurrency limit), and a queue created a moment ago is seen at once.
async function dispatchQueues(rt: Runtime): Promise<string[]> {
  const only = rt.settings.KEEL_DISPATCH_QUEUES;
  const due = (await rt.store.stats()).filter((q) => q.due > 0).map((q) => q.queue);
  return only.length > 0 ? due.filter((q) => only.includes(q)) : due;
}

export async function dispatchDueJobs(rt: Runtime, log: Logger): Promise<DispatchResult> {
  const started = Date.now();
  // The timer instance's worker stays listed while idle: its row is refreshed by this pass when due (at most once per
  // KEEL_WORKER_REFRESH_MS; presence.ts), not by a timer of its own.
  rt.processor.touchPresence();
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
    // Jobs it retried or handed back are pending again, due at their next attempt: each one's message is posted
    // delayed to then (by the store's clock), so the queue runner starts it on time instead of the dispatcher's
    // next tick (a minute later by default).
    let posted = r.rescheduled.length > 0 ? await postWhenDue(rt, r.rescheduled, log) : 0;
    // The drain's jobs are all finished now: a limited queue whose due jobs it left (its budget ran out) has free
    // slots nobody is about to fill; hand them on to the queue runner now, not at the next tick (shared/app/slots.ts).
    if (r.processed > 0) posted += await handOnDrained(rt, queues, log);
    return {
      mode,
      queues: queues.length,
      processed: r.processed,
      outcomes,
      posted,
      durationMs: Date.now() - started,
    };
  }
  // Nothing runs here and nothing is claimed: the picked jobs stay pending for the runners their messages reach.
  const { posted } = await postDueJobs(rt, queues, log);
  return {
    mode,
    queues: queues.length,
    processed: 0,
    outcomes: {},
    posted,
    durationMs: Date.now() - started,
  };
}

// Post the messages of jobs due now in `queues`, at most KEEL_DISPATCH_POST_LIMIT: the jobs a claim would take (pause,
// global max concurrency and due time honoured), picked without claiming them (store.pickDue: they stay pending), so
// the queue-triggered runner scales out with the storage queue and claims each by id. The dispatcher's post mode, and
// a queue resumed or given more concurrency over the ops API (its due jobs' messages were acknowledged while it could
// not run them).
export async function postDueJobs(
  rt: Runtime,
  queues: string[],
  log: Logger,
): Promise<{ picked: number; posted: number }> {
  return pickAndPost(rt, queues, rt.settings.KEEL_DISPATCH_POST_LIMIT, log);
}

export interface MaintenancePassReport {
  jobs: MaintenanceReport;
  // stagingPurged: batches that can never be applied again whose staged rows were still on the target (purged now).
  // detail: each reconciled batch, and each `extracting` batch re-posted (resumed: true).
  transfers: { reconciled: number; detail: unknown; stagingPurged: number } | 'not configured';
}

// When this runtime last ran the retention purges, and whether that run left more behind.
const lastPurges = new WeakMap<Runtime, { at: number; more: boolean }>();

export async function runMaintenancePass(rt: Runtime, log: Logger): Promise<MaintenancePassReport> {
  const started = Date.now();
  const last = lastPurges.get(rt);
  const purge = !last || last.more || started - last.at >= rt.settings.KEEL_MAINT_PURGE_INTERVAL_MS;
  let jobs: MaintenanceReport;
  try {
    jobs = await runMaintenance(rt.store, {
      rescueBatch: rt.settings.KEEL_MAINT_RESCUE_BATCH,
      purgeBatch: rt.settings.KEEL_MAINT_PURGE_BATCH,
      maxBatches: rt.settings.KEEL_MAINT_MAX_BATCHES,
      maxAttemptsByType: rt.registry.maxAttemptsByType(),
      auditRetentionDays: rt.settings.KEEL_OPS_AUDIT_RETENTION_DAYS,
      workerRetentionMs: rt.settings.KEEL_WORKER_RETENTION_MS,
      purge,
    });
  } catch (err) {
    maintenanceTelemetry(null, Date.now() - started, null);
    throw err;
  }
  if (purge) lastPurges.set(rt, { at: started, more: !jobs.complete });
  const stats = await rt.store.stats().catch(() => null);
  maintenanceTelemetry(jobs, Date.now() - started, stats);
  let transfers: MaintenancePassReport['transfers'] = 'not configured';
  if (rt.transfers) {
    try {
      const views = await rt.transfers.reconcileStale(
        rt.settings.KEEL_TRANSFER_STALE_MS,
        rt.settings.KEEL_TRANSFER_RECONCILE_LIMIT,
      );
      // "No progress for KEEL_TRANSFER_STALE_MS" on the journal's clock, the clock of the batch stamps (a host's may be
      // off the journal server's by more than that: behind it, nothing was ever stalled; ahead, a batch that had just
      // moved was; test/functions/transferClockSkew.test.ts).
      const journalNow = await rt.transfers.journalNow();
      const resumed = new Set<string>();
      for (const v of views) {
        reconcileTelemetry(v, journalNow);
        // Known not applied and stuck (its retry chain ended or its message was lost): post it again now rather
        // than at the next transfer timer tick.
        if (
          isStalled(rt, v, journalNow) &&
          !(await rt.transfers.isPaused(baseTransferName(v.transfer))) &&
          (await resumeStalled(rt, v, log))
        )
          resumed.add(v.batchId);
      }
      // Batches still `extracting` (nothing to reconcile) whose stage message was lost or whose retry chain ended:
      // before, only the transfer timer re-posted one, and only for a transfer it starts (KEEL_SCHEDULED_TRANSFERS)
      // under its own name, so an operator's start, a replay or a re-baseline stayed open for ever. Skipped: a paused
      // transfer's, and one of a transfer no longer configured (left to the operator: its stage step poisons the
      // message and touches nothing, so it would be posted at every pass). Those stay untouched, so the oldest: the
      // read goes to the journal's list bound (open batches are about one per transfer and replay), so that they
      // never hide the others; at most RECONCILE_LIMIT are posted per pass.
      const configured = new Set(rt.transfers.listTransfers().map((t) => t.name));
      const extracting = await rt.transfers.staleExtracting(rt.settings.KEEL_TRANSFER_STALE_MS, JOURNAL_LIMIT_MAX);
      let reposted = 0;
      for (const v of extracting) {
        if (reposted >= rt.settings.KEEL_TRANSFER_RECONCILE_LIMIT) break;
        const name = baseTransferName(v.transfer);
        if (
          configured.has(name) &&
          isStalled(rt, v, journalNow) &&
          !(await rt.transfers.isPaused(name)) &&
          (await resumeStalled(rt, v, log))
        ) {
          resumed.add(v.batchId);
          reposted++;
        }
      }
      // After reconcile (which may have just ended some batches): staged rows no run can apply any more.
      const staging = await rt.transfers.purgeTerminalStaging();
      if (staging.errors > 0)
        log.warn(`maintenance: ${staging.errors} transfer staging purge(s) failed; the next pass tries again`);
      transfers = {
        stagingPurged: staging.purged.length,
        reconciled: views.length,
        detail: [...views, ...extracting.filter((v) => resumed.has(v.batchId))].map((v) => ({
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
  const counts = [...Object.values(jobs.rescued), ...Object.values(jobs.purged), jobs.auditPurged, jobs.workersPruned];
  return (
    jobs.complete &&
    counts.every((n) => n === 0) &&
    (transfers === 'not configured' ||
      (transfers.reconciled === 0 && transfers.stagingPurged === 0 && (transfers.detail as unknown[]).length === 0))
  );
}

export interface SchedulerPassReport {
  schedules: SchedulePassItem[];
  enqueued: number;
  posted: number;
}

const scheduleMemories = new WeakMap<Runtime, ScheduleMemory>();
const warnedFine = new WeakSet<Runtime>();

// The shortest gap between two firings of a six-field cron, over its next few firings (ms; Infinity if it never fires).
export function shortestGapMs(cron: Ncrontab, from: Date = new Date()): number {
  const runs = cron.nextN(8, from);
  let gap = Infinity;
  for (let i = 1; i < runs.length; i++) gap = Math.min(gap, runs[i]!.getTime() - runs[i - 1]!.getTime());
  return gap;
}

// Schedules that tick more often than the scheduler timer fires (KEEL_SCHEDULER_SCHEDULE, a minute by default): their
// ticks are enqueued late, several at a pass, or missed past their grace period. Named once per runtime.
export function schedulesFinerThanTimer(rt: Runtime): ScheduleDefinition[] {
  const timerGap = shortestGapMs(ncrontab(rt.settings.KEEL_SCHEDULER_SCHEDULE));
  return rt.schedules.filter((def) => shortestGapMs(ncrontab(def.cron, def.timeZone)) < timerGap);
}

// The scheduler timer: enqueue the due ticks of every recurring schedule (exactly once across instances), then post
// the new jobs' messages so the queue runner starts them at once (the dispatcher covers a lost message). What it last
// saw of each schedule is kept per runtime, so a pass with no tick due makes no database call.
export async function runSchedulerPass(rt: Runtime, log: Logger, now: Date = new Date()): Promise<SchedulerPassReport> {
  if (!warnedFine.has(rt)) {
    warnedFine.add(rt);
    const fine = schedulesFinerThanTimer(rt);
    if (fine.length > 0)
      log.warn(
        `schedules ${fine.map((d) => d.name).join(', ')} tick more often than the scheduler timer fires (KEEL_SCHEDULER_SCHEDULE=${rt.settings.KEEL_SCHEDULER_SCHEDULE}): their ticks are enqueued late or missed; set KEEL_SCHEDULER_SCHEDULE to fire as often as the finest schedule (e.g. "* * * * * *")`,
      );
  }
  let memory = scheduleMemories.get(rt);
  if (!memory) scheduleMemories.set(rt, (memory = new Map()));
  const schedules = await runSchedules(rt.store, rt.registry, rt.schedules, now, memory);
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

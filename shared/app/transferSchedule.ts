// The transfer timer's pass (functions/transferTimer.ts): scheduled starts, stalled batches resumed, the freshness
// gauge, scheduled key-set comparisons.
import { ncrontab } from './ncrontab.js';
import { describeError, isTransferError } from '../transfer/errors.js';
import { telemetry } from '../telemetry/index.js';
import type { Logger } from './enqueue.js';
import { reportFreshness } from './freshness.js';
import type { Runtime } from './runtime.js';
import { isStalled, postStage, resumeStalled } from './transferSteps.js';

// Names the timer starts: KEEL_SCHEDULED_TRANSFERS, "*" for every configured transfer.
export function scheduledTransfers(rt: Runtime): string[] {
  if (!rt.transfers) return [];
  const configured = rt.transfers.listTransfers().map((t) => t.name);
  const wanted = rt.settings.KEEL_SCHEDULED_TRANSFERS;
  if (wanted.includes('*')) return configured;
  return wanted.filter((n) => configured.includes(n));
}

export interface TimerStep {
  transfer: string;
  action: 'created' | 'resumed' | 'nothing_new' | 'open_batch_busy' | 'paused' | 'not_due' | 'error';
  batchId?: string;
  detail?: string;
}

// A transfer with its own schedule is due when its cron has an occurrence after its newest batch was created (or
// it has none) and not after now (the journal's clock, like createdAt). The transfer timer must fire at least as often as the finest schedule.
export function scheduleDue(cron: string, lastCreatedAt: string | undefined, now: Date): boolean {
  if (!lastCreatedAt) return true;
  const next = ncrontab(cron, 'UTC').next(new Date(lastCreatedAt));
  return next !== null && next.getTime() <= now.getTime();
}

// One pass of the transfer timer, per scheduled transfer that is not paused: when a retryable batch is open and
// has made no progress for KEEL_TRANSFER_STALE_MS (its retry chain ended, its message was lost or poisoned), that
// batch is re-posted ("progress" is read from the batch's step stamps, which reconcile never moves; updated_at it
// does); when none is open and the transfer's schedule is due (its own cron, or every tick), a new batch is
// created and posted (catch-up then goes on from its commit).
//
// Every age is measured on the journal's clock, the clock of the batch stamps (a host's may be off the journal
// server's by hours: behind it, a stalled batch waited hours more and a schedule fired late; ahead, the reverse):
// `journal` is the journal server's now, read once a pass, moved by as much as `at` is off the host's clock (a
// test passes a later `at` to act as if that much time had passed).
export async function runTransferSchedule(rt: Runtime, log: Logger, at?: Date): Promise<TimerStep[]> {
  const now = at ?? new Date(Date.now());
  const service = rt.transfers;
  if (!service) return [];
  const steps: TimerStep[] = [];
  const schedules = new Map(service.listTransfers().map((t) => [t.name, t.schedule]));
  let paused: Set<string>;
  let journal: Date;
  try {
    paused = await service.pausedTransfers();
    const hostBefore = Date.now(); // before the read: a test's `at` at a schedule's occurrence stays at or after it
    journal = new Date((await service.journalNow()) + (at ? at.getTime() - hostBefore : 0));
  } catch (err) {
    log.error(`transfer timer: reading the transfer controls failed: ${(err as Error).message}`);
    return scheduledTransfers(rt).map((transfer) => ({ transfer, action: 'error', detail: (err as Error).message }));
  }
  for (const name of scheduledTransfers(rt)) {
    if (paused.has(name)) {
      steps.push({ transfer: name, action: 'paused' });
      continue;
    }
    try {
      const recent = await service.listBatches({ transfer: name, limit: 5 });
      const open = recent.find((b) => b.status !== 'committed' && b.state !== 'failed');
      if (open) {
        if (isStalled(rt, open, journal.getTime())) {
          await resumeStalled(rt, open, log);
          steps.push({ transfer: name, action: 'resumed', batchId: open.batchId });
        } else steps.push({ transfer: name, action: 'open_batch_busy', batchId: open.batchId });
        continue;
      }
      const cron = schedules.get(name);
      if (cron && !scheduleDue(cron, recent[0]?.createdAt, journal)) {
        steps.push({ transfer: name, action: 'not_due' });
        continue;
      }
      let created;
      try {
        created = await service.createBatch(name);
      } catch (err) {
        // Told apart as catch-up does (catchUp.ts): only "no new rows" is caught up (the freshness gauge); a batch
        // another run holds (another instance's start, or a replay a timestamp or rowversion window waits for) is
        // not, nor a pause that came after the read above.
        if (isTransferError(err, 'nothing_to_transfer')) steps.push({ transfer: name, action: 'nothing_new' });
        else if (isTransferError(err, 'open_batch_exists') || isTransferError(err, 'window_taken')) {
          const other = (err.detail as { batchId?: unknown } | undefined)?.batchId;
          steps.push({
            transfer: name,
            action: 'open_batch_busy',
            ...(typeof other === 'string' ? { batchId: other } : {}),
          });
        } else if (isTransferError(err, 'transfer_paused')) steps.push({ transfer: name, action: 'paused' });
        else throw err;
        continue;
      }
      await postStage(rt, created.batchId, log);
      steps.push({ transfer: name, action: 'created', batchId: created.batchId });
    } catch (err) {
      log.error(`transfer ${name}: scheduled start failed: ${(err as Error).message}`);
      steps.push({ transfer: name, action: 'error', detail: (err as Error).message });
      telemetry.transferStartFailed({
        transfer: name,
        source: 'timer',
        code: describeError(err).code,
        message: (err as Error).message,
      });
    }
  }
  if (steps.length > 0) await reportFreshness(rt, steps, now, journal, log);
  await runScheduledKeyCompares(rt, log, now);
  return steps;
}

// A transfer's keyCompareSchedule is due at the tick after one of its occurrences: an occurrence in (the transfer
// timer's previous tick, now]. (A tick the host skipped skips that comparison too: the next occurrence runs it.)
export function keyCompareDue(cron: string, timerCron: string, now: Date): boolean {
  const previousTick = ncrontab(timerCron, 'UTC').previous(new Date(now.getTime() - 1000));
  if (!previousTick) return false;
  const next = ncrontab(cron, 'UTC').next(previousTick);
  return next !== null && next.getTime() <= now.getTime();
}

// The scheduled key-set comparisons (docs/transfer.md "Deletes"): each due transfer that is not paused (the option
// is its own opt-in: KEEL_SCHEDULED_TRANSFERS need not list it) compares its committed key windows, deleting only with keyCompare 'apply', and reports what it found as a
// keel.transfer.keys_gone event (alert transfer-keys-gone when keys gone at the source stay on the target).
async function runScheduledKeyCompares(rt: Runtime, log: Logger, now: Date): Promise<void> {
  const service = rt.transfers!;
  const due = service
    .listTransfers()
    .filter(
      (t) =>
        t.keyCompareSchedule !== null && keyCompareDue(t.keyCompareSchedule, rt.settings.KEEL_TRANSFER_SCHEDULE, now),
    );
  if (due.length === 0) return;
  const paused = await service.pausedTransfers().catch(() => new Set<string>(due.map((t) => t.name)));
  for (const t of due) {
    if (paused.has(t.name)) continue;
    try {
      const r = await service.compareKeys(t.name, { apply: t.keyCompare === 'apply' });
      telemetry.transferKeysGone({
        transfer: t.name,
        windows: r.windows.length,
        goneAtSource: r.goneAtSource,
        deleted: r.deleted,
        applied: r.applied,
      });
      const msg = `transfer ${t.name}: scheduled key comparison: ${r.goneAtSource} target keys gone at the source in ${r.windows.length} windows, ${r.deleted} deleted`;
      if (r.goneAtSource > r.deleted) log.warn(msg);
      else log.info(msg);
    } catch (err) {
      log.error(`transfer ${t.name}: scheduled key comparison failed: ${(err as Error).message}`);
    }
  }
}

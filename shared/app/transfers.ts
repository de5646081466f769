// Transfer plumbing for the functions: building the service from settings, and the queue steps
// (stage queue -> apply queue), each claiming the batch by id through the journal's state machine.
import type { Settings } from '../config/settings.js';
import { Cron } from 'croner';
import { baseTransferName } from '../transfer/chains.js';
import type { TransferService } from '../transfer/service.js';
import { lastProgressAt, type BatchView } from '../transfer/view.js';
import { describeError } from '../transfer/errors.js';
import { telemetry } from '../telemetry/index.js';
import { isTransferError } from '../transfer/errors.js';
import { loadTransfers } from '../transfer/config.js';
import { parseBaselineBound } from '../transfer/changes.js';
import type { TransferJournal } from '../transfer/journal.js';
import { composeTransferService } from './transferAdapters.js';
import { engineNamed, transferEngineRules } from '../engines/registry.js';
import type { Logger } from './enqueue.js';
import type { Runtime } from './runtime.js';
import type { AppEnv } from './environment.js';
import { parseMessage, poison, transferMessageSchema } from './messages.js';
import type { InvocationContext } from '@azure/functions';

export interface TransferMessage {
  batchId: string;
  retry?: number; // the n-th delayed re-post in a row (see scheduleRetry)
  afterAttempt?: number; // the batch's apply attempts when this was posted: a later attempt makes it moot
  chainRows?: number; // rows committed by the catch-up chain before this batch
  chainStartedAt?: number; // epoch ms the catch-up chain started (its first batch's creation)
}

// The catch-up chain a message belongs to, as the queue steps pass it on (next step, retries).
export type ChainState = Pick<TransferMessage, 'chainRows' | 'chainStartedAt'>;

export function chainOf(m: ChainState): ChainState {
  const c: ChainState = {};
  if (m.chainRows !== undefined) c.chainRows = m.chainRows;
  if (m.chainStartedAt !== undefined) c.chainStartedAt = m.chainStartedAt;
  return c;
}

// Builds the service when transfers are configured (KEEL_TRANSFERS / KEEL_TRANSFERS_FILE); null otherwise.
// The batch journal lives in the control database, beside the jobs.
export async function createTransferService(settings: Settings, env: AppEnv): Promise<TransferService | null> {
  // Parsed once here, and handed on.
  const transfers = loadTransfers(transferEngineRules(), env);
  if (transfers.length === 0) return null;
  // The batch journal lives in the control database, beside the jobs: the job store's engine opens it.
  const control = engineNamed(settings.KEEL_STORE_ENGINE);
  if (!control.openJournal) throw new Error(`KEEL_STORE_ENGINE=${control.name} cannot hold the transfer journal`);
  const journal: TransferJournal = await control.openJournal(settings);
  const created = composeTransferService(journal, env, transfers, {
    directApply: settings.KEEL_TRANSFER_DIRECT_APPLY,
  });
  if (!created) {
    await journal.close();
    return null;
  }
  return created.service;
}

export async function postStage(
  rt: Runtime,
  batchId: string,
  log: Logger,
  extra: Omit<TransferMessage, 'batchId'> = {},
): Promise<boolean> {
  try {
    await rt.queues.send(rt.settings.KEEL_TRANSFER_STAGE_QUEUE, { batchId, ...extra } satisfies TransferMessage);
    return true;
  } catch (err) {
    log.warn(
      `batch ${batchId}: posting to ${rt.settings.KEEL_TRANSFER_STAGE_QUEUE} failed (the transfer timer resumes it): ${(err as Error).message}`,
    );
    return false;
  }
}

export async function postApply(
  rt: Runtime,
  batchId: string,
  extra: Omit<TransferMessage, 'batchId'> = {},
): Promise<void> {
  await rt.queues.send(rt.settings.KEEL_TRANSFER_APPLY_QUEUE, { batchId, ...extra } satisfies TransferMessage);
}

// A full window: the source probably has more. A windowed baseline's key window counts as full whatever its rows
// (rows deleted since it was chosen), and so does its last one (its low is a key window's top): the change windows
// after it hold what changed during the baseline (shared/transfer/changes.ts).
function windowFull(view: BatchView, batchSize: number): boolean {
  return (
    (view.rowCount ?? 0) >= batchSize ||
    parseBaselineBound(view.boundary.high) !== null ||
    parseBaselineBound(view.boundary.low) !== null
  );
}

export type CatchUpStep =
  | { action: 'next'; batchId: string; chainRows: number; chainStartedAt: number }
  | { action: 'window_not_full' | 'budget_spent' | 'off' | 'nothing_new' | 'paused' }
  | { action: 'error'; detail: string };

// Catch-up: a commit whose window was full (at least batchSize rows) means the source probably has more, so the
// next batch is created and posted at once instead of at the next timer tick, until the chain has committed
// KEEL_TRANSFER_CATCHUP_ROWS rows or has run for KEEL_TRANSFER_CATCHUP_MS since its first batch was created (the
// timer's next tick starts a new chain). Only the step that moved the batch to committed continues the chain, so a
// duplicate apply message does not start a second one.
export async function continueCatchUp(
  rt: Runtime,
  view: BatchView,
  chain: ChainState,
  log: Logger,
  now: () => number = Date.now,
): Promise<CatchUpStep> {
  const service = rt.transfers;
  if (!service) return { action: 'off' };
  const t = service.listTransfers().find((x) => x.name === view.transfer);
  if (!t) return { action: 'off' }; // a replay batch (its own chain): no catch-up, no freshness
  const full = windowFull(view, t.batchSize);
  // A window that was not full: the target has caught up with the source as of now. A full one: more is waiting,
  // and the target is as fresh as this commit, with the rows after it still to come (counted once the next batch
  // is on its way, so that the count does not hold up the chain).
  if (!full) telemetry.transferFreshness({ transfer: view.transfer, behindSince: null });
  const step = await nextInChain(rt, view, t.batchSize, chain, log, now());
  if (full)
    telemetry.transferFreshness(
      step.action === 'nothing_new' // the full window was the last of the source's rows
        ? { transfer: view.transfer, behindSince: null }
        : {
            transfer: view.transfer,
            behindSince: Date.parse(view.committedAt ?? new Date().toISOString()),
            rowsBehind: await countRowsBehind(rt, view.transfer, log),
          },
    );
  return step;
}

async function nextInChain(
  rt: Runtime,
  view: BatchView,
  batchSize: number,
  chain: ChainState,
  log: Logger,
  now: number,
): Promise<CatchUpStep> {
  const service = rt.transfers!;
  const rows = view.rowCount ?? 0;
  const full = windowFull(view, batchSize);
  const budget = rt.settings.KEEL_TRANSFER_CATCHUP_ROWS;
  if (budget === 0) return { action: 'off' };
  if (!full) return { action: 'window_not_full' };
  const total = (chain.chainRows ?? 0) + rows;
  if (total >= budget) {
    log.info(
      `transfer ${view.transfer}: catch-up chain committed ${total} rows (KEEL_TRANSFER_CATCHUP_ROWS ${budget}); the next timer tick continues`,
    );
    return { action: 'budget_spent' };
  }
  // A chain's clock starts when its first batch was created (a message without chainStartedAt is that batch's).
  const startedAt = chain.chainStartedAt ?? Date.parse(view.createdAt);
  const timeBudget = rt.settings.KEEL_TRANSFER_CATCHUP_MS;
  if (timeBudget > 0 && now - startedAt >= timeBudget) {
    log.info(
      `transfer ${view.transfer}: catch-up chain ran ${Math.round((now - startedAt) / 1000)} s and committed ${total} rows (KEEL_TRANSFER_CATCHUP_MS ${timeBudget}); the next timer tick continues`,
    );
    return { action: 'budget_spent' };
  }
  try {
    const next = await service.tryCreateBatch(view.transfer);
    if (!next) return { action: 'nothing_new' };
    await postStage(rt, next.batchId, log, { chainRows: total, chainStartedAt: startedAt });
    log.info(`transfer ${view.transfer}: catch-up: batch ${next.batchId} created after ${total} rows in this chain`);
    return { action: 'next', batchId: next.batchId, chainRows: total, chainStartedAt: startedAt };
  } catch (err) {
    // The batch that led here is committed; the next timer tick tries again (and reports the cause).
    log.error(`transfer ${view.transfer}: catch-up could not create the next batch: ${(err as Error).message}`);
    telemetry.transferStartFailed({
      transfer: view.transfer,
      source: 'catchup',
      code: describeError(err).code,
      message: (err as Error).message,
    });
    return { action: 'error', detail: (err as Error).message };
  }
}

// The delay before the n-th retry in a row (n >= 1): base * 2^(n-1), capped.
export function retryDelayMs(settings: Settings, n: number): number {
  const exp = Math.min(30, Math.max(0, n - 1));
  return Math.min(settings.KEEL_TRANSFER_RETRY_MAX_MS, settings.KEEL_TRANSFER_RETRY_BASE_MS * 2 ** exp);
}

export type RetryDecision =
  { action: 'posted'; retry: number; delayMs: number } | { action: 'limit' | 'not_retryable' };

// A stage or apply step left the batch open and retryable (a failure that is not terminal): the step posts the
// batch again to the queue its state needs (staged -> apply, extracting -> stage), invisible for the backoff.
// `retry` counts the re-posts in a row before this one; at KEEL_TRANSFER_RETRY_LIMIT the chain ends and the
// transfer timer or maintenance restarts it (resumeStalled). A failed post throws: the host then redelivers the
// message that led here, which is the same retry a little sooner.
export async function scheduleRetry(
  rt: Runtime,
  view: BatchView,
  retry: number,
  log: Logger,
  chain: ChainState = {},
): Promise<RetryDecision> {
  if (!view.retryable || (view.state !== 'staged' && view.state !== 'extracting')) return { action: 'not_retryable' };
  const n = retry + 1;
  if (n > rt.settings.KEEL_TRANSFER_RETRY_LIMIT) {
    log.warn(
      `batch ${view.batchId} (${view.transfer}): ${retry} retries in a row failed; the transfer timer or maintenance resumes it after KEEL_TRANSFER_STALE_MS`,
    );
    return { action: 'limit' };
  }
  const delayMs = retryDelayMs(rt.settings, n);
  const queue = view.state === 'staged' ? rt.settings.KEEL_TRANSFER_APPLY_QUEUE : rt.settings.KEEL_TRANSFER_STAGE_QUEUE;
  // A catch-up chain goes on after the retry (its rows and its clock).
  const message: TransferMessage = { batchId: view.batchId, retry: n, afterAttempt: view.attempts, ...chainOf(chain) };
  await rt.queues.send(queue, message, { delaySeconds: Math.ceil(delayMs / 1000) });
  log.warn(`batch ${view.batchId} (${view.transfer}): retry ${n} posted to ${queue} in ${Math.ceil(delayMs / 1000)} s`);
  return { action: 'posted', retry: n, delayMs };
}

// True when an open, retryable batch has made no progress (lastProgressAt: never moved by reconcile) for
// KEEL_TRANSFER_STALE_MS: its retry chain ended or its message was lost.
export function isStalled(rt: Runtime, view: BatchView, now = Date.now()): boolean {
  return (
    view.retryable &&
    (view.state === 'staged' || view.state === 'extracting') &&
    now - lastProgressAt(view) > rt.settings.KEEL_TRANSFER_STALE_MS
  );
}

// Re-posts a stalled batch: a staged one straight to the apply queue, tagged with its attempts so that a retry
// message still on its way and this one apply it once between them; an extracting one to the stage queue.
export async function resumeStalled(rt: Runtime, view: BatchView, log: Logger): Promise<boolean> {
  if (view.state === 'staged') {
    try {
      await rt.queues.send(rt.settings.KEEL_TRANSFER_APPLY_QUEUE, {
        batchId: view.batchId,
        afterAttempt: view.attempts,
      } satisfies TransferMessage);
      return true;
    } catch (err) {
      log.warn(
        `batch ${view.batchId}: posting to ${rt.settings.KEEL_TRANSFER_APPLY_QUEUE} failed: ${(err as Error).message}`,
      );
      return false;
    }
  }
  return postStage(rt, view.batchId, log);
}

export function describeView(v: BatchView): string {
  return `batch ${v.batchId} (${v.transfer}): ${v.state}/${v.status}${v.lastError ? `, last error: ${v.lastError}` : ''}`;
}

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
// it has none) and not after now. The transfer timer must fire at least as often as the finest schedule.
export function scheduleDue(cron: string, lastCreatedAt: string | undefined, now: Date): boolean {
  if (!lastCreatedAt) return true;
  const next = new Cron(cron, { paused: true, mode: '6-part', timezone: 'UTC' }).nextRun(new Date(lastCreatedAt));
  return next !== null && next.getTime() <= now.getTime();
}

// One pass of the transfer timer, per scheduled transfer that is not paused: when a retryable batch is open and
// has made no progress for KEEL_TRANSFER_STALE_MS (its retry chain ended, its message was lost or poisoned), that
// batch is re-posted ("progress" is read from the batch's step stamps, which reconcile never moves; updated_at it
// does); when none is open and the transfer's schedule is due (its own cron, or every tick), a new batch is
// created and posted (catch-up then goes on from its commit).
export async function runTransferSchedule(rt: Runtime, log: Logger, now: Date = new Date()): Promise<TimerStep[]> {
  const service = rt.transfers;
  if (!service) return [];
  const steps: TimerStep[] = [];
  const schedules = new Map(service.listTransfers().map((t) => [t.name, t.schedule]));
  let paused: Set<string>;
  try {
    paused = await service.pausedTransfers();
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
        if (isStalled(rt, open, now.getTime())) {
          await resumeStalled(rt, open, log);
          steps.push({ transfer: name, action: 'resumed', batchId: open.batchId });
        } else steps.push({ transfer: name, action: 'open_batch_busy', batchId: open.batchId });
        continue;
      }
      const cron = schedules.get(name);
      if (cron && !scheduleDue(cron, recent[0]?.createdAt, now)) {
        steps.push({ transfer: name, action: 'not_due' });
        continue;
      }
      const created = await service.tryCreateBatch(name);
      if (created) {
        await postStage(rt, created.batchId, log);
        steps.push({ transfer: name, action: 'created', batchId: created.batchId });
      } else steps.push({ transfer: name, action: 'nothing_new' });
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
  if (steps.length > 0) await reportFreshness(rt, steps, now, log);
  await runScheduledKeyCompares(rt, log, now);
  return steps;
}

// A transfer's keyCompareSchedule is due at the tick after one of its occurrences: an occurrence in (the transfer
// timer's previous tick, now]. (A tick the host skipped skips that comparison too: the next occurrence runs it.)
export function keyCompareDue(cron: string, timerCron: string, now: Date): boolean {
  const opts = { paused: true, mode: '6-part', timezone: 'UTC' } as const;
  const previousTick = new Cron(timerCron, opts).previousRuns(1, new Date(now.getTime() - 1000))[0];
  if (!previousTick) return false;
  const next = new Cron(cron, opts).nextRun(previousTick);
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

// Rows behind for the gauge (KEEL_TRANSFER_ROWS_BEHIND_CAP; 0: not counted): null when not counted or the count
// failed, which leaves the freshness report itself as it is.
async function countRowsBehind(rt: Runtime, transfer: string, log: Logger): Promise<number | null> {
  const cap = rt.settings.KEEL_TRANSFER_ROWS_BEHIND_CAP;
  if (!rt.transfers || cap === 0) return null;
  try {
    return (await rt.transfers.rowsBehind(transfer, cap))?.rows ?? null;
  } catch (err) {
    log.warn(`transfer ${transfer}: rows behind not counted: ${(err as Error).message}`);
    return null;
  }
}

// The freshness gauge after a timer pass: caught up when the pass found nothing new; otherwise behind since the
// transfer's last commit (never committed: since this process first saw it behind), with the rows behind counted
// at the source. Paused transfers are left out.
const firstBehind = new Map<string, number>();

async function reportFreshness(rt: Runtime, steps: TimerStep[], now: Date, log: Logger): Promise<void> {
  const service = rt.transfers!;
  try {
    const states = new Map((await service.transferStates(now.getTime())).map((x) => [x.name, x]));
    for (const step of steps) {
      if (step.action === 'paused') continue;
      if (step.action === 'nothing_new') {
        telemetry.transferFreshness({ transfer: step.transfer, behindSince: null });
        continue;
      }
      const committedAt = states.get(step.transfer)?.lastCommitted?.committedAt;
      if (!committedAt && !firstBehind.has(step.transfer)) firstBehind.set(step.transfer, now.getTime());
      telemetry.transferFreshness({
        transfer: step.transfer,
        behindSince: committedAt ? Date.parse(committedAt) : firstBehind.get(step.transfer)!,
        rowsBehind: await countRowsBehind(rt, step.transfer, log),
      });
    }
  } catch (err) {
    log.warn(`transfer timer: freshness not reported: ${(err as Error).message}`);
  }
}

// The queue steps leave a paused transfer's batch where it is (resuming the transfer re-posts it).
// The queue steps' common start (functions/transferStage.ts, transferApply.ts): the message parsed and transfers
// configured; otherwise the message goes to the poison queue and the step has nothing more to do (null).
export async function readTransferStep(
  rt: Runtime,
  queue: string,
  message: unknown,
  context: InvocationContext,
): Promise<{ transfers: TransferService; step: TransferMessage; chain: ChainState } | null> {
  const parsed = parseMessage(transferMessageSchema, message);
  if (!parsed.ok) {
    await poison(rt, queue, context, message, parsed.reason, parsed.detail);
    return null;
  }
  if (!rt.transfers) {
    await poison(
      rt,
      queue,
      context,
      message,
      'transfers_not_configured',
      'no transfers are configured (KEEL_TRANSFERS)',
    );
    return null;
  }
  return { transfers: rt.transfers, step: parsed.value, chain: chainOf(parsed.value) };
}

// A batch of a paused transfer is left as it is by a queue step (resuming the transfer posts it again): true when the
// step stops here, having said so.
export async function leftPaused(
  rt: Runtime,
  batchId: string,
  step: 'stage' | 'apply',
  context: InvocationContext,
  known?: BatchView | null, // the batch, when the caller read it already
): Promise<boolean> {
  const paused = await pausedFor(rt, batchId, known);
  if (paused)
    context.info(
      `${step}: batch ${batchId}: transfer ${paused} is paused; left as it is (resuming the transfer posts it again)`,
    );
  return paused !== null;
}

export async function pausedFor(
  rt: Runtime,
  batchId: string,
  known?: BatchView | null, // the batch, when the caller read it already
): Promise<string | null> {
  const service = rt.transfers;
  if (!service) return null;
  const b = known === undefined ? await service.getBatch(batchId) : known;
  if (!b) return null;
  const name = baseTransferName(b.transfer); // a replay batch pauses with its transfer
  return (await service.isPaused(name)) ? name : null;
}

export { isTransferError };

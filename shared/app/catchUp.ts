// The catch-up chain: a commit of a full window creates and posts the next batch at once.
import { parseBaselineBound } from '../transfer/changes.js';
import { describeError, isTransferError } from '../transfer/errors.js';
import type { BatchView } from '../transfer/view.js';
import { telemetry } from '../telemetry/index.js';
import type { Logger } from './enqueue.js';
import { countRowsBehind } from './freshness.js';
import type { Runtime } from './runtime.js';
import { postStage, type ChainState } from './transferSteps.js';

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
  | { action: 'window_not_full' | 'budget_spent' | 'off' | 'nothing_new' | 'paused' | 'open_batch' }
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
  now: () => number = Date.now, // only for a view without committedAt (the journal's clock is used when it has one)
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
  // Paused meanwhile (the chain stops): a paused transfer's freshness is not reported.
  if (full && step.action !== 'paused')
    telemetry.transferFreshness(
      step.action === 'nothing_new' // the full window was the last of the source's rows
        ? { transfer: view.transfer, behindSince: null }
        : {
            transfer: view.transfer,
            // As fresh as this commit, which this call just made: now on the host's clock, the gauge's (the
            // journal's committedAt measured against the host's clock would be off by their skew).
            behindSince: Date.now(),
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
  // A chain's clock starts when its first batch was created (a message without chainStartedAt is that batch's), and
  // runs to this commit: both stamps of the journal's clock, so a host's clock off the journal server's neither ends
  // every chain after its first window nor lets one run past its budget (test/functions/transferClockSkew.test.ts).
  const startedAt = chain.chainStartedAt ?? Date.parse(view.createdAt);
  const at = view.committedAt ? Date.parse(view.committedAt) : now;
  const timeBudget = rt.settings.KEEL_TRANSFER_CATCHUP_MS;
  if (timeBudget > 0 && at - startedAt >= timeBudget) {
    log.info(
      `transfer ${view.transfer}: catch-up chain ran ${Math.round((at - startedAt) / 1000)} s and committed ${total} rows (KEEL_TRANSFER_CATCHUP_MS ${timeBudget}); the next timer tick continues`,
    );
    return { action: 'budget_spent' };
  }
  try {
    let next;
    try {
      next = await service.createBatch(view.transfer);
    } catch (err) {
      // Told apart: a transfer paused meanwhile is not "caught up" (the freshness report above), and a window another
      // run created or holds (a duplicate step's chain) is not either.
      if (isTransferError(err, 'transfer_paused')) return { action: 'paused' };
      if (isTransferError(err, 'nothing_to_transfer')) return { action: 'nothing_new' };
      if (isTransferError(err, 'open_batch_exists') || isTransferError(err, 'window_taken'))
        return { action: 'open_batch' };
      throw err;
    }
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

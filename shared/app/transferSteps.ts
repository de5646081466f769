// The transfer queue steps (stage queue -> apply queue), each claiming the batch by id through the journal's state
// machine: their messages, posting a batch to a queue, retries with backoff, stalled batches, paused transfers.
import type { InvocationContext } from '@azure/functions';
import type { Settings } from '../config/settings.js';
import { baseTransferName } from '../transfer/chains.js';
import type { TransferService } from '../transfer/service.js';
import { lastProgressAt, type BatchView } from '../transfer/view.js';
import type { Logger } from './enqueue.js';
import { parseMessage, poison, transferMessageSchema } from './messages.js';
import type { Runtime } from './runtime.js';

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
// KEEL_TRANSFER_STALE_MS: its retry chain ended or its message was lost. `now` is the journal's (journalNow), the
// clock of the stamps: the timer and maintenance pass it.
export function isStalled(rt: Runtime, view: BatchView, now: number): boolean {
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

// Queue trigger: {"batchId"} -> extract + stage that batch (claimed by id through the journal's state machine),
// then post it to the apply queue. A batch already staged goes straight on; a committed or failed one is done. A
// batch committed by this step (a direct apply: docs/transfer.md) continues the catch-up chain like an apply.
// Malformed messages and unknown batch ids go to the poison queue. A failure that is not terminal leaves the batch
// extracting: the step posts it again with backoff (scheduleRetry); when that post fails, or the journal cannot be
// read, the error is thrown so the host retries the message (visibilityTimeout, maxDequeueCount -> poison; the
// transfer timer or maintenance resumes it).
import type { InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { poison } from '../shared/app/messages.js';
import { continueCatchUp } from '../shared/app/catchUp.js';
import { describeView, leftPaused, postApply, readTransferStep, scheduleRetry } from '../shared/app/transferSteps.js';
import { isTransferError } from '../shared/transfer/errors.js';
import { batchTelemetry } from '../shared/app/telemetryHooks.js';

export async function transferStage(message: unknown, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const queue = rt.settings.KEEL_TRANSFER_STAGE_QUEUE;
  const read = await readTransferStep(rt, queue, message, context);
  if (!read) return;
  const { transfers, chain } = read;
  const { batchId, retry = 0 } = read.step;
  try {
    const before = await transfers.getBatch(batchId);
    if (await leftPaused(rt, batchId, 'stage', context, before)) return;
    const view = await transfers.stage(batchId);
    batchTelemetry(view);
    context.info(`stage: ${describeView(view)}`);
    if (view.state === 'staged') await postApply(rt, batchId, chain);
    else if (view.status === 'committed') {
      // A direct apply (docs/transfer.md, "Direct apply") committed the batch in this step: the chain goes on as
      // after an apply. Only this step's own commit continues it (a redelivered or racing message finds the batch
      // committed by another run: committedByCall is false).
      if (transfers.committedByCall(view)) await continueCatchUp(rt, view, chain, context);
    } else await scheduleRetry(rt, view, retry, context, chain);
  } catch (err) {
    if (isTransferError(err, 'unknown_batch') || isTransferError(err, 'unknown_transfer')) {
      return poison(rt, queue, context, message, err.code, err.message);
    }
    const view = await transfers.getBatch(batchId).catch(() => null);
    if (!view) throw err;
    batchTelemetry(view);
    context.warn(`stage: ${describeView(view)}: ${(err as Error).message}`);
    const decision = await scheduleRetry(rt, view, retry, context, chain);
    if (decision.action === 'not_retryable' && view.status !== 'committed' && view.state !== 'failed') throw err;
  }
}

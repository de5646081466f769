// Queue trigger: {"batchId"} -> apply that staged batch in one target transaction, reconciling after any error.
// The journal's compare-and-set claims the batch: a rival apply of the same id learns it lost, and re-applying a
// committed batch is a no-op that says so.
import type { InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { parseMessage, poison, transferMessageSchema } from '../shared/app/messages.js';
import { describeView, isTransferError, postStage } from '../shared/app/transfers.js';
import { batchTelemetry } from '../shared/app/telemetryHooks.js';

export async function transferApply(message: unknown, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const queue = rt.settings.KEEL_TRANSFER_APPLY_QUEUE;
  const parsed = parseMessage(transferMessageSchema, message);
  if (!parsed.ok) return poison(rt, queue, context, message, parsed.reason, parsed.detail);
  if (!rt.transfers)
    return poison(
      rt,
      queue,
      context,
      message,
      'transfers_not_configured',
      'no transfers are configured (KEEL_TRANSFERS)',
    );
  const { batchId } = parsed.value;
  try {
    const before = await rt.transfers.getBatch(batchId);
    const view = await rt.transfers.apply(batchId);
    batchTelemetry(view, before?.state);
    const line = `apply: ${describeView(view)}`;
    if (view.status === 'committed') context.info(line);
    else context.warn(`${line}; next: ${view.nextAction}`);
  } catch (err) {
    if (isTransferError(err, 'unknown_batch') || isTransferError(err, 'unknown_transfer')) {
      return poison(rt, queue, context, message, err.code, err.message);
    }
    if (isTransferError(err, 'invalid_state')) {
      // Not staged yet (e.g. reconcile found nothing applied and nothing staged): back to the stage step.
      context.warn(`apply: batch ${batchId}: ${err.message}; re-posting to the stage queue`);
      await postStage(rt, batchId, context);
      return;
    }
    throw err;
  }
}

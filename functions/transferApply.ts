// Queue trigger: {"batchId"} -> apply that staged batch in one target transaction, reconciling after any error.
// The journal's compare-and-set claims the batch: a rival apply of the same id learns it lost, and re-applying a
// committed batch is a no-op that says so. A failure that is not terminal leaves the batch staged: the step posts
// it again with backoff (scheduleRetry); a retry message whose batch was applied again since is dropped. A commit
// of a full window creates and posts the next batch at once (continueCatchUp).
import type { InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { poison } from '../shared/app/messages.js';
import { continueCatchUp } from '../shared/app/catchUp.js';
import { describeView, leftPaused, postStage, readTransferStep, scheduleRetry } from '../shared/app/transferSteps.js';
import { isTransferError } from '../shared/transfer/errors.js';
import { batchTelemetry } from '../shared/app/telemetryHooks.js';

export async function transferApply(message: unknown, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const queue = rt.settings.KEEL_TRANSFER_APPLY_QUEUE;
  const read = await readTransferStep(rt, queue, message, context);
  if (!read) return;
  const { transfers, chain } = read;
  const { batchId, retry = 0, afterAttempt } = read.step;
  try {
    if (await leftPaused(rt, batchId, 'apply', context)) return;
    const before = await transfers.getBatch(batchId);
    if (before && afterAttempt !== undefined && before.attempts > afterAttempt) {
      context.info(
        `apply: batch ${batchId}: attempt ${before.attempts} ran after this retry was posted (after attempt ${afterAttempt}); dropped`,
      );
      return;
    }
    const view = await transfers.apply(batchId);
    batchTelemetry(view, before?.state);
    const line = `apply: ${describeView(view)}`;
    if (view.status === 'committed') {
      context.info(line);
      // Only the step whose call moved the batch to committed continues the chain: a rival step of the same batch
      // that read it uncommitted (a duplicate message, a retry racing a resumed post) finds it committed, and stops.
      if (transfers.committedByCall(view)) await continueCatchUp(rt, view, chain, context);
    } else {
      context.warn(`${line}; next: ${view.nextAction}`);
      await scheduleRetry(rt, view, retry, context, chain);
    }
  } catch (err) {
    if (isTransferError(err, 'unknown_batch') || isTransferError(err, 'unknown_transfer')) {
      return poison(rt, queue, context, message, err.code, err.message);
    }
    if (isTransferError(err, 'invalid_state')) {
      // Not staged yet (e.g. reconcile found nothing applied and nothing staged): back to the stage step.
      context.warn(`apply: batch ${batchId}: ${err.message}; re-posting to the stage queue`);
      await postStage(rt, batchId, context, chain);
      return;
    }
    throw err;
  }
}

// Timer: creates a batch for each scheduled transfer (KEEL_SCHEDULED_TRANSFERS) and posts it to the stage queue;
// re-posts an open, retryable batch nobody has touched for KEEL_TRANSFER_STALE_MS. A second firing finds the
// open batch and creates nothing (one open batch per transfer is enforced by the journal).
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { runTransferSchedule } from '../shared/app/transfers.js';

export async function transferTimer(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const steps = await runTransferSchedule(rt, context);
  if (steps.some((s) => s.action !== 'nothing_new')) context.info(`transfer timer: ${JSON.stringify(steps)}`);
}

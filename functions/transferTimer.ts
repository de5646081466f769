// Timer: creates a batch for each scheduled transfer (KEEL_SCHEDULED_TRANSFERS) that is not paused and whose own
// schedule (if any) is due, and posts it to the stage queue; re-posts an open, retryable batch that made no progress
// for KEEL_TRANSFER_STALE_MS. A second firing finds the open batch and creates nothing (one open batch per transfer
// is enforced by the journal). Then runs the key-set comparisons whose keyCompareSchedule is due.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { runTransferSchedule, type TimerStep } from '../shared/app/transferSchedule.js';

const QUIET: ReadonlySet<TimerStep['action']> = new Set(['nothing_new', 'not_due', 'paused']);

export async function transferTimer(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const steps = await runTransferSchedule(rt, context);
  if (steps.some((s) => !QUIET.has(s.action))) context.info(`transfer timer: ${JSON.stringify(steps)}`);
}

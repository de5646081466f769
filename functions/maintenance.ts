// Timer: zombie rescue, retention purges (archive, DLQ, metric buckets) and reconciliation of stale in-flight
// transfer batches. Every step is batched and bounded, and idempotent: a double firing is harmless. A pass with
// nothing to do logs at debug.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { maintenanceDidNothing, runMaintenancePass } from '../shared/app/dispatch.js';

export async function maintenance(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const report = await runMaintenancePass(rt, context);
  // An idle pass at debug: one information line every pass would bury the passes that did something.
  if (maintenanceDidNothing(report)) context.debug(`maintenance: ${JSON.stringify(report)}`);
  else context.info(`maintenance: ${JSON.stringify(report)}`);
}

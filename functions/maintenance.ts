// Timer: zombie rescue, retention purges (archive, DLQ, metric buckets) and reconciliation of stale in-flight
// transfer batches. Every step is batched and bounded, and idempotent: a double firing is harmless.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { runMaintenancePass } from '../shared/app/dispatch.js';

export async function maintenance(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const report = await runMaintenancePass(rt, context);
  context.info(`maintenance: ${JSON.stringify(report)}`);
}

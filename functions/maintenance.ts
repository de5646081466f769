// Timer: zombie rescue, retention purges (archive, DLQ, metric buckets) and reconciliation of stale in-flight
// transfer batches. Every step is batched and bounded, and idempotent: a double firing is harmless. A pass with
// nothing to do logs at debug.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { dispatchDueJobs, maintenanceDidNothing, runMaintenancePass } from '../shared/app/timerPasses.js';

export async function maintenance(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const report = await runMaintenancePass(rt, context);
  // Rescued zombies are pending again with no queue message, and every rescued or dead-lettered zombie freed a slot
  // of its queue (a limited queue's next job may run now): dispatch now rather than at the dispatcher's next tick.
  const { releasedFetched, retried, deadLettered } = report.jobs.rescued;
  if (releasedFetched + retried + deadLettered > 0) {
    const dispatched = await dispatchDueJobs(rt, context);
    context.info(`maintenance: dispatched rescued jobs: ${JSON.stringify(dispatched)}`);
  }
  // An idle pass at debug: one information line every pass would bury the passes that did something.
  if (maintenanceDidNothing(report)) context.debug(`maintenance: ${JSON.stringify(report)}`);
  else context.info(`maintenance: ${JSON.stringify(report)}`);
}

// Timer: recurring jobs. Enqueues the due ticks of every schedule declared in handlers/ (defineSchedule), applying
// each schedule's missed-tick policy. Azure runs a timer on one instance at a time (a lock in the storage account);
// the store's compare-and-set makes each tick enqueued exactly once even where two passes do meet.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { runSchedulerPass } from '../shared/app/timerPasses.js';

export async function scheduler(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const report = await runSchedulerPass(rt, context);
  for (const s of report.schedules) {
    if (s.enqueued.length > 0 || s.skipped > 0) {
      context.info(
        `schedule ${s.name}: ${s.status}, enqueued ${s.enqueued.length} (ticks ${s.ticks.join(', ')}), missed ${s.missed}, skipped ${s.skipped}`,
      );
    }
  }
}

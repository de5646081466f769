// Timer: claims due jobs (delayed, retried, or whose message was lost) and runs them within the invocation's
// time budget (KEEL_DISPATCH_MODE=run), or releases them and posts their ids for the job runner (=post).
// Bounded by budget and count; a second firing finds nothing it can claim twice.
import type { InvocationContext, Timer } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { dispatchDueJobs } from '../shared/app/timerPasses.js';

export async function dispatcher(_timer: Timer, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const result = await dispatchDueJobs(rt, context);
  if (result.processed > 0 || result.posted > 0) context.info(`dispatcher: ${JSON.stringify(result)}`);
}

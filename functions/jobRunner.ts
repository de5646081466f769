// Queue trigger: message {"jobId": "..."} -> claim that job by id -> run it -> finalize (archive, retry or DLQ).
// Malformed messages and ids of jobs that do not exist go to the poison queue with the reason.
// A job that exists but cannot be claimed (done, running elsewhere, not yet due, queue paused or at its
// limit) is acknowledged: the row is the truth. A job held back by its queue's limit is posted again by whoever frees
// a slot (the finish of a job of that queue hands it on: shared/app/slots.ts), else the dispatcher runs it when it
// can. Only a pending job is logged at information level; one the dispatcher already ran (the usual case under npm
// start) at debug.
import type { InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { jobMessageSchema, parseMessage, poison } from '../shared/app/messages.js';
import { postWhenDue } from '../shared/app/enqueue.js';
import { freesSlot, handOnSlots } from '../shared/app/slots.js';

export async function jobRunner(message: unknown, context: InvocationContext): Promise<void> {
  const rt = await getRuntime();
  const queue = rt.settings.KEEL_JOBS_QUEUE;
  const parsed = parseMessage(jobMessageSchema, message);
  if (!parsed.ok) return poison(rt, queue, context, message, parsed.reason, parsed.detail);
  const { jobId } = parsed.value;
  const { outcome, queue: jobQueue } = await rt.processor.processByIdOf(jobId);
  if (outcome === 'not_claimed') {
    const job = await rt.store.getJob(jobId);
    if (!job) return poison(rt, queue, context, message, 'unknown_job', `job ${jobId} does not exist`);
    if (job.location === 'hot' && job.state === 'pending') {
      // Really not claimed: not due yet, or its queue is paused or at its limit. The row is the truth.
      context.info(
        `job ${jobId} is pending but cannot run now (not due yet, or its queue is paused or at its limit); it is posted again when a slot frees, else the dispatcher runs it when it can`,
      );
    } else {
      // The usual case, not a problem: the dispatcher (woken by the enqueue) ran the job before its message came,
      // or another instance is running it. Debug level: one line per job would read like an error.
      context.debug(
        `job ${jobId} already ${job.location === 'hot' ? `${job.state} by another worker` : `finished (${job.location})`}; message acknowledged`,
      );
    }
    return;
  }
  context.info(`job ${jobId}: ${outcome}`);
  // Its queue has a concurrency limit: the slot this job held goes to the next due job now, not at the dispatcher's
  // next tick (shared/app/slots.ts; never throws).
  if (jobQueue !== undefined && freesSlot(outcome)) await handOnSlots(rt, [jobQueue], context);
  if (outcome === 'retried' || outcome === 'released') {
    // Post the next attempt's message for when it is due by the store's clock (a job handed back by shutdown is due
    // now); the dispatcher covers it if this is lost.
    await postWhenDue(rt, [jobId], context);
  }
}

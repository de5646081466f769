// Enqueue = write the row, then post the message. The row is the truth: if posting fails the job is still
// durable and the dispatcher claims it when due. Messages carry only the job id.
import type { EnqueueRequest, JobId } from '../jobs/contract.js';
import { storeClock } from '../jobs/maintenance.js';
import type { OpsEnqueued, OpsLogger } from '../ops/context.js';
import { prepareTypedJobs, type JobRequest, type TypedEnqueueOptions } from '../jobs/typedEnqueue.js';
import { MAX_VISIBILITY_DELAY_SECONDS } from './queues.js';
import type { Runtime } from './runtime.js';
import { enqueuedTelemetry } from './telemetryHooks.js';
import { flowJobs, flowResult, type Flow, type FlowResult } from '../../packages/client/src/flow.js';

export interface JobMessage {
  jobId: JobId;
}

// Declared once, by the port the ops API calls through (shared/ops/context.ts): the same logger and enqueue result.
export type Logger = OpsLogger;
export type EnqueuedJob = OpsEnqueued;

// How long a message for a job due at runAt waits: from the store's clock (its database server's, which every
// claim's due test reads), never this host's. A host whose clock ran ahead posted it too early (a wasted claim, the
// job then waiting for the dispatcher's next tick); one that ran behind, as much too late.
export function secondsUntil(runAt: Date, storeNow: Date): number {
  return Math.max(0, (runAt.getTime() - storeNow.getTime()) / 1000);
}

// delayMs is counted from the store's now() where the row is written: the message waits exactly that long. A runAt
// without the store's clock (its read failed): null, not posted.
function delaySecondsFor(req: EnqueueRequest, storeNow: Date | null): number | null {
  if (req.runAt) return storeNow ? secondsUntil(req.runAt, storeNow) : null;
  if (req.delayMs) return req.delayMs / 1000;
  return 0;
}

// Enqueue from code (your own functions, handlers starting follow-up jobs): the same checks as the ops API —
// registered type, payload schema (ValidationError naming the field), the handler's queue and maxAttempts.
export async function enqueueJobs(
  rt: Runtime,
  jobs: JobRequest | JobRequest[],
  log: Logger = console,
): Promise<EnqueuedJob[]> {
  return enqueueAndPost(rt, Array.isArray(jobs) ? jobs : [jobs], log);
}

// A flow in one call (docs/jobs.md, "Flows"): the parent, its children and the fan-in job, one batch and one
// transaction, with the same checks as enqueueJobs.
export async function enqueueFlow(
  rt: Runtime,
  flow: Flow<JobRequest>,
  log: Logger = console,
): Promise<FlowResult<EnqueuedJob>> {
  return flowResult(flow, await enqueueAndPost(rt, flowJobs(flow), log));
}

export async function enqueueAndPost(
  rt: Runtime,
  jobs: readonly JobRequest[],
  log: Logger,
  opts: Pick<TypedEnqueueOptions, 'prefix'> = {},
): Promise<EnqueuedJob[]> {
  const requests = prepareTypedJobs(rt.registry, jobs, {
    ...opts,
    allowUnknownTypes: rt.settings.KEEL_ALLOW_UNKNOWN_JOB_TYPES,
  });
  const results = requests.length === 1 ? [await rt.store.enqueue(requests[0]!)] : await rt.store.enqueueMany(requests);
  enqueuedTelemetry(requests.filter((_r, i) => !results[i]!.duplicate));
  const posts = (r: { duplicate: boolean }, i: number) => !r.duplicate && !requests[i]!.after?.length;
  // The store's clock, read once, only when a job to post names its own runAt. The jobs are enqueued whatever happens
  // next: a failed read leaves those jobs to the dispatcher, as a failed post does.
  const storeNow = results.some((r, i) => posts(r, i) && requests[i]!.runAt)
    ? await storeClock(rt.store).catch((err: unknown) => {
        log.warn(
          `reading the store's clock failed; jobs due at their runAt are left to the dispatcher: ${(err as Error).message}`,
        );
        return null;
      })
    : null;
  const out: EnqueuedJob[] = [];
  // Bounded fan-out (a batch may hold up to MAX_BATCH jobs): 16 sends at a time.
  for (let i = 0; i < results.length; i += 16) {
    out.push(
      ...(await Promise.all(
        results.slice(i, i + 16).map(async (r, k) => {
          // A duplicate is not posted. A flow's job waits for its parents: the move that releases it wakes the
          // workers (or the dispatcher's next poll finds it); a message now would find nothing to run.
          if (!posts(r, i + k)) return { ...r, posted: false };
          const delay = delaySecondsFor(requests[i + k]!, storeNow);
          // the dispatcher runs it when due
          if (delay === null || delay > MAX_VISIBILITY_DELAY_SECONDS) return { ...r, posted: false };
          return { ...r, posted: await postJob(rt, r.id, log, delay) };
        }),
      )),
    );
  }
  return out;
}

// Posts {jobId}; never throws: a lost message only delays the job until the dispatcher's next run.
export async function postJob(rt: Runtime, jobId: JobId, log: Logger, delaySeconds = 0): Promise<boolean> {
  try {
    await rt.queues.send(rt.settings.KEEL_JOBS_QUEUE, { jobId } satisfies JobMessage, { delaySeconds });
    return true;
  } catch (err) {
    log.warn(
      `job ${jobId}: posting to queue ${rt.settings.KEEL_JOBS_QUEUE} failed (the dispatcher will pick it up): ${(err as Error).message}`,
    );
    return false;
  }
}

// Posts each job that is pending in the hot table, delayed until its runAt by the store's clock (secondsUntil): jobs
// a run retried or handed back. One read per job and one of the store's clock per 16; never throws (a job whose
// message is not posted is the dispatcher's when due). Returns how many were posted.
export async function postWhenDue(rt: Runtime, ids: readonly JobId[], log: Logger): Promise<number> {
  let posted = 0;
  for (let i = 0; i < ids.length; i += 16) {
    const chunk = ids.slice(i, i + 16);
    const [jobs, now] = await Promise.all([
      Promise.all(chunk.map((id) => rt.store.getJob(id).catch(() => null))),
      storeClock(rt.store).catch((err: unknown) => {
        log.warn(
          `reading the store's clock failed; ${chunk.length} job(s) left to the dispatcher: ${(err as Error).message}`,
        );
        return null;
      }),
    ]);
    if (!now) continue;
    const ok = await Promise.all(
      jobs.map(async (job, k) =>
        job?.location === 'hot' && job.state === 'pending' && job.runAt
          ? postJob(rt, chunk[k]!, log, secondsUntil(job.runAt, now))
          : false,
      ),
    );
    posted += ok.filter(Boolean).length;
  }
  return posted;
}

export async function postJobs(rt: Runtime, ids: JobId[], log: Logger): Promise<number> {
  let posted = 0;
  // Bounded fan-out: 16 sends at a time.
  for (let i = 0; i < ids.length; i += 16) {
    const chunk = ids.slice(i, i + 16);
    const ok = await Promise.all(chunk.map((id) => postJob(rt, id, log)));
    posted += ok.filter(Boolean).length;
  }
  return posted;
}

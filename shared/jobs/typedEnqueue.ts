// Enqueue-time checks against the registered handlers, shared by the ops API, code (enqueueJobs) and the
// scheduler: the type must have a handler (unless unknown types are explicitly allowed), the payload must pass the
// handler's schema, and the handler's queue is applied. A bad job fails with a ValidationError
// naming the field ("payload.amount", "jobs[2].payload.amount") before anything is written.
import type { EnqueueRequest } from './contract.js';
import type { HandlerRegistry } from './registry.js';
import { applyJobType, DEFAULT_QUEUE, jobPrefix, unknownTypeError } from '../../packages/client/src/jobTypes.js';

// The queue default, the handler's-queue rule and the payload schema check are the client package's
// (packages/client/src/jobTypes.ts): a producer using it applies the same rule to the same schemas.
export { DEFAULT_QUEUE };

// A job as code and the ops API give it: the queue may be left to the handler's (or "default").
export type JobRequest = Omit<EnqueueRequest, 'queue'> & { queue?: string };

export interface TypedEnqueueOptions {
  // KEEL_ALLOW_UNKNOWN_JOB_TYPES: accept types this app has no handler for (a producer-only app whose jobs another
  // app runs). Off by default: such a job could only ever be dead-lettered here, so it is refused at enqueue.
  allowUnknownTypes?: boolean;
  // Field prefix for job i: '' for a single job, 'jobs[i]' for a batch (the default).
  prefix?: (i: number, count: number) => string;
}

export function prepareTypedJobs(
  registry: HandlerRegistry,
  jobs: readonly JobRequest[],
  opts: TypedEnqueueOptions = {},
): EnqueueRequest[] {
  const prefixOf = opts.prefix ?? jobPrefix;
  return jobs.map((job, i) => {
    const prefix = prefixOf(i, jobs.length);
    const h = typeof job.type === 'string' ? registry.get(job.type) : undefined;
    if (!h) {
      if (!opts.allowUnknownTypes) {
        throw unknownTypeError(
          prefix,
          job.type,
          registry.types(),
          'add one in handlers/, or set KEEL_ALLOW_UNKNOWN_JOB_TYPES=true if another app runs these jobs',
        );
      }
      return { ...job, queue: job.queue ?? DEFAULT_QUEUE };
    }
    // The handler's maxAttempts is not copied onto the row: the processor and zombie rescue both apply the job's
    // own limit, else the handler's (from the registry), else the queue's, so a changed handler limit applies at once.
    return applyJobType(h.options, job, prefix);
  });
}

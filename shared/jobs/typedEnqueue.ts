// Enqueue-time checks against the registered handlers, shared by the ops API, code (enqueueJobs) and the
// scheduler: the type must have a handler (unless unknown types are explicitly allowed), the payload must pass the
// handler's schema, and the handler's queue is applied. A bad job fails with a ValidationError
// naming the field ("payload.amount", "jobs[2].payload.amount") before anything is written.
import type { EnqueueRequest } from './contract.js';
import type { HandlerRegistry } from './registry.js';
import { ValidationError } from './validate.js';

export const DEFAULT_QUEUE = 'default';

// A job as code and the ops API give it: the queue may be left to the handler's (or "default").
export type JobRequest = Omit<EnqueueRequest, 'queue'> & { queue?: string };

export interface TypedEnqueueOptions {
  // KEEL_ALLOW_UNKNOWN_JOB_TYPES: accept types this app has no handler for (a producer-only app whose jobs another
  // app runs). Off by default: such a job could only ever be dead-lettered here, so it is refused at enqueue.
  allowUnknownTypes?: boolean;
  // Field prefix for job i: '' for a single job, 'jobs[i]' for a batch (the default).
  prefix?: (i: number, count: number) => string;
}

const defaultPrefix = (i: number, count: number) => (count === 1 ? '' : `jobs[${i}]`);

function field(prefix: string, name: string): string {
  return prefix ? `${prefix}.${name}` : name;
}

function issuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `.${String(p)}`;
  return out;
}

export function prepareTypedJobs(
  registry: HandlerRegistry,
  jobs: readonly JobRequest[],
  opts: TypedEnqueueOptions = {},
): EnqueueRequest[] {
  const prefixOf = opts.prefix ?? defaultPrefix;
  return jobs.map((job, i) => {
    const prefix = prefixOf(i, jobs.length);
    const h = typeof job.type === 'string' ? registry.get(job.type) : undefined;
    if (!h) {
      if (!opts.allowUnknownTypes) {
        const known = registry.types();
        throw new ValidationError(
          field(prefix, 'type'),
          `no handler is registered for job type "${String(job.type)}" (registered: ${known.join(', ') || 'none'}); ` +
            'add one in handlers/, or set KEEL_ALLOW_UNKNOWN_JOB_TYPES=true if another app runs these jobs',
        );
      }
      return { ...job, queue: job.queue ?? DEFAULT_QUEUE };
    }
    const queue = job.queue ?? h.options.queue ?? DEFAULT_QUEUE;
    if (h.options.queue && queue !== h.options.queue) {
      throw new ValidationError(
        field(prefix, 'queue'),
        `jobs of type "${h.type}" run on queue "${h.options.queue}" (its handler's queue), not "${queue}"`,
      );
    }
    let payload = job.payload;
    if (h.options.payload) {
      const r = h.options.payload.safeParse(job.payload);
      if (!r.success) {
        const issue = r.error.issues[0]!;
        throw new ValidationError(field(prefix, `payload${issuePath(issue.path)}`), issue.message);
      }
      payload = r.data;
    }
    // The handler's maxAttempts is not copied onto the row: the processor and zombie rescue both apply the job's
    // own limit, else the handler's (from the registry), else the queue's, so a changed handler limit applies at once.
    return { ...job, queue, ...(payload !== undefined ? { payload } : {}) };
  });
}

// What the transactional helpers share, whatever the database (pg.ts, mssql.ts): the jobs checked by the API's
// rules before the call, and wake(), the post-commit step that posts each new job's queue message.
import {
  applyJobType,
  DEFAULT_QUEUE,
  jobPrefix,
  unknownTypeError,
  type JobInput,
  type JobTypeMap,
} from './jobTypes.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, prepareEnqueue, type EnqueueJob } from './rules.js';

// The part of @azure/storage-queue's QueueClient that wake() calls.
export interface QueueSender {
  sendMessage(messageText: string, options?: { visibilityTimeout?: number }): Promise<unknown>;
}

export interface TransactionalEnqueueOptions<M extends JobTypeMap> {
  jobTypes?: M; // type, queue and payload checks (a type it does not name is refused)
  maxPayloadBytes?: number; // default 256 KiB, as the app's KEEL_MAX_PAYLOAD_BYTES and keel.max_payload_bytes
}

export interface TransactionalEnqueueResult {
  jobs: { id: string; duplicate: boolean }[];
  // After COMMIT: posts a queue message per new job (not duplicates, not delayed past 7 days); returns how many.
  wake(queue: QueueSender): Promise<number>;
}

const MAX_VISIBILITY_DELAY_SECONDS = 7 * 24 * 3600;

export function encodeJobMessage(jobId: string): string {
  return Buffer.from(JSON.stringify({ jobId }), 'utf8').toString('base64');
}

// The jobs as the API would take them (ValidationError naming the field), and the documents the procedure takes.
export function checkJobs<M extends JobTypeMap>(
  jobs: JobInput<M> | readonly JobInput<M>[],
  opts: TransactionalEnqueueOptions<M>,
): { checked: EnqueueJob[]; docs: ReturnType<typeof prepareEnqueue> } {
  const list = (Array.isArray(jobs) ? jobs : [jobs]) as readonly JobInput[];
  const map = opts.jobTypes;
  const checked: EnqueueJob[] = list.map((job, i) => {
    const prefix = jobPrefix(i, list.length);
    if (!map) return { ...job, queue: job.queue ?? DEFAULT_QUEUE };
    const spec = Object.hasOwn(map, job.type) ? map[job.type] : undefined;
    if (!spec) throw unknownTypeError(prefix, job.type, Object.keys(map), "add it to the client's jobTypes");
    return applyJobType(spec, job, prefix); // the parsed payload is stored, as the API stores it
  });
  return { checked, docs: prepareEnqueue(checked, opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES) };
}

// The procedure's answer with its post-commit wake(): each new job's message, with the job's delay as the message's
// visibility timeout (what Keel's own enqueue posts). A job is due when the store's clock passes its runAt, so a
// runAt's delay is counted from the store's clock: `storeNow`, the database's clock as the call answered (the same
// statement's), kept as its offset from this host's (a host an hour ahead posted such a job at once, an hour behind
// an hour late); without it, this host's clock. A delayMs is a span from the enqueue, on any one clock.
export function withWake(
  result: { id: string; duplicate: boolean }[],
  checked: readonly EnqueueJob[],
  storeNow?: Date | null,
): TransactionalEnqueueResult {
  const enqueuedAt = Date.now();
  const storeAhead = storeNow && !Number.isNaN(storeNow.getTime()) ? storeNow.getTime() - enqueuedAt : 0;
  return {
    jobs: result,
    async wake(queue: QueueSender): Promise<number> {
      let posted = 0;
      for (const [i, r] of result.entries()) {
        if (r.duplicate) continue;
        const job = checked[i]!;
        const delayMs = job.runAt
          ? job.runAt.getTime() - (Date.now() + storeAhead)
          : (job.delayMs ?? 0) - (Date.now() - enqueuedAt);
        const delay = Math.max(0, Math.ceil(delayMs / 1000));
        if (delay > MAX_VISIBILITY_DELAY_SECONDS) continue; // the dispatcher starts it when it is due
        await queue.sendMessage(encodeJobMessage(r.id), delay > 0 ? { visibilityTimeout: delay } : {});
        posted++;
      }
      return posted;
    },
  };
}

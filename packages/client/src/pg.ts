// Transactional enqueue on PostgreSQL: keel.enqueue_many inside the producer's own transaction (the outbox pattern
// without an outbox table). The job exists exactly when the producer's own writes do: roll back and there is no job.
//
//   await client.query('BEGIN');
//   await client.query('INSERT INTO billing.invoices ...');
//   const { jobs, wake } = await enqueueInTransaction(client, { type: 'invoice.send', payload, idempotencyKey });
//   await client.query('COMMIT');
//   await wake(jobsQueue);   // after the commit: workers start the jobs at once
//
// The producer's login needs only the role keel_producer (EXECUTE on keel.enqueue_many, nothing else). The jobs are
// checked here by the same rules as the HTTP API (rules.ts, and each type's queue and payload schema from jobTypes)
// before the call, and again by enqueue_many in SQL for a keel_producer session.
//
// Waking workers: enqueue_many sends NOTIFY keel_jobs, delivered at commit, which wakes hosts that listen (the local
// host). An app in Azure starts jobs from its jobs Storage queue (KEEL_JOBS_QUEUE, default keel-jobs) and otherwise
// at the dispatcher's next poll (15 s by default): wake(queue) posts each new job's message, {"jobId": "<id>"} as
// base64-encoded JSON (what the Functions queue trigger and Keel's own enqueue post), with the job's delay as the
// message's visibility timeout. `queue` is anything with sendMessage(text, { visibilityTimeout }) — an
// @azure/storage-queue QueueClient for that queue, with a credential that may send to it (Storage Queue Data
// Message Sender). Call it only after COMMIT: a message for a job that was rolled back is dropped by the worker
// (no such job), but it is a wasted wake-up.
import { IdempotencyConflictError } from './errors.js';
import {
  applyJobType,
  DEFAULT_QUEUE,
  jobPrefix,
  unknownTypeError,
  type JobInput,
  type JobTypeMap,
} from './jobTypes.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, prepareEnqueue, ValidationError, type EnqueueJob } from './rules.js';

// A pg Client or PoolClient (or anything with the same query method) inside the producer's transaction.
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

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

export async function enqueueInTransaction<M extends JobTypeMap = JobTypeMap>(
  client: PgQueryable,
  jobs: JobInput<M> | readonly JobInput<M>[],
  opts: TransactionalEnqueueOptions<M> = {},
): Promise<TransactionalEnqueueResult> {
  const list = (Array.isArray(jobs) ? jobs : [jobs]) as readonly JobInput[];
  const map = opts.jobTypes;
  const checked: EnqueueJob[] = list.map((job, i) => {
    const prefix = jobPrefix(i, list.length);
    if (!map) return { ...job, queue: job.queue ?? DEFAULT_QUEUE };
    const spec = Object.hasOwn(map, job.type) ? map[job.type] : undefined;
    if (!spec) throw unknownTypeError(prefix, job.type, Object.keys(map), "add it to the client's jobTypes");
    return applyJobType(spec, job, prefix); // the parsed payload is stored, as the API stores it
  });
  const docs = prepareEnqueue(checked, opts.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES);
  if (docs.length === 0) return { jobs: [], wake: async () => 0 };
  let rows: any[];
  try {
    ({ rows } = await client.query('select job_ids, duplicates from keel.enqueue_many($1::jsonb)', [
      JSON.stringify(docs),
    ]));
  } catch (err) {
    throw fromDatabase(err, docs.length);
  }
  const ids: string[] = (rows[0]?.job_ids ?? []).map(String);
  const dups: boolean[] = rows[0]?.duplicates ?? [];
  const result = ids.map((id, i) => ({ id, duplicate: dups[i] === true }));
  const enqueuedAt = Date.now();
  return {
    jobs: result,
    async wake(queue: QueueSender): Promise<number> {
      let posted = 0;
      for (const [i, r] of result.entries()) {
        if (r.duplicate) continue;
        const job = checked[i]!;
        const delayMs = job.runAt ? job.runAt.getTime() - Date.now() : (job.delayMs ?? 0) - (Date.now() - enqueuedAt);
        const delay = Math.max(0, Math.ceil(delayMs / 1000));
        if (delay > MAX_VISIBILITY_DELAY_SECONDS) continue; // the dispatcher starts it when it is due
        await queue.sendMessage(encodeJobMessage(r.id), delay > 0 ? { visibilityTimeout: delay } : {});
        posted++;
      }
      return posted;
    },
  };
}

// enqueue_many's refusals as the client's errors: SQLSTATE 22023 "jobs[i].field: message" is a ValidationError,
// 23505 on jobs_hot_idempotency_scope (detail: {index, queue, type, idempotencyKey}) an IdempotencyConflictError.
// Either way the producer's transaction is aborted and must be rolled back.
function fromDatabase(err: unknown, count: number): unknown {
  const e = err as { code?: string; constraint?: string; detail?: string; message?: string };
  if (e?.code === '22023' && typeof e.message === 'string') {
    const at = e.message.indexOf(': ');
    return at > 0 ? new ValidationError(e.message.slice(0, at), e.message.slice(at + 2)) : err;
  }
  if (e?.code === '23505' && e.constraint === 'jobs_hot_idempotency_scope' && e.detail) {
    try {
      const d = JSON.parse(e.detail) as { index: number; queue: string; type: string; idempotencyKey: string };
      const field = count === 1 ? 'idempotencyKey' : `jobs[${d.index}].idempotencyKey`;
      return new IdempotencyConflictError(d.index, d.queue, d.type, d.idempotencyKey, field);
    } catch {
      return err;
    }
  }
  return err;
}

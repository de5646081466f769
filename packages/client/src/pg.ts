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
import type { JobInput, JobTypeMap } from './jobTypes.js';
import { ValidationError } from './rules.js';
import {
  checkJobs,
  withWake,
  type TransactionalEnqueueOptions,
  type TransactionalEnqueueResult,
} from './transactional.js';

export {
  encodeJobMessage,
  type QueueSender,
  type TransactionalEnqueueOptions,
  type TransactionalEnqueueResult,
} from './transactional.js';

// A pg Client or PoolClient (or anything with the same query method) inside the producer's transaction.
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

export async function enqueueInTransaction<M extends JobTypeMap = JobTypeMap>(
  client: PgQueryable,
  jobs: JobInput<M> | readonly JobInput<M>[],
  opts: TransactionalEnqueueOptions<M> = {},
): Promise<TransactionalEnqueueResult> {
  const { checked, docs } = checkJobs(jobs, opts);
  if (docs.length === 0) return { jobs: [], wake: async () => 0 };
  let rows: any[];
  try {
    // clock_timestamp(): the store's clock as the call answers, for wake() (withWake).
    ({ rows } = await client.query(
      'select job_ids, duplicates, clock_timestamp() as store_now from keel.enqueue_many($1::jsonb)',
      [JSON.stringify(docs)],
    ));
  } catch (err) {
    throw fromDatabase(err, docs.length);
  }
  const ids: string[] = (rows[0]?.job_ids ?? []).map(String);
  const dups: boolean[] = rows[0]?.duplicates ?? [];
  const storeNow: unknown = rows[0]?.store_now;
  return withWake(
    ids.map((id, i) => ({ id, duplicate: dups[i] === true })),
    checked,
    storeNow instanceof Date ? storeNow : typeof storeNow === 'string' ? new Date(storeNow) : null,
  );
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

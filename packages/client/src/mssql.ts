// Transactional enqueue on SQL Server: keel.EnqueueMany inside the producer's own transaction. The job exists
// exactly when the producer's own writes do: roll back and there is no job.
//
//   const tx = new sql.Transaction(pool);
//   await tx.begin();
//   await new sql.Request(tx).query('INSERT INTO billing.Invoices ...');
//   const { jobs, wake } = await enqueueInSqlServerTransaction(new sql.Request(tx), { type: 'invoice.send', payload });
//   await tx.commit();
//   await wake(jobsQueue);   // after the commit: workers start the jobs at once (SQL Server has no NOTIFY)
//
// The producer's login needs only the role keel_producer (EXECUTE on keel.EnqueueMany and UPDATE on the id
// sequence, sql/sqlserver/R__900_executor_role.sql). EnqueueMany checks keys, conflicts and reserved keys but not the
// API's field rules, so the client checks the jobs here first (rules.ts, jobTypes). Any error dooms the producer's
// transaction (XACT_ABORT): roll it back. Without wake(), workers find the jobs at the dispatcher's next tick.
import { IdempotencyConflictError } from './errors.js';
import type { JobInput, JobTypeMap } from './jobTypes.js';
import { ValidationError } from './rules.js';
import {
  checkJobs,
  withWake,
  type TransactionalEnqueueOptions,
  type TransactionalEnqueueResult,
} from './transactional.js';

// An mssql Request bound to the producer's transaction (new sql.Request(transaction)); the client does not import
// mssql. A string input travels as nvarchar, as @Jobs is declared.
export interface MssqlRequestLike {
  input(name: string, value: unknown): unknown;
  execute(procedure: string): Promise<{
    recordset?: { Ord?: number; JobId: unknown; Duplicate: unknown }[];
    recordsets?: unknown; // the second: [{StoreNow}], the server's clock (for wake())
  }>;
}

const RESERVED_KEY = 50026; // "jobs[i].idempotencyKey: keys starting with "schedule:" are reserved ..."
const IDEMPOTENCY_CONFLICT = 50025; // "jobs[i].idempotencyKey: held by ... {"index":..,"queue":..,"type":..,...}"

export async function enqueueInSqlServerTransaction<M extends JobTypeMap = JobTypeMap>(
  request: MssqlRequestLike,
  jobs: JobInput<M> | readonly JobInput<M>[],
  opts: TransactionalEnqueueOptions<M> = {},
): Promise<TransactionalEnqueueResult> {
  const { checked, docs } = checkJobs(jobs, opts);
  if (docs.length === 0) return { jobs: [], wake: async () => 0 };
  request.input('Jobs', JSON.stringify(docs));
  let recordset: { Ord?: number; JobId: unknown; Duplicate: unknown }[];
  let storeNow: unknown;
  try {
    const result = await request.execute('keel.EnqueueMany');
    recordset = result.recordset ?? [];
    const sets = result.recordsets as { StoreNow?: unknown }[][] | undefined;
    storeNow = Array.isArray(sets) ? sets.find((set) => set?.[0] && 'StoreNow' in set[0])?.[0]?.StoreNow : undefined;
  } catch (err) {
    throw fromSqlServer(err, docs.length);
  }
  const rows = [...recordset].sort((a, b) => Number(a.Ord ?? 0) - Number(b.Ord ?? 0));
  return withWake(
    rows.map((r) => ({ id: String(r.JobId), duplicate: r.Duplicate === true || r.Duplicate === 1 })),
    checked,
    storeNow instanceof Date ? storeNow : null,
  );
}

// EnqueueMany's refusals as the client's errors: the reserved-key refusal is a ValidationError naming the field,
// a key held with another payload an IdempotencyConflictError.
function fromSqlServer(err: unknown, count: number): unknown {
  const e = err as { number?: number; message?: string };
  if (e?.number === RESERVED_KEY && typeof e.message === 'string') {
    const at = e.message.indexOf(': ');
    const field = at > 0 ? e.message.slice(0, at) : 'idempotencyKey';
    return new ValidationError(count === 1 ? field.replace(/^jobs\[0\]\./, '') : field, e.message.slice(at + 2));
  }
  if (e?.number === IDEMPOTENCY_CONFLICT && typeof e.message === 'string') {
    const at = e.message.indexOf('{"index":');
    if (at < 0) return err;
    try {
      const d = JSON.parse(e.message.slice(at)) as {
        index: number;
        queue: string;
        type: string;
        idempotencyKey: string;
      };
      const field = count === 1 ? 'idempotencyKey' : `jobs[${d.index}].idempotencyKey`;
      return new IdempotencyConflictError(d.index, d.queue, d.type, d.idempotencyKey, field);
    } catch {
      return err;
    }
  }
  return err;
}

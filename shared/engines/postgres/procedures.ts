// The PostgreSQL side of JOB_PROCEDURES (shared/jobs/procedures.ts): per procedure, the SQL type of each parameter
// of keel.<snake_name>(p_<param>, ...), in declaration order, and what the function returns (a set of rows, or one
// value of a type). The store calls the functions only through postgresCall(), which builds the statement from this
// table (pgStatement does the same for the transfer journal's table); test/engines/parity.test.ts compares the
// tables with the functions in a migrated database (pg_proc).
import type { JOB_PROCEDURES, JobProcedure } from '../../jobs/procedures.js';

export type PgType =
  'bigint' | 'bigint[]' | 'boolean' | 'integer' | 'jsonb' | 'text' | 'text[]' | 'timestamptz' | 'uuid';
type ParamName<P extends JobProcedure> = (typeof JOB_PROCEDURES)[P][number];

// One function of a procedure table (this one, or the transfer journal's JOURNAL_POSTGRES_FUNCTIONS).
export interface PgSignature<Param extends string = string> {
  params: { [K in Param]: PgType };
  returns: 'rows' | PgType | 'void'; // 'rows': returns table / setof; otherwise a single value of that type (or none)
  // 'rows' only: the select list over the call (aliased r) when a column is a composite to expand, e.g. (r.batch).*
  select?: string;
}
export type PgFunction<P extends JobProcedure> = PgSignature<ParamName<P>>;

// The parameters of JOB_FILTER_PARAMS (search_jobs and count_jobs).
const JOB_FILTER = {
  location: 'text',
  queue: 'text',
  type: 'text',
  tag: 'text',
  state: 'text',
  reason: 'text',
  from: 'timestamptz',
  to: 'timestamptz',
} as const;

export const POSTGRES_FUNCTIONS: { [P in JobProcedure]: PgFunction<P> } = {
  enqueue_many: { params: { jobs: 'jsonb' }, returns: 'rows' },
  claim_next: {
    params: { worker_id: 'text', queues: 'text[]', limit: 'integer', lease_seconds: 'integer' },
    returns: 'rows',
  },
  claim_by_id: { params: { job_id: 'bigint', worker_id: 'text', lease_seconds: 'integer' }, returns: 'rows' },
  pick_due: { params: { queues: 'text[]', limit: 'integer' }, returns: 'rows' },
  claim_and_start: {
    params: { worker_id: 'text', queues: 'text[]', limit: 'integer', lease_seconds: 'integer' },
    returns: 'rows',
  },
  start_many: { params: { leases: 'jsonb' }, returns: 'rows' },
  heartbeat: { params: { job_id: 'bigint', lease_id: 'text' }, returns: 'rows' },
  heartbeat_many: { params: { leases: 'jsonb' }, returns: 'rows' },
  complete_many: { params: { leases: 'jsonb', results: 'jsonb' }, returns: 'rows' },
  report_progress: { params: { job_id: 'bigint', lease_id: 'text', progress: 'jsonb' }, returns: 'text' },
  append_job_log: {
    params: { job_id: 'bigint', lease_id: 'text', lines: 'jsonb', max_lines: 'integer' },
    returns: 'text',
  },
  retry: {
    params: { job_id: 'bigint', lease_id: 'text', run_at: 'timestamptz', error: 'text', delay_ms: 'bigint' },
    returns: 'text',
  },
  fail: { params: { job_id: 'bigint', lease_id: 'text', reason: 'text', error: 'text' }, returns: 'text' },
  release: { params: { job_id: 'bigint', lease_id: 'text' }, returns: 'text' },
  interrupt: { params: { job_id: 'bigint', lease_id: 'text', error: 'text' }, returns: 'text' },
  cancel: { params: { job_id: 'bigint' }, returns: 'text' },
  cancel_many: { params: { job_ids: 'bigint[]' }, returns: 'rows' },
  rescue_zombies: { params: { limit: 'integer', type_max_attempts: 'jsonb' }, returns: 'rows' },
  resurrect: { params: { job_ids: 'bigint[]' }, returns: 'rows' },
  resurrect_by_filter: {
    params: {
      queue: 'text',
      type: 'text',
      reason: 'text',
      failed_after: 'timestamptz',
      failed_before: 'timestamptz',
      limit: 'integer',
      dry_run: 'boolean',
    },
    returns: 'rows',
  },
  purge: {
    params: { target: 'text', queue: 'text', older_than: 'timestamptz', batch_size: 'integer' },
    returns: 'bigint',
  },
  stats: { params: {}, returns: 'rows' },
  metrics: { params: { window_minutes: 'integer', queue: 'text' }, returns: 'rows' },
  list_queues: { params: { name: 'text' }, returns: 'rows' },
  update_queue: {
    params: {
      name: 'text',
      paused: 'boolean',
      max_concurrency: 'integer',
      clear_max_concurrency: 'boolean',
      zombie_timeout_seconds: 'integer',
      zombie_policy: 'text',
      max_attempts: 'integer',
      archive_retention_seconds: 'integer',
      dlq_retention_seconds: 'integer',
      metrics_retention_seconds: 'integer',
      expected: 'jsonb',
    },
    returns: 'rows',
  },
  get_job: { params: { job_id: 'bigint' }, returns: 'rows' },
  job_links: { params: { job_id: 'bigint' }, returns: 'rows' },
  search_jobs: {
    params: {
      ...JOB_FILTER,
      text: 'text',
      after_id: 'bigint',
      scan_rows: 'integer',
      limit: 'integer',
      priority: 'integer',
      idempotency_key: 'text',
      oldest: 'boolean',
    },
    returns: 'rows',
  },
  count_jobs: {
    params: { ...JOB_FILTER, cap: 'integer' },
    returns: 'rows',
  },
  dlq_groups: {
    params: { queue: 'text', offset: 'integer', limit: 'integer', scan_rows: 'integer' },
    returns: 'rows',
  },
  list_workers: { params: {}, returns: 'rows' },
  register_worker: {
    params: {
      worker_id: 'text',
      host: 'text',
      instance_id: 'text',
      pid: 'integer',
      app_version: 'text',
      build_id: 'text',
      queues: 'text',
      concurrency: 'integer',
      started_at: 'timestamptz',
      jobs_done: 'bigint',
    },
    returns: 'timestamptz',
  },
  deregister_worker: { params: { worker_id: 'text' }, returns: 'boolean' },
  prune_workers: { params: { older_than: 'timestamptz' }, returns: 'bigint' },
  list_schedules: { params: { name: 'text' }, returns: 'rows' },
  set_schedule_paused: { params: { name: 'text', paused: 'boolean' }, returns: 'rows' },
  fire_schedule: {
    params: { name: 'text', expected_tick: 'timestamptz', tick: 'timestamptz', jobs: 'jsonb' },
    returns: 'rows',
  },
  record_audit: {
    params: {
      principal_id: 'text',
      principal_name: 'text',
      tenant_id: 'text',
      app_id: 'text',
      auth_method: 'text',
      channel: 'text',
      role: 'text',
      required_role: 'text',
      http_method: 'text',
      action: 'text',
      target: 'text',
      summary: 'text',
      outcome: 'text',
      status: 'integer',
      reason: 'text',
      affected: 'bigint',
      request_id: 'text',
      client_ip: 'text',
    },
    returns: 'bigint',
  },
  finish_audit: {
    params: { id: 'bigint', outcome: 'text', status: 'integer', reason: 'text', affected: 'bigint' },
    returns: 'boolean',
  },
  search_audit: {
    params: {
      from: 'timestamptz',
      to: 'timestamptz',
      principal: 'text',
      action: 'text',
      target: 'text',
      outcome: 'text',
      before_id: 'bigint',
      scan_rows: 'integer',
      limit: 'integer',
    },
    returns: 'rows',
  },
  purge_audit: { params: { older_than: 'timestamptz', batch_size: 'integer' }, returns: 'bigint' },
};

// The arguments of one call: exactly the procedure's parameters (by their JOB_PROCEDURES names).
export type PostgresArgs<P extends JobProcedure> = { [K in ParamName<P>]: unknown };

// The statement and its bound values for keel.<proc>: named notation (p_<param> => $n::type), so PostgreSQL itself
// refuses a parameter the table misnames, and every value travels as a parameter. A function returning one value
// is read as a one-row result with that value in column `result`.
export function postgresCall<P extends JobProcedure>(
  proc: P,
  args: PostgresArgs<P>,
): { text: string; values: unknown[] } {
  return pgStatement(proc, POSTGRES_FUNCTIONS[proc] as PgSignature, args as Record<string, unknown>);
}

// The text of each function's statement, built once: it depends only on the signature, the name and the schema, and
// building it (a map, joins and template strings) cost every call what binding its values costs.
const statementTexts = new WeakMap<PgSignature, Map<string, { names: string[]; text: string }>>();

function statementText(name: string, fn: PgSignature, schema: string): { names: string[]; text: string } {
  let bySchemaName = statementTexts.get(fn);
  if (!bySchemaName) statementTexts.set(fn, (bySchemaName = new Map()));
  const key = `${schema}.${name}`;
  let s = bySchemaName.get(key);
  if (!s) {
    const names = Object.keys(fn.params);
    const types = fn.params as Record<string, PgType>;
    const list = names.map((n, i) => `p_${n} => $${i + 1}::${types[n]}`).join(', ');
    const call = `${schema}.${name}(${list})`;
    const text =
      fn.returns !== 'rows'
        ? `select ${call} as result`
        : fn.select
          ? `select ${fn.select} from ${call} r`
          : `select * from ${call}`;
    bySchemaName.set(key, (s = { names, text }));
  }
  return s;
}

// postgresCall for any procedure table: `name` is the function's name in `schema` (keel, or keel_transfer on a
// transfer target).
export function pgStatement(
  name: string,
  fn: PgSignature,
  args: Record<string, unknown>,
  schema = 'keel',
): { text: string; values: unknown[] } {
  const { names, text } = statementText(name, fn, schema);
  const given = Object.keys(args);
  if (given.length !== names.length || given.some((n) => !names.includes(n))) {
    throw new Error(`${schema}.${name} takes (${names.join(', ')}), got (${given.join(', ')})`);
  }
  return { text, values: names.map((n) => args[n] ?? null) };
}

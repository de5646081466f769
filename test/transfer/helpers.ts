// Shared setup for the transfer tests: source, target and control databases on the run's PostgreSQL server.
import pg from 'pg';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal } from '../support/journalMigrations.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { parseTransfers, type TransferConfig, type TransferInput } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { migratePostgresTarget } from '../../shared/engines/postgres/transferEndpoints.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { pgTransferPoolConfig, type TransferTimeouts } from '../../shared/transfer/timeouts.js';
import { FaultProxy } from '../support/faultProxy.js';
import type { SourceAdapter } from '../../shared/transfer/types.js';

const TRANSFER_RULES = transferEngineRules();

export { migrateJournal };

export interface Env {
  sourceUrl: string;
  targetUrl: string;
  controlUrl: string;
  source: pg.Pool;
  target: pg.Pool;
  control: pg.Pool;
  close(): Promise<void>;
}

export async function setupDatabases(prefix: string): Promise<Env> {
  const [sourceUrl, targetUrl, controlUrl] = await Promise.all([
    createTestDatabase(`${prefix}_src`),
    createTestDatabase(`${prefix}_tgt`),
    createTestDatabase(`${prefix}_ctl`),
  ]);
  const source = new pg.Pool({ connectionString: sourceUrl, max: 4 });
  const target = new pg.Pool({ connectionString: targetUrl, max: 4 });
  const control = new pg.Pool({ connectionString: controlUrl, max: 4 });
  for (const p of [source, target, control]) p.on('error', poolErrorLogger('postgres', 'transfer', 'test pool'));
  await migrateJournal(control);
  await migratePostgresTarget(target);
  return {
    sourceUrl,
    targetUrl,
    controlUrl,
    source,
    target,
    control,
    close: async () => {
      await Promise.all([source.end(), target.end(), control.end()]);
    },
  };
}

export const ORDERS_DDL = `create table public.orders (
  id bigint primary key,
  customer text,
  amount numeric(12,2),
  placed_at timestamptz,
  flag boolean,
  note varchar(200),
  payload bytea)`;

// Target side: the same table, plus a trigger counting how often each key was written (exactly-once check).
export const TARGET_DDL = `${ORDERS_DDL};
create table public.write_counts (id bigint primary key, writes integer not null);
create function public.count_write() returns trigger language plpgsql as $$
begin
  -- tests that need a slow apply set keel_test.write_delay (seconds per row) on their connections
  perform pg_sleep(coalesce(nullif(current_setting('keel_test.write_delay', true), '')::float8, 0));
  insert into public.write_counts (id, writes) values (new.id, 1)
  on conflict (id) do update set writes = public.write_counts.writes + 1;
  return new;
end $$;
create trigger orders_count after insert or update on public.orders for each row execute function public.count_write();`;

export async function insertSourceRows(
  pool: pg.Pool,
  from: number,
  to: number,
  table = 'public.orders',
): Promise<void> {
  if (!/^[a-z_][a-z0-9_.]*$/.test(table)) throw new Error(`bad test table name ${table}`);
  await pool.query(
    `insert into ${table} (id, customer, amount, placed_at, flag, note, payload)
     select n, 'customer-' || (n % 97) || case when n % 13 = 0 then E'\\ttab\\nline\\\\slash' else '' end,
            case when n % 17 = 0 then null else round((n % 1000) * 1.37, 2) end,
            timestamptz '2026-01-01 00:00:00.123456+00' + n * interval '1 minute 0.000001 second',
            n % 2 = 0, case when n % 5 = 0 then null else 'note ' || n || ' ✓' end,
            case when n % 3 = 0 then decode(lpad(to_hex(n), 8, '0'), 'hex') else null end
       from generate_series($1::bigint, $2::bigint) as n`,
    [from, to],
  );
}

export function ordersTransfer(name: string, overrides: Partial<TransferInput> = {}): TransferConfig {
  const input: TransferInput = {
    name,
    source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: 'public.orders' },
    target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders' },
    keyColumns: ['id'],
    boundary: { column: 'id', kind: 'key' },
    columns: ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'].map((c) => ({
      source: c,
      target: c,
    })),
    batchSize: 1000,
    chunkSize: 100,
    reconcileWaitMs: 300,
    ...overrides,
  };
  return parseTransfers([input], TRANSFER_RULES)[0]!;
}

export function makeService(
  env: { control: pg.Pool; source: pg.Pool; target: pg.Pool },
  transfers: TransferConfig[],
  targetPool?: pg.Pool,
): TransferService {
  return new TransferService({
    journal: new PostgresTransferJournal(env.control),
    transfers,
    connect: (t) => ({
      source: new PostgresTransferSource(t, env.source),
      target: new PostgresTransferTarget(t, targetPool ?? env.target),
    }),
  });
}

// Same content on both sides, every source row exactly once in the target and written once.
export async function assertExactlyOnce(
  env: Env,
  upTo?: number,
): Promise<{ source: number; target: number; maxWrites: number }> {
  const cols = 'id, customer, amount, placed_at, flag, note, payload';
  const where = upTo === undefined ? '' : ` where id <= ${Math.trunc(upTo)}`;
  const s = await env.source.query(
    `select md5(coalesce(string_agg(t::text, '|' order by id), '')) as h, count(*)::int as n from (select ${cols} from public.orders${where}) t`,
  );
  const t = await env.target.query(
    `select md5(coalesce(string_agg(t::text, '|' order by id), '')) as h, count(*)::int as n from (select ${cols} from public.orders${where}) t`,
  );
  const w = await env.target.query(`select coalesce(max(writes), 0)::int as m from public.write_counts`);
  if (s.rows[0].h !== t.rows[0].h)
    throw new Error(`target content differs from source (${s.rows[0].n} vs ${t.rows[0].n} rows)`);
  return { source: s.rows[0].n, target: t.rows[0].n, maxWrites: w.rows[0].m };
}

// Lanes: independent transfers that run concurrently in one test (each its own source and target table, the target
// counting writes per key in public.lane_writes). Same content as public.orders.
export const LANE_WRITES_DDL = `create table if not exists public.lane_writes (tbl text not null, id bigint not null, writes integer not null, primary key (tbl, id));
create or replace function public.count_lane_write() returns trigger language plpgsql as $$
begin
  perform pg_sleep(coalesce(nullif(current_setting('keel_test.write_delay', true), '')::float8, 0));
  insert into public.lane_writes (tbl, id, writes) values (tg_table_name, new.id, 1)
  on conflict (tbl, id) do update set writes = public.lane_writes.writes + 1;
  return new;
end $$;`;

export async function createLane(env: Env, table: string, rows: number): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(table)) throw new Error(`bad lane table ${table}`);
  const ddl = ORDERS_DDL.replace('public.orders', `public.${table}`);
  await env.source.query(ddl);
  await insertSourceRows(env.source, 1, rows, `public.${table}`);
  await env.target.query(ddl);
  await env.target.query(
    `create trigger ${table}_count after insert or update on public.${table} for each row execute function public.count_lane_write()`,
  );
}

export function laneTransfer(table: string, overrides: Partial<TransferInput> = {}): TransferConfig {
  return ordersTransfer(table, {
    source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: `public.${table}` },
    target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: `public.${table}` },
    ...overrides,
  });
}

// Problems found (empty = consistent): the lane's target rows up to `upTo` equal the source's, every key was written
// at most once, and for every batch of the transfer the journal and the target agree (committed in the journal
// exactly when the target holds a committed completion row; at most one committed completion per window).
export async function laneProblems(env: Env, table: string, upTo: number): Promise<string[]> {
  const problems: string[] = [];
  const cols = 'id, customer, amount, placed_at, flag, note, payload';
  const q = `select md5(coalesce(string_agg(t::text, '|' order by id), '')) as h, count(*)::int as n from (select ${cols} from public.${table} where id <= $1) t`;
  const s = await env.source.query(q, [upTo]);
  const t = await env.target.query(q, [upTo]);
  if (s.rows[0].h !== t.rows[0].h)
    problems.push(`target rows differ from the source window (${s.rows[0].n} source rows, ${t.rows[0].n} target rows)`);
  const w = await env.target.query(
    `select coalesce(max(writes), 0)::int as m, count(*) filter (where writes > 1)::int as twice from public.lane_writes where tbl = $1`,
    [table],
  );
  if (w.rows[0].m > 1) problems.push(`${w.rows[0].twice} keys written more than once (max ${w.rows[0].m})`);
  const j = await env.control.query(
    `select batch_id::text as id, state, boundary_low as low, boundary_high as high from keel.transfer_batches where transfer_name = $1`,
    [table],
  );
  const ids = j.rows.map((r) => r.id as string);
  const c = await env.target.query(
    `select batch_id::text as id, state from keel_transfer.completions where batch_id = any($1::uuid[])`,
    [ids],
  );
  const target = new Map<string, string>(c.rows.map((r) => [r.id as string, r.state as string]));
  const windows = new Map<string, number>();
  for (const r of j.rows) {
    const committedOnTarget = target.get(r.id) === 'committed';
    if ((r.state === 'committed') !== committedOnTarget)
      problems.push(`batch ${r.id}: journal says ${r.state}, target says ${target.get(r.id) ?? 'no completion row'}`);
    if (committedOnTarget) {
      const key = `${r.low ?? ''}..${r.high}`;
      windows.set(key, (windows.get(key) ?? 0) + 1);
    }
  }
  for (const [k, n] of windows) if (n > 1) problems.push(`window ${k} has ${n} committed completions`);
  return problems;
}

// Counts crashes: 'error' events and rejections nobody handled while a test ran (vitest also fails on them).
export function crashCounter(): { count: () => number; stop: () => void; errors: unknown[] } {
  const errors: unknown[] = [];
  const onErr = (e: unknown) => errors.push(e);
  process.on('uncaughtException', onErr);
  process.on('unhandledRejection', onErr);
  return {
    errors,
    count: () => errors.length,
    stop: () => {
      process.off('uncaughtException', onErr);
      process.off('unhandledRejection', onErr);
    },
  };
}

// Short timeouts for the fault and race tests (production defaults: shared/transfer/timeouts.ts), still far above
// what a healthy step needs: a step that would hang ends with an error instead.
export const FAULT_TEST_TIMEOUTS: TransferTimeouts = {
  connectMs: 5_000,
  statementMs: 20_000,
  queryMs: 25_000,
  idleInTransactionMs: 10_000,
  lockMs: 10_000,
  stallMs: 5_000,
};

// A TCP proxy in front of the target database that the fault tests cut (test/support/faultProxy.ts).
export async function targetProxy(env: Env): Promise<FaultProxy> {
  const u = new URL(env.targetUrl);
  return FaultProxy.start(u.hostname, Number(u.port));
}

// A target pool through that proxy. Each row the target writes or merges costs `writeDelayS` seconds (its write
// trigger, keel_test.write_delay), so a cut can land inside a COPY or an apply. `checked` (the default): the server
// notices a vanished client during a long statement (client_connection_check_interval) instead of finishing it;
// unchecked, it finishes and commits an apply whose client vanished, and only the target can say so.
export function proxiedTargetPool(
  proxy: FaultProxy,
  env: Env,
  o: { writeDelayS: number; checked?: boolean; label: string },
): pg.Pool {
  const pool = new pg.Pool({
    ...pgTransferPoolConfig(proxy.urlFor(env.targetUrl), FAULT_TEST_TIMEOUTS, 3),
    options: `${o.checked === false ? '' : '-c client_connection_check_interval=10 '}-c keel_test.write_delay=${o.writeDelayS}`,
  });
  pool.on('error', poolErrorLogger('postgres', 'transfer', o.label));
  return pool;
}

// The journal's events of one batch, in order.
export async function batchEvents(env: Env, batchId: string): Promise<string[]> {
  const r = await env.control.query<{ event: string }>(
    `select event from keel.transfer_batch_events where batch_id = $1 order by event_id`,
    [batchId],
  );
  return r.rows.map((x) => x.event);
}

// The target's completion row of one batch (none, or one).
export async function completionRows(
  env: Env,
  batchId: string,
): Promise<{ n: number; checksum: string | null; state: string }[]> {
  const r = await env.target.query(
    `select row_count::int as n, checksum, state from keel_transfer.completions where batch_id = $1`,
    [batchId],
  );
  return r.rows;
}

// What an operator's retries do after a fault, with the same batch id: reconcile a batch in doubt (applying, or
// unresolved: again after 20 ms), run one that is not, until it is committed or ends otherwise (at most 100 steps).
export async function recoverUntilCommitted(svc: TransferService, v: BatchView): Promise<BatchView> {
  for (let i = 0; i < 100 && v.state !== 'committed'; i++) {
    if (v.state === 'applying' || v.state === 'unresolved') {
      v = await svc.reconcile(v.batchId);
      if (v.state === 'unresolved') await new Promise((r) => setTimeout(r, 20));
    } else if (v.state === 'extracting' || v.state === 'staged') {
      v = await svc.run(v.batchId); // the retry reuses the batch id
    } else break;
  }
  return v;
}

// A SQL Server-shaped source over a PostgreSQL one: canonical rows in new arrays (keel-v1, no COPY text), with or
// without a snapshot read (one source read).
export function sqlServerShapedSource(s: PostgresTransferSource, opts: { oneRead: boolean }): SourceAdapter {
  return {
    engine: 'postgres',
    readSchema: () => s.readSchema(),
    nextWindow: (low, max) => s.nextWindow(low, max),
    manifest: (w, schema, algorithm) => s.manifest(w, schema, algorithm),
    checksumAlgorithms: async () => ['keel-v1'],
    streamRows: async function* (w, schema, n, facts) {
      for await (const chunk of s.streamRows(w, schema, n, facts)) yield [...chunk];
    },
    windowKeys: (w, schema) => s.windowKeys(w, schema),
    ...(opts.oneRead ? { readsSnapshot: () => s.readsSnapshot() } : {}),
    close: () => s.close(),
  };
}

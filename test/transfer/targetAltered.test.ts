// A target table altered between prepare and apply (an operator's ALTER TABLE while the app runs). prepare's column
// checks run once per process and schema, and the staging table keeps the target's column types from when it was
// made; the staged rows are verified in those types. Before, a column altered since (numeric(12,2) -> numeric(12,1))
// converted the verified values on their way into the business table: the batch committed rows rounded, not the
// source's (direct apply found the difference by its checksum, fell back to staging, and committed them so too).
// Now apply_batch compares the target's column types with the staged ones under its table lock and refuses the
// batch (target_incompatible: failed, window released); the service checks the table again before the next batch,
// which is refused while the target cannot hold the source's values, and moves the window exactly once the table
// can (the staging table made again in the new types). A compatible change (a wider numeric) costs one batch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import {
  createLane,
  insertSourceRows,
  LANE_WRITES_DDL,
  laneTransfer,
  ORDERS_DDL,
  setupDatabases,
  type Env,
} from './helpers.js';

describe('target table altered between prepare and apply', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_alt');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  const service = (t: TransferConfig, directApply: boolean) =>
    new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply,
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });

  // Rows (from, to] of the lane: target equals source (text form of every column), each key written once.
  async function windowProblems(table: string, from: number, to: number): Promise<string[]> {
    const q = `select md5(coalesce(string_agg(t::text, '|' order by id), '')) as h, count(*)::int as n
                 from (select id, customer, amount, placed_at, flag, note, payload from public.${table} where id > $1 and id <= $2) t`;
    const [s, t] = await Promise.all([env.source.query(q, [from, to]), env.target.query(q, [from, to])]);
    const w = await env.target.query(
      `select coalesce(max(writes), 0)::int as m from public.lane_writes where tbl = $1 and id > $2 and id <= $3`,
      [table, from, to],
    );
    const problems: string[] = [];
    if (s.rows[0].h !== t.rows[0].h) problems.push(`rows (${from}, ${to}] differ (${s.rows[0].n} vs ${t.rows[0].n})`);
    if (w.rows[0].m > 1) problems.push(`a key of (${from}, ${to}] written ${w.rows[0].m} times`);
    return problems;
  }

  for (const direct of [false, true]) {
    const mode = direct ? 'direct' : 'staged';

    it(`a narrower numeric scale: the batch is refused, no rounded row commits; moved once the column is restored (${mode})`, async () => {
      const table = `alt_n${direct ? 'd' : 's'}`;
      await createLane(env, table, 30);
      const t = laneTransfer(table, { batchSize: 10 });
      const svc = service(t, direct);
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
      await env.target.query(`alter table public.${table} alter column amount type numeric(12,1)`);

      const second = await svc.run((await svc.createBatch(t.name)).batchId);
      expect([second.state, second.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
      expect(second.lastError).toMatch(
        /changed since the batch was staged.*amount is numeric\(12,1\), staged as numeric\(12,2\)/,
      );
      expect((await env.target.query(`select count(*)::int as n from public.${table} where id > 10`)).rows[0].n).toBe(
        0,
      );
      // The table is checked again: no batch while amount cannot hold the source's values.
      const refused = await svc.createBatch(t.name).catch((e: unknown) => e);
      expect(isTransferError(refused, 'target_incompatible')).toBe(true);

      await env.target.query(`alter table public.${table} alter column amount type numeric(12,2)`);
      for (let n = 0; n < 2; n++) {
        const next = await svc.createBatch(t.name);
        if (n === 0) expect([next.boundary.low, next.boundary.high]).toEqual(['10', '20']);
        expect((await svc.run(next.batchId)).state).toBe('committed');
      }
      expect(await windowProblems(table, 10, 30)).toEqual([]);
      await svc.close();
    });

    it(`a wider numeric: one batch refused, then the window moves in the new type (${mode})`, async () => {
      const table = `alt_w${direct ? 'd' : 's'}`;
      await createLane(env, table, 30);
      const t = laneTransfer(table, { batchSize: 10 });
      const svc = service(t, direct);
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
      await env.target.query(`alter table public.${table} alter column amount type numeric(14,2)`);
      const runs: string[] = [];
      for (let n = 0; n < 4; n++) {
        const next = await svc.tryCreateBatch(t.name);
        if (!next) break;
        const v = await svc.run(next.batchId);
        runs.push(`${v.boundary.low}-${v.boundary.high}:${v.state}`);
      }
      // Staged: the batch staged in the old type is refused once. Direct: its rows go straight into the table,
      // verified there, so nothing is refused.
      expect(runs).toEqual(
        direct ? ['10-20:committed', '20-30:committed'] : ['10-20:failed', '10-20:committed', '20-30:committed'],
      );
      expect(await windowProblems(table, 0, 30)).toEqual([]);
      const staged = await env.target.query(
        `select format_type(a.atttypid, a.atttypmod) as t from pg_attribute a
          where a.attrelid = $1::regclass and a.attname = 'amount'`,
        [`keel_transfer.stg_${table}`],
      );
      if (!direct) expect(staged.rows[0].t).toBe('numeric(14,2)'); // made again in the new type
      await svc.close();
    });
  }

  // The staging table is made again only while it is empty. A staging of another run (another instance that has
  // not seen the change yet) still open when the table is found empty must not be dropped once it commits: its
  // batch would be staged (target registry and journal) with its rows gone. Forced here: the other run's rows are
  // written and held uncommitted while ensure_staging runs.
  it('the staging table is not made again under a staging still open', async () => {
    const table = 'alt_r';
    await createLane(env, table, 0);
    const cols = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'];
    const ensure = (c: { query: typeof env.target.query }) =>
      c.query(`select keel_transfer.ensure_staging($1, 'public', $1, $2::text[], false) as name`, [table, cols]);
    await ensure(env.target);
    const other = await env.target.connect();
    const mine = await env.target.connect();
    try {
      await other.query('begin');
      await other.query(
        `insert into keel_transfer.stg_${table} (id, customer, amount, keel_batch_id) values (1, 'a', 1.25, gen_random_uuid())`,
      );
      await env.target.query(`alter table public.${table} alter column amount type numeric(14,2)`);
      await mine.query(`set lock_timeout = '20s'`);
      const made = ensure(mine as never).then(
        () => 'made again',
        (e: { code?: string }) => e.code,
      );
      // ensure_staging waits for the open staging (a lock not granted on the staging table), then sees its row.
      for (let i = 0; i < 200; i++) {
        const w = await env.target.query(
          `select count(*)::int as n from pg_locks l where not l.granted and l.relation = $1::regclass`,
          [`keel_transfer.stg_${table}`],
        );
        if (w.rows[0].n > 0) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await other.query('commit');
      expect(await made).toBe('KT004');
      const kept = await env.target.query(`select count(*)::int as n from keel_transfer.stg_${table}`);
      expect(kept.rows[0].n).toBe(1);
    } finally {
      other.release();
      mine.release();
    }
  });

  // What the staging of a change window holds is counted before its apply deletes anything: a staged batch whose
  // rows are gone from the staging table (as when the table was dropped under a staging, above) fails and its
  // window is extracted again -- before, its apply counted the 'D' and 'U' rows from the emptied table and committed
  // the window having applied nothing (the journal and the completion row saying it was applied).
  it('a change window whose staged rows are gone is not committed', async () => {
    const table = 'alt_c';
    await migratePostgresChangeCapture(env.source);
    const ddl = ORDERS_DDL.replace('public.orders', `public.${table}`);
    await env.source.query(ddl);
    await env.target.query(ddl);
    await insertSourceRows(env.source, 1, 5, `public.${table}`);
    await env.source.query(`select keel_changes.enable($1, array['id'])`, [`public.${table}`]);
    const t = laneTransfer(table, { boundary: { kind: 'changes' }, batchSize: 100 });
    const svc = service(t, false);
    for (let b = await svc.tryCreateBatch(t.name); b; b = await svc.tryCreateBatch(t.name))
      expect((await svc.run(b.batchId)).state).toBe('committed'); // the baseline
    await env.source.query(`delete from public.${table} where id = 2`);
    await insertSourceRows(env.source, 6, 6, `public.${table}`);

    const open = await svc.createBatch(t.name);
    expect((await svc.stage(open.batchId)).state).toBe('staged');
    await env.target.query(`delete from keel_transfer.stg_${table} where keel_batch_id = $1`, [open.batchId]);
    const after = await svc.apply(open.batchId);
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
    expect(after.lastError).toMatch(/holds 0 of its 2 staged rows/);
    const ids = async () =>
      (await env.target.query(`select array_agg(id::int order by id) as a from public.${table}`)).rows[0].a;
    expect(await ids()).toEqual([1, 2, 3, 4, 5]);

    for (let b = await svc.tryCreateBatch(t.name); b; b = await svc.tryCreateBatch(t.name))
      expect((await svc.run(b.batchId)).state).toBe('committed');
    expect(await ids()).toEqual([1, 3, 4, 5, 6]);
    await svc.close();
  });

  // The same for a key window of a table whose every column is its key (no column to update: its merge counts
  // only the keys it inserted): the fast path's insert counts every staged row, so rows gone fail the batch.
  it('a key-only window whose staged rows are gone is not committed', async () => {
    const table = 'alt_k';
    const ddl = `create table public.${table} (id bigint primary key)`;
    await env.source.query(ddl);
    await env.target.query(ddl);
    await env.source.query(`insert into public.${table} select generate_series(1, 20)`);
    const t = laneTransfer(table, { batchSize: 10, columns: [{ source: 'id', target: 'id' }] });
    const svc = service(t, false);
    const open = await svc.createBatch(t.name);
    expect((await svc.stage(open.batchId)).state).toBe('staged');
    await env.target.query(`delete from keel_transfer.stg_${table} where keel_batch_id = $1`, [open.batchId]);
    const after = await svc.apply(open.batchId);
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
    for (let b = await svc.tryCreateBatch(t.name); b; b = await svc.tryCreateBatch(t.name))
      expect((await svc.run(b.batchId)).state).toBe('committed');
    const n = await env.target.query(`select count(*)::int as n, max(id)::int as m from public.${table}`);
    expect(n.rows[0]).toEqual({ n: 20, m: 20 });
    await svc.close();
  });

  // Direct apply chooses binary COPY when both sides declare the same type, from the types prepare read. A target
  // integer widened to bigint since (compatible: prepare accepts it) must not fail every batch with the binary
  // int4 stream the bigint column cannot read.
  it('an integer widened to bigint: the windows still move, each row once (direct)', async () => {
    const ddl = `create table public.alt_i (id bigint primary key, n integer not null)`;
    await env.source.query(ddl);
    await env.target.query(`${ddl};
      create trigger alt_i_count after insert or update on public.alt_i for each row execute function public.count_lane_write()`);
    await env.source.query(`insert into public.alt_i select g, g * 7 from generate_series(1, 30) g`);
    const t = laneTransfer('alt_i', {
      batchSize: 10,
      columns: ['id', 'n'].map((c) => ({ source: c, target: c })),
    });
    const svc = service(t, true);
    expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
    await env.target.query(`alter table public.alt_i alter column n type bigint`);
    const runs: string[] = [];
    // Each batch run until it ends (a retryable failure is retried, as the queue steps would).
    for (let n = 0; n < 6; n++) {
      const open = (await svc.listBatches({ transfer: t.name, limit: 1 }))[0];
      const next =
        open && open.status !== 'committed' && open.state !== 'failed' ? open : await svc.tryCreateBatch(t.name);
      if (!next) break;
      const v = await svc.run(next.batchId);
      runs.push(`${v.boundary.low}-${v.boundary.high}:${v.state}${v.lastErrorCode ? `:${v.lastErrorCode}` : ''}`);
    }
    // At most one attempt lost to the binary stream read with the old type, never a batch failed.
    expect(runs.filter((r) => r.includes(':committed'))).toEqual(['10-20:committed', '20-30:committed']);
    expect(runs.filter((r) => r.includes(':failed'))).toEqual([]);
    expect(runs.length).toBeLessThanOrEqual(3);
    const q = `select md5(string_agg(id || ':' || n, ',' order by id)) as h from public.alt_i`;
    const [s, tg] = await Promise.all([env.source.query(q), env.target.query(q)]);
    expect(tg.rows[0].h).toBe(s.rows[0].h);
    const w = await env.target.query(`select max(writes)::int as m from public.lane_writes where tbl = 'alt_i'`);
    expect(w.rows[0].m).toBe(1);
    await svc.close();
  });
});

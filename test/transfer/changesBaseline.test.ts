// The windowed baseline of a 'changes' transfer (docs/transfer.md "Deletes", shared/transfer/changes.ts) on the twin:
// the baseline runs in key windows of batchSize rows, each mirroring only its key range, at the version captured
// before its first window; the first change window starts at that version, so changes made during the baseline are
// not lost. Faults: a cut while a baseline window is staged or applied (retried with the same batch id); the
// version expiring during a long baseline (a clear error, then a re-baseline).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { isTransferError, TransferError } from '../../shared/transfer/errors.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import { seededRandom } from '../support/seededRandom.js';
import {
  assertExactlyOnce,
  insertSourceRows,
  makeService,
  ordersTransfer,
  ORDERS_DDL,
  setupDatabases,
  TARGET_DDL,
  type Env,
  proxiedTargetPool,
  targetProxy,
  recoverUntilCommitted,
} from './helpers.js';

const NAME = 'orders_bl';
const RUNS = Number(process.env.KEEL_CHANGES_FAULT_RUNS ?? 6);
const seeded = seededRandom('windowed baseline fault injection');
const rand = (lo: number, hi: number) => seeded.int(lo, hi);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const transfer = (batchSize: number, more: Parameters<typeof ordersTransfer>[1] = {}) =>
  ordersTransfer(NAME, { boundary: { kind: 'changes' }, batchSize, ...more });

// Runs a batch to committed, retrying the same batch id (reconcile first when its outcome is unknown).
async function runToCommit(svc: TransferService, batchId: string): Promise<BatchView> {
  const v = await recoverUntilCommitted(svc, await svc.run(batchId));
  expect(v.batchId).toBe(batchId);
  expect(v.state, `batch ${batchId}: ${v.lastError}`).toBe('committed');
  return v;
}

async function drain(svc: TransferService): Promise<BatchView[]> {
  const done: BatchView[] = [];
  for (let i = 0; i < 500; i++) {
    const b = await svc.tryCreateBatch(NAME);
    if (!b) return done;
    done.push(await runToCommit(svc, b.batchId));
  }
  throw new Error('the source never ran dry');
}

describe('windowed baseline of a changes transfer (key windows, then change windows from the version before it)', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;

  beforeAll(async () => {
    env = await setupDatabases('tr_chg_baseline');
    await migratePostgresChangeCapture(env.source);
    proxy = await targetProxy(env);
    proxied = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0002,
      label: 'test target pool (through the fault proxy)',
    });
  });
  afterAll(async () => {
    await proxied?.end();
    await proxy?.close();
    await env?.close();
  });

  // Source 1..rows (change capture enabled after the rows: only the baseline carries them); the target holds rows
  // the source does not have (below the first key, inside, and past the last one), logged when deleted.
  async function fresh(rows: number, targetOnly: number[]): Promise<void> {
    await env.source.query(`select keel_changes.disable(to_regclass('public.orders'))`).catch(() => undefined);
    await env.source.query(`drop table if exists public.orders`);
    await env.target.query(
      `drop table if exists public.orders, public.write_counts, public.delete_log; drop function if exists public.count_write, public.log_delete`,
    );
    await env.source.query(ORDERS_DDL);
    await insertSourceRows(env.source, 1, rows);
    await env.source.query(`select keel_changes.enable('public.orders', array['id'])`);
    await env.target.query(TARGET_DDL);
    await env.target.query(`create table public.delete_log (id bigint not null);
      create function public.log_delete() returns trigger language plpgsql as $$
      begin insert into public.delete_log (id) values (old.id); return old; end $$;
      create trigger orders_log_delete after delete on public.orders for each row execute function public.log_delete();`);
    for (const id of targetOnly)
      await env.target.query(`insert into public.orders (id, customer) values ($1, 'only on the target')`, [id]);
    await env.target.query(`truncate public.write_counts`);
    await env.control.query(`delete from keel.transfer_batches where transfer_name like $1`, [`${NAME}%`]);
    await env.target.query(`truncate keel_transfer.completions`);
  }

  const deletesLogged = async () =>
    (await env.target.query(`select id::int as id from public.delete_log order by id`)).rows.map((r) => r.id as number);

  it('changes made during the baseline are not lost; each key window mirrors only its range', async () => {
    await fresh(100, [-5, 0, 37, 1000]);
    await env.source.query(`delete from public.orders where id = 37`); // before the baseline: never on the target
    await env.source.query(`select keel_changes.current_version('public.orders')`);
    const svc = makeService(env, [transfer(10)]);
    try {
      const first = await svc.createBatch(NAME);
      expect(first.boundary.low).toBeNull();
      const m = /^baseline@(\d+):10$/.exec(first.boundary.high);
      expect(m, first.boundary.high).not.toBeNull();
      const version = m![1]!; // captured before the first window was chosen
      expect(first.rowCount).toBe(10);
      await runToCommit(svc, first.batchId);

      // During the baseline: changes in the range already mirrored (only the change windows can carry them), in
      // ranges still to come (a later window reads them as they are, and the change windows again), and past the
      // last key.
      await env.source.query(`delete from public.orders where id in (2, 3)`);
      await env.source.query(`update public.orders set note = 'during' where id in (4, 55)`);
      await env.source.query(`delete from public.orders where id = 60`);
      await insertSourceRows(env.source, 150, 152);
      const rest = await drain(svc);
      // Windows chain: each low is the previous high; the baseline's windows hold at most batchSize rows, the last
      // one ends at the version captured before the first, and the first change window starts there.
      const all = [first, ...rest];
      for (let i = 1; i < all.length; i++) expect(all[i]!.boundary.low).toBe(all[i - 1]!.boundary.high);
      const baseline = all.slice(0, all.findIndex((b) => b.boundary.high === version) + 1);
      // 1..10, then 11..100 without 37 and 60 and 150..152 (91 rows) in windows of 10: eleven windows
      expect(baseline.length).toBe(11);
      for (const b of baseline) expect(b.rowCount!).toBeLessThanOrEqual(10);
      const last = baseline.at(-1)!;
      const changes = all.slice(baseline.length);
      expect(changes.length).toBeGreaterThan(0);
      expect(changes[0]!.boundary.low).toBe(version);
      await assertExactlyOnce(env);
      // Target-only rows (below, inside and above the source's keys) deleted once each by the mirror; 2 and 3 by
      // a change window (the first window had copied them before they were deleted at the source).
      expect(await deletesLogged()).toEqual([-5, 0, 2, 3, 37, 1000]);
      const d = await env.target.query(
        `select batch_id::text as id, deleted_count::int as d from keel_transfer.completions`,
      );
      const deletedBy = new Map(d.rows.map((r) => [r.id as string, r.d as number]));
      expect(deletedBy.get(first.batchId)).toBe(2); // -5 and 0: the first window is open below
      expect(deletedBy.get(last.batchId)).toBe(1); // 1000: the last window is open above
      expect(changes.reduce((n, b) => n + deletedBy.get(b.batchId)!, 0)).toBe(2); // 2 and 3
    } finally {
      await svc.close();
    }
  });

  it('version expired during a long baseline: a clear error, nothing lost, and a re-baseline finishes', async () => {
    await fresh(60, [145]);
    const svc = makeService(env, [transfer(10)]);
    try {
      for (let i = 0; i < 2; i++) await runToCommit(svc, (await svc.createBatch(NAME)).batchId);
      const open = await svc.createBatch(NAME); // the third key window, extracted
      // A delete the change windows would have to carry, then retention past the baseline's version.
      await env.source.query(`delete from public.orders where id = 5`);
      await env.source.query(`select keel_changes.current_version('public.orders')`);
      await env.source.query(
        `select keel_changes.retain('public.orders', (select current_version from keel_changes.tracked))`,
      );
      // The open window fails for good (its window released), and no next window starts: both say why and what to do.
      const failed = await svc.run(open.batchId);
      expect(failed.state).toBe('failed');
      expect(failed.lastErrorCode).toBe('changes_expired');
      expect(failed.lastError).toMatch(/baseline in progress/);
      const err = await svc.createBatch(NAME).catch((e: unknown) => e);
      expect(isTransferError(err, 'changes_expired'), String(err)).toBe(true);
      expect((err as TransferError).message).toMatch(
        /Re-baseline the transfer \(POST \/api\/ops\/transfers\/orders_bl\/rebaseline/,
      );
      expect((await env.target.query(`select count(*)::int as n from public.orders where id = 5`)).rows[0].n).toBe(1);

      // The re-baseline starts over in key windows at a new version; its chain ends in change windows as before.
      const rb = await svc.rebaseline(NAME);
      expect(rb.boundary.low).toMatch(/^rebaseline@baseline@\d+:20$/);
      expect(rb.boundary.high).toMatch(/^baseline@\d+:11$/); // 1..11 without 5
      await runToCommit(svc, rb.batchId);
      const rest = await drain(svc);
      expect(rest.length).toBeGreaterThanOrEqual(4);
      await assertExactlyOnce(env);
      expect(await deletesLogged()).toEqual([5, 145]);
    } finally {
      await svc.close();
    }
  });

  async function faulted(plan: FaultPlan): Promise<boolean> {
    await fresh(200, [-3, 0, 999]);
    const svc = makeService(
      env,
      [transfer(rand(20, 70), { chunkSize: rand(7, 40), reconcileWaitMs: rand(1, 150) })],
      proxied,
    );
    let fired = false;
    try {
      // A key window in the middle of the baseline is cut; a change made meanwhile is carried after it.
      await runToCommit(svc, (await svc.createBatch(NAME)).batchId);
      const cut = await svc.createBatch(NAME);
      expect(cut.boundary.low).toMatch(/^baseline@/);
      const armed = proxy.arm(plan).then(() => (fired = true));
      const first = await svc.run(cut.batchId);
      proxy.disarm();
      await Promise.race([armed, sleep(5)]);
      await runToCommit(svc, first.batchId); // the same batch id
      await env.source.query(`delete from public.orders where id = 1`);
      await drain(svc);
      await assertExactlyOnce(env);
      const log = await deletesLogged();
      expect(log).toEqual([-3, 0, 1, 999]); // each delete committed exactly once
      return fired;
    } finally {
      await svc.close();
    }
  }

  it(`cut while a baseline key window is staged, ${RUNS} runs`, { timeout: 120_000 }, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++)
      if (
        await faulted({
          kind: 'cut-after-bytes',
          trigger: (sql) => /^copy keel_transfer\./.test(sql),
          bytes: rand(0, 2000),
        })
      )
        fired++;
    expect(fired).toBeGreaterThan(RUNS / 2);
  });

  it(
    `cut while a baseline key window is applied (its range mirror in the same transaction), ${RUNS} runs`,
    { timeout: 120_000 },
    async () => {
      let fired = 0;
      for (let i = 0; i < RUNS; i++)
        if (
          await faulted({
            kind: 'cut-after-ms',
            trigger: (sql) => sql.includes('keel_transfer.apply_batch'),
            delayMs: rand(0, 8),
          })
        )
          fired++;
      expect(fired).toBeGreaterThanOrEqual(RUNS / 2);
    },
  );

  it('with a declared value policy (canonical rows, keel-v1 manifest) the baseline runs in key windows too', async () => {
    await fresh(35, [99]);
    const cols = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'];
    const svc = makeService(env, [
      transfer(10, {
        columns: cols.map((c) => ({ source: c, target: c, ...(c === 'note' ? { empty: 'null' } : {}) })),
      }),
    ]);
    try {
      const plan = await svc.rebaselinePlan(NAME);
      expect(plan).toMatchObject({ possible: true, windowed: true, after: null });
      const done = await drain(svc);
      expect(done.map((b) => b.rowCount)).toEqual([10, 10, 10, 5]);
      await assertExactlyOnce(env);
      expect(await deletesLogged()).toEqual([99]);
    } finally {
      await svc.close();
    }
  });

  it('without a target that mirrors key ranges the baseline stays one window', async () => {
    await fresh(30, []);
    // (the Oracle target, until its package mirrors a key range: the same source, asked without the window option)
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [transfer(10)],
      connect: (t) => ({
        source: new PostgresTransferSource(t, env.source),
        target: Object.assign(new PostgresTransferTarget(t, env.target), { mirrorsKeyRanges: false }),
      }),
    });
    try {
      expect((await svc.rebaselinePlan(NAME)).windowed).toBe(false);
      const b = await svc.createBatch(NAME);
      expect(b.boundary).toMatchObject({ low: null, high: expect.stringMatching(/^\d+$/) });
      expect(b.rowCount).toBe(30);
      await runToCommit(svc, b.batchId);
      await assertExactlyOnce(env);
    } finally {
      await svc.close();
    }
  });
});

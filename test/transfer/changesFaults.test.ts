// Fault tests of the delete path (docs/transfer.md, "Deletes"): change windows holding deletes, updates and inserts
// through a TCP proxy that cuts the target connection while the window is staged, while it is applied, or after the
// apply's COMMIT reached the server (reply lost). After each run the same batch id is reconciled and retried: the
// target must equal the source, every delete committed exactly once (a trigger logs committed deletes), and the
// completion row agree with the journal.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
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
import { seededRandom } from '../support/seededRandom.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import type { BatchView } from '../../shared/transfer/service.js';

const RUNS = Number(process.env.KEEL_CHANGES_FAULT_RUNS ?? 12);
const NAME = 'orders_chg_faults';
const seeded = seededRandom('change window fault injection');
const rand = (lo: number, hi: number) => seeded.int(lo, hi);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('delete windows through faults (cut while staging, cut mid-apply, reply lost after COMMIT)', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;
  let proxiedUnchecked: pg.Pool;
  let nextId = 2001;

  beforeAll(async () => {
    env = await setupDatabases('tr_chg_faults');
    await migratePostgresChangeCapture(env.source);
    await env.source.query(ORDERS_DDL);
    await env.source.query(`select keel_changes.enable('public.orders', array['id'])`);
    await insertSourceRows(env.source, 1, 2000);
    await env.target.query(TARGET_DDL);
    // Committed deletes on the target, per key: a delete applied twice (or rolled back and counted) shows here.
    await env.target
      .query(`create table public.delete_log (id bigint not null, at timestamptz not null default clock_timestamp());
      create function public.log_delete() returns trigger language plpgsql as $$
      begin insert into public.delete_log (id) values (old.id); return old; end $$;
      create trigger orders_log_delete after delete on public.orders for each row execute function public.log_delete();`);
    proxy = await targetProxy(env);
    proxied = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0002,
      label: 'test target pool (through the fault proxy)',
    });
    proxiedUnchecked = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0002,
      checked: false,
      label: 'test target pool (unchecked, fault proxy)',
    });
    // The baseline, without faults.
    const svc = makeService(env, [ordersTransfer(NAME, { boundary: { kind: 'changes' }, batchSize: 5000 })]);
    const b = await svc.createBatch(NAME);
    expect((await svc.run(b.batchId)).state).toBe('committed');
    await svc.close();
  });
  afterAll(async () => {
    await proxied?.end();
    await proxiedUnchecked?.end();
    await proxy?.close();
    await env?.close();
  });

  // Source changes for one window: deletes of present keys, updates, inserts. Returns the keys deleted.
  async function changeSource(): Promise<number[]> {
    const present = (
      await env.source.query(`select id::int as id from public.orders order by random() limit $1`, [rand(20, 60)])
    ).rows.map((r) => r.id as number);
    const deleted = present.slice(0, rand(5, present.length - 5));
    const updated = present.slice(deleted.length);
    await env.source.query(`delete from public.orders where id = any($1::bigint[])`, [deleted]);
    await env.source.query(`update public.orders set note = 'upd ' || id || ' ' || $2 where id = any($1::bigint[])`, [
      updated,
      rand(0, 1e6),
    ]);
    const n = rand(0, 30);
    if (n > 0) await insertSourceRows(env.source, nextId, nextId + n - 1);
    nextId += n;
    return deleted;
  }

  async function faultedRun(
    plan: FaultPlan,
    pool: pg.Pool,
  ): Promise<{ first: BatchView; final: BatchView; fired: boolean }> {
    const deleted = await changeSource();
    const svc = makeService(
      env,
      [
        ordersTransfer(NAME, {
          boundary: { kind: 'changes' },
          batchSize: 5000,
          chunkSize: rand(7, 40),
          reconcileWaitMs: rand(1, 150),
        }),
      ],
      pool,
    );
    try {
      const created = await svc.createBatch(NAME);
      let fired = false;
      const armed = proxy.arm(plan).then(() => {
        fired = true;
      });
      const first = await svc.run(created.batchId);
      proxy.disarm();
      await Promise.race([armed, sleep(5)]);
      const v = await recoverUntilCommitted(svc, first);
      expect(v.batchId).toBe(created.batchId);
      expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
      expect(v.appliedCount).toBe(created.rowCount);
      const c = await env.target.query(
        `select row_count::int as n, checksum, state, deleted_count::int as d from keel_transfer.completions where batch_id = $1`,
        [v.batchId],
      );
      expect(c.rows).toEqual([
        { n: created.rowCount, checksum: created.checksum, state: 'committed', d: deleted.length },
      ]);
      // the target equals the source, and each delete was committed exactly once
      await assertExactlyOnce(env);
      const log = await env.target.query(
        `select count(*)::int as n, count(distinct id)::int as keys from public.delete_log where id = any($1::bigint[])`,
        [deleted],
      );
      expect(log.rows[0]).toEqual({ n: deleted.length, keys: deleted.length });
      return { first, final: v, fired };
    } finally {
      await svc.close();
    }
  }

  it(`cut while a delete window is staged, ${RUNS} runs`, { timeout: 120_000 }, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun(
        { kind: 'cut-after-bytes', trigger: (sql) => /^copy keel_transfer\./.test(sql), bytes: rand(0, 3000) },
        proxied,
      );
      if (r.fired) fired++;
    }
    expect(fired).toBeGreaterThan(RUNS / 2);
  });

  it(`cut while a delete window is applied, ${RUNS} runs`, { timeout: 120_000 }, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun(
        { kind: 'cut-after-ms', trigger: (sql) => sql.includes('keel_transfer.apply_batch'), delayMs: rand(0, 8) },
        i % 2 === 0 ? proxied : proxiedUnchecked,
      );
      if (r.fired) fired++;
      const d = await env.control.query(`select event from keel.transfer_batch_events where batch_id = $1`, [
        r.final.batchId,
      ]);
      const events = d.rows.map((x) => x.event as string);
      // applied once, and the outcome read from the target, never guessed
      expect(events.filter((e) => e === 'applied' || e === 'reconciled_committed').length).toBe(1);
    }
    expect(fired).toBeGreaterThanOrEqual(RUNS / 2);
  });

  it(`COMMIT of a delete window reached the server, reply lost, ${RUNS} runs`, { timeout: 120_000 }, async () => {
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun(
        { kind: 'drop-reply', trigger: (sql) => sql.includes('keel_transfer.apply_batch'), holdMs: rand(0, 4) },
        proxied,
      );
      expect(r.fired).toBe(true);
      expect(r.first.state).toBe('committed'); // reconcile read the completion row
      expect(r.final.attempts).toBe(1); // and nothing was applied again
    }
  });
});

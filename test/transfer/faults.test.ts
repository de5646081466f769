// Fault injection: a TCP proxy between Keel and the target database cuts the connection (a) mid-transfer,
// (b) mid-apply, (c) after the apply's COMMIT reached the server but before its reply reached Keel. After each,
// reconcile + retry must leave every source row in the target exactly once and the journal right.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import { assertExactlyOnce, insertSourceRows, makeService, ordersTransfer, setupDatabases, TARGET_DDL, ORDERS_DDL, type Env } from './helpers.js';
import type { BatchView } from '../../shared/transfer/service.js';

const RUNS = Number(process.env.KEEL_FAULT_RUNS ?? 50);
const NAME = 'orders_faults';
const rand = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('transfer fault injection (TCP proxy between Keel and the target)', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;
  let proxiedUnchecked: pg.Pool;
  let covered = 0;

  beforeAll(async () => {
    env = await setupDatabases('tr_faults');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 3 * RUNS * 90 + 1000);
    const u = new URL(env.targetUrl);
    proxy = await FaultProxy.start(u.hostname, Number(u.port));
    // The server notices a vanished client during a long statement (mid-apply) instead of finishing it, and
    // each merged row costs 0.2 ms so that an apply lasts long enough to be cut in the middle.
    proxied = new pg.Pool({ connectionString: proxy.urlFor(env.targetUrl), max: 3, options: '-c client_connection_check_interval=10 -c keel_test.write_delay=0.0002' });
    proxied.on('error', () => undefined);
    // Without the check the server finishes an apply whose client vanished and commits it: the caller saw an
    // error, the outcome is "committed", and only the target can say so.
    proxiedUnchecked = new pg.Pool({ connectionString: proxy.urlFor(env.targetUrl), max: 3, options: '-c keel_test.write_delay=0.0002' });
    proxiedUnchecked.on('error', () => undefined);
  });
  afterAll(async () => {
    await proxied?.end();
    await proxiedUnchecked?.end();
    await proxy?.close();
    await env?.close();
  });

  // One batch through a fault, then reconcile + retry (same batch id) until it is committed.
  async function faultedRun(plan: FaultPlan, pool: pg.Pool = proxied): Promise<{ first: BatchView; fired: boolean; final: BatchView; serverCompleted: boolean }> {
    const svc = makeService(env, [ordersTransfer(NAME, { batchSize: rand(20, 90), chunkSize: rand(7, 40), reconcileWaitMs: rand(1, 150) })], pool);
    const created = await svc.createBatch(NAME);
    let fired = false;
    let serverCompleted = false;
    const armed = proxy.arm(plan).then((r) => {
      fired = true;
      serverCompleted = r.serverCompleted;
    });
    const first = await svc.run(created.batchId);
    proxy.disarm();
    await Promise.race([armed, sleep(5)]);
    let v = first;
    for (let i = 0; i < 100 && v.state !== 'committed'; i++) {
      if (v.state === 'applying' || v.state === 'unresolved') {
        v = await svc.reconcile(v.batchId);
        if (v.state === 'unresolved') await sleep(20);
      } else if (v.state === 'extracting' || v.state === 'staged') {
        v = await svc.run(v.batchId);
      } else break;
    }
    expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
    expect(v.appliedCount).toBe(created.rowCount);
    expect(v.stagedChecksum).toBe(created.checksum);
    const c = await env.target.query(`select row_count::int as n, checksum, state from keel_transfer.completions where batch_id = $1`, [v.batchId]);
    expect(c.rows).toEqual([{ n: created.rowCount, checksum: created.checksum, state: 'committed' }]);
    covered = Number(v.boundary.high);
    return { first, fired, final: v, serverCompleted };
  }

  async function checkTarget() {
    const r = await assertExactlyOnce(env, covered);
    expect(r.target).toBe(covered);
    expect(r.maxWrites).toBe(1);
  }

  it(`(a) cut mid-transfer, ${RUNS} runs`, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun({ kind: 'cut-after-bytes', trigger: (sql) => /^copy keel_transfer\./.test(sql), bytes: rand(0, 9000) });
      if (r.fired) fired++;
    }
    expect(fired).toBeGreaterThan(RUNS / 2);
    await checkTarget();
  });

  it(`(b) cut mid-apply, ${RUNS} runs`, async () => {
    let fired = 0;
    const outcomes = { committedAfterCut: 0, rolledBack: 0, unresolvedFirst: 0 };
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun(
        { kind: 'cut-after-ms', trigger: (sql) => sql.includes('keel_transfer.apply_batch'), delayMs: rand(0, 12) },
        i % 2 === 0 ? proxied : proxiedUnchecked,
      );
      if (r.fired) fired++;
      const d = await env.control.query(`select event from keel.transfer_batch_events where batch_id = $1 order by event_id`, [r.final.batchId]);
      const events = d.rows.map((x) => x.event as string);
      if (events.includes('reconciled_committed')) outcomes.committedAfterCut++;
      if (events.includes('reconciled_blocked')) outcomes.unresolvedFirst++;
      if (events.includes('reconciled_not_applied')) outcomes.rolledBack++;
      // Never two applies: at most one 'applied' event and the outcome was read, not guessed.
      expect(events.filter((e) => e === 'applied').length + events.filter((e) => e === 'reconciled_committed').length).toBe(1);
    }
    expect(fired).toBeGreaterThanOrEqual(RUNS * 0.7);
    console.log(`mid-apply: ${fired}/${RUNS} cuts landed before the reply; outcomes read by reconcile:`, outcomes);
    await checkTarget();
  });

  it(`(c) COMMIT reached the server, reply lost, ${RUNS} runs`, async () => {
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun({ kind: 'drop-reply', trigger: (sql) => sql.includes('keel_transfer.apply_batch'), holdMs: rand(0, 4) });
      expect(r.fired).toBe(true);
      expect(r.serverCompleted).toBe(true);
      // The caller lost the reply; reconcile read the completion row and the batch was not applied again.
      expect(r.first.state).toBe('committed');
      expect(r.final.attempts).toBe(1);
      const d = await env.control.query(`select event from keel.transfer_batch_events where batch_id = $1 order by event_id`, [r.final.batchId]);
      expect(d.rows.map((x) => x.event)).toEqual(['created', 'manifest_recorded', 'staged', 'apply_started', 'apply_error', 'reconciled_committed']);
    }
    await checkTarget();
  });
});

// Fault injection: a TCP proxy between Keel and the target database cuts the connection (a) mid-transfer,
// (b) mid-apply, (c) after the apply's COMMIT reached the server but before its reply reached Keel. After each,
// reconcile + retry must leave every source row in the target exactly once and the journal right.
import pg from 'pg';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import {
  assertExactlyOnce,
  crashCounter,
  createLane,
  insertSourceRows,
  laneProblems,
  laneTransfer,
  LANE_WRITES_DDL,
  makeService,
  ordersTransfer,
  setupDatabases,
  TARGET_DDL,
  ORDERS_DDL,
  type Env,
  proxiedTargetPool,
  targetProxy,
  batchEvents,
  completionRows,
  recoverUntilCommitted,
} from './helpers.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { seededRandom } from '../support/seededRandom.js';
import { pgTransferPoolConfig, type TransferTimeouts } from '../../shared/transfer/timeouts.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import type { SourceAdapter } from '../../shared/transfer/types.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

const RUNS = Number(process.env.KEEL_FAULT_RUNS ?? 40);
const NAME = 'orders_faults';
const seeded = seededRandom('transfer fault injection (target proxy)');
const rand = (lo: number, hi: number) => seeded.int(lo, hi);
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
    proxy = await targetProxy(env);
    proxied = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0002,
      label: 'test target pool (through the fault proxy)',
    });
    // Without the check the server finishes an apply whose client vanished and commits it: the caller saw an
    // error, the outcome is "committed", and only the target can say so.
    proxiedUnchecked = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0002,
      checked: false,
      label: 'test target pool (unchecked, fault proxy)',
    });
  });
  afterAll(async () => {
    await proxied?.end();
    await proxiedUnchecked?.end();
    await proxy?.close();
    await env?.close();
  });

  // One batch through a fault, then reconcile + retry (same batch id) until it is committed.
  async function faultedRun(
    plan: FaultPlan,
    pool: pg.Pool = proxied,
  ): Promise<{ first: BatchView; fired: boolean; final: BatchView; serverCompleted: boolean }> {
    const svc = makeService(
      env,
      [ordersTransfer(NAME, { batchSize: rand(20, 90), chunkSize: rand(7, 40), reconcileWaitMs: rand(1, 150) })],
      pool,
    );
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
    const v = await recoverUntilCommitted(svc, first);
    expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
    expect(v.appliedCount).toBe(created.rowCount);
    expect(v.stagedChecksum).toBe(created.checksum);
    expect(await completionRows(env, v.batchId)).toEqual([
      { n: created.rowCount, checksum: created.checksum, state: 'committed' },
    ]);
    covered = Number(v.boundary.high);
    return { first, fired, final: v, serverCompleted };
  }

  async function checkTarget() {
    const r = await assertExactlyOnce(env, covered);
    expect(r.target).toBe(covered);
    expect(r.maxWrites).toBe(1);
  }

  it(`(a) cut mid-transfer, ${RUNS} runs`, { timeout: 180_000 }, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun({
        kind: 'cut-after-bytes',
        trigger: (sql) => /^copy keel_transfer\./.test(sql),
        bytes: rand(0, 4000),
      });
      if (r.fired) fired++;
    }
    expect(fired).toBeGreaterThan(RUNS / 2);
    await checkTarget();
  });

  it(`(b) cut mid-apply, ${RUNS} runs`, { timeout: 180_000 }, async () => {
    let fired = 0;
    const outcomes = { committedAfterCut: 0, rolledBack: 0, unresolvedFirst: 0 };
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun(
        { kind: 'cut-after-ms', trigger: (sql) => sql.includes('keel_transfer.apply_batch'), delayMs: rand(0, 12) },
        i % 2 === 0 ? proxied : proxiedUnchecked,
      );
      if (r.fired) fired++;
      const events = await batchEvents(env, r.final.batchId);
      if (events.includes('reconciled_committed')) outcomes.committedAfterCut++;
      if (events.includes('reconciled_blocked')) outcomes.unresolvedFirst++;
      if (events.includes('reconciled_not_applied')) outcomes.rolledBack++;
      // Never two applies: at most one 'applied' event and the outcome was read, not guessed.
      expect(
        events.filter((e) => e === 'applied').length + events.filter((e) => e === 'reconciled_committed').length,
      ).toBe(1);
    }
    expect(fired).toBeGreaterThanOrEqual(RUNS * 0.7);
    console.log(`mid-apply: ${fired}/${RUNS} cuts landed before the reply; outcomes read by reconcile:`, outcomes);
    await checkTarget();
  });

  it(`(c) COMMIT reached the server, reply lost, ${RUNS} runs`, { timeout: 180_000 }, async () => {
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun({
        kind: 'drop-reply',
        trigger: (sql) => sql.includes('keel_transfer.apply_batch'),
        holdMs: rand(0, 4),
      });
      expect(r.fired).toBe(true);
      expect(r.serverCompleted).toBe(true);
      // The caller lost the reply; reconcile read the completion row and the batch was not applied again.
      expect(r.first.state).toBe('committed');
      expect(r.final.attempts).toBe(1);
      expect(await batchEvents(env, r.final.batchId)).toEqual([
        'created',
        'manifest_recorded',
        'staged',
        'apply_started',
        'apply_error',
        'reconciled_committed',
      ]);
    }
    await checkTarget();
  });
});

// Issue 9.2-4b: cuts at random bytes of the staging COPY on both sides (source COPY TO STDOUT, target COPY FROM
// STDIN), while either side's COPY opens, and on the row path (the source's COPY of canonical text into COPY FROM STDIN); then peers that
// stop replying without a reset. Each run must end the step with a recorded, retryable error (or a commit when the
// cut landed after the data), never a crash or a hang; a retry with the same batch id then commits, and the target
// holds the window exactly once with the journal agreeing.
describe('staging faults on both sides, and peers that never reply', () => {
  const RUNS = Number(process.env.KEEL_STAGING_FAULT_RUNS ?? 48);
  const rng = seededRandom('transfer staging faults');
  // Short timeouts so that silent peers are found quickly (production defaults: shared/transfer/timeouts.ts).
  const T: TransferTimeouts = {
    connectMs: 3_000,
    statementMs: 3_000,
    queryMs: 4_000,
    idleInTransactionMs: 3_000,
    lockMs: 3_000,
    stallMs: 1_500,
  };
  let env: Env;
  let srcProxy: FaultProxy;
  let tgtProxy: FaultProxy;
  let srcPool: pg.Pool;
  let tgtPool: pg.Pool;
  const table = 'stg_faults';
  let covered = 0;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  beforeAll(async () => {
    env = await setupDatabases('tr_stgfaults');
    await env.target.query(LANE_WRITES_DDL);
    await createLane(env, table, 120 * (RUNS + 12) + 500);
    const s = new URL(env.sourceUrl);
    const t = new URL(env.targetUrl);
    srcProxy = await FaultProxy.start(s.hostname, Number(s.port));
    tgtProxy = await FaultProxy.start(t.hostname, Number(t.port));
    srcPool = new pg.Pool(pgTransferPoolConfig(srcProxy.urlFor(env.sourceUrl), T, 3));
    tgtPool = new pg.Pool(pgTransferPoolConfig(tgtProxy.urlFor(env.targetUrl), T, 3));
    srcPool.on('error', poolErrorLogger('postgres', 'transfer', 'test source pool (fault proxy)'));
    tgtPool.on('error', poolErrorLogger('postgres', 'transfer', 'test target pool (fault proxy)'));
  });
  afterAll(async () => {
    await srcPool?.end().catch(() => undefined);
    await tgtPool?.end().catch(() => undefined);
    await srcProxy?.close();
    await tgtProxy?.close();
    await env?.close();
  });

  // A service whose source and target connections both go through the proxies; rowPath: no COPY passthrough
  // ('one-read': the source says it reads a snapshot, so the manifest comes from the staged rows themselves).
  function service(t: TransferConfig, rowPath: boolean | 'one-read'): TransferService {
    return new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => {
        const s = new PostgresTransferSource(tc, srcPool);
        const source: SourceAdapter = rowPath
          ? {
              engine: 'postgres',
              readSchema: () => s.readSchema(),
              nextWindow: (low, max) => s.nextWindow(low, max),
              manifest: (w, schema, algorithm) => s.manifest(w, schema, algorithm),
              checksumAlgorithms: () => s.checksumAlgorithms(),
              streamRows: (w, schema, n, facts) => s.streamRows(w, schema, n, facts),
              ...(rowPath === 'one-read' ? { readsSnapshot: () => s.readsSnapshot() } : {}),
              close: () => s.close(),
            }
          : s;
        return { source, target: new PostgresTransferTarget(tc, tgtPool, { stallMs: T.stallMs }) };
      },
    });
  }

  type Shape = { name: string; side: 'source' | 'target'; rowPath: boolean | 'one-read'; plan: () => FaultPlan };
  const COPY_TO = (sql: string) => /^copy \(select/.test(sql);
  const COPY_FROM = (sql: string) => /^copy keel_transfer\./.test(sql);
  const SHAPES: Shape[] = [
    {
      name: 'target COPY cut at a random byte',
      side: 'target',
      rowPath: false,
      plan: () => ({ kind: 'cut-after-bytes', trigger: COPY_FROM, bytes: rng.int(0, 12_000) }),
    },
    {
      name: 'target cut while its COPY opens',
      side: 'target',
      rowPath: false,
      plan: () => ({ kind: 'cut-after-ms', trigger: COPY_FROM, delayMs: 0 }),
    },
    {
      name: 'source COPY cut at a random byte',
      side: 'source',
      rowPath: false,
      plan: () => ({ kind: 'cut-after-server-bytes', trigger: COPY_TO, bytes: rng.int(0, 16_000) }),
    },
    {
      name: 'source cut while its COPY opens (target COPY already open)',
      side: 'source',
      rowPath: false,
      plan: () => ({ kind: 'cut-after-ms', trigger: COPY_TO, delayMs: 0 }),
    },
    {
      name: 'source cut while its transaction opens',
      side: 'source',
      rowPath: false,
      plan: () => ({
        kind: 'cut-after-ms',
        trigger: (sql) => /^begin isolation level repeatable read/.test(sql),
        delayMs: 0,
      }),
    },
    {
      name: 'row path: source COPY of canonical text cut at a random byte',
      side: 'source',
      rowPath: true,
      plan: () => ({ kind: 'cut-after-server-bytes', trigger: COPY_TO, bytes: rng.int(0, 9_000) }),
    },
    {
      name: 'row path: target COPY cut at a random byte',
      side: 'target',
      rowPath: true,
      plan: () => ({ kind: 'cut-after-bytes', trigger: COPY_FROM, bytes: rng.int(0, 9_000) }),
    },
    {
      name: 'row path, one read: source COPY of canonical text cut at a random byte (no manifest recorded yet)',
      side: 'source',
      rowPath: 'one-read',
      plan: () => ({ kind: 'cut-after-server-bytes', trigger: COPY_TO, bytes: rng.int(0, 9_000) }),
    },
    {
      name: 'row path, one read: target COPY cut at a random byte',
      side: 'target',
      rowPath: 'one-read',
      plan: () => ({ kind: 'cut-after-bytes', trigger: COPY_FROM, bytes: rng.int(0, 9_000) }),
    },
    {
      name: 'row path, one read: target cut when the staging opens after the rows (manifest just recorded)',
      side: 'target',
      rowPath: 'one-read',
      plan: () => ({ kind: 'cut-after-ms', trigger: (sql) => sql.includes('keel_transfer.begin_stage'), delayMs: 0 }),
    },
  ];

  // Runs one batch with the fault armed, then retries (same id) until committed. Returns problems (empty = fine).
  async function faulted(shape: Shape, plan: FaultPlan, stats: Record<string, number>): Promise<string[]> {
    const t = laneTransfer(table, { batchSize: rng.int(40, 120), chunkSize: rng.int(5, 40), reconcileWaitMs: 200 });
    const svc = service(t, shape.rowPath);
    const proxy = shape.side === 'source' ? srcProxy : tgtProxy;
    const problems: string[] = [];
    const work = (async () => {
      const created = await svc.createBatch(t.name);
      let fired = false;
      void proxy.arm(plan).then(() => (fired = true));
      const first = await svc.run(created.batchId); // never throws for transfer-level problems
      proxy.disarm();
      if (fired) stats.fired!++;
      if (first.state !== 'committed') {
        if (!first.lastError) problems.push(`first run ended ${first.state} without a recorded error`);
        if (!first.retryable && first.state !== 'unresolved')
          problems.push(`first run ended ${first.state}, not retryable: ${first.lastError}`);
        stats.retried!++;
      }
      let v = first;
      for (let i = 0; i < 30 && v.state !== 'committed'; i++) {
        if (v.state === 'applying' || v.state === 'unresolved') {
          v = await svc.reconcile(v.batchId);
          if (v.state === 'unresolved') await sleep(50);
        } else if (v.state === 'extracting' || v.state === 'staged') v = await svc.run(v.batchId);
        else break;
      }
      if (v.state !== 'committed') problems.push(`batch ${v.batchId} ended ${v.state}: ${v.lastError}`);
      else covered = Number(v.boundary.high);
      await svc.close().catch(() => undefined);
    })();
    const res = await Promise.race([work.then(() => 'done' as const), sleep(45_000).then(() => 'hang' as const)]);
    if (res === 'hang') {
      stats.hangs!++;
      proxy.disarm();
      return [`${shape.name}: no end within 45 s (hang)`];
    }
    return problems;
  }

  it(
    `${RUNS} cuts at random bytes of the staging COPY (both sides), while either COPY opens, and on the row path`,
    { timeout: 240_000 },
    async () => {
      const crashes = crashCounter();
      const stats: Record<string, number> = { runs: 0, fired: 0, retried: 0, inconsistent: 0, hangs: 0 };
      const failures: string[] = [];
      for (let i = 0; i < RUNS; i++) {
        const shape = SHAPES[i % SHAPES.length]!;
        const plan = shape.plan();
        const p = await faulted(shape, plan, stats);
        stats.runs!++;
        const c = await laneProblems(env, table, covered);
        if (p.length + c.length > 0) {
          stats.inconsistent!++;
          failures.push(
            `run ${i} (${shape.name}, ${JSON.stringify({ ...plan, trigger: undefined })}): ${[...p, ...c].join('; ')}`,
          );
        }
      }
      crashes.stop();
      console.log('staging faults:', { ...stats, crashes: crashes.count() });
      expect(failures).toEqual([]);
      expect(crashes.count()).toBe(0);
      expect(stats.fired).toBeGreaterThanOrEqual(RUNS * 0.6); // the cuts landed where they were aimed
      expect(stats.retried).toBeGreaterThan(RUNS / 3); // and most interrupted the staging
    },
  );

  it(
    'peers that stop replying without a reset: the timeouts end the step with a recorded, retryable error',
    { timeout: 240_000 },
    async () => {
      const crashes = crashCounter();
      const stats: Record<string, number> = { runs: 0, fired: 0, retried: 0, inconsistent: 0, hangs: 0 };
      const silent: Shape[] = [
        {
          name: 'source silent mid-COPY',
          side: 'source',
          rowPath: false,
          plan: () => ({ kind: 'blackhole', trigger: COPY_TO }),
        },
        {
          name: 'target silent mid-COPY',
          side: 'target',
          rowPath: false,
          plan: () => ({ kind: 'blackhole', trigger: COPY_FROM }),
        },
        {
          name: 'source silent mid-COPY on the row path',
          side: 'source',
          rowPath: true,
          plan: () => ({ kind: 'blackhole', trigger: COPY_TO }),
        },
        {
          name: 'target silent after the apply call',
          side: 'target',
          rowPath: false,
          plan: () => ({ kind: 'blackhole', trigger: (sql) => sql.includes('keel_transfer.apply_batch') }),
        },
        {
          name: 'target silent after begin_stage',
          side: 'target',
          rowPath: false,
          plan: () => ({ kind: 'blackhole', trigger: (sql) => sql.includes('keel_transfer.begin_stage') }),
        },
      ];
      const failures: string[] = [];
      const codes = new Set<string>();
      for (const shape of silent) {
        const p = await faulted(shape, shape.plan(), stats);
        stats.runs!++;
        const c = await laneProblems(env, table, covered);
        const last = await env.control.query(
          `select e.detail->>'code' as code from keel.transfer_batch_events e join keel.transfer_batches b using (batch_id)
          where b.transfer_name = $1 and e.event in ('stage_error', 'apply_error') order by e.event_id desc limit 1`,
          [table],
        );
        if (last.rows[0]?.code) codes.add(last.rows[0].code);
        if (p.length + c.length > 0) {
          stats.inconsistent!++;
          failures.push(`${shape.name}: ${[...p, ...c].join('; ')}`);
        }
      }
      crashes.stop();
      console.log('silent peers:', { ...stats, crashes: crashes.count(), codes: [...codes] });
      expect(failures).toEqual([]);
      expect(crashes.count()).toBe(0);
      expect(stats.fired).toBe(silent.length);
      expect(stats.retried).toBe(silent.length); // every silent peer interrupted its step, and the error was recorded
      expect(codes.has('stream_stalled')).toBe(true);
    },
  );
});

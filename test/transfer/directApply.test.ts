// Direct apply (docs/transfer.md, "Direct apply"): a PostgreSQL -> PostgreSQL key window is written into the target
// table in the one target transaction that claims the batch id, verifies the rows against the manifest and writes
// the completion row. Checked here: the happy path (one step, every row written once, nothing staged), the fall
// back to staging when rows of the window already exist, the fence (an attempt reconcile ruled out cannot commit),
// and cuts through a TCP proxy at every point of that transaction: reconcile + retry leave every row exactly once.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import {
  assertExactlyOnce,
  insertSourceRows,
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
import type { TransferConfig } from '../../shared/transfer/config.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { CanonicalRow } from '../../shared/transfer/checksum.js';
import type { SourceAdapter } from '../../shared/transfer/types.js';
import { sumsPricing, sumsWorkers } from '../../shared/engines/postgres/directApply.js';
import { pgChecksumQuery } from '../../shared/engines/postgres/transferSql.js';

const RUNS = Number(process.env.KEEL_FAULT_RUNS ?? 12);
const seeded = seededRandom('transfer direct apply faults');
const rand = (lo: number, hi: number) => seeded.int(lo, hi);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('direct apply (PostgreSQL -> PostgreSQL key windows)', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;
  let covered = 0;

  beforeAll(async () => {
    env = await setupDatabases('tr_direct');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 6 * RUNS * 90 + 2000);
    proxy = await targetProxy(env);
    proxied = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0001,
      label: 'test target pool (direct apply, fault proxy)',
    });
  });
  afterAll(async () => {
    await proxied?.end();
    await proxy?.close();
    await env?.close();
  });

  function service(t: TransferConfig, target: pg.Pool = env.target, directApply = true): TransferService {
    return new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply,
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, target),
      }),
    });
  }

  const events = (batchId: string) => batchEvents(env, batchId);
  const completion = (batchId: string) => completionRows(env, batchId);

  // A direct apply whose batch is not counted, not claimed or fenced leaves no read of the window open on the source
  // (the source's read opens only once the claim holds the batch: opened before it, a read waiting on a claim held
  // by a rival run could hold the source connection that rival needs). No session in a transaction, no COPY running
  // (a released COPY's backend ends within moments: polled, bounded).
  async function sourceReadsLeft(): Promise<number> {
    let n = -1;
    for (let i = 0; i < 50 && n !== 0; i++) {
      if (i > 0) await sleep(100);
      const r = await env.source.query(
        `select count(*)::int as n from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
            and (state like 'idle in transaction%' or (state = 'active' and query ilike 'copy%'))`,
      );
      n = r.rows[0].n;
    }
    return n;
  }

  it('commits a window in the stage step: one target transaction, every row written once, nothing staged', async () => {
    const t = ordersTransfer('orders_direct', { batchSize: 500 });
    const svc = service(t);
    for (let i = 0; i < 3; i++) {
      const created = await svc.createBatch(t.name);
      const v = await svc.stage(created.batchId);
      expect(v.state).toBe('committed');
      expect(v.appliedCount).toBe(created.rowCount);
      expect(v.stagedChecksum).toBe(created.checksum);
      expect(v.attempts).toBe(1);
      expect(await events(v.batchId)).toEqual(['created', 'manifest_recorded', 'apply_started', 'applied']);
      expect(await completion(v.batchId)).toEqual([
        { n: created.rowCount, checksum: created.checksum, state: 'committed' },
      ]);
      // Nothing went through the staging table or its registry.
      const staged = await env.target.query(`select count(*)::int as n from keel_transfer.staged where batch_id = $1`, [
        v.batchId,
      ]);
      expect(staged.rows[0].n).toBe(0);
      // Applying it again is a no-op that says so.
      expect((await svc.apply(v.batchId)).state).toBe('committed');
      covered = Number(v.boundary.high);
    }
    const r = await assertExactlyOnce(env, covered);
    expect(r.target).toBe(covered);
    expect(r.maxWrites).toBe(1);
  });

  it('falls back to staging and the merge when rows of the window already exist on the target', async () => {
    const t = ordersTransfer('orders_direct', { batchSize: 400 });
    const svc = service(t);
    // A stale copy of one row of the next window: the direct path must not run (the merge updates it).
    await env.target.query(
      `insert into public.orders (id, customer) values ($1, 'stale') on conflict (id) do update set customer = 'stale'`,
      [covered + 7],
    );
    const created = await svc.createBatch(t.name);
    const v = await svc.run(created.batchId);
    expect(v.state).toBe('committed');
    expect(v.appliedCount).toBe(created.rowCount);
    // Attempt 1 was the direct one: reconcile fenced it (nothing written), attempt 2 applied the staged rows.
    expect(v.attempts).toBe(2);
    expect(await events(v.batchId)).toEqual([
      'created',
      'manifest_recorded',
      'apply_started',
      'reconciled_not_applied',
      'staged',
      'apply_started',
      'applied',
    ]);
    const fence = await env.target.query(
      `select state, fenced_through::int as f from keel_transfer.completions where batch_id = $1`,
      [v.batchId],
    );
    expect(fence.rows).toEqual([{ state: 'committed', f: 1 }]);
    expect(await sourceReadsLeft()).toBe(0); // nothing read for the refused claim is left open
    covered = Number(v.boundary.high);
    const r = await assertExactlyOnce(env, covered);
    expect(r.target).toBe(covered);
    await env.target.query(`update public.write_counts set writes = 1 where id = $1`, [covered - 400 + 7]);
  });

  it('an attempt that reconcile fenced cannot commit: begin_direct refuses it (KT005), nothing is written', async () => {
    const c = await env.target.connect();
    try {
      const id = '0b4c1f9e-3c43-4c1e-9a61-7f3f2d1f0a01';
      await env.target.query(`select * from keel_transfer.try_claim($1, 100, 3)`, [id]);
      await c.query('begin');
      await expect(
        c.query(`select * from keel_transfer.begin_direct($1, 'x', 'public', 'orders', 'id', null, 10, 3)`, [id]),
      ).rejects.toMatchObject({ code: 'KT005' });
      await c.query('rollback');
      const r = await c.query(
        `select * from keel_transfer.begin_direct($1, 'x', 'public', 'orders', 'id', $2, $3, 4)`,
        [id, covered + 100_000, covered + 100_010],
      );
      expect(r.rows[0].outcome).toBe('claimed'); // a later attempt takes the fence over
      await c.query('rollback');
    } finally {
      c.release();
    }
  });

  // One batch through a fault on the proxied target, then reconcile + run (same id) until committed.
  async function faultedRun(plan: FaultPlan): Promise<{ first: BatchView; final: BatchView; fired: boolean }> {
    const t = ordersTransfer('orders_direct', { batchSize: rand(30, 90), reconcileWaitMs: rand(1, 150) });
    const svc = service(t, proxied);
    const created = await svc.createBatch(t.name);
    let fired = false;
    const armed = proxy.arm(plan).then(() => {
      fired = true;
    });
    const first = await svc.run(created.batchId);
    proxy.disarm();
    await Promise.race([armed, sleep(5)]);
    const v = await recoverUntilCommitted(svc, first);
    expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
    expect(v.appliedCount).toBe(created.rowCount);
    expect(await completion(v.batchId)).toEqual([
      { n: created.rowCount, checksum: created.checksum, state: 'committed' },
    ]);
    const ev = await events(v.batchId);
    // Never two applies: the outcome was read from the target, not guessed.
    expect(ev.filter((e) => e === 'applied' || e === 'reconciled_committed').length).toBe(1);
    covered = Number(v.boundary.high);

    return { first, final: v, fired };
  }

  async function checkTarget() {
    const r = await assertExactlyOnce(env, covered);
    expect(r.target).toBe(covered);
    expect(r.maxWrites).toBe(1);
  }

  it(`cut inside the direct COPY, ${RUNS} runs`, { timeout: 120_000 }, async () => {
    let fired = 0;
    for (let i = 0; i < RUNS; i++) {
      const r = await faultedRun({
        kind: 'cut-after-bytes',
        trigger: (sql) => /^copy "?public"?\./.test(sql),
        bytes: rand(0, 3000),
      });
      if (r.fired) fired++;
      if (r.fired) expect(r.final.attempts).toBeGreaterThanOrEqual(2);
    }
    expect(fired).toBeGreaterThan(RUNS / 2);
    await checkTarget();
  });

  // finish_direct (the completion row marked with the manifest's sums) goes out with the claim, before the rows: a
  // cut there, or while the rows' sums run after them, leaves nothing committed (the rows, the claim and the marked
  // completion row are one transaction).
  it(
    `cut at the claim with the completion row marked, or after the rows were written (their sums), ${RUNS} runs`,
    { timeout: 120_000 },
    async () => {
      let rolledBack = 0;
      let fired = 0;
      for (let i = 0; i < RUNS; i++) {
        const r = await faultedRun({
          kind: 'cut-after-ms',
          trigger: (sql) =>
            i % 2 === 0 ? sql.includes('keel_transfer.finish_direct') : sql.startsWith('select count(*)::text as n'),
          delayMs: 0,
        });
        // A cut timed 0 ms after the sums went out can lose the race to the COMMIT on a loaded machine (the batch then
        // simply committed); the cuts that land are what this test is about.
        if (r.fired) fired++;
        // The cut can land before the COMMIT (rolled back: fenced, then attempt 2 commits) or after it (the reply
        // lost: reconcile reads the completion row); either way the outcome was read from the target.
        if ((await events(r.final.batchId)).includes('reconciled_not_applied')) rolledBack++;
      }
      expect(fired).toBeGreaterThan(0);
      expect(rolledBack).toBeGreaterThan(0);
      await checkTarget();
    },
  );

  it(
    `COMMIT reached the server, reply lost: reconcile reads the completion row, ${RUNS} runs`,
    {
      timeout: 120_000,
    },
    async () => {
      for (let i = 0; i < RUNS; i++) {
        const r = await faultedRun({ kind: 'drop-reply', trigger: (sql) => sql === 'commit', holdMs: rand(0, 4) });
        expect(r.fired).toBe(true);
        expect(r.first.state).toBe('committed');
        expect(r.final.attempts).toBe(1);
        expect(await events(r.final.batchId)).toEqual([
          'created',
          'manifest_recorded',
          'apply_started',
          'apply_error',
          'reconciled_committed',
        ]);
      }
      await checkTarget();
    },
  );

  // From 10,000 rows the window's checksum is priced for parallel workers, one worker per 100,000 rows of the window
  // (directApply.ts): a worker must see the rows the claiming transaction wrote and has not committed, and the
  // partial sums must add up to the manifest. A window of 100,000 (one worker) and one of 12,500 (priced, none).
  it(
    'windows of 100,000 (one parallel worker) and 12,500 rows (none) commit directly, their sums equal to the manifest',
    { timeout: 120_000 },
    async () => {
      const DDL = ORDERS_DDL.replace('public.orders', 'public.orders_large');
      await env.source.query(DDL);
      await env.target.query(DDL);
      await insertSourceRows(env.source, 1, 112_500, 'public.orders_large');
      const t = ordersTransfer('orders_direct_large', {
        batchSize: 100_000,
        source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: 'public.orders_large' },
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders_large' },
      });
      const svc = service(t);
      for (const rows of [100_000, 12_500]) {
        const created = await svc.createBatch(t.name);
        expect(created.rowCount).toBe(rows);
        const v = await svc.stage(created.batchId);
        expect(v.state).toBe('committed');
        expect(v.stagedChecksum).toBe(created.checksum);
        expect(await events(v.batchId)).toEqual(['created', 'manifest_recorded', 'apply_started', 'applied']);
      }
      await svc.close();
      const cols = 'id, customer, amount, placed_at, flag, note, payload';
      const digest = `select md5(string_agg(t::text, '|' order by id)) as h, count(*)::int as n from (select ${cols} from public.orders_large) t`;
      expect((await env.target.query(digest)).rows).toEqual((await env.source.query(digest)).rows);
    },
  );

  // The sums' parallel workers are chosen by the window's size (sumsPricing): none below 100,000 rows, one per
  // 100,000, never more than the server's own max_parallel_workers_per_gather. Checked on the plan the target's
  // server makes for the sums of a window under each pricing.
  it('the sums of a window plan one parallel worker per 100,000 rows, none below, at most the server cap', async () => {
    await env.target.query(`create table public.sums_plan (like public.orders_large)`);
    await env.target.query(`insert into public.sums_plan select * from public.orders_large where id <= 30000`);
    await env.target.query(`analyze public.sums_plan`);
    const serverCap = Number(
      (await env.target.query(`select current_setting('max_parallel_workers_per_gather') as n`)).rows[0].n,
    );
    const sums = pgChecksumQuery(
      [
        { ref: 't.id', type: 'int' },
        { ref: 't.customer', type: 'text' },
      ],
      'public.sums_plan t',
      't.id > $2::bigint and t.id <= $1::bigint',
      'keel-pg2',
    );
    const c = await env.target.connect();
    try {
      for (const [rows, expected] of [
        [9_999, 0],
        [99_999, 0],
        [100_000, Math.min(1, serverCap)],
        [250_000, Math.min(2, serverCap)],
        [1_000_000_000, serverCap],
      ] as const) {
        expect(sumsWorkers(rows)).toBe(Math.max(0, Math.floor(rows / 100_000)));
        await c.query(`begin; ${sumsPricing(rows)}`);
        const plan = (await c.query({ text: `explain ${sums}`, values: ['30000', '0'] })).rows
          .map((r: Record<string, string>) => r['QUERY PLAN'])
          .join('\n');
        await c.query('rollback');
        const planned = /Workers Planned: (\d+)/.exec(plan)?.[1];
        expect({ rows, workers: planned === undefined ? 0 : Number(planned) }).toEqual({ rows, workers: expected });
      }
    } finally {
      c.release();
      await env.target.query(`drop table public.sums_plan`);
    }
  });

  it('a batch moved while the journal counts the attempt: the open target transaction claims and writes nothing', async () => {
    const t = ordersTransfer('orders_direct', { batchSize: 300 });
    const other = service(t);
    // The journal's start_apply (sent while the target opens its transaction) finds the batch abandoned by another
    // run: no count, so the target must roll back without claiming the batch id or writing a row.
    class Racing extends PostgresTransferJournal {
      override async transition(...a: Parameters<PostgresTransferJournal['transition']>) {
        if (a[4] === 'apply_started') await other.abandon(a[0], 'abandoned while the attempt was counted');
        return super.transition(...a);
      }
    }
    const svc = new TransferService({
      journal: new Racing(env.control),
      transfers: [t],
      directApply: true,
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    const created = await svc.createBatch(t.name);
    const v = await svc.stage(created.batchId);
    expect(v.state).toBe('failed');
    expect(v.attempts).toBe(0);
    expect(await events(v.batchId)).toEqual(['created', 'manifest_recorded', 'failed']);
    expect(await completion(v.batchId)).toEqual([]);
    const written = await env.target.query(
      `select count(*)::int as n from public.orders where id > $1::bigint and id <= $2::bigint`,
      [created.boundary.low, created.boundary.high],
    );
    expect(written.rows[0].n).toBe(0);
    const idle = await env.target.query(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and state like 'idle in transaction%' and pid <> pg_backend_pid()`,
    );
    expect(idle.rows[0].n).toBe(0);
    expect(await sourceReadsLeft()).toBe(0); // nothing was read for the batch that was not counted
  });

  it('an attempt fenced before its claim: no source read is left open, the next attempt commits', async () => {
    const t = ordersTransfer('orders_direct', { batchSize: 250 });
    const svc = service(t);
    const created = await svc.createBatch(t.name);
    // Reconcile's verdict for attempts <= 1 is already on the target: the direct apply's claim (attempt 1) is
    // refused with KT005 after its source read has opened.
    await env.target.query(`select * from keel_transfer.try_claim($1, 100, 1)`, [created.batchId]);
    const first = await svc.run(created.batchId);
    expect(first.state).not.toBe('committed');
    expect(await sourceReadsLeft()).toBe(0);
    const v = await recoverUntilCommitted(svc, first);
    expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
    expect(v.attempts).toBeGreaterThanOrEqual(2);
    expect(await completion(v.batchId)).toEqual([
      { n: created.rowCount, checksum: created.checksum, state: 'committed' },
    ]);
    covered = Number(v.boundary.high);
    await checkTarget();
    expect(await sourceReadsLeft()).toBe(0);
    await svc.close();
  });
});

// The row path (docs/transfer.md, "Direct apply of the row path"): canonical rows and keel-v1, as a SQL Server source
// sends them, with the manifest read before the rows or (one source read) computed from them as they pass. The
// same transaction, the same guarantees: the sums of the written window equal the manifest or nothing commits, and
// the batch falls back to staging; a cut leaves nothing committed and the batch recoverable.
describe('direct apply of the row path (canonical rows, keel-v1)', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;
  let covered = 0;

  beforeAll(async () => {
    env = await setupDatabases('tr_direct_rows');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 8 * RUNS * 90 + 3000);
    // Tampering on the target, once: the row with the id in public.tamper_at gets another note on its first
    // insert only (a sequence is not rolled back), so the direct transaction's sums differ and the staged way's not.
    await env.target.query(`create table public.tamper_at (id bigint primary key);
      create sequence public.tamper_once;
      create function public.tamper() returns trigger language plpgsql as $$
      begin
        if exists (select 1 from public.tamper_at where id = new.id) and nextval('public.tamper_once') = 1 then
          new.note := 'tampered';
        end if;
        return new;
      end $$;
      create trigger orders_tamper before insert on public.orders for each row execute function public.tamper();`);
    proxy = await targetProxy(env);
    proxied = proxiedTargetPool(proxy, env, {
      writeDelayS: 0.0001,
      label: 'test target pool (direct rows, fault proxy)',
    });
  });
  afterAll(async () => {
    await proxied?.end();
    await proxy?.close();
    await env?.close();
  });

  // The PostgreSQL source offered as a row source: no COPY passthrough, keel-v1 only; oneRead: it reads a snapshot
  // (the manifest is then computed from the rows). tamper: changes the rows of the first stream (not the manifest).
  function service(
    t: TransferConfig,
    o: { oneRead: boolean; target?: pg.Pool; tamper?: (rows: CanonicalRow[]) => void },
  ): TransferService {
    let streams = 0;
    return new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: true,
      connect: (tc) => {
        const s = new PostgresTransferSource(tc, env.source);
        const source: SourceAdapter = {
          engine: 'postgres',
          readSchema: () => s.readSchema(),
          nextWindow: (low, max) => s.nextWindow(low, max),
          manifest: (w, schema, algorithm) => s.manifest(w, schema, algorithm),
          checksumAlgorithms: async () => ['keel-v1'],
          streamRows: async function* (w, schema, n, facts) {
            const first = streams++ === 0;
            for await (const chunk of s.streamRows(w, schema, n, facts)) {
              if (!first || !o.tamper) {
                yield chunk;
                continue;
              }
              // A new array, as any step that changes rows yields (a chunk's rows are never changed in place: the
              // source's COPY text of them travels with the chunk, checksum.ts COPY_TEXT).
              const changed = [...chunk];
              o.tamper(changed);
              yield changed;
            }
          },
          ...(o.oneRead ? { readsSnapshot: () => s.readsSnapshot() } : {}),
          close: () => s.close(),
        };
        return { source, target: new PostgresTransferTarget(tc, o.target ?? env.target) };
      },
    });
  }

  const events = (batchId: string) => batchEvents(env, batchId);
  const completion = (batchId: string) => completionRows(env, batchId);
  const stagedRows = async (batchId: string) =>
    (await env.target.query(`select count(*)::int as n from keel_transfer.staged where batch_id = $1`, [batchId]))
      .rows[0].n as number;
  // The manifest the source's server computes for the batch's window (keel-v1).
  const sourceManifest = async (t: TransferConfig, v: BatchView) => {
    const s = new PostgresTransferSource(t, env.source);
    const w = { kind: 'key' as const, low: v.boundary.low, high: v.boundary.high };
    return s.manifest(w, await s.readSchema(), 'keel-v1');
  };

  for (const oneRead of [false, true]) {
    it(`commits in the stage step with the manifest's sums, nothing staged (${oneRead ? 'one source read' : 'manifest read first'})`, async () => {
      const t = ordersTransfer('orders_rows', { batchSize: 700, chunkSize: 90 });
      const svc = service(t, { oneRead });
      for (let i = 0; i < 2; i++) {
        const created = await svc.createBatch(t.name);
        expect(created.rowCount === null).toBe(oneRead); // one read: the manifest comes with the rows
        const v = await svc.stage(created.batchId);
        expect(v.state, `${v.lastError}`).toBe('committed');
        expect(v.attempts).toBe(1);
        const m = await sourceManifest(t, v);
        expect(m.rowCount).toBe(700);
        expect({ n: v.appliedCount, checksum: v.checksum, staged: v.stagedChecksum }).toEqual({
          n: m.rowCount,
          checksum: m.checksum,
          staged: m.checksum,
        });
        expect(await events(v.batchId)).toEqual(
          oneRead
            ? ['created', 'manifest_recorded', 'apply_started', 'applied']
            : ['created', 'manifest_recorded', 'apply_started', 'applied'],
        );
        expect(await completion(v.batchId)).toEqual([{ n: m.rowCount, checksum: m.checksum, state: 'committed' }]);
        expect(await stagedRows(v.batchId)).toBe(0);
        covered = Number(v.boundary.high);
      }
      const r = await assertExactlyOnce(env, covered);
      expect(r.target).toBe(covered);
      expect(r.maxWrites).toBe(1);
    });
  }

  for (const oneRead of [false, true]) {
    it(`no bytes column: the source's COPY text is written as it came, the stored rows are the source's (${oneRead ? 'one source read' : 'manifest read first'})`, async () => {
      const table = `public.orders_text_${oneRead ? 1 : 0}`;
      const COLUMNS =
        'id bigint primary key, customer text, amount numeric(12,2), placed_at timestamptz, flag boolean, note varchar(200)';
      await env.source.query(`create table ${table} (${COLUMNS});
        insert into ${table} select id, customer, amount, placed_at, flag,
          case id % 5 when 0 then E'a\\tb\\nc\\rd\\\\e "q" ,()' when 1 then 'Zoë ✓' when 2 then '' when 3 then null else note end
          from public.orders where id <= 400`);
      await env.target.query(`create table ${table} (${COLUMNS})`);
      const t = ordersTransfer(`orders_text_${oneRead ? 1 : 0}`, {
        source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table },
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table },
        columns: ['id', 'customer', 'amount', 'placed_at', 'flag', 'note'].map((c) => ({ source: c, target: c })),
        batchSize: 1000,
        chunkSize: 70,
      });
      const created = await service(t, { oneRead }).createBatch(t.name);
      const v = await service(t, { oneRead }).stage(created.batchId);
      expect(v.state, `${v.lastError}`).toBe('committed');
      expect(await events(v.batchId)).toEqual(['created', 'manifest_recorded', 'apply_started', 'applied']);
      expect(v.appliedCount).toBe(400);
      const rows = (db: pg.Pool) => db.query(`select * from ${table} order by id`).then((r) => r.rows);
      expect(await rows(env.target)).toEqual(await rows(env.source));
    });
  }

  it('a tampered row (manifest read first): the window does not match, nothing commits, the staged way applies it', async () => {
    const t = ordersTransfer('orders_rows', { batchSize: 300, chunkSize: 70 });
    // The first stream carries another value for one row than the source holds (and its manifest says).
    const svc = service(t, {
      oneRead: false,
      tamper: (rows) => {
        if (rows[5]) rows[5] = [...rows[5].slice(0, 1), 'tampered', ...rows[5].slice(2)];
      },
    });
    const created = await svc.createBatch(t.name);
    const v = await svc.run(created.batchId);
    expect(v.state, `${v.lastError}`).toBe('committed');
    expect(v.attempts).toBe(2);
    expect(await events(v.batchId)).toEqual([
      'created',
      'manifest_recorded',
      'apply_started',
      'reconciled_not_applied',
      'staged',
      'apply_started',
      'applied',
    ]);
    expect(await completion(v.batchId)).toEqual([{ n: 300, checksum: created.checksum, state: 'committed' }]);
    covered = Number(v.boundary.high);
    const r = await assertExactlyOnce(env, covered); // the source's values, each row written once
    expect(r.maxWrites).toBe(1);
  });

  it('one source read: the target stores another value than the rows carried; rolled back, fenced, staged instead', async () => {
    const t = ordersTransfer('orders_rows', { batchSize: 300, chunkSize: 70 });
    const svc = service(t, { oneRead: true });
    await env.target.query(`insert into public.tamper_at values ($1)`, [covered + 11]);
    const created = await svc.createBatch(t.name);
    const v = await svc.run(created.batchId);
    expect(v.state, `${v.lastError}`).toBe('committed');
    // Attempt 1 (direct) wrote the rows, recorded the manifest, counted the attempt and claimed; its sums differed
    // (the stored note is not the one hashed): rolled back, and reconcile fenced it. Attempt 2 staged and applied.
    expect(v.attempts).toBe(2);
    expect(await events(v.batchId)).toEqual([
      'created',
      'manifest_recorded',
      'apply_started',
      'reconciled_not_applied',
      'staged',
      'apply_started',
      'applied',
    ]);
    const m = await sourceManifest(t, v);
    expect({ n: v.appliedCount, checksum: v.checksum }).toEqual({ n: m.rowCount, checksum: m.checksum });
    covered = Number(v.boundary.high);
    const r = await assertExactlyOnce(env, covered);
    expect(r.maxWrites).toBe(1);
  });

  it('rows of the window already on the target: not eligible before any row is read, staged and merged', async () => {
    const t = ordersTransfer('orders_rows', { batchSize: 300, chunkSize: 70 });
    const svc = service(t, { oneRead: true });
    await env.target.query(`insert into public.orders (id, customer) values ($1, 'stale')`, [covered + 3]);
    const created = await svc.createBatch(t.name);
    const v = await svc.run(created.batchId);
    expect(v.state, `${v.lastError}`).toBe('committed');
    // No attempt was counted for the direct way (the window was checked before the rows).
    expect(v.attempts).toBe(1);
    expect(await events(v.batchId)).toEqual(['created', 'manifest_recorded', 'staged', 'apply_started', 'applied']);
    covered = Number(v.boundary.high);
    await assertExactlyOnce(env, covered);
    await env.target.query(`update public.write_counts set writes = 1 where id = $1`, [covered - 300 + 3]);
  });

  // A duplicate message: two runs of one batch at once, both the one-read direct way (rows before the claim). They
  // queue on the batch's lock (keel_transfer.lock_batch) before either holds a key: one commits, the other finds the
  // window taken. (The cycle that lock rules out needs a third party: reconcile fencing the first run's counted
  // attempt between its rows and its claim while a second run claims first; sql/README.md, "Transfer targets".)
  it(
    'two runs of one batch at once (one source read): one commits, every row once, no deadlock error',
    { timeout: 60_000 },
    async () => {
      const t = ordersTransfer('orders_rows', { batchSize: 400, chunkSize: 50 });
      for (let i = 0; i < 4; i++) {
        const a = service(t, { oneRead: true });
        const b = service(t, { oneRead: true });
        const created = await a.createBatch(t.name);
        const runs = await Promise.allSettled([a.stage(created.batchId), b.stage(created.batchId)]);
        const said = runs.map((r) => (r.status === 'fulfilled' ? String(r.value.lastError ?? '') : String(r.reason)));
        for (const s of said) expect(s).not.toMatch(/deadlock/i);
        let v = await a.run(created.batchId);
        if (v.state !== 'committed') v = await a.run(created.batchId);
        expect(v.state, `${v.lastError}; runs said: ${said.join(' | ')}`).toBe('committed');
        covered = Number(v.boundary.high);
        const r = await assertExactlyOnce(env, covered);
        expect(r.maxWrites).toBe(1);
      }
    },
  );

  // One batch through a cut on the proxied target; right after it nothing of the window is committed (rows or
  // completion row); then reconcile + run (same id) until committed.
  async function cutRun(oneRead: boolean, plan: FaultPlan) {
    const t = ordersTransfer('orders_rows', {
      batchSize: rand(40, 90),
      chunkSize: rand(5, 30),
      reconcileWaitMs: rand(1, 150),
    });
    const svc = service(t, { oneRead, target: proxied });
    const created = await svc.createBatch(t.name);
    let fired = false;
    const armed = proxy.arm(plan).then(() => {
      fired = true;
    });
    const first = await svc.run(created.batchId);
    proxy.disarm();
    await Promise.race([armed, sleep(5)]);
    const low = Number(created.boundary.low ?? 0);
    const high = Number(created.boundary.high);
    if (first.state !== 'committed') {
      const written = await env.target.query(
        `select count(*)::int as n from public.orders where id > $1 and id <= $2`,
        [low, high],
      );
      expect(written.rows[0].n).toBe(0);
      expect((await completion(created.batchId)).filter((c) => c.state === 'committed')).toEqual([]);
    }
    const v = await recoverUntilCommitted(svc, first);
    expect(v.state, `batch ${v.batchId}: ${v.lastError}`).toBe('committed');
    const m = await sourceManifest(t, v);
    expect(await completion(v.batchId)).toEqual([{ n: m.rowCount, checksum: m.checksum, state: 'committed' }]);
    const ev = await events(v.batchId);
    expect(ev.filter((e) => e === 'applied' || e === 'reconciled_committed').length).toBe(1);
    covered = Number(v.boundary.high);
    return { first, final: v, fired };
  }

  for (const oneRead of [false, true]) {
    it(
      `cut inside the direct COPY of canonical rows (${oneRead ? 'one source read' : 'manifest read first'}), ${RUNS} runs`,
      { timeout: 120_000 },
      async () => {
        let fired = 0;
        for (let i = 0; i < RUNS; i++) {
          const r = await cutRun(oneRead, {
            kind: 'cut-after-bytes',
            trigger: (sql) => /^copy "?public"?\./.test(sql),
            bytes: rand(0, 3000),
          });
          if (r.fired) fired++;
        }
        expect(fired).toBeGreaterThan(RUNS / 2);
        const r = await assertExactlyOnce(env, covered);
        expect(r.target).toBe(covered);
        expect(r.maxWrites).toBe(1);
      },
    );
  }

  it(
    `one source read, cut at the claim after the rows (the attempt counted), ${RUNS} runs`,
    { timeout: 120_000 },
    async () => {
      let fired = 0;
      for (let i = 0; i < RUNS; i++) {
        const r = await cutRun(true, {
          kind: 'cut-after-ms',
          trigger: (sql) => sql.includes('keel_transfer.claim_batch'),
          delayMs: 0,
        });
        if (r.fired) {
          fired++;
          expect(r.final.attempts).toBeGreaterThanOrEqual(2);
        }
      }
      expect(fired).toBeGreaterThan(RUNS / 2);
      const r = await assertExactlyOnce(env, covered);
      expect(r.maxWrites).toBe(1);
    },
  );
});

// A server-side kill (pg_terminate_backend) at EVERY statement a batch sends to the target and to the journal, one
// statement per run, in the staged flow (prepare, begin_stage, the COPY, the checks, finish_stage, apply_batch, the
// purge) and in the direct apply (begin_direct, the COPY into the table, the sums, finish_direct, COMMIT), and each
// journal call (insert, manifest, transitions, notes, reads). The statements are enumerated by a traced run first
// (per pool, in order), then run k kills the connection that is about to send statement k (`idle`: terminated
// while idle, then the statement is sent on the dead connection) or right after sending it (`during`: the
// server's backend is terminated while it runs it or just after; a COMMIT may or may not have happened). Then
// production's recovery runs (maintenance: reconcile of stale batches and the staging purge; the queue message
// redelivered, same batch id) under a bound of steps, and the final state must be exact: the batch committed once
// (journal = target's completion row), the target's table equal to the source window with every key written once,
// no staged rows or registry row left behind, no session idle in a transaction, no unhandled error.
// Bounded: runs in lanes of 3 under KEEL_TERMINATE_EACH_MS per server (default 40 s; the plan list is rotated by the
// seed so that a budget cut short still covers other statements on other runs; KEEL_TEST_SEED replays).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createJournalPool, PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { pgTransferPoolConfig } from '../../shared/transfer/timeouts.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { seededRandom } from '../support/seededRandom.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import {
  createLane,
  FAULT_TEST_TIMEOUTS,
  laneProblems,
  LANE_WRITES_DDL,
  laneTransfer,
  setupDatabases,
  sqlServerShapedSource,
  type Env,
} from './helpers.js';
import { within } from '../support/until.js';

const BUDGET_MS = Number(process.env.KEEL_TERMINATE_EACH_MS ?? 40_000);
const LANES = 3;
const ROWS = 40;
const STEP_MS = 15_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// staged: the bulk COPY staged then applied; direct: the bulk COPY into the table; rows-oneread: canonical rows of a
// SQL Server-shaped source read once, applied directly (the claim after the rows); changes: a change window with
// deletes, updates and inserts after a baseline (staged, then apply_batch's merge and deletes).
type Flow = 'staged' | 'direct' | 'rows-oneread' | 'changes';
const FLOWS: Flow[] = ['staged', 'direct', 'rows-oneread', 'changes'];
type Where = 'target' | 'journal' | 'source';
const WHERES: Where[] = ['target', 'journal', 'source'];
const DELETES_DDL = `create table public.lane_deletes (tbl text not null, id bigint not null);
create function public.log_lane_delete() returns trigger language plpgsql as $$
begin insert into public.lane_deletes (tbl, id) values (tg_table_name, old.id); return old; end $$;`;
const DELETED = [3, 8, 13, 18, 23];
type How = 'idle' | 'during';
interface Plan {
  flow: Flow;
  where: Where;
  k: number;
  how: How;
  text: string;
}
interface Armed {
  k: number;
  how: How;
  seen: number;
  fired: boolean;
  trace: string[];
}

// Clients are told apart by their application_name: one per lane and pool.
const armed = new Map<string, Armed>();
let admin: pg.Pool;

function statementText(arg: unknown): string {
  if (typeof arg === 'string') return arg;
  const t = (arg as { text?: unknown } | null)?.text;
  return typeof t === 'string' ? t : '<submittable>';
}

async function terminate(pid: number): Promise<void> {
  await admin.query(`select pg_terminate_backend($1)`, [pid]);
  for (let i = 0; i < 400; i++) {
    const r = await admin.query(`select 1 from pg_stat_activity where pid = $1`, [pid]);
    if (r.rowCount === 0) return;
    await sleep(5);
  }
}

const originalQuery = pg.Client.prototype.query;
function installHook(): void {
  (pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown }).query = function (
    this: pg.Client & { connectionParameters: { application_name?: string }; processID: number },
    ...args: unknown[]
  ) {
    const a = armed.get(this.connectionParameters.application_name ?? '');
    if (!a || a.fired) return (originalQuery as (...x: unknown[]) => unknown).apply(this, args);
    a.seen++;
    a.trace.push(statementText(args[0]).replace(/\s+/g, ' ').slice(0, 90));
    if (a.seen !== a.k) return (originalQuery as (...x: unknown[]) => unknown).apply(this, args);
    a.fired = true;
    const pid = this.processID;
    const isPromiseForm =
      typeof args[args.length - 1] !== 'function' && typeof (args[0] as { submit?: unknown }).submit !== 'function';
    if (a.how === 'idle' && isPromiseForm)
      return terminate(pid).then(() => (originalQuery as (...x: unknown[]) => Promise<unknown>).apply(this, args));
    const out = (originalQuery as (...x: unknown[]) => unknown).apply(this, args);
    void terminate(pid).catch(() => undefined);
    return out;
  };
}

let env: Env;
const pools: pg.Pool[] = [];
let owner: PostgresTransferJournal;
let lanes = 0;
const unhandled: unknown[] = [];
const onUnhandled = (e: unknown) => unhandled.push(e);

const bounded = <T>(p: Promise<T>, what: string): Promise<T> => within(p, STEP_MS, what);

// One process's service for one lane: its own source, target and journal pools, named so that the hook can find them.
function service(flow: Flow, table: string): { svc: TransferService; app: (w: Where) => string } {
  const app = (w: Where) => `te_${table}_${w}`;
  const pool = (url: string, w: Where) => {
    const p = new pg.Pool({ ...pgTransferPoolConfig(url, FAULT_TEST_TIMEOUTS, 3), application_name: app(w) });
    p.on('error', poolErrorLogger('postgres', 'transfer', app(w)));
    return p;
  };
  const target = pool(env.targetUrl, 'target');
  const source = pool(env.sourceUrl, 'source');
  const jp = createJournalPool(env.controlUrl, {
    max: 3,
    applicationName: app('journal'),
    statementTimeoutMs: 5_000,
    queryTimeoutMs: 8_000,
    idleInTransactionTimeoutMs: 5_000,
    log: () => undefined,
  });
  const t = laneTransfer(table, {
    batchSize: ROWS,
    chunkSize: 10,
    reconcileWaitMs: 100,
    ...(flow === 'changes' ? { boundary: { kind: 'changes' as const } } : {}),
  });
  const svc = new TransferService({
    journal: new PostgresTransferJournal(jp),
    onClose: async () => {
      await Promise.all([target.end(), source.end(), jp.end()]).catch(() => undefined);
    },
    transfers: [t],
    directApply: flow !== 'staged',
    connect: (tc) => {
      const s = new PostgresTransferSource(tc, source);
      return {
        source: flow === 'rows-oneread' ? sqlServerShapedSource(s, { oneRead: true }) : s,
        target: new PostgresTransferTarget(tc, target),
      };
    },
  });
  return { svc, app };
}

// The lane's table; for a changes flow, its baseline committed (without faults) and then deletes, updates and
// inserts at the source for the change window the fault meets. Returns the keys compared (upTo).
async function prepareLane(flow: Flow, table: string): Promise<number> {
  await createLane(env, table, ROWS);
  if (flow !== 'changes') return ROWS;
  await env.source.query(`select keel_changes.enable($1::regclass, array['id'])`, [`public.${table}`]);
  await env.target.query(
    `create trigger ${table}_deletes after delete on public.${table} for each row execute function public.log_lane_delete()`,
  );
  const { svc } = service(flow, table);
  const b = await svc.createBatch(table);
  expect((await svc.run(b.batchId)).state).toBe('committed');
  await svc.close();
  await env.target.query(`delete from public.lane_writes where tbl = $1`, [table]);
  await env.source.query(`delete from public.${table} where id = any($1::bigint[])`, [DELETED]);
  await env.source.query(`update public.${table} set note = 'changed ' || id where id % 7 = 1`);
  await env.source.query(
    `insert into public.${table} (id, customer) select n, 'new ' || n from generate_series($1::bigint, $2::bigint) n`,
    [ROWS + 1, ROWS + 5],
  );
  return ROWS + 5;
}

// What production runs after a fault until the batch is committed: maintenance (reconcile of stale batches), the
// queue message redelivered (stage for extracting, apply for staged), same batch id; at most 30 rounds.
async function recover(
  svc: TransferService,
  name: string,
  label: string,
  first: { id: string | null },
): Promise<BatchView | null> {
  let id: string | null = null;
  for (let i = 0; i < 30; i++) {
    try {
      if (!id) {
        const { open } = await owner.lastForTransfer(name);
        id = open?.batchId ?? (first.id && (await owner.get(first.id)) ? first.id : null);
        if (!id) {
          const c = await bounded(svc.tryCreateBatch(name), `${label}: create`);
          if (!c) throw new Error(`${label}: nothing to create`);
          id = c.batchId;
        }
      }
      const v = (await svc.getBatch(id))!;
      if (v.state === 'committed') return v;
      if (v.state === 'failed') return v;
      await bounded(svc.reconcileStale(0, 10), `${label}: maintenance`);
      const w = (await svc.getBatch(id))!;
      if (w.state === 'extracting') await bounded(svc.stage(id), `${label}: stage`);
      else if (w.state === 'staged') await bounded(svc.apply(id), `${label}: apply`);
      else if (w.state !== 'committed') await sleep(30);
    } catch (err) {
      if ((err as Error).message.startsWith('HANG')) throw err;
      await sleep(20);
    }
  }
  return id ? ((await svc.getBatch(id)) ?? null) : null;
}

// The first run of a batch as a queue step does it: create, then run (stage + apply, reconcile after a failure).
async function firstRun(
  svc: TransferService,
  name: string,
  label: string,
  first: { id: string | null },
): Promise<void> {
  try {
    const b = await bounded(svc.createBatch(name), `${label}: create`);
    first.id = b.batchId;
    await bounded(svc.run(b.batchId), `${label}: run`);
  } catch (err) {
    if ((err as Error).message.startsWith('HANG')) throw err;
  }
}

async function leftovers(table: string, batchId: string): Promise<string[]> {
  const out: string[] = [];
  const idle = await admin.query<{ a: string; q: string }>(
    `select application_name as a, left(query, 80) as q from pg_stat_activity
      where state like 'idle in transaction%' and application_name like $1`,
    [`te_${table}_%`],
  );
  for (const r of idle.rows) out.push(`idle in transaction: ${r.a}: ${r.q}`);
  const reg = await env.target
    .query(`select count(*)::int as n from keel_transfer.staged_batches where batch_id = $1`, [batchId])
    .catch(async () => ({ rows: [{ n: 0 }] }));
  if (reg.rows[0].n > 0) out.push(`staging registry row left for ${batchId}`);
  return out;
}

async function runPlan(p: Plan): Promise<{ problems: string[]; fired: boolean; firstState: string }> {
  const table = `te_${lanes++}`;
  const upTo = await prepareLane(p.flow, table);
  const { svc, app } = service(p.flow, table);
  const label = `${p.flow} ${p.where} #${p.k} (${p.how}) ${p.text}`;
  const a: Armed = { k: p.k, how: p.how, seen: 0, fired: false, trace: [] };
  armed.set(app(p.where), a);
  const first: { id: string | null } = { id: null };
  try {
    await firstRun(svc, table, label, first);
    armed.delete(app(p.where));
    const firstState = first.id ? ((await owner.get(first.id))?.state ?? 'none') : 'not created';
    const v = await recover(svc, table, label, first);
    // Maintenance's purge after the commit (a cut may have left the batch's staged rows).
    await bounded(svc.purgeTerminalStaging(), `${label}: purge`);
    const problems = [
      ...(v?.state === 'committed'
        ? []
        : [`not converged: ${v ? `${v.state} (${v.lastErrorCode}: ${v.lastError})` : 'no batch'}`]),
      ...(await laneProblems(env, table, upTo)),
      ...(v ? await leftovers(table, v.batchId) : []),
    ];
    if (p.flow === 'changes') {
      const d = await env.target.query<{ id: string; n: number }>(
        `select id::text, count(*)::int as n from public.lane_deletes where tbl = $1 group by id order by id::bigint`,
        [table],
      );
      const got = d.rows.map((r) => `${r.id}x${r.n}`).join(',');
      if (got !== DELETED.map((x) => `${x}x1`).join(',')) problems.push(`deletes on the target: ${got}`);
    } else if (v && v.state === 'committed' && v.appliedCount !== ROWS) problems.push(`appliedCount ${v.appliedCount}`);
    return { problems: problems.map((x) => `${label}: ${x}`), fired: a.fired, firstState };
  } finally {
    armed.delete(app(p.where));
    await svc.close().catch(() => undefined);
  }
}

describe('pg_terminate_backend at every statement of a batch', () => {
  beforeAll(async () => {
    env = await setupDatabases('term_each');
    await env.target.query(LANE_WRITES_DDL);
    await env.target.query(DELETES_DDL);
    await migratePostgresChangeCapture(env.source);
    admin = new pg.Pool({ connectionString: env.controlUrl, max: 4 });
    admin.on('error', () => undefined);
    pools.push(admin);
    owner = new PostgresTransferJournal(env.control);
    installHook();
    process.on('uncaughtException', onUnhandled);
    process.on('unhandledRejection', onUnhandled);
  });
  afterAll(async () => {
    (pg.Client.prototype as unknown as { query: unknown }).query = originalQuery;
    process.off('uncaughtException', onUnhandled);
    process.off('unhandledRejection', onUnhandled);
    for (const p of pools) await p.end().catch(() => undefined);
    await env?.close();
  });

  it(
    'every statement, killed idle and while it runs: the batch converges, exactly once',
    async () => {
      const rnd = seededRandom('terminateEach');
      // The trace: each flow's statements per pool, in order, from a run without faults.
      const plans: Plan[] = [];
      for (const flow of FLOWS) {
        const table = `te_${lanes++}`;
        await prepareLane(flow, table);
        const { svc, app } = service(flow, table);
        const traces = Object.fromEntries(
          WHERES.map((w): [Where, Armed] => [w, { k: -1, how: 'idle', seen: 0, fired: false, trace: [] }]),
        ) as Record<Where, Armed>;
        for (const w of WHERES) armed.set(app(w), traces[w]);
        const b = await svc.createBatch(table);
        expect((await svc.run(b.batchId)).state).toBe('committed');
        for (const w of WHERES) armed.delete(app(w));
        await svc.close();
        if (process.env.KEEL_TERMINATE_EACH_TRACE) console.log(flow, JSON.stringify(traces, null, 1));
        for (const where of WHERES)
          traces[where].trace.forEach((text, i) => {
            for (const how of ['idle', 'during'] as How[]) plans.push({ flow, where, k: i + 1, how, text });
          });
      }
      // Rotated by the seed: a budget cut short covers the others on another run.
      const start = rnd.int(0, plans.length - 1);
      const order = [...plans.slice(start), ...plans.slice(0, start)];
      const problems: string[] = [];
      const deadline = Date.now() + BUDGET_MS;
      let done = 0;
      let next = 0;
      const outcomes = new Map<string, number>(); // the first run's end state: how the kills bit
      await Promise.all(
        Array.from({ length: LANES }, async () => {
          while (next < order.length && Date.now() < deadline) {
            const p = order[next++]!;
            const r = await runPlan(p);
            problems.push(...r.problems);
            if (!r.fired) problems.push(`${p.flow} ${p.where} #${p.k} (${p.how}): the kill never fired`);
            outcomes.set(r.firstState, (outcomes.get(r.firstState) ?? 0) + 1);
            done++;
          }
        }),
      );
      console.log(
        `terminateEach: ${done} of ${plans.length} plans run; first runs ended ${JSON.stringify(Object.fromEntries(outcomes))}`,
      );
      expect(problems).toEqual([]);
      expect(unhandled).toEqual([]);
      expect(done).toBeGreaterThan(Math.min(plans.length, 20));
    },
    BUDGET_MS + 120_000,
  );
});

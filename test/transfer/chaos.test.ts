// A bounded, seeded chaos run of whole transfers through the production entry points (docs/transfer.md): two app
// instances (two runtimes, their own pools) share one journal, one source and one target, each reached through a
// fault proxy. For a while, lanes pick at random: deliver a queued stage/apply message (sometimes to both instances at
// once, a duplicate delivery; a step that throws is redelivered like the host does, then poisoned), the transfer
// timer's pass (its clock sometimes ahead, so stalled batches are resumed), maintenance (reconcile, resume, purge),
// the operator's pause / resume / abandon / start / batch resume, source writes (appends to a key transfer; inserts,
// updates and deletes under a change-window transfer), and faults: a connection cut after a random byte count or a
// few ms into a statement, a statement's reply dropped after it completed, a source COPY cut mid-stream, an outage
// of the journal, the source or the target. Then the faults stop, every transfer is resumed, and the production loop
// alone (queue steps, timer, maintenance) must bring every batch to committed or failed within a bounded number of
// passes. Invariants: the target tables equal the source (per key and value, deletes carried), every key of the key
// transfer written exactly once, each batch's journal state agrees with the target's completion row (failed batches
// never committed), the committed windows of each transfer chain without gap or overlap, no error went unhandled,
// and no deadlock. The seed is printed; KEEL_TEST_SEED replays the plan (timings differ); KEEL_CHAOS_MS sets the
// chaos phase's length.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { seededRandom } from '../support/seededRandom.js';
import { databaseOf, watchDeadlocks, type DeadlockWatch } from '../support/deadlocks.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { parseSettings } from '../../shared/config/settings.js';
import { createRuntime, setRuntime, type Runtime } from '../../shared/app/runtime.js';
import { runTransferSchedule } from '../../shared/app/transferSchedule.js';
import { runMaintenancePass } from '../../shared/app/timerPasses.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { ops } from '../../functions/ops.js';
import { context, RecordingQueues, request } from '../functions/support.js';

const CHAOS_MS = Number(process.env.KEEL_CHAOS_MS ?? 15_000);
// Opt-in (a long run's fault, not CI's): KEEL_CHAOS_PARTITION_MS=max partitions of one side (source, target or journal)
// for up to that long: connections stay open and nothing moves either way (no reset), then it all arrives late.
const PARTITION_MS = Number(process.env.KEEL_CHAOS_PARTITION_MS ?? 0);
const SETTLE_PASSES = 40;
const MAX_DEQUEUE = 5; // host.json maxDequeueCount: then the message is poisoned (the timer resumes the batch)
const rnd = seededRandom('transfer chaos');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const TABLE_DDL = (t: string) => `create table public.${t} (id bigint primary key, name text not null, n integer)`;
// Target: writes per key of the key transfer (an insert or update of a key twice shows here).
const WRITES_DDL = `create table public.item_writes (id bigint primary key, writes integer not null);
create function public.count_item_write() returns trigger language plpgsql as $$
begin
  insert into public.item_writes (id, writes) values (new.id, 1)
  on conflict (id) do update set writes = public.item_writes.writes + 1;
  return new;
end $$;
create trigger items_count after insert or update on public.items for each row execute function public.count_item_write();`;

interface Queued {
  queue: string;
  message: unknown;
  dequeues: number;
}

describe('transfer chaos: faults, duplicate deliveries, two instances and an operator, then the production loop', () => {
  const proxies: Record<'source' | 'target' | 'journal', FaultProxy> = {} as never;
  let source: pg.Pool; // direct: the test's own writes and checks
  let target: pg.Pool;
  let control: pg.Pool;
  let urls: string[] = [];
  let rtA: Runtime;
  let rtB: Runtime;
  const queues = new RecordingQueues();
  const pending: Queued[] = [];
  const unhandled: string[] = [];
  const onUnhandled = (err: unknown) =>
    unhandled.push(err instanceof Error ? `${err.name}: ${err.message}\n${err.stack}` : String(err));
  let deadlocks: DeadlockWatch;
  let nextItem = 1;
  let nextThing = 1;
  const stepErrors: string[] = [];
  const writerErrors: string[] = []; // the test's own source writes

  beforeAll(async () => {
    process.on('uncaughtException', onUnhandled);
    process.on('unhandledRejection', onUnhandled);
    const [srcUrl, tgtUrl, ctlUrl] = await Promise.all([
      createTestDatabase('tr_chaos_src'),
      createTestDatabase('tr_chaos_tgt'),
      createTestDatabase('tr_chaos_ctl'),
    ]);
    urls = [srcUrl, tgtUrl, ctlUrl];
    source = new pg.Pool({ connectionString: srcUrl, max: 3 });
    target = new pg.Pool({ connectionString: tgtUrl, max: 2 });
    control = new pg.Pool({ connectionString: ctlUrl, max: 2 });
    await migratePostgresChangeCapture(source);
    for (const t of ['items', 'things']) {
      await source.query(TABLE_DDL(t));
      await target.query(TABLE_DDL(t));
    }
    await target.query(WRITES_DDL);
    await source.query(`select keel_changes.enable('public.things', array['id'])`);
    await appendItems(rnd.int(40, 160));
    await writeThings(rnd.int(20, 60), 0, 0);
    for (const [k, url] of [
      ['source', srcUrl],
      ['target', tgtUrl],
      ['journal', ctlUrl],
    ] as const) {
      const u = new URL(url);
      proxies[k] = await FaultProxy.start(u.hostname, Number(u.port));
    }
    const base = {
      source: { engine: 'postgres', connectionSetting: 'CHAOS_SOURCE', table: 'public.items' },
      target: { engine: 'postgres', connectionSetting: 'CHAOS_TARGET', table: 'public.items' },
      keyColumns: ['id'],
      columns: ['id', 'name', 'n'].map((c) => ({ source: c, target: c })),
      reconcileWaitMs: 300,
      chunkSize: rnd.pick([5, 50]),
    };
    const direct = rnd.next() < 0.6;
    console.log(`[chaos] direct apply ${direct}, chunkSize ${base.chunkSize}`);
    const env: Record<string, string> = {
      KEEL_PG_URL: proxies.journal.urlFor(appUrl(ctlUrl)),
      KEEL_PG_MIGRATE_URL: ctlUrl,
      CHAOS_SOURCE: proxies.source.urlFor(srcUrl),
      CHAOS_TARGET: proxies.target.urlFor(tgtUrl),
      KEEL_SCHEDULED_TRANSFERS: '*',
      KEEL_TRANSFER_DIRECT_APPLY: String(direct),
      KEEL_TRANSFER_STALE_MS: '1000',
      KEEL_TRANSFER_RETRY_BASE_MS: '1000',
      KEEL_TRANSFER_RETRY_LIMIT: '3',
      KEEL_TRANSFER_CONNECT_TIMEOUT_MS: '5000',
      KEEL_TRANSFER_STATEMENT_TIMEOUT_MS: '20000',
      KEEL_TRANSFER_QUERY_TIMEOUT_MS: '25000',
      KEEL_TRANSFER_IDLE_IN_TRANSACTION_TIMEOUT_MS: '10000',
      KEEL_TRANSFER_LOCK_TIMEOUT_MS: '5000',
      KEEL_TRANSFER_STALL_TIMEOUT_MS: '5000',
      KEEL_HEARTBEAT_MS: '200',
      KEEL_TRANSFERS: JSON.stringify([
        { ...base, name: 'items', boundary: { column: 'id', kind: 'key' }, batchSize: rnd.pick([7, 20, 45]) },
        {
          ...base,
          name: 'things',
          source: { ...base.source, table: 'public.things' },
          target: { ...base.target, table: 'public.things' },
          boundary: { kind: 'changes' },
          batchSize: rnd.pick([6, 15, 40]),
        },
      ]),
    };
    const settings = parseSettings(env);
    rtA = await createRuntime(settings, { queues, env });
    rtB = await createRuntime(settings, { queues, env });
    setRuntime(rtA); // the ops API's instance
    deadlocks = await watchDeadlocks(urls.map(databaseOf));
  });

  afterAll(async () => {
    setRuntime(undefined);
    for (const p of Object.values(proxies)) p?.up();
    await rtA?.close().catch(() => undefined);
    await rtB?.close().catch(() => undefined);
    for (const p of Object.values(proxies)) await p?.close();
    await source?.end();
    await target?.end();
    await control?.end();
    process.off('uncaughtException', onUnhandled);
    process.off('unhandledRejection', onUnhandled);
    await deadlocks?.assertNone();
  });

  async function appendItems(n: number): Promise<void> {
    const from = nextItem;
    nextItem += n;
    await source.query(
      `insert into public.items select g, 'item-' || g, g % 7 from generate_series($1::bigint, $2::bigint) g`,
      [from, nextItem - 1],
    );
  }

  // Inserts `ins` new things, updates `upd` and deletes `del` random existing ones (one transaction).
  async function writeThings(ins: number, upd: number, del: number): Promise<void> {
    // The range is reserved before the first await: read after it (nextThing - 1 in the insert's arguments, as
    // before), a concurrent lane's reservation had moved nextThing, the ranges overlapped and the insert failed on a
    // duplicate key (the source's log showed 249..249 inserted, then 246..249).
    const from = nextThing;
    nextThing += ins;
    const to = nextThing - 1;
    const c = await source.connect();
    try {
      await c.query('begin');
      if (ins > 0)
        await c.query(
          `insert into public.things select g, 'thing-' || g, 0 from generate_series($1::bigint, $2::bigint) g`,
          [from, to],
        );
      if (upd > 0)
        await c.query(
          `update public.things set n = n + 1, name = name || '+' where id in (select id from public.things order by random() limit $1)`,
          [upd],
        );
      if (del > 0)
        await c.query(
          `delete from public.things where id in (select id from public.things order by random() limit $1)`,
          [del],
        );
      await c.query('commit');
    } catch (err) {
      await c.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  }

  function drainSent(): void {
    for (const m of queues.sent.splice(0)) pending.push({ queue: m.queue, message: m.message, dequeues: 0 });
  }

  // One delivery of a message to one instance, as the host does it: a step that throws is delivered again later,
  // up to MAX_DEQUEUE times.
  async function deliver(m: Queued, rt: Runtime): Promise<void> {
    const ctx = context(m.queue);
    setRuntime(rt); // the step reads the runtime synchronously as it starts
    const p =
      m.queue === rtA.settings.KEEL_TRANSFER_STAGE_QUEUE
        ? transferStage(m.message, ctx)
        : transferApply(m.message, ctx);
    setRuntime(rtA);
    try {
      await p;
    } catch (err) {
      stepErrors.push(`${m.queue}: ${(err as Error).message}`);
      if (m.dequeues + 1 < MAX_DEQUEUE) pending.push({ ...m, dequeues: m.dequeues + 1 });
    } finally {
      drainSent();
    }
  }

  async function call(method: string, path: string, body: unknown = {}) {
    const res = await ops(request(method, path, { body, operator: true }), context('ops'));
    drainSent();
    return { status: res.status ?? 200, body: res.jsonBody as any };
  }

  async function openBatches(): Promise<{ id: string; transfer: string; state: string }[]> {
    const r = await control.query(
      `select batch_id::text as id, transfer_name as transfer, state from keel.transfer_batches
        where state in ('extracting', 'staged', 'applying', 'unresolved')`,
    );
    return r.rows;
  }

  const TRIGGERS: Record<keyof typeof proxies, [string, RegExp][]> = {
    target: [
      ['apply', /apply_batch/],
      ['direct', /begin_direct|finish_direct|claim_batch|direct_window_open/],
      ['stage', /begin_stage|finish_stage/],
      ['copy', /^copy /i],
      ['reconcile', /try_claim/],
      ['commit', /^commit/i],
      ['purge', /purge/],
      ['any', /./],
    ],
    journal: [
      ['insert', /transfer_batch_insert/],
      ['transition', /transfer_batch_transition/],
      ['note', /transfer_batch_note/],
      ['read', /transfer_batch_(get|list|last|stale)/],
      ['control', /transfer_control/],
      ['any', /./],
    ],
    source: [
      ['copy', /^copy /i],
      ['any', /./],
    ],
  };

  function armRandom(): string {
    const which = rnd.pick(['source', 'target', 'target', 'journal', 'journal'] as const);
    const proxy = proxies[which];
    if (proxy.armed) return `${which}: still armed`;
    const [label, re] = rnd.pick(TRIGGERS[which]);
    const trigger = (sql: string) => re.test(sql);
    const kind = rnd.pick(['cut-after-bytes', 'cut-after-ms', 'drop-reply', 'cut-after-server-bytes'] as const);
    const plan: FaultPlan =
      kind === 'cut-after-bytes'
        ? { kind, trigger, bytes: rnd.int(0, 4000) }
        : kind === 'cut-after-ms'
          ? { kind, trigger, delayMs: rnd.int(0, 60) }
          : kind === 'drop-reply'
            ? { kind, trigger }
            : { kind, trigger, bytes: rnd.int(0, 3000) };
    void proxy.arm(plan);
    return `${which}: ${kind} at ${label}`;
  }

  async function outage(): Promise<string> {
    const which = rnd.pick(['source', 'target', 'journal'] as const);
    const ms = rnd.int(20, 400);
    proxies[which].down();
    await sleep(ms);
    proxies[which].up();
    return `${which} down ${ms} ms`;
  }

  const heals: Promise<void>[] = [];
  function partition(): string {
    const which = rnd.pick(['source', 'target', 'target', 'journal', 'journal'] as const);
    if (proxies[which].isStalled) return `${which}: already partitioned`;
    const ms = rnd.int(200, PARTITION_MS);
    proxies[which].stall();
    heals.push(sleep(ms).then(() => proxies[which].heal()));
    return `${which} partitioned ${ms} ms`;
  }

  async function operator(): Promise<string> {
    const name = rnd.pick(['items', 'things']);
    const what = rnd.pick([
      'pause',
      'resume',
      'resume',
      'abandon',
      'start',
      'batchResume',
      'rebaseline',
      'rebaseline',
    ] as const);
    if (what === 'rebaseline') {
      // Re-baseline (things only: a changes transfer), racing the timer's and catch-up's windows of either instance;
      // one that finds the chain moved on is released (window_taken), else it chains from its predecessor (marked).
      const r = await call('POST', `transfers/things/rebaseline`, {});
      return `rebaseline things: ${r.status}${r.status === 409 ? ` ${r.body?.error ?? ''}` : ''}`;
    }
    if (what === 'pause' || what === 'resume' || what === 'start') {
      const r = await call('POST', `transfers/${name}/${what}`, what === 'pause' ? { reason: 'chaos' } : {});
      return `${what} ${name}: ${r.status}`;
    }
    const open = (await openBatches()).filter((b) => b.transfer === name);
    if (open.length === 0) return `${what} ${name}: nothing open`;
    const b = rnd.pick(open);
    const r =
      what === 'abandon'
        ? await call('POST', `transfers/batches/${b.id}/abandon`, { reason: 'chaos operator' })
        : await call('POST', `transfers/batches/${b.id}/resume`);
    return `${what} ${b.id} (${b.state}): ${r.status}`;
  }

  async function action(): Promise<string> {
    const x = rnd.next();
    const rt = rnd.next() < 0.5 ? rtA : rtB;
    if (x < 0.4) {
      if (pending.length === 0) return 'no message';
      const m = pending.splice(rnd.int(0, pending.length - 1), 1)[0]!;
      if (rnd.next() < 0.2) {
        // Delivered twice at once, to both instances (at-least-once delivery; a message redelivered while its
        // first delivery still runs).
        await Promise.all([deliver(m, rtA), deliver({ ...m, dequeues: MAX_DEQUEUE }, rtB)]);
        return `${m.queue} twice`;
      }
      await deliver(m, rt);
      return m.queue;
    }
    if (x < 0.5) {
      const ahead = rnd.pick([0, 0, 1500, 30_000]);
      await runTransferSchedule(rt, context('transferTimer'), new Date(Date.now() + ahead));
      drainSent();
      return `timer (+${ahead} ms)`;
    }
    if (x < 0.57) {
      await runMaintenancePass(rt, context('maintenance'));
      drainSent();
      return 'maintenance';
    }
    if (x < 0.65) return operator();
    if (x < 0.75) {
      // (straight to the source, no proxy: they never fail, and the check below says so)
      try {
        if (rnd.next() < 0.5) await appendItems(rnd.int(1, 30));
        else await writeThings(rnd.int(0, 8), rnd.int(0, 6), rnd.int(0, 4));
      } catch (err) {
        writerErrors.push((err as Error).message);
        throw err;
      }
      return 'source writes';
    }
    if (x < 0.93) return armRandom();
    if (PARTITION_MS > 0 && rnd.next() < 0.5) return partition();
    return outage();
  }

  it('converges: target = source, each window committed once, journal = target, nothing stuck', async () => {
    const trace: string[] = [];
    const lane = async (n: number, until: number) => {
      while (Date.now() < until) {
        let what: string;
        try {
          what = await action();
        } catch (err) {
          what = `error: ${(err as Error).message}`;
        }
        trace.push(`${n}: ${what}`);
      }
    };
    // Start both transfers, then the chaos.
    await call('POST', 'transfers/items/start');
    await call('POST', 'transfers/things/start');
    const until = Date.now() + CHAOS_MS;
    await Promise.all([lane(1, until), lane(2, until), lane(3, until)]);
    await Promise.all(heals);

    // The faults stop; the operator resumes every transfer; the production loop alone finishes the work.
    for (const p of Object.values(proxies)) {
      p.disarm();
      p.up();
    }
    await call('POST', 'transfers/items/resume');
    await call('POST', 'transfers/things/resume');
    let passes = 0;
    let quiet = 0;
    for (; passes < SETTLE_PASSES && quiet < 2; passes++) {
      while (pending.length > 0) await deliver(pending.shift()!, rtA);
      const steps = await runTransferSchedule(rtA, context('transferTimer'), new Date(Date.now() + 5_000));
      drainSent();
      await runMaintenancePass(rtA, context('maintenance')).catch((err) => stepErrors.push(String(err)));
      drainSent();
      const open = await openBatches();
      const idle = steps.every((s) => s.action === 'nothing_new');
      quiet = open.length === 0 && pending.length === 0 && idle ? quiet + 1 : 0;
      // An apply in doubt is reconciled by maintenance once untouched for KEEL_TRANSFER_STALE_MS.
      if (open.some((b) => b.state === 'applying' || b.state === 'unresolved')) await sleep(1100);
    }
    const journal = (
      await control.query(
        `select batch_id::text as id, transfer_name as transfer, state, boundary_low as low, boundary_high as high,
                last_error, last_error_code as code, created_at from keel.transfer_batches order by created_at, batch_id`,
      )
    ).rows;
    const summary = () => `seed ${rnd.seed} (replay with KEEL_TEST_SEED=${rnd.seed})`;
    console.log(
      `[chaos] seed ${rnd.seed}: ${trace.length} actions (${trace.filter((x) => / rebaseline things: 202/.test(x)).length} re-baselines), ${passes} settle passes, ${journal.length} batches: ` +
        JSON.stringify(
          journal.reduce<Record<string, number>>((a, b) => {
            const k = `${b.transfer}:${b.state}${b.state === 'failed' ? `:${b.code}` : ''}`;
            a[k] = (a[k] ?? 0) + 1;
            return a;
          }, {}),
        ),
    );
    const problems: string[] = [];
    // A batch fails only when abandoned (invalid_state: the operator's, or the final fence found) or when the source
    // changed under its window (manifest_mismatch; a change window's rows re-read): never from a fault.
    for (const b of journal)
      if (
        b.state === 'failed' &&
        b.code !== 'invalid_state' &&
        b.code !== 'manifest_mismatch' &&
        !(b.code === 'window_taken' && String(b.low).startsWith('rebaseline@'))
      ) {
        const ev = await control.query(
          `select event, detail::text as d from keel.transfer_batch_events where batch_id = $1 order by event_id`,
          [b.id],
        );
        problems.push(
          `batch ${b.id} (${b.transfer}) failed ${b.code}: ${b.last_error}; events: ${ev.rows.map((r) => `${r.event} ${String(r.d).slice(0, 200)}`).join(' | ')}`,
        );
      }
    if (quiet < 2)
      problems.push(
        `not settled after ${passes} passes: open ${JSON.stringify(await openBatches())}, ${pending.length} messages`,
      );
    // Every batch ends committed or failed.
    for (const b of journal)
      if (b.state !== 'committed' && b.state !== 'failed')
        problems.push(`batch ${b.id} (${b.transfer}) stuck ${b.state}: ${b.last_error}`);
    // Journal = target: committed exactly when the target's completion row is committed.
    const comp = new Map<string, string>(
      (
        await target.query(
          `select batch_id::text as id, state from keel_transfer.completions where batch_id = any($1)`,
          [journal.map((b) => b.id)],
        )
      ).rows.map((r) => [r.id as string, r.state as string]),
    );
    for (const b of journal)
      if ((b.state === 'committed') !== (comp.get(b.id) === 'committed'))
        problems.push(`batch ${b.id} (${b.transfer}): journal ${b.state}, target ${comp.get(b.id) ?? 'no completion'}`);
    // Committed windows chain: each committed batch starts where the previous committed one ended.
    for (const name of ['items', 'things']) {
      const committed = journal.filter((b) => b.transfer === name && b.state === 'committed');
      let prev: string | null = null;
      for (const [i, b] of committed.entries()) {
        // (a re-baseline's low is its predecessor's high, marked)
        if (i > 0 && b.low !== prev && b.low !== `rebaseline@${prev}`)
          problems.push(`${name}: window (${b.low}, ${b.high}] follows ${prev}`);
        if (i === 0 && b.low !== null) problems.push(`${name}: first committed window starts at ${b.low}`);
        prev = b.high;
      }
    }
    // Target = source, per key and value.
    for (const t of ['items', 'things']) {
      const q = `select id, name, n from public.${t} order by id`;
      const [s, g] = await Promise.all([source.query(q), target.query(q)]);
      const a = new Map(s.rows.map((r) => [String(r.id), `${r.name}|${r.n}`]));
      const b = new Map(g.rows.map((r) => [String(r.id), `${r.name}|${r.n}`]));
      const diff: string[] = [];
      for (const [k, v] of a) if (b.get(k) !== v) diff.push(`${k}: source ${v}, target ${b.get(k) ?? 'missing'}`);
      for (const [k, v] of b) if (!a.has(k)) diff.push(`${k}: on the target only (${v})`);
      if (diff.length) problems.push(`${t}: ${diff.length} keys differ, e.g. ${diff.slice(0, 5).join('; ')}`);
    }
    const twice = await target.query(`select id, writes from public.item_writes where writes <> 1 order by id limit 5`);
    if (twice.rows.length) problems.push(`items written more than once: ${JSON.stringify(twice.rows)}`);
    if (writerErrors.length) problems.push(`the test's source writes failed: ${writerErrors.slice(0, 3).join('; ')}`);
    if (unhandled.length) problems.push(`unhandled: ${unhandled.slice(0, 3).join('\n')}`);
    if (problems.length) {
      console.log(`[chaos] trace (last 60):\n${trace.slice(-60).join('\n')}`);
      console.log(`[chaos] step errors (last 20):\n${stepErrors.slice(-20).join('\n')}`);
    }
    expect(problems, summary()).toEqual([]);
  }, 180_000);
});

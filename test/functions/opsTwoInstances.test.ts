// The ops writes raced across two instances: two runtimes with their own pools, services and in-process state on one
// database, as two Function hosts are (opsRouteTable.test.ts races each write within one process). Each case sends
// the same call from both instances at once (twice from each), ROUNDS times on fresh targets, and checks that it
// took effect once (or each effect once), that every answer is the state after the caller's own change, never a 5xx,
// and that each call left exactly one finished audit record with the status its caller got.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../shared/ops/routes.js';
import { createOpsHandler, type OpsHttpHandler } from '../../shared/ops/router.js';
import { opsRuntimeOf } from '../../shared/app/opsRuntime.js';
import { createRuntime, type Runtime } from '../../shared/app/runtime.js';
import { defineSchedule } from '../../shared/jobs/define.js';
import { registerDemoHandlers } from '../../dev/demoHandlers.js';
import {
  auditRows,
  context,
  deadLetteredJob,
  enqueueJob,
  jsonOf,
  lastAuditId,
  RecordingQueues,
  request,
  tally,
} from './support.js';
import { keyCompareTransfer, useItemsTransfer } from './itemsTransfer.js';

const ROUNDS = 3;
const EACH = 2; // calls per instance per round
const SCHEDULE = defineSchedule('two-inst', { cron: '0 0 0 1 1 *', type: 'demo.echo', payload: { message: 'x' } });
const fx = useItemsTransfer({
  label: 'fn_two_inst',
  rows: 40,
  batchSize: 10,
  chunkSize: 10,
  env: { KEEL_OPS_REFUSAL_WINDOW_MS: '0' },
  schedules: [SCHEDULE],
  sourceDdl: [
    'create table public.items (id bigint primary key, name text not null)',
    'create table public.kc (id bigint primary key, name text not null)',
  ],
  seed: async (source) => {
    await source.query(`insert into public.kc select n, 'kc-' || n from generate_series(1, 40) n`);
  },
  moreTransfers: (items) => [keyCompareTransfer(items, 'kc')],
});

interface Answer {
  status: number;
  body: any;
  from: 'A' | 'B';
}

// The second instance: the first's settings (so the same database, transfers and schedules), its own runtime.
let b: { rt: Runtime; queues: RecordingQueues };
let handlers: { A: OpsHttpHandler; B: OpsHttpHandler };
beforeAll(async () => {
  const queues = new RecordingQueues();
  const rt = await createRuntime(fx.t.rt.settings, {
    queues,
    env: fx.t.rt.env,
    register: registerDemoHandlers,
    schedules: [SCHEDULE],
  });
  b = { rt, queues };
  handlers = {
    A: createOpsHandler(allRoutes(), async () => opsRuntimeOf(fx.t.rt)),
    B: createOpsHandler(allRoutes(), async () => opsRuntimeOf(rt)),
  };
});
afterAll(async () => {
  await b?.rt.close();
});

async function callOn(from: 'A' | 'B', method: string, path: string, body: unknown = {}): Promise<Answer> {
  const res = await handlers[from](request(method, path, { body, operator: true }), context('ops'));
  return { status: res.status ?? 200, body: jsonOf(res), from };
}
const call = (method: string, path: string, body?: unknown) => callOn('A', method, path, body);

// Every call of a round at once, half from each instance.
async function race(method: string, path: string, body: unknown = {}): Promise<Answer[]> {
  const from = await lastAuditId(fx.t.pool);
  const rs = await Promise.all(
    (['A', 'B'] as const).flatMap((who) => Array.from({ length: EACH }, () => callOn(who, method, path, body))),
  );
  for (const r of rs) {
    expect(r.status, `${method} ${path} on ${r.from}: ${JSON.stringify(r.body)}`).toBeLessThan(500);
    if (r.status >= 400) expect(typeof r.body.message).toBe('string');
  }
  const rows = (await auditRows(fx.t.pool, from)).filter((x) => x.http_method === method);
  expect(rows, `${method} ${path}: one record per call`).toHaveLength(rs.length);
  expect(rows.map((x) => Number(x.status)).sort()).toEqual(rs.map((x) => x.status).sort());
  for (const row of rows) {
    expect(row.outcome).toBe(Number(row.status) < 400 ? 'ok' : 'failed');
    expect(row.finished_at).not.toBeNull();
  }
  return rs;
}

const enqueue = (job: Record<string, unknown>) => enqueueJob(call, job);
const deadLettered = (queue: string) => deadLetteredJob(call, fx.t.rt, queue);

const jobAt = async (id: string) => (await call('GET', `jobs/${id}`)).body;

// The stage and apply steps run on the first instance (the functions' runtime): the second's posts are moved there.
async function pump(): Promise<void> {
  fx.t.queues.sent.push(...b.queues.sent.splice(0));
  await fx.pump();
}

const N = 2 * EACH;

describe('ops writes raced across two instances', () => {
  it('enqueue with an idempotency key: one job, one first answer, the same id everywhere', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const rs = await race('POST', 'jobs', {
        queue: 'ti-enq',
        type: 'demo.echo',
        idempotencyKey: `ti-${round}`,
        delayMs: 600_000,
      });
      expect(tally(rs)).toEqual({ 201: N });
      expect(new Set(rs.map((r) => r.body.id)).size).toBe(1);
      expect(rs.filter((r) => r.body.duplicate === false)).toHaveLength(1);
    }
    expect((await call('GET', 'jobs?queue=ti-enq')).body.items).toHaveLength(ROUNDS);
  });

  it('pause and resume a queue: every answer paused as asked; a queue created once is reported created once', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const q = `ti-q-${round}`;
      const paused = await race('POST', `queues/${q}/pause`);
      expect(tally(paused)).toEqual({ 200: N });
      expect(paused.every((r) => r.body.paused === true)).toBe(true);
      expect(paused.filter((r) => r.body.created === true)).toHaveLength(1);
      const resumed = await race('POST', `queues/${q}/resume`);
      expect(resumed.every((r) => r.body.paused === false && r.body.created === false)).toBe(true);
      expect((await call('GET', `queues/${q}`)).body.paused).toBe(false);
    }
  });

  it('change a queue setting from both: each answer shows its own value; the queue ends with one of them', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const q = `ti-lim-${round}`;
      const from = await lastAuditId(fx.t.pool);
      const rs = await Promise.all(
        [3, 4, 5, 6].map((v, i) =>
          callOn(i % 2 ? 'B' : 'A', 'PATCH', `queues/${q}`, { maxConcurrency: v, maxAttempts: v }).then((r) => ({
            ...r,
            sent: v,
          })),
        ),
      );
      expect(tally(rs)).toEqual({ 200: 4 });
      for (const r of rs) expect([r.body.maxConcurrency, r.body.maxAttempts]).toEqual([r.sent, r.sent]);
      expect(rs.filter((r) => r.body.created === true)).toHaveLength(1);
      const end = (await call('GET', `queues/${q}`)).body;
      expect([3, 4, 5, 6]).toContain(end.maxConcurrency);
      expect(end.maxAttempts).toBe(end.maxConcurrency); // one caller's whole change, not a mix
      expect((await auditRows(fx.t.pool, from)).filter((x) => x.action === 'updateQueue')).toHaveLength(4);
    }
  });

  it('cancel one job, and many by ids: each job cancelled once', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const one = await enqueue({ queue: 'ti-cancel', type: 'demo.echo', delayMs: 600_000 });
      const rs = await race('POST', `jobs/${one}/cancel`);
      expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
      expect(await jobAt(one)).toMatchObject({ location: 'dlq', reason: 'cancelled' });

      const ids = await Promise.all([1, 2, 3].map(() => enqueue({ queue: 'ti-cm', type: 'demo.echo', delayMs: 6e5 })));
      const many = await race('POST', 'jobs/cancel', { ids, dryRun: false });
      expect(tally(many)).toEqual({ 200: N });
      const done = many.flatMap((r) => r.body.rows).filter((x: { outcome: string }) => x.outcome === 'cancelled');
      expect(done.map((x: { id: string }) => x.id).sort()).toEqual([...ids].sort());
      expect(many.reduce((n, r) => n + Number(r.body.count), 0)).toBe(ids.length);
    }
  });

  it('resurrect one dead letter, and the previewed ids of a filter: each job resurrected and posted once', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const one = await deadLettered('ti-res');
      fx.t.queues.clear();
      b.queues.clear();
      const rs = await race('POST', `dlq/${one}/resurrect`);
      expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
      expect(await jobAt(one)).toMatchObject({ location: 'hot', state: 'pending' });

      const ids = await Promise.all([1, 2, 3].map(() => deadLettered(`ti-rf-${round}`)));
      const preview = await call('POST', 'dlq/resurrect', { queue: `ti-rf-${round}`, limit: 10 });
      expect([...preview.body.ids].sort()).toEqual([...ids].sort());
      // A dead letter arriving after the preview: matched by the filter, never resurrected.
      const late = await deadLettered(`ti-rf-${round}`);
      fx.t.queues.clear();
      b.queues.clear();
      const many = await race('POST', 'dlq/resurrect', {
        queue: `ti-rf-${round}`,
        ids: preview.body.ids,
        limit: 10,
        dryRun: false,
      });
      expect(tally(many)).toEqual({ 200: N });
      const moved = many.flatMap((r) => r.body.ids as string[]);
      expect(moved.sort()).toEqual([...ids].sort());
      expect(many.reduce((n, r) => n + Number(r.body.posted), 0)).toBe(ids.length);
      expect(await jobAt(late)).toMatchObject({ location: 'dlq' });
      for (const r of many) expect(r.body.arrivedAfterPreview.ids).toEqual([late]);
      const posts = [...fx.t.queues.sent, ...b.queues.sent].filter((m) => m.queue !== 'keel-transfer-stage');
      expect(posts).toHaveLength(ids.length);
    }
  });

  it('purge the DLQ from both: each row deleted once, the deleted counts add up to the preview', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const q = `ti-purge-${round}`;
      const ids = await Promise.all([1, 2, 3, 4, 5].map(() => deadLettered(q)));
      await new Promise((r) => setTimeout(r, 20));
      const olderThan = new Date().toISOString();
      const preview = await call('POST', 'purge', { target: 'dlq', queue: q, olderThan });
      expect(preview.body.matched).toBe(ids.length);
      const rs = await race('POST', 'purge', {
        target: 'dlq',
        queue: q,
        olderThan,
        dryRun: false,
        batchSize: 1,
        previewMatched: ids.length,
      });
      expect(tally(rs)).toEqual({ 200: N });
      expect(rs.reduce((n, r) => n + Number(r.body.deleted), 0)).toBe(ids.length);
      for (const id of ids) expect((await call('GET', `jobs/${id}`)).status).toBe(404);
    }
  });

  it('a schedule paused on one instance while the other fires its tick: no tick after the pause returned', async () => {
    for (let round = 0; round < ROUNDS * 2; round++) {
      const [state] = await b.rt.store.listSchedules(SCHEDULE.name);
      const last = state?.lastTick ?? null;
      const tick = new Date((last?.getTime() ?? Date.UTC(2020, 0, 1)) + 60_000);
      const job = {
        queue: 'ti-sched',
        type: 'demo.echo',
        payload: { message: 'x' },
        idempotencyKey: `schedule:${SCHEDULE.name}:${tick.toISOString()}`,
      };
      const fire = b.rt.store.fireSchedule(SCHEDULE.name, last, tick, [job]);
      await new Promise((r) => setTimeout(r, round));
      const paused = await race('POST', `schedules/${SCHEDULE.name}/pause`);
      expect(tally(paused)).toEqual({ 200: N });
      const atPause = (await call('GET', 'jobs?queue=ti-sched')).body.items.length;
      const fired = await fire;
      expect((await call('GET', 'jobs?queue=ti-sched')).body.items.length).toBe(atPause);
      expect(['fired', 'paused']).toContain(fired.status);
      await race('POST', `schedules/${SCHEDULE.name}/resume`);
    }
  });

  it('start a transfer from both: one batch, the others told an open batch exists', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      // New rows each round (a committed batch's catch-up takes everything there is).
      const low = 50 + round * 10;
      await fx.source.query(
        `insert into public.items select n, 'item-' || n from generate_series($1::int, $2::int) n`,
        [low, low + 4],
      );
      const rs = await race('POST', 'transfers/items/start');
      expect(tally(rs), JSON.stringify(rs.map((r) => r.body))).toEqual({ 202: 1, 409: N - 1 });
      const batchId = rs.find((r) => r.status === 202)!.body.batch.batchId as string;
      for (const r of rs.filter((x) => x.status === 409)) expect(r.body.detail?.batchId).toBe(batchId);
      await pump();
      expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('committed');
    }
  });

  it('replay a range from both: one batch; the paused transfer refuses every instance', async () => {
    const committed = (await call('GET', 'transfers/batches?transfer=items&state=committed')).body.items as any[];
    const c = committed[committed.length - 1];
    for (let round = 0; round < ROUNDS; round++) {
      const rs = await race('POST', 'transfers/items/replay', { low: c.boundary.low, high: c.boundary.high });
      expect(tally(rs)).toEqual({ 202: 1, 409: N - 1 });
      const batchId = rs.find((r) => r.status === 202)!.body.batch.batchId as string;
      await pump();
      expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('committed');
    }
    await callOn('B', 'POST', 'transfers/items/pause', {});
    const refused = await race('POST', 'transfers/items/replay', { low: c.boundary.low, high: c.boundary.high });
    expect(tally(refused)).toEqual({ 409: N });
    await callOn('A', 'POST', 'transfers/items/resume', {});
  });

  it('abandon an open batch from both: abandoned once, the others a 409', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      await fx.source.query(
        `insert into public.items select n, 'item-' || n from generate_series($1::int, $2::int) n`,
        [100 + round * 10, 104 + round * 10],
      );
      const started = await call('POST', 'transfers/items/start', {});
      expect(started.status, JSON.stringify(started.body)).toBe(202);
      fx.t.queues.clear();
      b.queues.clear();
      const batchId = started.body.batch.batchId as string;
      const rs = await race('POST', `transfers/batches/${batchId}/abandon`, { reason: 'two instances' });
      expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
      expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('failed');
      // The window is released: the next start takes it again.
      const again = await call('POST', 'transfers/items/start', {});
      expect(again.status).toBe(202);
      await pump();
    }
  });

  it('compare keys with apply from both: each gone key deleted once', async () => {
    const start = await call('POST', 'transfers/kc/start', {});
    expect(start.status).toBe(202);
    await pump();
    for (let round = 0; round < ROUNDS; round++) {
      const gone = [1 + round, 5 + round];
      await fx.source.query(`delete from public.kc where id = any($1::bigint[])`, [gone]);
      const rs = await race('POST', 'transfers/kc/compare-keys', { apply: true });
      expect(tally(rs)).toEqual({ 200: N });
      expect(rs.reduce((n, r) => n + Number(r.body.deleted), 0)).toBe(gone.length);
      const left = await fx.target.query(`select count(*)::int as n from public.kc where id = any($1::bigint[])`, [
        gone,
      ]);
      expect(left.rows[0].n).toBe(0);
    }
  });
});

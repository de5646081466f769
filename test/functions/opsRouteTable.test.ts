// The ops route table, case by case (opsFuzz.test.ts fuzzes every route with generated input; this file names a case
// for each): a route added without a case here fails the first test. Every route is called 10 times at once on one
// target: a read answers the same each time; a write takes effect once (the others a clean 409/404, or the same
// idempotent answer), never a 5xx, and leaves exactly one finished audit record per call, with the status its caller
// got. Then what JSON.parse and a URL decoder let through on every write: the same key twice (a proxy may keep the
// first, JSON.parse keeps the last), bytes that are not UTF-8, numbers JSON can write and a double cannot hold.
import { describe, expect, it } from 'vitest';
import { allRoutes } from '../../shared/ops/routes.js';
import { defineSchedule } from '../../shared/jobs/define.js';
import { auditRows, lastAuditId, snapshot } from './support.js';
import { keyCompareTransfer, useItemsTransfer } from './itemsTransfer.js';

const N = 10;
const SCHEDULE = defineSchedule('route-table', { cron: '0 0 0 1 1 *', type: 'demo.echo', payload: { message: 'x' } });
const fx = useItemsTransfer({
  label: 'fn_routes',
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
    await source.query(`insert into public.kc select n, 'kc-' || n from generate_series(1, 20) n`);
  },
  moreTransfers: (items) => [keyCompareTransfer(items, 'kc')],
});
const { call, pump } = fx;

interface Answer {
  status: number;
  body: any;
}

function tally(rs: Answer[]): Record<number, number> {
  const by: Record<number, number> = {};
  for (const r of rs) by[r.status] = (by[r.status] ?? 0) + 1;
  return by;
}

async function enqueue(job: Record<string, unknown>): Promise<string> {
  const r = await call('POST', 'jobs', job);
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.id as string;
}

async function deadLettered(queue: string): Promise<string> {
  const id = await enqueue({ queue, type: 'demo.fatal' });
  expect(await fx.t.rt.processor.processById(id)).toBe('dead_lettered');
  return id;
}

async function committedItems(): Promise<{ batchId: string; low: string | null; high: string }> {
  const started = await call('POST', 'transfers/items/start', {});
  if (started.status === 202) await pump();
  const batches = (await call('GET', 'transfers/batches?transfer=items&state=committed')).body.items as any[];
  const b = batches[batches.length - 1];
  return { batchId: b.batchId, low: b.boundary.low, high: b.boundary.high };
}

// One case per write: the call sent N times at once (prepared on a fresh target) and what must hold after.
interface WriteCase {
  prepare(): Promise<{ path: string; body?: unknown; check(rs: Answer[]): Promise<void> }>;
}
const jobAt = async (id: string) => (await call('GET', `jobs/${id}`)).body;

const WRITES: Record<string, WriteCase> = {
  enqueue: {
    async prepare() {
      const body = { queue: 'rt-enq', type: 'demo.echo', idempotencyKey: 'rt-once', delayMs: 600_000 };
      return {
        path: 'jobs',
        body,
        async check(rs) {
          expect(tally(rs)).toEqual({ 201: N });
          expect(new Set(rs.map((r) => r.body.id)).size).toBe(1);
          expect(rs.filter((r) => r.body.duplicate === false)).toHaveLength(1);
          expect((await call('GET', 'jobs?queue=rt-enq')).body.items).toHaveLength(1);
        },
      };
    },
  },
  pauseQueue: {
    async prepare() {
      return {
        path: 'queues/rt-q/pause',
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect((await call('GET', 'queues/rt-q')).body.paused).toBe(true);
        },
      };
    },
  },
  resumeQueue: {
    async prepare() {
      return {
        path: 'queues/rt-q/resume',
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect((await call('GET', 'queues/rt-q')).body.paused).toBe(false);
        },
      };
    },
  },
  updateQueue: {
    async prepare() {
      return {
        path: 'queues/rt-q',
        body: { maxConcurrency: 3 },
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect((await call('GET', 'queues/rt-q')).body.maxConcurrency).toBe(3);
        },
      };
    },
  },
  cancelJob: {
    async prepare() {
      const id = await enqueue({ queue: 'rt-cancel', type: 'demo.echo', delayMs: 600_000 });
      return {
        path: `jobs/${id}/cancel`,
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
          expect(await jobAt(id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
        },
      };
    },
  },
  cancelMany: {
    async prepare() {
      const ids = await Promise.all([1, 2, 3].map(() => enqueue({ queue: 'rt-cm', type: 'demo.echo', delayMs: 6e5 })));
      return {
        path: 'jobs/cancel',
        body: { ids, dryRun: false },
        async check(rs) {
          const done = rs
            .flatMap((r) => (r.status === 200 ? r.body.rows : []))
            .filter((x) => x.outcome === 'cancelled');
          expect(done.map((x: { id: string }) => x.id).sort()).toEqual([...ids].sort());
          for (const id of ids) expect((await jobAt(id)).location).toBe('dlq');
        },
      };
    },
  },
  resurrectJob: {
    async prepare() {
      const id = await deadLettered('rt-res');
      return {
        path: `dlq/${id}/resurrect`,
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
          expect(await jobAt(id)).toMatchObject({ location: 'hot', state: 'pending' });
        },
      };
    },
  },
  resurrectByFilter: {
    async prepare() {
      const ids = await Promise.all([1, 2, 3].map(() => deadLettered('rt-rf')));
      return {
        path: 'dlq/resurrect',
        body: { queue: 'rt-rf', ids, limit: 3, dryRun: false },
        async check(rs) {
          const moved = rs.flatMap((r) => (r.status === 200 ? (r.body.ids as string[]) : []));
          expect(moved.sort()).toEqual([...ids].sort());
          for (const id of ids) expect((await jobAt(id)).location).toBe('hot');
        },
      };
    },
  },
  purge: {
    async prepare() {
      const ids = await Promise.all([1, 2, 3, 4].map(() => deadLettered('rt-purge')));
      await new Promise((r) => setTimeout(r, 20));
      return {
        path: 'purge',
        body: { target: 'dlq', queue: 'rt-purge', olderThan: new Date().toISOString(), dryRun: false, batchSize: 1 },
        async check(rs) {
          expect(rs.reduce((n, r) => n + (r.status === 200 ? Number(r.body.deleted) : 0), 0)).toBe(ids.length);
          for (const id of ids) expect((await call('GET', `jobs/${id}`)).status).toBe(404);
        },
      };
    },
  },
  pauseSchedule: {
    async prepare() {
      return {
        path: `schedules/${SCHEDULE.name}/pause`,
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          const s = (await call('GET', 'schedules')).body.items.find((x: any) => x.name === SCHEDULE.name);
          expect(s.state).toBe('paused');
        },
      };
    },
  },
  resumeSchedule: {
    async prepare() {
      return {
        path: `schedules/${SCHEDULE.name}/resume`,
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          const s = (await call('GET', 'schedules')).body.items.find((x: any) => x.name === SCHEDULE.name);
          expect(s.state).toBe('active');
        },
      };
    },
  },
  pauseTransfer: {
    async prepare() {
      return {
        path: 'transfers/items/pause',
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect(rs.every((r) => r.body.paused === true)).toBe(true);
        },
      };
    },
  },
  resumeTransfer: {
    async prepare() {
      return {
        path: 'transfers/items/resume',
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect(rs.every((r) => r.body.paused === false)).toBe(true);
        },
      };
    },
  },
  startTransfer: {
    async prepare() {
      fx.t.queues.clear();
      return {
        path: 'transfers/items/start',
        async check(rs) {
          // One batch: one 202, the others told an open batch exists (409).
          expect(tally(rs)).toEqual({ 202: 1, 409: N - 1 });
          await pump();
        },
      };
    },
  },
  rebaselineTransfer: {
    async prepare() {
      // Not a changes transfer: refused the same way N times.
      return {
        path: 'transfers/items/rebaseline',
        async check(rs) {
          expect(tally(rs)).toEqual({ 409: N });
        },
      };
    },
  },
  compareTransferKeys: {
    async prepare() {
      await call('POST', 'transfers/kc/start', {});
      await pump();
      await fx.source.query(`delete from public.kc where id in (5, 15)`);
      return {
        path: 'transfers/kc/compare-keys',
        body: { apply: true },
        async check(rs) {
          // Each gone key deleted once, by whichever call got to it.
          expect(rs.reduce((n, r) => n + (r.status === 200 ? Number(r.body.deleted) : 0), 0)).toBe(2);
          for (const r of rs) if (r.status !== 200) expect(r.status).toBe(409);
          expect((await fx.target.query(`select count(*)::int as n from public.kc`)).rows[0].n).toBe(18);
        },
      };
    },
  },
  replayTransfer: {
    async prepare() {
      const c = await committedItems();
      fx.t.queues.clear();
      return {
        path: 'transfers/items/replay',
        body: { low: c.low, high: c.high },
        async check(rs) {
          // One replay batch of the range: one 202, the others told it is open (409).
          expect(tally(rs)).toEqual({ 202: 1, 409: N - 1 });
          const batchId = rs.find((r) => r.status === 202)!.body.batch.batchId as string;
          for (const r of rs.filter((x) => x.status === 409)) expect(r.body.detail.batchId).toBe(batchId);
          await pump();
          expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('committed');
        },
      };
    },
  },
  reconcileBatch: {
    async prepare() {
      const c = await committedItems();
      return {
        path: `transfers/batches/${c.batchId}/reconcile`,
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
          expect((await call('GET', `transfers/batches/${c.batchId}`)).body.state).toBe('committed');
        },
      };
    },
  },
  resumeBatch: {
    async prepare() {
      await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(41, 45) n`);
      fx.t.queues.clear();
      const started = await call('POST', 'transfers/items/start', {});
      expect(started.status, JSON.stringify(started.body)).toBe(202);
      const batchId = started.body.batch.batchId as string;
      return {
        path: `transfers/batches/${batchId}/resume`,
        async check(rs) {
          for (const r of rs) expect([200, 202]).toContain(r.status);
          await pump();
          expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('committed');
        },
      };
    },
  },
  abandonBatch: {
    async prepare() {
      await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(46, 50) n`);
      fx.t.queues.clear();
      const started = await call('POST', 'transfers/items/start', {});
      expect(started.status, JSON.stringify(started.body)).toBe(202);
      const batchId = started.body.batch.batchId as string;
      return {
        path: `transfers/batches/${batchId}/abandon`,
        body: { reason: 'route table' },
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: 1, 409: N - 1 });
          expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('failed');
          fx.t.queues.clear();
        },
      };
    },
  },
  reconcileStale: {
    async prepare() {
      return {
        path: 'transfers/reconcile',
        async check(rs) {
          expect(tally(rs)).toEqual({ 200: N });
        },
      };
    },
  },
};

// One path per read (an existing target where there is one).
const READS: Record<string, () => Promise<string>> = {
  health: async () => 'health',
  stats: async () => 'stats',
  metrics: async () => 'metrics',
  listQueues: async () => 'queues',
  getQueue: async () => 'queues/rt-q',
  searchJobs: async () => 'jobs?queue=rt-cancel',
  getJob: async () => `jobs/${await enqueue({ queue: 'rt-read', type: 'demo.echo', delayMs: 600_000 })}`,
  dlqGroups: async () => 'dlq/groups',
  listWorkers: async () => 'workers',
  warnings: async () => 'warnings',
  listHandlers: async () => 'handlers',
  listSchedules: async () => 'schedules',
  listTransfers: async () => 'transfers',
  listBatches: async () => 'transfers/batches?transfer=items',
  getBatch: async () => `transfers/batches/${(await committedItems()).batchId}`,
  searchAudit: async () => 'audit?limit=5',
  openapi: async () => 'openapi.json',
};

const routes = allRoutes();

describe('ops route table', () => {
  it('names a case for every route and no other', () => {
    const writes = routes.filter((r) => r.method !== 'GET').map((r) => r.operationId);
    const reads = routes.filter((r) => r.method === 'GET').map((r) => r.operationId);
    expect(Object.keys(WRITES).sort(), 'a write without a case in WRITES').toEqual([...writes].sort());
    expect(Object.keys(READS).sort(), 'a read without a case in READS').toEqual([...reads].sort());
  });

  for (const op of Object.keys(WRITES)) {
    it(`${op}: ${N} identical calls at once take effect once, none fails, one finished audit record each`, async () => {
      const r = routes.find((x) => x.operationId === op)!;
      const c = await WRITES[op]!.prepare();
      const from = await lastAuditId(fx.t.pool);
      const rs = await Promise.all(Array.from({ length: N }, () => call(r.method, c.path, c.body ?? {})));
      for (const x of rs) {
        expect(x.status, `${op}: ${JSON.stringify(x.body)}`).toBeLessThan(500);
        if (x.status >= 400) expect(typeof x.body.message, `${op}: ${JSON.stringify(x.body)}`).toBe('string');
      }
      await c.check(rs);
      const rows = (await auditRows(fx.t.pool, from)).filter((x) => x.action === op);
      expect(rows, `${op}: one record per call`).toHaveLength(N);
      expect(rows.map((x) => Number(x.status)).sort()).toEqual(rs.map((x) => x.status).sort());
      for (const row of rows) expect(row.outcome).toBe(Number(row.status) < 400 ? 'ok' : 'failed');
    });
  }

  it(`every read ${N} times at once: the same status each time, never a 5xx`, async () => {
    for (const [op, pathOf] of Object.entries(READS)) {
      const path = await pathOf();
      const rs = await Promise.all(Array.from({ length: N }, () => call('GET', path)));
      expect(
        rs.map((x) => x.status),
        `${op} ${path}: ${JSON.stringify(rs.find((x) => x.status >= 500)?.body)}`,
      ).toEqual(Array(N).fill(200));
    }
  });
});

describe('ops route table: what a JSON parser or URL decoder lets through', () => {
  it('the same key twice, bytes that are not UTF-8, numbers a double cannot hold: a 400 naming the field; nothing changes', async () => {
    const { ops } = await import('../../functions/ops.js');
    const { request, context, jsonOf } = await import('./support.js');
    const raw = async (method: string, path: string, bytes: string | Uint8Array) => {
      const res = await ops(request(method, path, { raw: bytes, operator: true }), context('ops'));
      return { status: res.status ?? 200, body: jsonOf(res) };
    };
    const before = await snapshot(fx.t.pool);
    const notUtf8 = new Uint8Array([...Buffer.from('{"x":"'), 0xff, 0xfe, ...Buffer.from('"}')]);
    const lone = new Uint8Array([...Buffer.from('{"x":"'), 0xed, 0xa0, 0x80, ...Buffer.from('"}')]); // CESU surrogate
    for (const r of routes.filter((x) => x.method !== 'GET')) {
      if (!r.body) continue; // the body is never read
      const path = r.path
        .replace(/^\//, '')
        .replace(/batches\/:id/, 'batches/00000000-0000-4000-8000-000000000000')
        .replace(/:id/, '1')
        .replace(/:name/, 'items');
      const what = `${r.method} ${r.path}`;
      // dryRun true then false: a parser keeping the first key would run nothing; refused whatever it would do here.
      const dup = await raw(r.method, path, '{"dryRun":true,"dryRun":false}');
      expect(dup, what).toMatchObject({ status: 400, body: { error: 'invalid_json', field: 'dryRun' } });
      const nested = await raw(r.method, path, '{"payload":{"a":1,"b":{"c":1,"c":2}}}');
      expect(nested, what).toMatchObject({ status: 400, body: { field: 'payload.b.c' } });
      for (const bytes of [notUtf8, lone])
        expect(await raw(r.method, path, bytes), what).toMatchObject({ status: 400, body: { field: 'body' } });
      // 1e400 parses to Infinity, -0 and 1e-400 to zero: never a 5xx, a 400 names the field.
      for (const n of ['1e400', '-1e400', '-0', '1e-400', '123456789012345678901234567890']) {
        const res = await raw(r.method, path, `{"limit":${n},"batchSize":${n},"maxConcurrency":${n}}`);
        expect(res.status, `${what} ${n}: ${JSON.stringify(res.body)}`).toBeLessThan(500);
        if (res.status === 400) expect(res.body.field, `${what} ${n}`).toBeTruthy();
      }
    }
    // The same job twice in one batch body (the same key of one object twice, a level down) is refused too.
    const twice = await raw('POST', 'jobs', '{"jobs":[{"type":"demo.echo","type":"demo.fatal"}]}');
    expect(twice).toMatchObject({ status: 400, body: { field: 'jobs[0].type' } });
    const kept = (f: Record<string, string>) =>
      Object.fromEntries(Object.entries(f).filter(([t]) => /jobs_|dlq_counts|transfer_batch|job_deps/.test(t)));
    expect(kept(await snapshot(fx.t.pool))).toEqual(kept(before));
  });
});

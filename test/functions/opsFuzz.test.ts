// Bounded fuzz over every ops route (the route table itself, so a new route is covered the day it is added): wrong
// types, missing and unknown fields, odd path parameters and query strings, bodies that are not objects, too deep or
// too big, and callers without the route's role. Every answer must be a 4xx with a stable error code (a 400 names
// the field), never a 5xx; nothing a refused call sends may change the database. Then concurrent identical
// destructive calls racing each other (one action N times at once, for every route: opsRouteTable.test.ts):
// exactly one takes effect, the others get a clear 409/404, and nothing is lost. Last, list
// bounds out of range, every read at once, and the audit trail docs/operations.md promises: one record per write,
// a refused record per refused write, none for 404/405 or a read's 400.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { allRoutes } from '../../shared/ops/routes.js';
import { auditRows, deadLetteredJob, enqueueJob, lastAuditId, READER, snapshot, tally } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';
import { seededRandom } from '../support/seededRandom.js';

// Every refusal its own audit record (KEEL_OPS_REFUSAL_WINDOW_MS=0): the fuzz checks each call's record; the bound on
// a flood of refusals has its own test (opsRefusalFlood.test.ts).
const fx = useItemsTransfer({
  label: 'fn_fuzz',
  rows: 40,
  batchSize: 20,
  chunkSize: 10,
  env: { KEEL_OPS_REFUSAL_WINDOW_MS: '0' },
});
const { call } = fx;

// Values of every JSON type, and the awkward members of each.
const ODD_VALUES: unknown[] = [
  null,
  true,
  0,
  -1,
  1.5,
  2 ** 63,
  1e308,
  '',
  ' ',
  'x',
  '-1',
  '1e3',
  '9223372036854775808',
  '💥',
  [],
  [null],
  {},
  { a: 1 },
];
// What a database cannot store, and what is too long for any field: tried on every field, every run.
const UNSTORABLE: unknown[] = ['\u0000', 'a\u0000b', '\ud800', 'x\udc00', 'x'.repeat(5000)];
const ODD_PARAMS = [
  '0',
  '-1',
  'abc',
  '1.5',
  '9223372036854775807',
  '9223372036854775808',
  '99999999999999999999999',
  '00000000-0000-0000-0000-000000000000',
  'not-a-uuid',
  'x'.repeat(129),
  'x'.repeat(1000),
  'a b',
  '\u0000',
  '💥',
  "'; drop table x; --",
  '..',
];
const ODD_QUERY_VALUES = ['', 'abc', '-1', '1.5', '1e3', '99999999999999999999', 'x'.repeat(3000), '\u0000', 'true'];

function objectShape(schema: z.ZodType | undefined): Record<string, z.ZodType> | null {
  if (!schema) return null;
  if (schema instanceof z.ZodObject) return schema.shape as Record<string, z.ZodType>;
  if (schema instanceof z.ZodUnion) {
    const merged: Record<string, z.ZodType> = {};
    for (const o of schema.options as z.ZodType[]) Object.assign(merged, objectShape(o) ?? {});
    return merged;
  }
  return null;
}

function deepArray(depth: number): string {
  return '['.repeat(depth) + ']'.repeat(depth);
}

interface Answer {
  status: number;
  body: any;
}

// What every answer to bad input must be.
function expectClear(what: string, r: Answer) {
  expect(r.status, `${what}: ${JSON.stringify(r.body)?.slice(0, 400)}`).toBeGreaterThanOrEqual(400);
  expect(r.status, `${what}: ${JSON.stringify(r.body)?.slice(0, 400)}`).toBeLessThan(500);
  expect(typeof r.body?.error, `${what}: no error code`).toBe('string');
  expect(typeof r.body?.message, `${what}: no message`).toBe('string');
  if (r.status === 400) expect(r.body.field, `${what}: a 400 must name the field (${r.body.message})`).toBeTruthy();
}

// Not an error, or a clear one: a call whose input may be valid.
function expectNo5xx(what: string, r: Answer) {
  expect(r.status, `${what}: ${JSON.stringify(r.body)?.slice(0, 400)}`).toBeLessThan(500);
  if (r.status >= 400) expectClear(what, r);
}

function pathOf(path: string, value: string): string {
  return path.replace(/^\//, '').replace(/:(\w+)/g, () => encodeURIComponent(value));
}

describe('ops fuzz: every route, bad input', () => {
  it('odd path parameters, query strings and bodies: a clear 4xx naming the field, never a 5xx; refusals change nothing', async () => {
    const random = seededRandom('ops fuzz');
    const routes = allRoutes();
    const before = await snapshot(fx.t.pool);
    let calls = 0;
    for (const r of routes) {
      const write = r.method !== 'GET';
      const hasParams = r.path.includes(':');
      // Odd path parameters, with an otherwise empty call.
      if (hasParams) {
        for (const p of ODD_PARAMS) {
          const res = await call(r.method, pathOf(r.path, p), write ? {} : undefined);
          calls++;
          expectNo5xx(`${r.method} ${r.path} with ${JSON.stringify(p).slice(0, 40)}`, res);
        }
      }
      // A well-formed parameter (an unknown id, or the configured transfer), so the body is what is judged.
      const base = baseOf(r);
      // Unknown, repeated and odd query parameters.
      const qshape = objectShape(r.query) ?? {};
      const qkeys = [...Object.keys(qshape), 'bogus'];
      for (const k of qkeys) {
        // A seeded sample of the values per key keeps the run bounded (replay a failure with its seed).
        for (const v of random.shuffle(ODD_QUERY_VALUES).slice(0, 5)) {
          const res = await call(r.method, `${base}?${k}=${encodeURIComponent(v)}`, write ? {} : undefined);
          calls++;
          expectNo5xx(`${r.method} ${r.path}?${k}=${v.slice(0, 20)}`, res);
        }
      }
      expectClear(`${r.method} ${r.path} twice the same query parameter`, await call(r.method, `${base}?a=1&a=2`));
      if (!write) continue;
      // Bodies that are not objects, or not JSON, or too deep, or too big.
      for (const raw of [
        'null',
        '[]',
        '"s"',
        '1',
        'true',
        '{"a":',
        '{}}',
        deepArray(5000),
        `{"a":${deepArray(5000)}}`,
      ]) {
        const res = await callRaw(r.method, base, raw);
        calls++;
        expectNo5xx(`${r.method} ${r.path} raw ${raw.slice(0, 20)}`, res);
      }
      const huge = await callRaw(r.method, base, JSON.stringify({ pad: 'x'.repeat(300 * 1024) }));
      expect(huge.status, `${r.method} ${r.path} huge body`).toBe(413);
      // Each known field (and an unknown one) with a value of every type, alone and beside a random other field.
      const shape = objectShape(r.body) ?? {};
      const keys = [...Object.keys(shape), 'bogus'];
      for (const k of keys) {
        for (const v of [...UNSTORABLE, ...random.shuffle(ODD_VALUES).slice(0, 5)]) {
          const other = random.pick(keys);
          const body: Record<string, unknown> = { [k]: v };
          if (other !== k) body[other] = random.pick(ODD_VALUES);
          const res = await call(r.method, base, body);
          calls++;
          expectNo5xx(`${r.method} ${r.path} ${JSON.stringify(body).slice(0, 120)}`, res);
        }
      }
      // Wrong role: a reader may not run an operator's route (a function key alone grants producer); nothing is
      // read from the body first.
      if (r.role === 'operator') {
        const res = await call(r.method, base, {}, { 'x-ms-client-principal': READER });
        expect(res.status, `${r.method} ${r.path} as reader`).toBe(403);
      }
    }
    // No job and no batch appeared, moved or went missing (some calls were valid: pausing a queue named "abc", a
    // setting in range; those change settings only).
    const kept = (f: Record<string, string>) =>
      Object.fromEntries(Object.entries(f).filter(([t]) => /jobs_|dlq_counts|transfer_batch|job_deps/.test(t)));
    expect(kept(await snapshot(fx.t.pool))).toEqual(kept(before));
    expect(calls).toBeGreaterThan(500);
  }, 180_000);

  // The host hands the ops handler its catch-all segment decoded: "queues/default?x" for queues/default%3Fx. Read as a
  // URL path again, the "?" ended it: PATCH /queues/default%3Fx changed the queue "default", and a "%" failed to
  // decode (a 404). Every route with a path parameter, so a new one is covered.
  it('a path parameter holding "?", "#" or "%" is that parameter, refused naming it: never another target', async () => {
    for (const r of allRoutes().filter((x) => x.path.includes(':'))) {
      const name = /:(\w+)/.exec(r.path)![1]!;
      for (const suffix of ['?x', '?', '#x', '%', '%zz', '%3F']) {
        const good = paramOf(r);
        const res = await call(r.method, pathOf(r.path, `${good}${suffix}`), r.method === 'GET' ? undefined : {});
        const what = `${r.method} ${r.path} with ${name} ${JSON.stringify(good + suffix)}`;
        expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(400);
        expect(res.body, what).toMatchObject({ error: 'invalid_request', field: name, in: 'path' });
      }
    }
    // The queue the parameter starts with is not the one changed.
    expect((await call('PATCH', 'queues/fuzz-target', { maxAttempts: 3 })).status).toBe(200);
    const res = await call('PATCH', `queues/${encodeURIComponent('fuzz-target?x')}`, { maxAttempts: 9 });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect((await call('GET', 'queues/fuzz-target')).body.maxAttempts).toBe(3);
  });

  // A field that takes any JSON value (a job's payload) may nest as deep as the body limit allows: 100,000 levels
  // in 256 KB, past every recursive JSON.stringify and parser on the way (the audit summary's digest overflowed
  // V8's stack: a bare 500 from the host, and no record). Bounded by LIMITS.payloadDepth, a 400 naming the field.
  it('a JSON-valued field nested at and past its depth limit, up to the body limit: accepted, or a 400 naming it with its refused record', async () => {
    const { LIMITS } = await import('../../shared/jobs/validate.js');
    const valid: Record<string, (value: string) => string> = {
      enqueue: (v) => `{"type":"demo.echo","delayMs":60000,"payload":${v}}`,
    };
    const anyJson = (schema: z.ZodType) => [{ a: [1] }, [[[]]], 'x', 1, null].every((v) => schema.safeParse(v).success);
    const nested = (depth: number) => '[{"a":'.repeat(depth / 2) + '1' + '}]'.repeat(depth / 2);
    let routes = 0;
    for (const r of allRoutes().filter((x) => x.method !== 'GET')) {
      const fields = Object.entries(objectShape(r.body) ?? {}).filter(([, f]) => anyJson(f));
      if (fields.length === 0) continue;
      routes++;
      const make = valid[r.operationId];
      expect(
        make,
        `${r.operationId} takes any JSON in ${fields.map(([k]) => k).join(', ')}: add a valid body here`,
      ).toBeDefined();
      for (const depth of [LIMITS.payloadDepth, LIMITS.payloadDepth + 2, 5_000, 40_000]) {
        for (const batch of [false, true]) {
          const one = make!(nested(depth));
          const raw = batch ? `{"jobs":[${make!('1')},${one}]}` : one;
          const from = await lastAuditId(fx.t.pool);
          const res = await callRaw(r.method, baseOf(r), raw);
          const what = `${r.operationId} at depth ${depth}${batch ? ' (second of a batch)' : ''}`;
          const rows = await auditRows(fx.t.pool, from);
          expect(
            rows.map((x) => [x.action, x.status]),
            what,
          ).toEqual([[r.operationId, res.status]]);
          if (depth <= LIMITS.payloadDepth) {
            expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
            continue;
          }
          expectClear(what, res);
          expect(res.status, what).toBe(400);
          expect(res.body.field, what).toBe(batch ? 'jobs[1].payload' : 'payload');
          expect(rows[0]!.outcome, what).toBe('refused');
        }
      }
    }
    expect(routes).toBeGreaterThan(0);
  }, 120_000);
});

async function callRaw(method: string, path: string, raw: string): Promise<Answer> {
  const { ops } = await import('../../functions/ops.js');
  const { request, context, jsonOf } = await import('./support.js');
  const res = await ops(request(method, path, { raw, operator: true }), context('ops'));
  return { status: res.status ?? 200, body: jsonOf(res) };
}

describe('ops fuzz: concurrent identical destructive calls', () => {
  const N = 6;

  const enqueue = (job: Record<string, unknown>) => enqueueJob(call, job);
  const deadLettered = (queue: string) => deadLetteredJob(call, fx.t.rt, queue);

  it('cancel and resurrect the same selection at once, N times each: each id moved once per confirmed call, none lost', async () => {
    const ids = await Promise.all(
      [1, 2, 3].map(() => enqueue({ queue: 'fuzz-many', type: 'demo.echo', delayMs: 60_000 })),
    );
    const cancels = await Promise.all(
      Array.from({ length: N }, () => call('POST', 'jobs/cancel', { ids, dryRun: false })),
    );
    for (const r of cancels) expectNo5xx('cancel many', r);
    const cancelled = cancels
      .flatMap((r) => (r.status === 200 ? (r.body.rows as any[]) : []))
      .filter((x) => x.outcome === 'cancelled');
    expect(cancelled.map((x) => x.id).sort()).toEqual([...ids].sort());
    const res = await Promise.all(
      Array.from({ length: N }, () => call('POST', 'dlq/resurrect', { ids, limit: 3, dryRun: false })),
    );
    for (const r of res) expectNo5xx('resurrect many', r);
    const resurrected = res.flatMap((r) => (r.status === 200 ? (r.body.ids as string[]) : []));
    expect(resurrected.sort()).toEqual([...ids].sort());
    for (const id of ids) expect((await call('GET', `jobs/${id}`)).body.location).toBe('hot');
  });

  it('resurrect and purge the same dead letters at once: each ends resurrected (hot) or purged (gone), as answered', async () => {
    const ids = await Promise.all([1, 2, 3, 4, 5, 6].map(() => deadLettered('fuzz-race')));
    await new Promise((r) => setTimeout(r, 20));
    const olderThan = new Date().toISOString();
    const [purge, ...resurrects] = await Promise.all([
      call('POST', 'purge', { target: 'dlq', queue: 'fuzz-race', olderThan, dryRun: false, batchSize: 1 }),
      ...ids.map((id) => call('POST', `dlq/${id}/resurrect`, {})),
    ]);
    expectNo5xx('purge', purge!);
    let resurrected = 0;
    for (const [i, r] of resurrects.entries()) {
      expectNo5xx('resurrect', r);
      const now = await call('GET', `jobs/${ids[i]}`);
      if (r.status === 200) {
        resurrected++;
        expect(now.body.location, `job ${ids[i]} resurrected`).toBe('hot');
      } else {
        expect([404, 409]).toContain(r.status);
        expect(now.status, `job ${ids[i]}: resurrect answered ${r.status}`).toBe(404);
      }
    }
    // Nothing lost, nothing counted twice: every job was either purged or resurrected.
    expect(resurrected + Number(purge!.body.deleted)).toBe(ids.length);
  });

  it('pause, resume, start and abandon a transfer N times at once: clear answers, one batch, abandoned once', async () => {
    for (const action of ['pause', 'resume']) {
      const rs = await Promise.all(Array.from({ length: N }, () => call('POST', `transfers/items/${action}`, {})));
      for (const r of rs) expectNo5xx(action, r);
    }
    const starts = await Promise.all(Array.from({ length: N }, () => call('POST', 'transfers/items/start', {})));
    for (const r of starts) expectNo5xx('start', r);
    const batchIds = new Set(starts.filter((r) => r.status < 300).map((r) => r.body.batch.batchId as string));
    expect(batchIds.size).toBe(1);
    const [batchId] = [...batchIds];
    const abandons = await Promise.all(
      Array.from({ length: N }, () => call('POST', `transfers/batches/${batchId}/abandon`, { reason: 'fuzz' })),
    );
    for (const r of abandons) expectNo5xx('abandon', r);
    // One effect, one success: the others are told it is failed already (409), not that they abandoned it too.
    expect(tally(abandons)).toEqual({ 200: 1, 409: N - 1 });
    expect(abandons.find((r) => r.status === 409)!.body).toMatchObject({ error: 'conflict', state: 'failed' });
    expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('failed');
    const rec = await Promise.all(
      Array.from({ length: N }, () => call('POST', `transfers/batches/${batchId}/reconcile`, {})),
    );
    for (const r of rec) expectNo5xx('reconcile', r);
    const resumes = await Promise.all(
      Array.from({ length: N }, () => call('POST', `transfers/batches/${batchId}/resume`, {})),
    );
    for (const r of resumes) expectNo5xx('resume', r);
  });
});

describe('ops fuzz: one batch resumed N times at once, its messages delivered at once', () => {
  it('every resume is accepted; the N stage and apply steps running together commit the window once', async () => {
    const N = 4;
    fx.t.queues.clear();
    const started = await call('POST', 'transfers/items/start', {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    const batchId = started.body.batch.batchId as string;
    const resumes = await Promise.all(
      Array.from({ length: N }, () => call('POST', `transfers/batches/${batchId}/resume`, {})),
    );
    for (const r of resumes) expectNo5xx('resume', r);
    // Deliver every posted message at once, round by round (stage, then apply), until none is left.
    const { transferStage } = await import('../../functions/transferStage.js');
    const { transferApply } = await import('../../functions/transferApply.js');
    const { context } = await import('./support.js');
    for (let round = 0; round < 10 && fx.t.queues.sent.length > 0; round++) {
      const batch = fx.t.queues.sent.splice(0);
      await Promise.all(
        batch.map((m) =>
          m.queue === 'keel-transfer-stage'
            ? transferStage(m.message, context('transferStage'))
            : transferApply(m.message, context('transferApply')),
        ),
      );
    }
    const detail = (await call('GET', `transfers/batches/${batchId}`)).body;
    expect(detail.state, JSON.stringify(detail.events?.map((e: { event: string }) => e.event))).toBe('committed');
    const done = await fx.target.query(
      `select count(*)::int as n from keel_transfer.completions where batch_id = $1 and state = 'committed'`,
      [batchId],
    );
    expect(done.rows[0].n).toBe(1);
    const { low, high } = detail.boundary as { low: string | null; high: string };
    const rows = await fx.target.query(
      `select count(*)::int as n, count(distinct id)::int as d from public.items where id > $1 and id <= $2`,
      [Number(low ?? 0), Number(high)],
    );
    expect(rows.rows[0]).toEqual({ n: detail.rowCount, d: detail.rowCount });
  });
});

// A path of the route with well-formed parameters: an unknown id, or the configured transfer.
function baseOf(r: { path: string }): string {
  return pathOf(r.path, paramOf(r));
}

function paramOf(r: { path: string }): string {
  return r.path.startsWith('/transfers/batches/:id')
    ? '00000000-0000-4000-8000-000000000000'
    : r.path.includes(':id')
      ? '1'
      : 'items';
}

// Last in the file: its valid writes (a transfer started, queues paused) would change what the suites above start from.
describe('ops fuzz: list bounds, methods, content types and the audit trail of refusals', () => {
  it('page sizes, offsets, cursors and windows out of range: a 400 naming the parameter; in range never a 5xx', async () => {
    const bounded = /^(limit|offset|scanRows|windowMinutes|afterId|beforeId)$/;
    let checked = 0;
    for (const r of allRoutes().filter((x) => x.method === 'GET')) {
      for (const k of Object.keys(objectShape(r.query) ?? {}).filter((x) => bounded.test(x))) {
        for (const v of ['-1', '-9007199254740993', '99999999999999999999', '1e400', 'Infinity', 'NaN', '0x10']) {
          const res = await call('GET', `${baseOf(r)}?${k}=${encodeURIComponent(v)}`);
          expectClear(`GET ${r.path}?${k}=${v}`, res);
          expect(res.status, `GET ${r.path}?${k}=${v}`).toBe(400);
          expect(res.body.field, `GET ${r.path}?${k}=${v}`).toBe(k);
          checked++;
        }
        // The largest page a list route takes is bounded by its schema: 1,000,000 is past every one of them.
        if (/^(limit|scanRows)$/.test(k)) {
          const res = await call('GET', `${baseOf(r)}?${k}=1000001`);
          expect([400, 404], `GET ${r.path}?${k}=1000001: ${JSON.stringify(res.body)}`).toContain(res.status);
          if (res.status === 400) expect(res.body.field).toBe(k);
        }
        // A job or audit id cursor at either end of the id range, in each order the route takes (the largest id,
        // oldest first: "afterId + 1" overflowed bigint in the engines, a 500). Batch cursors are UUIDs.
        if (/^(afterId|beforeId)$/.test(k) && r.path !== '/transfers/batches') {
          const order = objectShape(r.query)?.order;
          for (const o of order ? ['newest', 'oldest'] : [undefined])
            for (const v of ['1', '9223372036854775807'])
              for (const location of r.path === '/jobs' ? ['hot', 'archive', 'dlq'] : [undefined]) {
                const q = `${k}=${v}${o ? `&order=${o}` : ''}${location ? `&location=${location}` : ''}`;
                const res = await call('GET', `${baseOf(r)}?${q}`);
                expect(res.status, `GET ${r.path}?${q}: ${JSON.stringify(res.body)}`).toBe(200);
              }
        }
        const one = await call('GET', `${baseOf(r)}?${k}=1`);
        expectNo5xx(`GET ${r.path}?${k}=1`, one);
        if (one.status === 200 && Array.isArray(one.body?.items) && k === 'limit')
          expect(one.body.items.length, `GET ${r.path}?limit=1`).toBeLessThanOrEqual(1);
      }
    }
    expect(checked).toBeGreaterThan(30);
  });

  it('every read at once, five times over: the same status each time, never a 5xx', async () => {
    const reads = allRoutes().filter((r) => r.method === 'GET');
    const rounds = await Promise.all(
      Array.from({ length: 5 }, () => Promise.all(reads.map((r) => call('GET', baseOf(r))))),
    );
    reads.forEach((r, i) => {
      const statuses = rounds.map((round) => round[i]!.status);
      for (const [n, res] of rounds.map((round) => round[i]!).entries()) expectNo5xx(`GET ${r.path} #${n}`, res);
      expect(new Set(statuses).size, `GET ${r.path}: ${statuses.join(', ')}`).toBe(1);
    });
  });

  it("every write leaves exactly one record of its answer, a refused one a refused record naming why; 404, 405 and a read's 400 none", async () => {
    const writes = allRoutes().filter((r) => r.method !== 'GET');
    const { ops } = await import('../../functions/ops.js');
    const { request, context, jsonOf, OPERATOR } = await import('./support.js');
    const send = async (method: string, path: string, raw: string | undefined, headers: Record<string, string>) => {
      const req = request(method, path, { ...(raw === undefined ? {} : { raw }), headers });
      const res = await ops(req, context('ops'));
      return { status: res.status ?? 200, body: jsonOf(res) };
    };
    const oneRefusal = async (what: string, action: string, status: number, run: () => Promise<Answer>) => {
      const from = await lastAuditId(fx.t.pool);
      const res = await run();
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(status);
      const rows = await auditRows(fx.t.pool, from);
      expect(
        rows.map((x) => [x.action, x.outcome, x.status]),
        what,
      ).toEqual([[action, 'refused', status]]);
      expect(rows[0]!.reason, what).toBe(res.body.message);
    };
    const operator = { 'x-ms-client-principal': OPERATOR };
    for (const r of writes) {
      const base = baseOf(r);
      const what = `${r.method} ${r.path}`;
      // Not JSON: a form (curl -d), text, or no content type at all.
      for (const type of ['application/x-www-form-urlencoded', 'text/plain', '']) {
        await oneRefusal(`${what} as "${type}"`, r.operationId, 415, () =>
          send(r.method, base, '{}', { ...operator, 'content-type': type }),
        );
      }
      // From another site (a browser says so).
      await oneRefusal(`${what} cross-site`, r.operationId, 403, () =>
        send(r.method, base, '{}', { ...operator, 'sec-fetch-site': 'cross-site' }),
      );
      if (r.body) {
        await oneRefusal(`${what} invalid JSON`, r.operationId, 400, () => send(r.method, base, '{"a":', operator));
        await oneRefusal(`${what} over the body limit`, r.operationId, 413, () =>
          send(r.method, base, JSON.stringify({ pad: 'x'.repeat(300 * 1024) }), operator),
        );
      }
      if (r.role === 'operator')
        await oneRefusal(`${what} as reader`, r.operationId, 403, () =>
          send(r.method, base, '{}', { 'x-ms-client-principal': READER }),
        );
      // A method the path does not take: 405 with Allow, or 404 when no route has the path; no record either way.
      const from = await lastAuditId(fx.t.pool);
      for (const m of ['PUT', 'DELETE', 'PATCH', 'POST'].filter((x) => x !== r.method)) {
        const res = await send(m, base, '{}', operator);
        if (res.status < 400) continue; // another route takes this method on the same path
        expect([404, 405], `${m} ${r.path}: ${JSON.stringify(res.body)}`).toContain(res.status);
      }
      expect(await auditRows(fx.t.pool, from), `${what}: other methods`).toEqual([]);
    }
    // Every write the operator sends leaves exactly one record of its own answer: refused before it ran (an empty
    // body some routes refuse), or started and finished as ok or failed.
    for (const r of writes) {
      const from = await lastAuditId(fx.t.pool);
      const res = await send(r.method, baseOf(r), '{}', operator);
      const rows = await auditRows(fx.t.pool, from);
      expect(
        rows.map((x) => [x.action, x.status]),
        `${r.method} ${r.path}: ${JSON.stringify(res.body)}`,
      ).toEqual([[r.operationId, res.status]]);
      expect(rows[0]!.outcome).toBe(res.status < 400 ? 'ok' : res.status === 400 ? 'refused' : 'failed');
    }
    const from = await lastAuditId(fx.t.pool);
    expect((await send('POST', 'no/such/route', '{}', operator)).status).toBe(404);
    expect((await send('GET', 'jobs?limit=-1', undefined, operator)).status).toBe(400);
    expect((await send('HEAD', 'stats', undefined, operator)).status).toBe(405); // routes take GET, not HEAD
    expect(await auditRows(fx.t.pool, from)).toEqual([]);
  }, 120_000);
});

// Last: a valid body of every write route with one field (at any depth) replaced, so each value reaches the route's
// own checks and the store instead of stopping at a missing required field. Found: a job's runAt or expiresAt in year
// 0 or past 9999 (valid ISO text, no engine stores it) and a payload nested past the stack, each a 500.
describe('ops fuzz: a valid body with one field changed', () => {
  const PAST = '2020-01-01T00:00:00Z';
  // A valid body per write route whose body has fields: a new route with fields must add one (the test says so).
  const VALID: Record<string, Record<string, unknown>> = {
    updateQueue: {
      maxAttempts: 5,
      maxConcurrency: 3,
      zombieTimeoutSeconds: 60,
      zombiePolicy: 'retry',
      archiveRetentionSeconds: 864_000,
      dlqRetentionSeconds: 864_000,
      metricsRetentionSeconds: 864_000,
      confirmPurge: true,
      expected: { maxAttempts: 5 },
    },
    enqueue: {
      jobs: [
        {
          queue: 'fuzz-mutate',
          type: 'demo.echo',
          payload: { a: [1] },
          priority: 1,
          delayMs: 3_600_000,
          tags: ['t'],
          idempotencyKey: 'k',
          maxAttempts: 2,
          expiresAt: '2099-01-01T00:00:00Z',
        },
        {
          queue: 'fuzz-mutate',
          type: 'demo.echo',
          runAt: '2099-01-01T00:00:00Z',
          after: [{ index: 0 }],
          onFailure: 'skip',
        },
      ],
    },
    cancelMany: {
      queue: 'fuzz-mutate',
      type: 'demo.echo',
      tag: 't',
      state: 'pending',
      ids: ['1'],
      limit: 10,
      dryRun: true,
    },
    resurrectByFilter: {
      queue: 'fuzz-mutate',
      type: 'demo.echo',
      reason: 'cancelled',
      failedAfter: PAST,
      failedBefore: PAST,
      limit: 10,
      dryRun: true,
      ids: ['1'],
    },
    purge: {
      target: 'dlq',
      queue: 'fuzz-mutate',
      olderThan: PAST,
      batchSize: 10,
      maxBatches: 1,
      dryRun: true,
      previewMatched: 0,
    },
    pauseTransfer: { reason: 'fuzz' },
    rebaselineTransfer: { preview: true },
    compareTransferKeys: { apply: false, windows: 3 },
    replayTransfer: { low: null, high: '20', preview: true },
    abandonBatch: { reason: 'fuzz', preview: true },
    reconcileStale: { olderThanMs: 1000, limit: 5 },
  };
  // The edges of every JSON type, dates at and past what engines store, text no database stores, and size.
  const VALUES: unknown[] = [
    null,
    false,
    0,
    -1,
    1.5,
    2 ** 31,
    2 ** 53 + 1,
    1e308,
    '',
    'x',
    '1',
    '9223372036854775808',
    '0000-01-01T00:00:00Z',
    '0001-01-01T00:00:00+01:00',
    '9999-12-31T23:59:59-01:00',
    '2026-02-30T00:00:00Z',
    '\u0000',
    '\ud800',
    'x'.repeat(3000),
    [],
    ['1', '1'],
    [{ index: 5 }],
    {},
    { a: 1 },
  ];

  it('never a 5xx; a 400 names the field', async () => {
    const random = seededRandom('ops fuzz: one field changed');
    const paths = (v: unknown, at: (string | number)[] = []): (string | number)[][] =>
      Array.isArray(v)
        ? v.flatMap((x, i) => [[...at, i], ...paths(x, [...at, i])])
        : v && typeof v === 'object'
          ? Object.entries(v).flatMap(([k, x]) => [[...at, k], ...paths(x, [...at, k])])
          : [];
    const replaced = (body: unknown, path: (string | number)[], value: unknown) => {
      const copy = structuredClone(body) as Record<string | number, unknown>;
      let at = copy;
      for (const p of path.slice(0, -1)) at = at[p] as Record<string | number, unknown>;
      if (value === undefined) delete at[path[path.length - 1]!];
      else at[path[path.length - 1]!] = value;
      return copy;
    };
    let calls = 0;
    for (const r of allRoutes().filter((x) => x.method !== 'GET')) {
      const fields = Object.keys(objectShape(r.body) ?? {});
      if (fields.length === 0) continue;
      const body = VALID[r.operationId];
      expect(body, `${r.operationId} takes ${fields.join(', ')}: add a valid body to VALID`).toBeDefined();
      const valid = await call(r.method, baseOf(r), body);
      expect(valid.status, `${r.operationId} valid body: ${JSON.stringify(valid.body)}`).toBeLessThan(500);
      // A replay's range must match committed windows, which this file may not have made when run alone.
      if (valid.status === 400 && r.operationId !== 'replayTransfer')
        throw new Error(`${r.operationId}: VALID is refused: ${JSON.stringify(valid.body)}`);
      for (const path of paths(body)) {
        // Every edge value on the first job's fields, a seeded sample of them deeper down (bounded).
        const values = path.length <= 3 ? VALUES : random.shuffle(VALUES).slice(0, 6);
        for (const v of [undefined, ...values]) {
          const sent = replaced(body, path, v);
          const res = await call(r.method, baseOf(r), sent);
          calls++;
          expectNo5xx(`${r.operationId} ${path.join('.')} = ${JSON.stringify(v)?.slice(0, 40)}`, res);
        }
      }
    }
    expect(calls).toBeGreaterThan(500);
  }, 240_000);
});

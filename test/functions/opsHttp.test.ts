// Every ops route over real HTTP, through the local host (dev/localHost.ts) that `npm start` runs, as a caller outside
// the process sees it: the host's own answers (key, method, path) and the ops handler's, for what a test suite
// fuzzing the wire sends: wrong or missing content types, empty bodies, numbers JSON can write and a double cannot
// hold, NUL and odd Unicode, repeated and array-style query parameters, HEAD and OPTIONS, forged principals, an
// encoded "/" in a path parameter, and N identical writes at once. Every answer is JSON; bad input is a 4xx whose 400
// names the field, never a 5xx; refusals change nothing; every write leaves exactly one audit record per call.
import http from 'node:http';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { allRoutes } from '../../shared/ops/routes.js';
import { auditRows, lastAuditId, OPERATOR, READER, snapshot } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const KEY = 'http-sweep-key-'.padEnd(40, 'k');
const fx = useItemsTransfer({
  label: 'fn_http',
  rows: 20,
  batchSize: 10,
  chunkSize: 10,
  env: { KEEL_OPS_REFUSAL_WINDOW_MS: '0' },
  http: { opsKey: KEY },
});

interface Wire {
  status: number;
  type: string;
  text: string;
  body: any;
}

async function send(
  method: string,
  path: string,
  opts: { raw?: string | Buffer; headers?: Record<string, string>; key?: boolean; principal?: string | null } = {},
): Promise<Wire> {
  const headers: Record<string, string> = {
    ...(opts.key === false ? {} : { 'x-functions-key': KEY }),
    ...(opts.principal === null ? {} : { 'x-ms-client-principal': opts.principal ?? OPERATOR }),
    ...(method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS' ? { 'content-type': 'application/json' } : {}),
    ...opts.headers,
  };
  for (const [k, v] of Object.entries(headers)) if (v === '') delete headers[k];
  const res = await fetch(`${fx.host!.baseUrl}/${path.replace(/^\//, '')}`, {
    method,
    headers,
    ...(opts.raw !== undefined ? { body: typeof opts.raw === 'string' ? opts.raw : new Uint8Array(opts.raw) } : {}),
  });
  const text = await res.text();
  let body: unknown = undefined;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', text, body };
}

const ops = (method: string, path: string, opts: Parameters<typeof send>[2] = {}) =>
  send(method, `api/ops/${path.replace(/^\//, '')}`, opts);

// A JSON error: a 4xx with a code and a message, a 400 naming the field.
function expectJsonError(what: string, r: Wire, status?: number | number[]) {
  const shown = `${what}: ${r.status} ${r.text.slice(0, 300)}`;
  expect(r.type, shown).toMatch(/^application\/json/);
  expect(r.status, shown).toBeGreaterThanOrEqual(400);
  expect(r.status, shown).toBeLessThan(500);
  if (status !== undefined) expect(Array.isArray(status) ? status : [status], shown).toContain(r.status);
  expect(typeof r.body?.error, shown).toBe('string');
  expect(typeof r.body?.message, shown).toBe('string');
  if (r.status === 400) expect(r.body.field, shown).toBeTruthy();
}

function expectNo5xx(what: string, r: Wire) {
  const shown = `${what}: ${r.status} ${r.text.slice(0, 300)}`;
  expect(r.status, shown).toBeLessThan(500);
  if (r.status !== 204) expect(r.type, shown).toMatch(/^application\/json/);
  if (r.status >= 400) expectJsonError(what, r);
}

function objectShape(schema: z.ZodType | undefined): Record<string, z.ZodType> {
  if (!schema) return {};
  if (schema instanceof z.ZodObject) return schema.shape as Record<string, z.ZodType>;
  if (schema instanceof z.ZodUnion) {
    const merged: Record<string, z.ZodType> = {};
    for (const o of schema.options as z.ZodType[]) Object.assign(merged, objectShape(o));
    return merged;
  }
  // .refine() wraps the object in a pipe/effect in zod 4: its input schema holds the shape.
  const inner = (schema as unknown as { _zod?: { def?: { in?: z.ZodType; schema?: z.ZodType } } })._zod?.def;
  return inner?.in ? objectShape(inner.in) : inner?.schema ? objectShape(inner.schema) : {};
}

function paramOf(r: { path: string }): string {
  return r.path.startsWith('/transfers/batches/:id')
    ? '00000000-0000-4000-8000-000000000000'
    : r.path.includes(':id')
      ? '1'
      : r.path.startsWith('/transfers/')
        ? 'items'
        : 'http-q';
}

function pathOf(path: string, value: string, encoded = false): string {
  return path.replace(/^\//, '').replace(/:(\w+)/g, () => (encoded ? value : encodeURIComponent(value)));
}

const baseOf = (r: { path: string }) => pathOf(r.path, paramOf(r));
// The jobs, the DLQ and dependencies: what no refused call may touch (a valid empty call may pause a queue or start a
// transfer).
const kept = (f: Record<string, string>) =>
  Object.fromEntries(Object.entries(f).filter(([t]) => /jobs_|dlq_counts|job_deps/.test(t)));

// Methods fetch() will not send, on a plain socket: status, content type and body.
function rawMethod(method: string, path: string): Promise<Wire> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${fx.host!.baseUrl}/api/ops/${path}`,
      { method, headers: { 'x-functions-key': KEY, 'x-ms-client-principal': OPERATOR } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = undefined;
          }
          resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), text, body });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('ops over HTTP: every route, bad input on the wire', () => {
  it('content types, empty and odd bodies, repeated and array-style query parameters: a JSON 4xx naming the field, never a 5xx; nothing changes', async () => {
    const before = kept(await snapshot(fx.t.pool));
    let calls = 0;
    for (const r of allRoutes()) {
      const base = baseOf(r);
      const what = `${r.method} ${r.path}`;
      const write = r.method !== 'GET';
      if (write) {
        for (const type of [
          'text/plain',
          'application/x-www-form-urlencoded',
          'multipart/form-data; boundary=x',
          'application/jsonx',
          'application/xml',
          '',
        ]) {
          const res = await ops(r.method, base, { raw: '{}', headers: { 'content-type': type } });
          calls++;
          expectJsonError(`${what} as "${type}"`, res, 415);
          expect(res.body.field, what).toBe('content-type');
        }
        const gz = await ops(r.method, base, { raw: '{}', headers: { 'content-encoding': 'gzip' } });
        expectJsonError(`${what} gzip`, gz, 415);
        expect(gz.body.field, what).toBe('content-encoding');
        // No body at all, declared JSON: the route's answer to {} (valid or a 400 naming the field).
        expectNo5xx(`${what} with no body`, await ops(r.method, base));
        // Bodies that are not an object, or not JSON text a double holds, or not text a database stores.
        for (const raw of [
          '',
          ' ',
          'null',
          '[]',
          '[{}]',
          '"x"',
          '0',
          'NaN',
          'Infinity',
          '{"a":NaN}',
          '{"limit":1e999}',
          '{"limit":-1e999}',
          '{"limit":123456789012345678901234567890}',
          '{"limit":-0}',
          '{"queue":"\\u0000"}',
          '{"reason":"\\ud800"}',
          '{"\\u0000":1}',
          '{"reason":"💥‮"}',
          '\ufeff{}',
          '{}\u0000',
          '{"a":1}{"b":2}',
        ]) {
          const res = await ops(r.method, base, { raw });
          calls++;
          expectNo5xx(`${what} raw ${JSON.stringify(raw)}`, res);
        }
        // Bytes that are not UTF-8 and a body past KEEL_OPS_MAX_BODY_BYTES.
        const bad = await ops(r.method, base, { raw: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]) });
        if (r.body) expectJsonError(`${what} not UTF-8`, bad, 400);
        else expectNo5xx(`${what} not UTF-8`, bad);
        if (r.body) {
          const huge = await ops(r.method, base, { raw: JSON.stringify({ pad: 'x'.repeat(300 * 1024) }) });
          expectJsonError(`${what} huge`, huge, 413);
        }
      }
      // The same query parameter twice, array-style, unknown, and with odd values.
      const keys = Object.keys(objectShape(r.query));
      for (const q of [
        'a=1&a=1',
        'bogus=1',
        'limit[]=1',
        'limit[0]=1&limit[1]=2',
        ...keys.flatMap((k) => [
          `${k}=1&${k}=1`,
          `${k}[]=x`,
          `${k}=%00`,
          `${k}=${'9'.repeat(400)}`,
          `${k}=%F0%9F%92%A5`,
        ]),
      ]) {
        const res = await ops(r.method, `${base}?${q}`, write ? { raw: '{}' } : {});
        calls++;
        const name = `${what}?${q.slice(0, 40)}`;
        expectNo5xx(name, res);
        if (/^(\w+)=1&\1=1$/.test(q)) {
          expectJsonError(name, res, 400);
          expect(res.body.field, name).toBe(q.split('=')[0]);
        }
      }
    }
    expect(kept(await snapshot(fx.t.pool))).toEqual(before);
    expect(calls).toBeGreaterThan(400);
  }, 240_000);

  it('HEAD, OPTIONS and methods no route takes: a JSON 404 or 405 from the host or the router, never run', async () => {
    const from = await lastAuditId(fx.t.pool);
    for (const r of allRoutes()) {
      const base = baseOf(r);
      for (const m of ['HEAD', 'OPTIONS', 'TRACE', 'PROPFIND']) {
        const res = ['HEAD', 'OPTIONS'].includes(m) ? await ops(m, base) : await rawMethod(m, base);
        expect(res.status, `${m} ${r.path}`).toBe(404);
        expect(res.type, `${m} ${r.path}`).toMatch(/^application\/json/);
        if (m !== 'HEAD') expectJsonError(`${m} ${r.path}`, res, 404);
      }
    }
    expect(await auditRows(fx.t.pool, from)).toEqual([]);
  });

  it('a missing or wrong key is a JSON 401 from the host; a forged or unreadable principal fails closed on every operator route', async () => {
    const before = kept(await snapshot(fx.t.pool));
    const forged = [
      'not base64 at all !!',
      Buffer.from('not json').toString('base64'),
      Buffer.from('{"claims":"Keel.Operator"}').toString('base64'),
      Buffer.from('{"claims":[{"typ":"roles","val":["Keel.Operator"]}]}').toString('base64'),
      Buffer.from('{"auth_typ":"aad","claims":[{"typ":"roles","val":"keel.operator"}]}').toString('base64'),
      Buffer.from('[{"typ":"roles","val":"Keel.Operator"}]').toString('base64'),
      Buffer.from(JSON.stringify({ userRoles: ['Keel.Operator'] })).toString('base64'),
      READER,
      `${OPERATOR}x`,
      'A'.repeat(16_000),
    ];
    for (const r of allRoutes()) {
      const base = baseOf(r);
      const what = `${r.method} ${r.path}`;
      const raw = r.method === 'GET' ? undefined : '{}';
      expectJsonError(`${what} without a key`, await ops(r.method, base, { key: false, ...(raw ? { raw } : {}) }), 401);
      expectJsonError(
        `${what} wrong key`,
        await ops(r.method, base, { headers: { 'x-functions-key': 'nope' }, ...(raw ? { raw } : {}) }),
        401,
      );
      if (r.role !== 'operator') continue;
      for (const p of forged) {
        const res = await ops(r.method, base, { principal: p, ...(raw ? { raw } : {}) });
        expectJsonError(`${what} principal ${p.slice(0, 30)}`, res, [401, 403]);
      }
    }
    expect(kept(await snapshot(fx.t.pool))).toEqual(before);
  }, 120_000);

  // Azure's front end decodes %2F before routing (azure-functions-host#9290); the local host keeps it in the URL, and
  // the router takes the segments from there: "a%2Fb" is one parameter holding "/", refused naming it. Found: the
  // decoded catch-all routed POST transfers/batches%2F<id>/resume as POST transfers/batches/<id>/resume.
  it('an encoded "/" in a path parameter is that parameter, refused naming it: never another route or resource', async () => {
    // A real batch, so "batches%2F<id>" names one that exists (started here, or by an earlier test's valid call).
    await fx.call('POST', 'transfers/items/start', {});
    const batches = (await fx.call('GET', 'transfers/batches?transfer=items')).body.items as { batchId: string }[];
    expect(batches.length).toBeGreaterThan(0);
    const batchId = batches[0]!.batchId;
    expect((await fx.call('PATCH', 'queues/http-q', { maxAttempts: 3 })).status).toBe(200);
    const before = await snapshot(fx.t.pool);
    const from = await lastAuditId(fx.t.pool);
    let checked = 0;
    let writes = 0;
    for (const r of allRoutes().filter((x) => x.path.includes(':'))) {
      const name = /:(\w+)/.exec(r.path)![1]!;
      const good = paramOf(r);
      for (const value of [
        `${good}%2Fx`,
        `${good}%2f`,
        `%2F${good}`,
        `batches%2F${batchId}`,
        `http-q%2Fpause`,
        `${good}%2F..%2F${good}`,
        `${good}%5Cx`,
        `${good}%00`,
      ]) {
        const path = pathOf(r.path, value, true);
        if (r.method !== 'GET') writes++;
        const res = await ops(r.method, path, r.method === 'GET' ? {} : { raw: r.body ? '{"maxAttempts":9}' : '{}' });
        const what = `${r.method} ${path}`;
        expectJsonError(what, res, 400);
        expect(res.body, what).toMatchObject({ error: 'invalid_request', field: name, in: 'path' });
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(50);
    expect(await snapshot(fx.t.pool)).toEqual(before);
    expect((await fx.call('GET', 'queues/http-q')).body.maxAttempts).toBe(3);
    // Each refused write left its refused record, naming the route the caller named.
    const rows = await auditRows(fx.t.pool, from);
    expect(rows.map((x) => [x.outcome, x.status])).toEqual(Array(writes).fill(['refused', 400]));
    // A double-encoded "/" is the text "%2F" in the parameter: refused too (no name holds "%").
    const twice = await ops('PATCH', 'queues/http-q%252Fx', { raw: '{"maxAttempts":9}' });
    expect(twice.body).toMatchObject({ error: 'invalid_request', field: 'name', in: 'path' });
  });
});

// Request bodies for N identical writes: valid (a dry run or a preview where the route has one), so the call reaches
// the store; the route table test (opsRouteTable.test.ts) checks each one's effect, this one the wire and the record.
const BODIES: Record<string, unknown> = {
  enqueue: { queue: 'http-n', type: 'demo.echo', idempotencyKey: 'http-once', delayMs: 600_000 },
  updateQueue: { maxConcurrency: 3 },
  cancelMany: { queue: 'http-n', limit: 5, dryRun: true },
  resurrectByFilter: { queue: 'http-n', limit: 5, dryRun: true },
  purge: { target: 'dlq', queue: 'http-n', olderThan: '2020-01-01T00:00:00Z', dryRun: true },
  pauseTransfer: { reason: 'http sweep' },
  rebaselineTransfer: { preview: true },
  compareTransferKeys: { apply: false, windows: 1 },
  replayTransfer: { low: null, high: '5', preview: true },
  abandonBatch: { reason: 'http sweep', preview: true },
  reconcileStale: { olderThanMs: 1000, limit: 5 },
};

describe('ops over HTTP: N identical writes at once', () => {
  it('every write route, N at once with the same body: never a 5xx, and exactly one finished audit record per call with its status', async () => {
    const N = 6;
    for (const r of allRoutes().filter((x) => x.method !== 'GET')) {
      const body = BODIES[r.operationId] ?? {};
      const from = await lastAuditId(fx.t.pool);
      const raw = JSON.stringify(body);
      const rs = await Promise.all(Array.from({ length: N }, () => ops(r.method, baseOf(r), { raw })));
      for (const res of rs) expectNo5xx(`${r.operationId} x${N}`, res);
      const rows = await auditRows(fx.t.pool, from);
      expect(
        rows.map((x) => x.action),
        r.operationId,
      ).toEqual(Array(N).fill(r.operationId));
      expect(
        rows.map((x) => Number(x.status)).sort(),
        `${r.operationId}: ${rs.map((x) => x.status).join(',')}`,
      ).toEqual(rs.map((x) => x.status).sort());
      expect(
        rows.filter((x) => x.outcome === 'started'),
        r.operationId,
      ).toEqual([]);
    }
  }, 180_000);
});

// The local host's HTTP layer as the Functions host behaves: a key for authLevel 'function' routes (header or `code`),
// none for 'anonymous' ones, 404 for a method a route does not declare, and a body over the host's cap refused with
// 413 before the function runs — also when it comes chunked with no Content-Length (read and dropped, never kept).
// Then what a hostile or broken caller does: bodies past the in-flight budget (503, nothing buffered), requests
// Node's parser refuses (JSON, not a bare status line), a caller that goes away mid-body (its budget given back), and
// a sender that stalls mid-body or mid-headers (408, the socket closed; the host answers others meanwhile).
import http from 'node:http';
import net from 'node:net';
import type { HttpRequest } from '@azure/functions';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalHost, type RunningLocalHost } from '../../dev/localHost.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { parseSettings } from '../../shared/config/settings.js';

const KEY = 'k'.repeat(32);
const CAP = 1024 * 1024;
let host: RunningLocalHost;
const BUDGET = 2 * CAP;
const seen: number[] = []; // body sizes the functions received
const ROUTE_LIMIT = 4096;
const limitedSeen: number[] = []; // what of each body the route with its own limit received
// The "held" route keeps its request (and so its body's share of the budget) until released.
let arrived = 0;
let release: () => void = () => undefined;
let gate = Promise.resolve();
function closeGate() {
  gate = new Promise<void>((r) => (release = r));
}

beforeAll(async () => {
  const handler = async (req: HttpRequest) => {
    seen.push((await req.arrayBuffer()).byteLength);
    return { status: 200, jsonBody: { ok: true } };
  };
  host = await startLocalHost({
    definitions: [
      { name: 'keyed', kind: 'http', route: 'keyed', methods: ['POST'], authLevel: 'function', handler },
      { name: 'open', kind: 'http', route: 'open', methods: ['GET', 'POST'], authLevel: 'anonymous', handler },
      // A route with its own body limit (as the ops API's, KEEL_OPS_MAX_BODY_BYTES): it answers 413 itself, as the ops
      // router does, and records what of the body reached it.
      {
        name: 'limited',
        kind: 'http',
        route: 'limited',
        methods: ['POST'],
        authLevel: 'anonymous',
        bodyLimitSetting: 'KEEL_OPS_MAX_BODY_BYTES',
        handler: async (req: HttpRequest) => {
          const n = (await req.arrayBuffer()).byteLength;
          limitedSeen.push(n);
          const over = n > ROUTE_LIMIT || Number(req.headers.get('content-length') ?? 0) > ROUTE_LIMIT;
          return { status: over ? 413 : 200, jsonBody: { n } };
        },
      },
      {
        name: 'held',
        kind: 'http',
        route: 'held',
        methods: ['POST'],
        authLevel: 'anonymous',
        handler: async (req: HttpRequest) => {
          const n = (await req.arrayBuffer()).byteLength;
          arrived++;
          await gate;
          return { status: 200, jsonBody: { n } };
        },
      },
    ],
    settings: parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused',
      KEEL_OPS_MAX_BODY_BYTES: String(ROUTE_LIMIT),
    }),
    hostConfig: hostConfigFrom({ version: '2.0' }),
    queueService: QueueServiceClient.fromConnectionString('UseDevelopmentStorage=true'), // unused: no queues, no timers
    timerLocks: false,
    opsKey: KEY,
    port: 0,
    maxRequestBytes: CAP,
    maxInflightBodyBytes: BUDGET,
    log: () => undefined,
  });
});

afterAll(async () => {
  await host?.stop();
});

// A POST whose body is written in chunks (Transfer-Encoding: chunked, no Content-Length).
function chunkedPost(path: string, bytes: number, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${host.baseUrl}${path}`, { method: 'POST', headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    const chunk = Buffer.alloc(64 * 1024, 'x');
    let sent = 0;
    const write = () => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', write);
      }
      req.end();
    };
    write();
  });
}

describe('local host HTTP', () => {
  it('keys where the route is function-level, none where anonymous, 404 for an undeclared method', async () => {
    expect((await fetch(`${host.baseUrl}/api/keyed`, { method: 'POST' })).status).toBe(401);
    expect(
      (await fetch(`${host.baseUrl}/api/keyed`, { method: 'POST', headers: { 'x-functions-key': 'wrong' } })).status,
    ).toBe(401);
    expect(
      (await fetch(`${host.baseUrl}/api/keyed`, { method: 'POST', headers: { 'x-functions-key': KEY } })).status,
    ).toBe(200);
    expect((await fetch(`${host.baseUrl}/api/keyed?code=${KEY}`, { method: 'POST' })).status).toBe(200);
    expect((await fetch(`${host.baseUrl}/api/open`)).status).toBe(200);
    expect((await fetch(`${host.baseUrl}/api/keyed`, { headers: { 'x-functions-key': KEY } })).status).toBe(404);
    expect((await fetch(`${host.baseUrl}/api/open`, { method: 'DELETE' })).status).toBe(404);
  });

  it('a body over the cap is a 413 before the function runs, declared or chunked; one at the cap is delivered', async () => {
    seen.length = 0;
    const declared = await fetch(`${host.baseUrl}/api/open`, { method: 'POST', body: Buffer.alloc(CAP + 1) });
    expect(declared.status).toBe(413);
    expect(await chunkedPost('/api/open', 16 * CAP)).toBe(413);
    expect(await chunkedPost('/api/keyed', 16 * CAP, { 'x-functions-key': KEY })).toBe(413);
    expect(seen).toEqual([]);
    expect(await chunkedPost('/api/open', CAP - 64 * 1024)).toBe(200);
    expect(seen).toEqual([CAP - 64 * 1024]);
    // The host still answers after them.
    expect((await fetch(`${host.baseUrl}/api/open`)).status).toBe(200);
  });

  it("a body past a route's own limit is not held whole: the function gets one byte past it (chunked) or none (declared), and its answer arrives", async () => {
    limitedSeen.length = 0;
    const bytes = CAP - 64 * 1024; // within the host's cap: only the route's limit applies
    expect(await chunkedPost('/api/limited', bytes)).toBe(413);
    const declared = await fetch(`${host.baseUrl}/api/limited`, { method: 'POST', body: Buffer.alloc(bytes, 'x') });
    expect(declared.status).toBe(413);
    expect(await declared.json()).toEqual({ n: 0 });
    // Within the limit, chunked or declared, the body arrives whole.
    const small = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${host.baseUrl}/api/limited`, { method: 'POST' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.write(Buffer.alloc(ROUTE_LIMIT / 2, 'x')); // no Content-Length: chunked
      req.end();
    });
    expect(small).toBe(200);
    expect((await jsonPost('/api/limited', ROUTE_LIMIT)).status).toBe(200);
    expect(limitedSeen).toEqual([ROUTE_LIMIT + 1, 0, ROUTE_LIMIT / 2, ROUTE_LIMIT]);
    expect((await fetch(`${host.baseUrl}/api/open`)).status).toBe(200);
  });
});

// What came back on a raw socket: status, headers and body (the socket closed by the host or after `waitMs`).
function rawExchange(
  port: number,
  parts: (string | Buffer)[],
  opts: { waitMs?: number; pauseMs?: number } = {},
): Promise<{ status: number; headers: string; body: string; closed: boolean; ms: number }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    const done = () => {
      clearTimeout(timer);
      const [head = '', ...rest] = data.split('\r\n\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      socket.destroy();
      const body = rest.join('\r\n\r\n');
      resolve({
        status,
        headers: head,
        body: /transfer-encoding: chunked/i.test(head) ? dechunk(body) : body,
        closed,
        ms: Date.now() - started,
      });
    };
    const timer = setTimeout(done, opts.waitMs ?? 20_000);
    socket.on('data', (d) => (data += d.toString('latin1')));
    socket.on('close', () => {
      closed = true;
      done();
    });
    socket.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'ECONNRESET' || err.code === 'EPIPE' ? undefined : reject(err),
    );
    socket.on('connect', () => {
      void (async () => {
        for (const p of parts) {
          if (socket.destroyed) return;
          socket.write(p);
          if (opts.pauseMs) await new Promise((r) => setTimeout(r, opts.pauseMs));
        }
      })();
    });
  });
}

function dechunk(text: string): string {
  let out = '';
  let at = 0;
  for (;;) {
    const eol = text.indexOf('\r\n', at);
    const size = eol < 0 ? 0 : parseInt(text.slice(at, eol), 16);
    if (!size) return out;
    out += text.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

function jsonPost(path: string, bytes: number, headers: Record<string, string> = {}) {
  return fetch(`${host.baseUrl}${path}`, { method: 'POST', body: Buffer.alloc(bytes, 'x'), headers });
}

describe('local host HTTP: hostile and broken callers', () => {
  it('bodies past the in-flight budget are a 503 naming the limit (declared or chunked), others still answered; the budget comes back', async () => {
    closeGate();
    arrived = 0;
    const body = Math.floor(CAP * 0.9);
    // Two bodies of 0.9 cap each are held by the function: 1.8 of the 2-cap budget.
    const held = [jsonPost('/api/held', body), jsonPost('/api/held', body)];
    for (let i = 0; i < 600 && arrived < 2; i++) await new Promise((r) => setTimeout(r, 50));
    expect(arrived).toBe(2);
    const refused = await jsonPost('/api/held', body);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('content-type')).toMatch(/application\/json/);
    expect(await refused.json()).toMatchObject({ error: 'server_busy', field: 'body', limit: BUDGET });
    expect(await chunkedPost('/api/held', body)).toBe(503);
    // A request without a body, and a small one within what is left, are served meanwhile.
    expect((await fetch(`${host.baseUrl}/api/open`)).status).toBe(200);
    expect((await jsonPost('/api/open', 1000)).status).toBe(200);
    expect(arrived).toBe(2);
    release();
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200]);
    // Given back: the same two fit again.
    gate = Promise.resolve();
    expect(
      (await Promise.all([jsonPost('/api/held', body), chunkedPost('/api/held', body)])).map((r) =>
        typeof r === 'number' ? r : r.status,
      ),
    ).toEqual([200, 200]);
  });

  it('Expect: 100-continue: a body over the cap or the budget is refused before it is sent; one within gets 100 Continue', async () => {
    const expect100 = (bytes: number) =>
      rawExchange(
        host.port,
        [`POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: ${bytes}\r\nExpect: 100-continue\r\n\r\n`],
        {
          waitMs: 1500,
        },
      );
    const over = await expect100(CAP + 1);
    expect(over.status, over.headers).toBe(413);
    expect(JSON.parse(over.body)).toMatchObject({ error: 'payload_too_large', field: 'body', limit: CAP });
    expect(over.closed).toBe(true);
    const past = await expect100(BUDGET + 1);
    expect([413, 503]).toContain(past.status);
    const within = await expect100(10);
    expect(within.status, within.headers).toBe(100);
  });

  it('a refused body still arriving on a Connection: close request: the caller can send it all and gets the answer, not EPIPE', async () => {
    // Refused before the function runs (no such route, no key, over the cap): the answer is written at once, but the
    // socket stays open until the rest of the body is in. Before, Node closed it as soon as the answer was out and a
    // caller still sending (Python's urllib, say) got EPIPE instead of the status.
    const send = (path: string, bytes: number) =>
      new Promise<{ status: number; error: string | null }>((resolve) => {
        const sock = net.connect(host.port, '127.0.0.1');
        let data = '';
        let error: string | null = null;
        sock.on('data', (d) => (data += d.toString('latin1')));
        sock.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
        sock.on('close', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0), error }));
        sock.on('connect', () => {
          sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: ${bytes}\r\nConnection: close\r\n\r\n`);
          // Small writes, queued at once: the body keeps arriving after the answer went out.
          const chunk = Buffer.alloc(8 * 1024, 'x');
          for (let sent = 0; sent < bytes; sent += chunk.length)
            sock.write(chunk.subarray(0, Math.min(chunk.length, bytes - sent)));
          sock.end();
        });
      });
    for (const [path, status] of [
      ['/api/nowhere', 404],
      ['/api/keyed', 401],
      ['/api/open', 413],
      ['/api/%ZZ', 400],
    ] as const) {
      for (let i = 0; i < 3; i++) expect(await send(path, 4 * CAP), path).toEqual({ status, error: null });
    }
  });

  it('a caller that goes away mid-body gives its share of the budget back, and the host goes on', async () => {
    const body = Math.floor(CAP * 0.9);
    for (let i = 0; i < 3; i++) {
      const sock = net.connect(host.port, '127.0.0.1');
      await new Promise((r) => sock.once('connect', r));
      sock.write(`POST /api/held HTTP/1.1\r\nHost: x\r\nContent-Length: ${body}\r\n\r\n`);
      sock.write(Buffer.alloc(body >> 1, 'x'));
      await new Promise((r) => setTimeout(r, 100));
      sock.destroy();
    }
    // If any share leaked, the second of these would be over the budget.
    let statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      statuses = (await Promise.all([jsonPost('/api/held', body), jsonPost('/api/held', body)])).map((r) => r.status);
      if (statuses.every((s) => s === 200)) break;
      await new Promise((r) => setTimeout(r, 100)); // the aborted reads may still be closing
    }
    expect(statuses).toEqual([200, 200]);
  });

  it("what Node's parser refuses is answered in JSON with Node's status, the connection closed; the host goes on", async () => {
    const cases: [string, string, number, string][] = [
      ['bad method', 'FO(O / HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'bad_request'],
      [
        'two Content-Lengths',
        'POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab',
        400,
        'bad_request',
      ],
      [
        'Content-Length not a number',
        'POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n',
        400,
        'bad_request',
      ],
      [
        'Content-Length and chunked',
        'POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
        400,
        'bad_request',
      ],
      [
        'bad chunk size',
        'POST /api/open HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
        400,
        'bad_request',
      ],
      ['NUL in a header value', 'GET /api/open HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b\r\n\r\n', 400, 'bad_request'],
      ['a space before the colon', 'GET /api/open HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n', 400, 'bad_request'],
      ['not HTTP at all', '\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\r\n\r\n', 400, 'bad_request'],
      ['CONNECT', 'CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n', 404, 'not_found'],
      [
        'an Expect other than 100-continue',
        'GET /api/open HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nConnection: close\r\n\r\n',
        417,
        'expectation_failed',
      ],
      [
        'headers over the limit',
        `GET /api/open HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
        431,
        'headers_too_large',
      ],
      [
        'garbage after a good request',
        'GET /api/open HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02 nonsense\r\n\r\n',
        400,
        'bad_request',
      ],
    ];
    for (const [what, raw, status, error] of cases) {
      const r = await rawExchange(host.port, [raw]);
      // After a good request on the same connection the refusal follows its 200.
      const last = r.body.includes('HTTP/1.1 ') ? r.body.slice(r.body.lastIndexOf('HTTP/1.1 ')) : null;
      const [head, body] = last ? last.split('\r\n\r\n') : [r.headers, r.body];
      expect(Number(/^HTTP\/1\.1 (\d{3})/.exec(head!)?.[1]), `${what}: ${head}`).toBe(status);
      expect(head, what).toMatch(/content-type: application\/json/i);
      const parsed = JSON.parse(body!);
      expect(parsed, what).toMatchObject({ error });
      expect(typeof parsed.message, what).toBe('string');
      expect(parsed.field, what).toBeTruthy();
      expect(r.closed, what).toBe(true);
    }
    expect((await fetch(`${host.baseUrl}/api/open`)).status).toBe(200);
  });

  it('an unusable Host header or a request target that is not a path: a 400 in JSON, not a 500', async () => {
    for (const [what, raw] of [
      ['Host with a space', 'GET /api/open HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n'],
      ['Host with a path', 'GET /api/open HTTP/1.1\r\nHost: evil.example/x?\r\nConnection: close\r\n\r\n'],
      ['absolute-form target', 'GET http://other.example/api/open HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'],
      ['asterisk target', 'OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'],
      ['"//" target', 'GET //other.example/api/open HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'],
    ] as const) {
      const r = await rawExchange(host.port, [raw], { waitMs: 3000 });
      expect(r.status, `${what}: ${r.headers}`).toBeGreaterThanOrEqual(200);
      expect(r.status, `${what}: ${r.headers}`).toBeLessThan(500);
      expect(r.headers, what).toMatch(/content-type: application\/json/i);
      expect(() => JSON.parse(r.body), what).not.toThrow();
    }
  });
});

describe('local host HTTP: stalled senders', () => {
  let slow: RunningLocalHost;
  beforeAll(async () => {
    slow = await startLocalHost({
      definitions: [
        {
          name: 'open',
          kind: 'http',
          route: 'open',
          methods: ['GET', 'POST'],
          authLevel: 'anonymous',
          handler: async () => ({ status: 200, jsonBody: { ok: true } }),
        },
      ],
      settings: parseSettings({ KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused' }),
      hostConfig: hostConfigFrom({ version: '2.0' }),
      queueService: QueueServiceClient.fromConnectionString('UseDevelopmentStorage=true'),
      timerLocks: false,
      opsKey: KEY,
      port: 0,
      maxRequestBytes: CAP,
      maxInflightBodyBytes: CAP,
      bodyTimeoutMs: 1500,
      headersTimeoutMs: 1500,
      log: () => undefined,
    });
  });
  afterAll(async () => {
    await slow?.stop();
  });

  it('a body that stops arriving is a 408 in JSON and the connection closed; its budget comes back; others are served meanwhile', async () => {
    // Declares the whole budget, sends 10 bytes, then nothing.
    const stalled = rawExchange(slow.port, [
      `POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: ${CAP}\r\n\r\n`,
      'x'.repeat(10),
    ]);
    await new Promise((r) => setTimeout(r, 200));
    expect((await fetch(`${slow.baseUrl}/api/open`)).status).toBe(200);
    const r = await stalled;
    expect(r.status, r.headers).toBe(408);
    expect(JSON.parse(r.body)).toMatchObject({ error: 'request_timeout', field: 'body', limit: 1500 });
    expect(r.closed).toBe(true);
    expect(r.ms).toBeLessThan(15_000);
    // The whole budget is free again.
    expect((await fetch(`${slow.baseUrl}/api/open`, { method: 'POST', body: Buffer.alloc(CAP - 1) })).status).toBe(200);
  });

  it('a body dribbled a byte at a time is cut at the timeout, not kept alive by each byte', async () => {
    const parts = [
      'POST /api/open HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n',
      ...Array.from({ length: 60 }, () => 'x'),
    ];
    const r = await rawExchange(slow.port, parts, { pauseMs: 100 });
    expect(r.status, r.headers).toBe(408);
    expect(r.closed).toBe(true);
    expect(r.ms).toBeLessThan(15_000);
  });

  it('headers that stop arriving are a 408 in JSON and the connection closed', async () => {
    const r = await rawExchange(slow.port, ['GET /api/open HTTP/1.1\r\nHost: x\r\nX-Slow: '], { waitMs: 20_000 });
    expect(r.status, r.headers).toBe(408);
    expect(r.headers).toMatch(/content-type: application\/json/i);
    expect(JSON.parse(r.body)).toMatchObject({ error: 'request_timeout' });
    expect(r.closed).toBe(true);
    expect(r.ms).toBeLessThan(15_000);
  });
});

// The local host's HTTP layer as the Functions host behaves: a key for authLevel 'function' routes (header or `code`),
// none for 'anonymous' ones, 404 for a method a route does not declare, and a body over the host's cap refused with
// 413 before the function runs — also when it comes chunked with no Content-Length (read and dropped, never kept).
import http from 'node:http';
import type { HttpRequest } from '@azure/functions';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalHost, type RunningLocalHost } from '../../dev/localHost.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { parseSettings } from '../../shared/config/settings.js';

const KEY = 'k'.repeat(32);
const CAP = 1024 * 1024;
let host: RunningLocalHost;
const seen: number[] = []; // body sizes the functions received

beforeAll(async () => {
  const handler = async (req: HttpRequest) => {
    seen.push((await req.arrayBuffer()).byteLength);
    return { status: 200, jsonBody: { ok: true } };
  };
  host = await startLocalHost({
    definitions: [
      { name: 'keyed', kind: 'http', route: 'keyed', methods: ['POST'], authLevel: 'function', handler },
      { name: 'open', kind: 'http', route: 'open', methods: ['GET', 'POST'], authLevel: 'anonymous', handler },
    ],
    settings: parseSettings({ KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused' }),
    hostConfig: hostConfigFrom({ version: '2.0' }),
    queueService: QueueServiceClient.fromConnectionString('UseDevelopmentStorage=true'), // unused: no queues, no timers
    timerLocks: false,
    opsKey: KEY,
    port: 0,
    maxRequestBytes: CAP,
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
});

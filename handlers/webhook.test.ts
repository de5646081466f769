// Tests of the example handler, written with the handler test kit (test/kit.ts): copy this file with the handler.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { webhook } from './webhook.js';
import { FakeClock, runHandler, runJobEndToEnd, startHandler } from '../test/kit.js';

// A receiver on this machine that answers what the test tells it to and records what it got.
let answer: (req: http.IncomingMessage, res: http.ServerResponse) => void = (_req, res) => res.end();
const received: { headers: http.IncomingHttpHeaders; body: string }[] = [];
const closedEarly: boolean[] = [];
const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    received.push({ headers: req.headers, body });
    res.on('close', () => closedEarly.push(!res.writableFinished));
    answer(req, res);
  });
});
let url = '';
const previousHosts = process.env.WEBHOOK_ALLOWED_HOSTS;

beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  url = `http://127.0.0.1:${port}/hook`;
  process.env.WEBHOOK_ALLOWED_HOSTS = `example.com, 127.0.0.1:${port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  if (previousHosts === undefined) delete process.env.WEBHOOK_ALLOWED_HOSTS;
  else process.env.WEBHOOK_ALLOWED_HOSTS = previousHosts;
});

describe('webhook.post', () => {
  it('refuses a bad payload as enqueue does, naming the field', () => {
    expect(() => startHandler(webhook, { url: 'https://evil.example.net/x', body: {} })).toThrow(
      /^payload\.url: host is not in WEBHOOK_ALLOWED_HOSTS/,
    );
    expect(() => startHandler(webhook, { url: 'http://example.com/x', body: {} })).toThrow(
      /^payload\.url: must be an https URL/,
    );
    expect(() => startHandler(webhook, { url: 'https://example.com/x' })).toThrow(/^payload\.body/);
    expect(() => startHandler(webhook, { url: 'https://example.com/x', body: 1, extra: true })).toThrow(
      /^payload: .*extra/i,
    );
    expect(() => startHandler(webhook, { url: 'https://example.com/x', body: 1 }, { queue: 'other' })).toThrow(
      /^queue: .*"webhooks"/,
    );
  });

  it('posts the body with a stable idempotency key and succeeds on 2xx', async () => {
    answer = (_req, res) => res.writeHead(204).end();
    const r = await runHandler(webhook, { url, body: { invoice: 42 } }, { attempt: 3, idempotencyKey: 'invoice-42' });
    expect(r).toEqual({ outcome: 'succeeded' });
    const got = received.at(-1)!;
    expect(JSON.parse(got.body)).toEqual({ invoice: 42 });
    expect(got.headers['idempotency-key']).toBe('invoice-42');
    // Without a key the job id stands in, the same on every attempt.
    await runHandler(webhook, { url, body: null }, { idempotencyKey: null, jobId: '77' });
    expect(received.at(-1)!.headers['idempotency-key']).toBe('keel-job-77');
  });

  it('retries a 5xx after the exponential backoff, dated by the clock', async () => {
    answer = (_req, res) => res.writeHead(502).end();
    const clock = new FakeClock('2030-05-01T12:00:00Z');
    const first = await runHandler(webhook, { url, body: 1 }, { attempt: 1, clock, random: () => 0 });
    expect(first).toMatchObject({ outcome: 'retried', delayMs: 1_000, message: 'Error: webhook answered 502' });
    expect(first.retryAt).toEqual(new Date('2030-05-01T12:00:01Z'));
    // Attempt 4: ceiling base * 2^3 = 16 s, equal jitter -> [8 s, 16 s).
    const fourth = await runHandler(webhook, { url, body: 1 }, { attempt: 4, clock, random: () => 0.5 });
    expect(fourth.delayMs).toBe(12_000);
    // The last allowed attempt (maxAttempts 8, from the handler) dead-letters as exhausted.
    const last = await runHandler(webhook, { url, body: 1 }, { attempt: 8, clock });
    expect(last).toMatchObject({ outcome: 'dead_lettered', reason: 'exhausted' });
  });

  it('follows no redirect past the host allowlist and takes no transport header from the payload', async () => {
    const elsewhere = received.length;
    answer = (_req, res) => res.writeHead(307, { location: 'http://10.60.1.4:8080/internal' }).end();
    const r = await runHandler(webhook, { url, body: 1 });
    expect(r).toMatchObject({ outcome: 'dead_lettered', reason: 'fatal' });
    expect((r as { message: string }).message).toMatch(/307 \(a redirect\): not followed/);
    expect(received.length).toBe(elsewhere + 1); // the allowed host only
    for (const name of ['Host', 'content-length', 'Transfer-Encoding', 'connection', 'Idempotency-Key'])
      expect(() => startHandler(webhook, { url, body: 1, headers: { [name]: 'x' } })).toThrow(
        new RegExp(`payload\\.headers.*set by the handler or the transport`),
      );
  });

  it('honours Retry-After on 429 and dead-letters a 4xx at once', async () => {
    answer = (_req, res) => res.writeHead(429, { 'retry-after': '7' }).end();
    expect(await runHandler(webhook, { url, body: 1 })).toMatchObject({ outcome: 'retried', delayMs: 7_000 });
    answer = (_req, res) => res.writeHead(422).end();
    expect(await runHandler(webhook, { url, body: 1 })).toMatchObject({ outcome: 'dead_lettered', reason: 'fatal' });
  });

  it('stops the request when the job is cancelled or the worker shuts down, and retries after a timeout (fake clock)', async () => {
    answer = () => undefined; // never answers
    const seen = received.length;
    const before = closedEarly.length;
    const cancelled = startHandler(webhook, { url, body: 1 });
    await waitFor(() => received.length > seen); // the receiver has the request and is holding it
    cancelled.abort('cancelled');
    expect(await cancelled.result).toMatchObject({ outcome: 'dead_lettered', reason: 'cancelled' });
    await waitFor(() => closedEarly.length > before); // fetch got the signal: the connection was dropped
    expect(closedEarly.at(-1)).toBe(true);

    // A worker shutdown hands the job back (its attempt given back by the store), not a retry.
    const stopped = startHandler(webhook, { url, body: 1 }, { attempt: 8 });
    await waitFor(() => received.length > seen + 1);
    stopped.abort('shutdown');
    expect(await stopped.result).toMatchObject({ outcome: 'released', message: 'interrupted by worker shutdown' });

    const clock = new FakeClock();
    const slow = startHandler(webhook, { url, body: 1 }, { clock, random: () => 0 });
    clock.advance(29_999);
    clock.advance(1); // the handler's 30 s timeout
    expect(await slow.result).toMatchObject({
      outcome: 'retried',
      delayMs: 1_000,
      message: 'timed out after 30000 ms',
    });
    expect(slow.ctx.signal.aborted).toBe(true);
  });

  it('runs end to end on the embedded PostgreSQL: enqueued on its queue, delivered, archived', async () => {
    answer = (_req, res) => res.writeHead(200).end('ok');
    const r = await runJobEndToEnd(webhook, { payload: { url, body: { hello: 'world' } }, idempotencyKey: 'e2e-1' });
    expect(r.outcome).toBe('succeeded');
    expect(r.job).toMatchObject({ location: 'archive', queue: 'webhooks', type: 'webhook.post', attempts: 1 });
    expect(received.at(-1)!.headers['idempotency-key']).toBe('e2e-1');
  });
});

async function waitFor(cond: () => boolean, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 10));
  }
}

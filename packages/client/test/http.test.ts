// The client over HTTP against the real ops router (functions/ops.ts, functions/console.ts) on a real database,
// behind an in-process stand-in for the Functions host's key check and App Service authentication (support.ts):
// typed enqueue with a function key or an Entra token, the API's field-level errors as typed errors, and retries
// that cannot duplicate a job.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineHandler, z } from '../../../shared/jobs/define.js';
import { registerHandlers } from '../../../shared/jobs/handlerFolder.js';
import { createTestRuntime, type TestRuntime } from '../../../test/functions/support.js';
import {
  IdempotencyConflictError,
  jobTypesFrom,
  KeelApiError,
  KeelHttpClient,
  KeelUnavailableError,
  ValidationError,
  type JobInput,
} from '../src/index.js';
import { AUDIENCE, easyAuthEnv, startFrontDoor, type FrontDoor } from './support.js';

const invoiceSend = defineHandler('invoice.send', {
  queue: 'billing',
  payload: z.strictObject({ invoiceId: z.string().min(1), copies: z.number().int().default(1) }),
  async handle() {},
});
const types = jobTypesFrom(invoiceSend);

let t: TestRuntime;
let door: FrontDoor;
let restoreEnv: () => void;
const slept: number[] = [];
const sleep = async (ms: number) => {
  slept.push(ms);
};

beforeAll(async () => {
  t = await createTestRuntime('client_http', {
    register: (r) => registerHandlers(r, [{ ...invoiceSend, source: 'test' }]),
  });
  restoreEnv = easyAuthEnv();
  door = await startFrontDoor();
});
afterAll(async () => {
  await door?.close();
  restoreEnv?.();
  await t?.close();
});

const keyed = (extra: Partial<ConstructorParameters<typeof KeelHttpClient>[0]> = {}) =>
  new KeelHttpClient({ baseUrl: door.baseUrl, functionKey: door.functionKey, jobTypes: types, sleep, ...extra });

async function hotJobs(invoiceIds: string[]) {
  const { items } = await t.rt.store.searchJobs({ location: 'hot', type: 'invoice.send', limit: 500 });
  return items.filter((j) => invoiceIds.includes((j.payload as { invoiceId: string }).invoiceId));
}

describe('KeelHttpClient with a function key', () => {
  it("enqueues a typed job on its handler's queue; the message is posted and the job runs", async () => {
    const client = keyed();
    const r = await client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-1' }, idempotencyKey: 'inv-1' });
    expect(r).toMatchObject({ duplicate: false, posted: true });
    expect(door.requests.at(-1)!.path).toBe('/api/ops/jobs');
    expect(t.queues.take(t.rt.settings.KEEL_JOBS_QUEUE)).toEqual([{ jobId: r.id }]);
    const job = await t.rt.store.getJob(r.id);
    expect(job).toMatchObject({ queue: 'billing', type: 'invoice.send', payload: { invoiceId: 'INV-1', copies: 1 } });
    expect(await t.rt.processor.processById(r.id)).toBe('succeeded');
    expect((await t.rt.store.getJob(r.id))!.location).toBe('archive');
  });

  it('refuses a bad job before sending, naming the field, as the API would', async () => {
    const client = keyed();
    const before = door.requests.length;
    const bad = { type: 'invoice.send', payload: { invoiceId: 7 } } as unknown as JobInput<typeof types>;
    const local = await client.enqueue(bad).catch((e: unknown) => e);
    expect(local).toBeInstanceOf(ValidationError);
    expect(local).toMatchObject({ field: 'payload.invoiceId' });
    await expect(
      client.enqueueMany([
        { type: 'invoice.send', payload: { invoiceId: 'a' } },
        { type: 'invoice.send', payload: { invoiceId: 'b' }, priority: 5_000_000 },
      ]),
    ).rejects.toMatchObject({ name: 'ValidationError', field: 'jobs[1].priority' });
    await expect(
      client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'a' }, queue: 'elsewhere' }),
    ).rejects.toMatchObject({ field: 'queue', message: expect.stringContaining('"billing"') });
    await expect(
      client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'a' }, idempotencyKey: 'schedule:x:1' }),
    ).rejects.toMatchObject({
      field: 'idempotencyKey',
      message: expect.stringContaining('reserved for the scheduler'),
    });
    await expect(client.enqueue({ type: 'nope' } as never)).rejects.toMatchObject({ field: 'type' });
    expect(door.requests.length).toBe(before); // nothing was sent
    // The server, sent the same job by an untyped client, refuses it with the same field and message.
    const untyped = new KeelHttpClient({ baseUrl: door.baseUrl, functionKey: door.functionKey, sleep });
    const remote = await untyped.enqueue(bad as never).catch((e: unknown) => e);
    expect(remote).toBeInstanceOf(KeelApiError);
    expect((remote as KeelApiError).field).toBe('payload.invoiceId');
    expect((remote as KeelApiError).message).toBe((local as ValidationError).message);
  });

  it("carries the API's field-level errors (an untyped client sends; the server refuses)", async () => {
    const client = new KeelHttpClient({ baseUrl: door.baseUrl, functionKey: door.functionKey, sleep });
    const err = await client
      .enqueueMany([
        { type: 'invoice.send', payload: { invoiceId: 'ok' } },
        { type: 'invoice.send', payload: { invoiceId: '' } },
      ])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KeelApiError);
    expect(err).toMatchObject({ status: 400, code: 'invalid_request', field: 'jobs[1].payload.invoiceId' });
    expect(await hotJobs(['ok', ''])).toEqual([]); // nothing of the batch
  });

  it('a key held with another payload is an IdempotencyConflictError naming the key (409), nothing enqueued', async () => {
    const client = keyed();
    const first = await client.enqueue({
      type: 'invoice.send',
      payload: { invoiceId: 'INV-2' },
      idempotencyKey: 'inv-2',
    });
    const dup = await client.enqueue({
      type: 'invoice.send',
      payload: { invoiceId: 'INV-2' },
      idempotencyKey: 'inv-2',
    });
    expect(dup).toMatchObject({ id: first.id, duplicate: true });
    const err = await client
      .enqueueMany([
        { type: 'invoice.send', payload: { invoiceId: 'INV-3' }, idempotencyKey: 'inv-3' },
        { type: 'invoice.send', payload: { invoiceId: 'other' }, idempotencyKey: 'inv-2' },
      ])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdempotencyConflictError);
    expect(err).toMatchObject({
      index: 1,
      field: 'jobs[1].idempotencyKey',
      idempotencyKey: 'inv-2',
      queue: 'billing',
      type: 'invoice.send',
    });
    expect((await hotJobs(['INV-2', 'INV-3', 'other'])).map((j) => j.idempotencyKey)).toEqual(['inv-2']);
  });

  it('retries 503 and 429 with backoff (Retry-After honoured), then succeeds; a 4xx is not retried', async () => {
    const client = keyed({ random: () => 0.5, retryBaseMs: 100 });
    slept.length = 0;
    const before = door.requests.length;
    door.faults.push({ status: 503 }, { status: 429, headers: { 'retry-after': '2' } });
    const r = await client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-4' } });
    expect(r.duplicate).toBe(false);
    expect(door.requests.length - before).toBe(3);
    expect(slept).toEqual([50, 2_000]); // jitter 0.5 * 100 ms, then the server's 2 s
    // A job given no key got one, so the retries above could not have enqueued it twice.
    expect((await t.rt.store.getJob(r.id))!.idempotencyKey).toMatch(/^keel-client:[0-9a-f-]{36}$/);

    door.faults.push({ status: 400, body: { error: 'invalid_request', message: 'no', field: 'x' } });
    const n = door.requests.length;
    await expect(client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'x' } })).rejects.toMatchObject({
      status: 400,
      field: 'x',
    });
    expect(door.requests.length - n).toBe(1);
  });

  it("a call's signal ends the wait between retries at once: nothing more is sent", async () => {
    // The real wait (no injected sleep): a 429 asking for 30 s, the most retryMaxMs lets the client wait.
    const client = new KeelHttpClient({ baseUrl: door.baseUrl, functionKey: door.functionKey, jobTypes: types });
    door.faults.push({ status: 429, headers: { 'retry-after': '30' } });
    const before = door.requests.length;
    const stop = new AbortController();
    const started = Date.now();
    const call = client
      .enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-ABORT' } }, { signal: stop.signal })
      .catch((e: unknown) => e);
    while (door.requests.length === before) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 100)); // the answer read, the client now waits
    stop.abort(new Error('caller gave up'));
    expect(await call).toMatchObject({ message: 'caller gave up' });
    expect(Date.now() - started).toBeLessThan(10_000);
    await new Promise((r) => setTimeout(r, 200));
    expect(door.requests.length - before).toBe(1);
    expect(await hotJobs(['INV-ABORT'])).toEqual([]);
    // An injected sleep that ignores the signal: the call still ends before the next attempt.
    const stop2 = new AbortController();
    const deaf = keyed({ sleep: async () => stop2.abort(new Error('aborted in the wait')) });
    door.faults.push({ status: 503 });
    const n = door.requests.length;
    await expect(
      deaf.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-ABORT' } }, { signal: stop2.signal }),
    ).rejects.toMatchObject({ message: 'aborted in the wait' });
    expect(door.requests.length - n).toBe(1);
  });

  it('a request whose answer is lost after the job was written is retried into the same job, not a second one', async () => {
    const client = keyed();
    door.faults.push('drop-after-app');
    const r = await client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-5' } });
    expect(r.duplicate).toBe(true); // the first attempt wrote it
    expect((await hotJobs(['INV-5'])).map((j) => j.id)).toEqual([r.id]);
  });

  it('gives up after its retries: the last API error, or KeelUnavailableError when nothing answered', async () => {
    const client = keyed({ retries: 2 });
    door.faults.push({ status: 503 }, { status: 503 }, { status: 503 });
    await expect(client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'x' } })).rejects.toMatchObject({
      name: 'KeelApiError',
      status: 503,
    });
    const dead = new KeelHttpClient({ baseUrl: 'http://127.0.0.1:1', functionKey: 'k', retries: 1, sleep });
    const err = await dead.enqueue({ type: 'a', payload: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KeelUnavailableError);
    expect(err).toMatchObject({ attempts: 2 });
  });
});

describe('KeelHttpClient with an Entra token (managed identity with the Keel.Producer app role)', () => {
  it("enqueues without a key through App Service authentication: the token's roles make it a producer", async () => {
    const credential = door.issuer.credential(['Keel.Producer']);
    const client = new KeelHttpClient({
      baseUrl: door.baseUrl,
      token: credential,
      scope: `${AUDIENCE}/.default`,
      jobTypes: types,
      sleep,
    });
    const r = await client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-6' }, idempotencyKey: 'inv-6' });
    expect(r.duplicate).toBe(false);
    expect(credential.scopes).toEqual([`${AUDIENCE}/.default`]);
    const req = door.requests.at(-1)!;
    expect(req.path).toBe('/api/console-api/ops/jobs');
    expect(req.headers['x-functions-key']).toBeUndefined();
    expect(await t.rt.processor.processById(r.id)).toBe('succeeded');
  });

  it('a token without the producer role is refused (403 naming the role); the producer role cannot act as operator', async () => {
    const reader = new KeelHttpClient({
      baseUrl: door.baseUrl,
      token: () => door.issuer.issue({ roles: ['Keel.Reader'] }),
      sleep,
    });
    const err = await reader.enqueue({ type: 'invoice.send', payload: { invoiceId: 'x' } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KeelApiError);
    expect(err).toMatchObject({ status: 403, code: 'forbidden' });
    expect((err as KeelApiError).body).toMatchObject({ requiredRole: 'Keel.Producer', requiredLevel: 'producer' });

    const producer = new KeelHttpClient({
      baseUrl: door.baseUrl,
      token: () => door.issuer.issue({ roles: ['Keel.Producer'] }),
      sleep,
    });
    const job = await producer.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-7' }, delayMs: 60_000 });
    const headers = {
      authorization: `Bearer ${door.issuer.issue({ roles: ['Keel.Producer'] })}`,
      'x-keel-console': '1',
      'content-type': 'application/json',
    };
    const cancel = await fetch(`${door.baseUrl}/api/console-api/ops/jobs/${job.id}/cancel`, {
      method: 'POST',
      headers,
    });
    expect(cancel.status).toBe(403);
    expect(await cancel.json()).toMatchObject({ requiredRole: 'Keel.Operator' });
    const read = await fetch(`${door.baseUrl}/api/console-api/ops/jobs/${job.id}`, { headers });
    expect(read.status).toBe(200); // producer includes reader

    // A token for another audience, or an expired one, never reaches the app (App Service answers 401).
    for (const token of [
      door.issuer.issue({ roles: ['Keel.Producer'], aud: 'api://someone-else' }),
      door.issuer.issue({ roles: ['Keel.Producer'], expiresInS: -60 }),
    ]) {
      const c = new KeelHttpClient({ baseUrl: door.baseUrl, token: () => token, sleep });
      await expect(c.enqueue({ type: 'invoice.send', payload: { invoiceId: 'x' } })).rejects.toMatchObject({
        status: 401,
      });
    }
  });

  it('with both a key and a token it calls /api/ops with both (the roles of the token apply on top of the key)', async () => {
    const client = new KeelHttpClient({
      baseUrl: door.baseUrl,
      functionKey: door.functionKey,
      token: () => door.issuer.issue({ roles: ['Keel.Producer'] }),
      sleep,
    });
    await client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'INV-8' } });
    const req = door.requests.at(-1)!;
    expect(req.path).toBe('/api/ops/jobs');
    expect(req.headers.authorization).toMatch(/^Bearer /);
  });
});

// Compile-time checks: a payload that does not match its type's schema does not type-check.
export function typeChecks(client: KeelHttpClient<typeof types>) {
  // @ts-expect-error invoiceId must be a string
  void client.enqueue({ type: 'invoice.send', payload: { invoiceId: 1 } });
  // @ts-expect-error the payload is required by the schema
  void client.enqueue({ type: 'invoice.send' });
  // @ts-expect-error no such job type
  void client.enqueue({ type: 'invoice.sned', payload: { invoiceId: 'x' } });
  void client.enqueue({ type: 'invoice.send', payload: { invoiceId: 'x' }, runAt: new Date() });
}

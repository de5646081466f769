// Typed payloads over the ops API and from code: a bad payload is a 400 naming the field and nothing is enqueued;
// unknown types are refused unless KEEL_ALLOW_UNKNOWN_JOB_TYPES; the handler's queue is applied.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ops } from '../../functions/ops.js';
import { enqueueJobs } from '../../shared/app/enqueue.js';
import { setRuntime } from '../../shared/app/runtime.js';
import { defineHandler, z } from '../../shared/jobs/define.js';
import { registerHandlers } from '../../shared/jobs/handlerFolder.js';
import { ValidationError } from '../../shared/jobs/validate.js';
import { context, createTestRuntime, jsonOf, request, snapshot, type TestRuntime } from '../functions/support.js';

const invoice = defineHandler('invoice.charge', {
  payload: z.strictObject({
    invoiceId: z.string().regex(/^INV-\d+$/),
    amount: z.object({ cents: z.number().int().positive(), currency: z.enum(['EUR', 'SEK']) }),
    note: z.string().default('none'),
  }),
  queue: 'billing',
  maxAttempts: 3,
  async handle() {},
});

// A transform the worker's second check of the stored payload would undo (string -> its length): every job of this
// type would fail as fatal at run time, so enqueue refuses it, naming the field.
const lengthOf = defineHandler('text.length', {
  payload: z.strictObject({ text: z.string().transform((v) => v.length) }),
  async handle() {},
});
// A transform that gives back its own output (trim, defaults): fine.
const trimmed = defineHandler('text.trimmed', {
  payload: z.strictObject({ text: z.string().trim(), lang: z.string().default('en') }),
  async handle() {},
});

let t: TestRuntime;
const quiet = { info() {}, warn() {}, error() {} };

beforeAll(async () => {
  t = await createTestRuntime('typed_enqueue', {
    register: (r) =>
      registerHandlers(r, [
        { ...invoice, source: 'test' },
        { ...lengthOf, source: 'test' },
        { ...trimmed, source: 'test' },
      ]),
  });
});
afterAll(async () => t?.close());

async function call(method: string, path: string, opts: Parameters<typeof request>[2] = {}) {
  const res = await ops(request(method, path, opts), context('ops'));
  return { status: res.status ?? 200, body: jsonOf(res) };
}

const good = { invoiceId: 'INV-1', amount: { cents: 1200, currency: 'EUR' } };

describe('typed payloads at enqueue', () => {
  it('over the ops API: 400 naming the field, nothing enqueued', async () => {
    const before = await snapshot(t.pool);
    const bad = await call('POST', 'jobs', {
      body: { type: 'invoice.charge', payload: { ...good, amount: { cents: -5, currency: 'EUR' } } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: 'invalid_request', field: 'payload.amount.cents' });
    // In a batch, the first bad job fails the whole request: the good one before it is not written either.
    const batch = await call('POST', 'jobs', {
      body: {
        jobs: [
          { type: 'invoice.charge', payload: good },
          { type: 'invoice.charge', payload: { ...good, invoiceId: 'nope' } },
        ],
      },
    });
    expect(batch.status).toBe(400);
    expect(batch.body.field).toBe('jobs[1].payload.invoiceId');
    const unknown = await call('POST', 'jobs', { body: { type: 'invoice.refund', payload: {} } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.field).toBe('type');
    expect(unknown.body.message).toMatch(/KEEL_ALLOW_UNKNOWN_JOB_TYPES/);
    const wrongQueue = await call('POST', 'jobs', {
      body: { type: 'invoice.charge', queue: 'default', payload: good },
    });
    expect(wrongQueue.status).toBe(400);
    expect(wrongQueue.body.field).toBe('queue');
    expect(await snapshot(t.pool)).toEqual(before);
    expect(t.queues.sent).toEqual([]);
  });

  it("a good job lands on the handler's queue with the parsed payload", async () => {
    const ok = await call('POST', 'jobs', { body: { type: 'invoice.charge', payload: good } });
    expect(ok.status).toBe(201);
    const job = await t.rt.store.getJob(ok.body.id);
    expect(job).toMatchObject({ queue: 'billing', payload: { ...good, note: 'none' } });
  });

  it('from code: enqueueJobs applies the same checks', async () => {
    await expect(
      enqueueJobs(t.rt, { type: 'invoice.charge', payload: { ...good, amount: { cents: 1, currency: 'USD' } } }, quiet),
    ).rejects.toThrow(ValidationError);
    await expect(
      enqueueJobs(t.rt, { type: 'invoice.charge', payload: { ...good, amount: { cents: 1, currency: 'USD' } } }, quiet),
    ).rejects.toThrow(/^payload\.amount\.currency: /);
    const [r] = await enqueueJobs(t.rt, { type: 'invoice.charge', payload: good }, quiet);
    expect((await t.rt.store.getJob(r!.id))?.queue).toBe('billing');
  });

  it('GET /handlers lists types with options and payload schema', async () => {
    const r = await call('GET', 'handlers');
    expect(r.status).toBe(200);
    const item = r.body.items.find((i: { type: string }) => i.type === 'invoice.charge');
    expect(item).toMatchObject({
      queue: 'billing',
      maxAttempts: 3,
      concurrency: null,
      retryOnTimeout: false,
      source: 'test',
    });
    expect(item.payloadSchema.properties.amount.properties.currency.enum).toEqual(['EUR', 'SEK']);
    expect(r.body.items.map((i: { type: string }) => i.type)).toContain('fixture.echo');
    expect(r.body.allowUnknownTypes).toBe(false);
  });
});

describe('unknown types allowed explicitly', () => {
  it('KEEL_ALLOW_UNKNOWN_JOB_TYPES=true accepts a type with no handler here (another app runs it)', async () => {
    const other = await createTestRuntime('typed_unknown', { env: { KEEL_ALLOW_UNKNOWN_JOB_TYPES: 'true' } });
    try {
      const [r] = await enqueueJobs(other.rt, { type: 'elsewhere.job', payload: { any: 1 } }, quiet);
      expect((await other.rt.store.getJob(r!.id))?.queue).toBe('default');
    } finally {
      await other.close();
    }
  });
});

describe('the handler API (shared/handlerApi.ts)', () => {
  it('enqueue() from a handler module uses the running app with its checks; the errors are the ones it exports', async () => {
    const api = await import('../../shared/handlerApi.js');
    // The app's runtime, as getRuntime() finds it in Azure (the test above closed another one, which unset it).
    setRuntime(t.rt);
    const [r] = await api.enqueue({ type: 'invoice.charge', payload: good, idempotencyKey: 'api-1' }, quiet);
    expect(r).toMatchObject({ duplicate: false, posted: true });
    expect(await t.rt.store.getJob(r!.id)).toMatchObject({ queue: 'billing', payload: { ...good, note: 'none' } });
    const bad = await api
      .enqueue({ type: 'invoice.charge', payload: { ...good, invoiceId: 'x' } }, quiet)
      .catch((e) => e);
    expect(bad).toBeInstanceOf(api.ValidationError);
    expect(bad).toMatchObject({ field: 'payload.invoiceId' });
    const taken = await api
      .enqueue({ type: 'invoice.charge', payload: { ...good, note: 'other' }, idempotencyKey: 'api-1' }, quiet)
      .catch((e) => e);
    expect(taken).toBeInstanceOf(api.IdempotencyConflictError);
    // The definitions it exports are the ones the app registers.
    expect(api.defineHandler).toBe(defineHandler);
  });
});

describe('payload schemas the worker checks again', () => {
  it('refuses a schema whose output it does not give back (the job would fail at run time); idempotent ones pass', async () => {
    const refused = await call('POST', '/jobs', { body: { type: 'text.length', payload: { text: 'abc' } } });
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('payload');
    expect(refused.body.message).toMatch(/does not give back its own output/);
    const ok = await call('POST', '/jobs', { body: { type: 'text.trimmed', payload: { text: '  hi ' } } });
    expect(ok.status).toBe(201);
    expect((await t.rt.store.getJob(ok.body.id))!.payload).toEqual({ text: 'hi', lang: 'en' });
  });
});

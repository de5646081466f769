// Transactional enqueue from another application's PostgreSQL transaction, with the client: the producer logs in
// with the enqueue-only role keel_producer; a rollback leaves no job; a commit leaves a due job, and wake() posts the
// message Keel's job runner takes ({"jobId"} as base64 JSON), after which the app runs it. Errors of the SQL entry
// point come back as the client's typed errors.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { defineHandler, z } from '../../../shared/jobs/define.js';
import { registerHandlers } from '../../../shared/jobs/handlerFolder.js';
import { jobMessageSchema, parseMessage } from '../../../shared/app/messages.js';
import { withLogin } from '../../../dev/pgAdmin.js';
import { createTestRuntime, type TestRuntime } from '../../../test/functions/support.js';
import { skewed } from '../../../test/support/skewedClock.js';
import {
  enqueueInTransaction,
  IdempotencyConflictError,
  jobTypes,
  ValidationError,
  type QueueSender,
} from '../src/index.js';

const ran: unknown[] = [];
const orderPaid = defineHandler('order.paid', {
  queue: 'orders',
  payload: z.strictObject({ orderId: z.number().int(), note: z.string().default('') }),
  async handle(payload) {
    ran.push(payload);
  },
});
const types = jobTypes({ 'order.paid': { queue: 'orders', payload: orderPaid.options.payload } });

const PRODUCER = { user: 'keel_client_producer_test', password: 'keel-client-producer-test' };

// What an @azure/storage-queue QueueClient is to wake(): records the messages it would send.
class RecordingSender implements QueueSender {
  readonly sent: { text: string; visibilityTimeout?: number }[] = [];
  async sendMessage(text: string, options?: { visibilityTimeout?: number }) {
    this.sent.push({
      text,
      ...(options?.visibilityTimeout !== undefined ? { visibilityTimeout: options.visibilityTimeout } : {}),
    });
    return {};
  }
}

let t: TestRuntime;
let producer: pg.Client;

beforeAll(async () => {
  t = await createTestRuntime('client_pg', {
    register: (r) => registerHandlers(r, [{ ...orderPaid, source: 'test' }]),
  });
  const owner = t.pool;
  await owner.query(
    `do $$ begin create role ${PRODUCER.user} login; exception when duplicate_object or unique_violation then null; end $$`,
  );
  await owner.query(`alter role ${PRODUCER.user} with login nosuperuser password '${PRODUCER.password}'`);
  await owner.query(`grant keel_producer to ${PRODUCER.user}`);
  await owner.query('create table public.orders (id integer primary key, amount integer not null)');
  await owner.query(`grant select, insert on public.orders to ${PRODUCER.user}`);
  producer = new pg.Client({
    connectionString: withLogin(t.url, PRODUCER.user, PRODUCER.password),
    connectionTimeoutMillis: 10_000,
  });
  producer.on('error', () => undefined);
  await producer.connect();
});
afterAll(async () => {
  await producer?.end();
  await t?.close();
});

async function jobsOfOrder(orderId: number) {
  const { rows } = await t.pool.query(
    `select id::text, queue, state, run_at <= now() as due from keel.jobs_hot where type = 'order.paid' and payload->>'orderId' = $1`,
    [String(orderId)],
  );
  return rows as { id: string; queue: string; state: string; due: boolean }[];
}

describe('enqueueInTransaction (PostgreSQL, role keel_producer)', () => {
  it('a rolled-back producer transaction leaves no job and nothing to wake', async () => {
    await producer.query('begin');
    await producer.query('insert into public.orders (id, amount) values (1, 100)');
    const { jobs } = await enqueueInTransaction(
      producer,
      { type: 'order.paid', payload: { orderId: 1 } },
      {
        jobTypes: types,
      },
    );
    expect(jobs).toHaveLength(1);
    await producer.query('rollback');
    expect(await jobsOfOrder(1)).toEqual([]);
    expect((await t.pool.query('select count(*)::int as n from public.orders')).rows[0].n).toBe(0);
  });

  it("a committed one leaves a due job on its handler's queue; wake() posts its message and the app runs it", async () => {
    await producer.query('begin');
    await producer.query('insert into public.orders (id, amount) values (2, 250)');
    const { jobs, wake } = await enqueueInTransaction(
      producer,
      { type: 'order.paid', payload: { orderId: 2 }, idempotencyKey: 'order-2' },
      { jobTypes: types },
    );
    await producer.query('commit');
    const [row] = await jobsOfOrder(2);
    expect(row).toEqual({ id: jobs[0]!.id, queue: 'orders', state: 'pending', due: true });
    const sender = new RecordingSender();
    expect(await wake(sender)).toBe(1);
    // The message is what the jobs queue's trigger accepts: base64 of {"jobId": "<id>"}, no delay.
    expect(sender.sent).toHaveLength(1);
    expect(sender.sent[0]!.visibilityTimeout).toBeUndefined();
    const decoded = Buffer.from(sender.sent[0]!.text, 'base64').toString('utf8');
    expect(parseMessage(jobMessageSchema, decoded)).toEqual({ ok: true, value: { jobId: jobs[0]!.id } });
    expect(await t.rt.processor.processById(jobs[0]!.id)).toBe('succeeded');
    expect(ran).toContainEqual({ orderId: 2, note: '' }); // the stored payload is the schema's output

    // The same key and payload again, in another transaction: the held job, a duplicate, nothing to wake.
    await producer.query('begin');
    await producer.query('insert into public.orders (id, amount) values (3, 1)');
    const again = await enqueueInTransaction(
      producer,
      [
        { type: 'order.paid', payload: { orderId: 3 }, delayMs: 90_000 },
        { type: 'order.paid', payload: { orderId: 4 }, runAt: new Date(Date.now() + 30 * 24 * 3600_000) },
      ],
      { jobTypes: types },
    );
    await producer.query('commit');
    const later = new RecordingSender();
    expect(await again.wake(later)).toBe(1); // the 30-day job is past a queue message's 7 days: the dispatcher's
    expect(later.sent[0]!.visibilityTimeout).toBeGreaterThanOrEqual(89);
    expect(later.sent[0]!.visibilityTimeout).toBeLessThanOrEqual(90);
  });

  it.each([
    ['an hour ahead of', 3_600_000],
    ['an hour behind', -3_600_000],
  ])(
    "on a host %s the store, wake() delays a runAt job's message until its runAt by the store's clock",
    async (_what, offset) => {
      // A job is due when the database's clock passes its runAt: a host an hour ahead posted it at once, an hour
      // behind an hour late. Both clocks run in the enqueue and the wake (the host's skewed throughout).
      await producer.query('begin');
      const dbNow = (await producer.query('select clock_timestamp() as now')).rows[0].now as Date;
      const r = await skewed(offset, () =>
        enqueueInTransaction(
          producer,
          { type: 'order.paid', payload: { orderId: 11 }, runAt: new Date(dbNow.getTime() + 90_000) },
          { jobTypes: types },
        ),
      );
      await producer.query('commit');
      const sender = new RecordingSender();
      expect(await skewed(offset, () => r.wake(sender))).toBe(1);
      expect(sender.sent[0]!.visibilityTimeout).toBeGreaterThanOrEqual(60); // 90 s less a loaded machine's slack
      expect(sender.sent[0]!.visibilityTimeout).toBeLessThanOrEqual(91);
      await t.rt.store.cancel(r.jobs[0]!.id);
    },
  );

  it('refuses a bad job before the call, naming the field as the API does; the transaction stays usable', async () => {
    await producer.query('begin');
    await expect(
      enqueueInTransaction(producer, { type: 'order.paid', payload: { orderId: 'x' } } as never, { jobTypes: types }),
    ).rejects.toMatchObject({ name: 'ValidationError', field: 'payload.orderId' });
    await expect(
      enqueueInTransaction(
        producer,
        [
          { type: 'order.paid', payload: { orderId: 5 } },
          { type: 'order.paid', payload: { orderId: 6 }, queue: 'other' },
        ],
        { jobTypes: types },
      ),
    ).rejects.toMatchObject({ field: 'jobs[1].queue' });
    await expect(
      enqueueInTransaction(producer, { type: 'order.paid', payload: { orderId: 5 }, idempotencyKey: 'schedule:x:1' }),
    ).rejects.toMatchObject({ field: 'idempotencyKey', message: expect.stringContaining('reserved') });
    expect((await producer.query('select 1 as ok')).rows[0].ok).toBe(1); // nothing reached the server
    await producer.query('rollback');
  });

  it("maps enqueue_many's refusals to typed errors: 22023 to ValidationError, a held key to IdempotencyConflictError", async () => {
    // The client's own payload limit raised; the server's (keel.max_payload_bytes, 256 KiB) still applies.
    await producer.query('begin');
    const big = { type: 'order.paid', payload: { orderId: 7, note: 'x'.repeat(300_000) } } as const;
    const tooBig = await enqueueInTransaction(producer, big, { jobTypes: types, maxPayloadBytes: 1_000_000 }).catch(
      (e: unknown) => e,
    );
    expect(tooBig).toBeInstanceOf(ValidationError);
    expect(tooBig).toMatchObject({ field: 'jobs[0].payload' });
    await producer.query('rollback');

    await producer.query('begin');
    await enqueueInTransaction(producer, {
      type: 'order.paid',
      queue: 'orders',
      payload: { orderId: 8 },
      idempotencyKey: 'order-8',
    });
    await producer.query('commit');
    await producer.query('begin');
    const conflict = await enqueueInTransaction(producer, [
      { type: 'order.paid', queue: 'orders', payload: { orderId: 9 } },
      { type: 'order.paid', queue: 'orders', payload: { orderId: 99 }, idempotencyKey: 'order-8' },
    ]).catch((e: unknown) => e);
    await producer.query('rollback');
    expect(conflict).toBeInstanceOf(IdempotencyConflictError);
    expect(conflict).toMatchObject({
      index: 1,
      field: 'jobs[1].idempotencyKey',
      idempotencyKey: 'order-8',
      queue: 'orders',
      type: 'order.paid',
    });
    expect(await jobsOfOrder(9)).toEqual([]);
  });
});

// Transactional enqueue on SQL Server, with the client: what it sends to keel.EnqueueMany inside the producer's
// transaction (the jobs checked by the API's rules first, as one nvarchar @Jobs document), how it reads the answer,
// and EnqueueMany's refusals (THROW 50025 / 50026, their message text as sql/sqlserver/R__020_enqueue_claim.sql
// writes it) as the client's typed errors. No SQL Server runs here: an mssql Request stand-in records the call; the
// workflow's SQL Server suite runs the procedure itself (test/engines/sqlserver.*).
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  enqueueInSqlServerTransaction,
  IdempotencyConflictError,
  jobTypes,
  prepareEnqueue,
  ValidationError,
  type MssqlRequestLike,
  type QueueSender,
} from '../src/index.js';

class FakeRequest implements MssqlRequestLike {
  inputs: Record<string, unknown> = {};
  executed: string[] = [];
  constructor(
    private readonly answer: () => Promise<{ recordset: { Ord: number; JobId: unknown; Duplicate: unknown }[] }>,
  ) {}
  input(name: string, value: unknown) {
    this.inputs[name] = value;
    return this;
  }
  execute(procedure: string) {
    this.executed.push(procedure);
    return this.answer();
  }
}

const sqlError = (number: number, message: string) => Object.assign(new Error(message), { number });
const types = jobTypes({ 'order.paid': { queue: 'orders', payload: z.strictObject({ orderId: z.number().int() }) } });

describe('enqueueInSqlServerTransaction', () => {
  it('calls keel.EnqueueMany with the checked jobs and maps its rows (in Ord order) to ids; wake posts new jobs only', async () => {
    const req = new FakeRequest(async () => ({
      recordset: [
        { Ord: 1, JobId: '12', Duplicate: true },
        { Ord: 0, JobId: 11, Duplicate: false },
      ],
    }));
    const jobs = [
      { type: 'order.paid' as const, payload: { orderId: 1 } },
      { type: 'order.paid' as const, payload: { orderId: 2 }, idempotencyKey: 'k2' },
    ];
    const r = await enqueueInSqlServerTransaction(req, jobs, { jobTypes: types });
    expect(req.executed).toEqual(['keel.EnqueueMany']);
    expect(JSON.parse(req.inputs.Jobs as string)).toEqual(
      JSON.parse(JSON.stringify(prepareEnqueue(jobs.map((j) => ({ ...j, queue: 'orders' }))))),
    );
    expect(r.jobs).toEqual([
      { id: '11', duplicate: false },
      { id: '12', duplicate: true },
    ]);
    const sent: string[] = [];
    const queue: QueueSender = { sendMessage: async (text) => void sent.push(text) };
    expect(await r.wake(queue)).toBe(1);
    expect(JSON.parse(Buffer.from(sent[0]!, 'base64').toString('utf8'))).toEqual({ jobId: '11' });
  });

  it('refuses bad jobs before any call, naming the field', async () => {
    const req = new FakeRequest(async () => ({ recordset: [] }));
    await expect(
      enqueueInSqlServerTransaction(req, { type: 'order.paid', payload: { orderId: 'x' } } as never, {
        jobTypes: types,
      }),
    ).rejects.toMatchObject({ name: 'ValidationError', field: 'payload.orderId' });
    await expect(
      enqueueInSqlServerTransaction(req, { type: 'nope' } as never, { jobTypes: types }),
    ).rejects.toBeInstanceOf(ValidationError);
    expect(req.executed).toEqual([]);
  });

  it("maps EnqueueMany's refusals to typed errors (a held key) and passes other errors on", async () => {
    const held = new FakeRequest(async () => {
      throw sqlError(
        50025,
        'jobs[1].idempotencyKey: held by a hot job of the same queue and type with another payload {"index":1,"queue":"orders","type":"order.paid","idempotencyKey":"k"}',
      );
    });
    const jobs = [
      { type: 'order.paid' as const, payload: { orderId: 1 } },
      { type: 'order.paid' as const, payload: { orderId: 2 }, idempotencyKey: 'k' },
    ];
    const err = await enqueueInSqlServerTransaction(held, jobs, { jobTypes: types }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdempotencyConflictError);
    expect(err).toMatchObject({
      queue: 'orders',
      type: 'order.paid',
      idempotencyKey: 'k',
      field: 'jobs[1].idempotencyKey',
    });
    const other = new FakeRequest(async () => {
      throw sqlError(1205, 'Transaction (Process ID 52) was deadlocked');
    });
    await expect(enqueueInSqlServerTransaction(other, jobs, { jobTypes: types })).rejects.toMatchObject({
      number: 1205,
    });
  });
});

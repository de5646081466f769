// Transfer functions invoked directly: HTTP start -> stage queue step -> apply queue step -> committed, between two
// real PostgreSQL databases; the timer; reconcile; poison messages.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { maintenance } from '../../functions/maintenance.js';
import { context, snapshot, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const TABLE = `create table public.items (id bigint primary key, name text not null, qty integer not null)`;

const fx = useItemsTransfer({
  label: 'fn_tr',
  sourceDdl: [TABLE],
  seed: () => addRows(1, 250),
  columns: ['id', 'name', 'qty'],
  chunkSize: 100,
  // The staged flow (stage step, then apply step); the direct apply's is in transferDirect.test.ts.
  env: { KEEL_SCHEDULED_TRANSFERS: '*', KEEL_TRANSFER_DIRECT_APPLY: 'false' },
});
const { call } = fx;

async function addRows(from: number, to: number) {
  await fx.source.query(
    `insert into public.items select n, 'item-' || n, n % 7 from generate_series($1::int, $2::int) n`,
    [from, to],
  );
}

describe('transfer functions', () => {
  it('lists the configured transfers', async () => {
    const r = await call('GET', 'transfers');
    expect(r.body.configured).toBe(true);
    expect(r.body.items.map((x: { name: string }) => x.name)).toEqual(['items']);
  });

  it('HTTP start -> stage step -> apply step -> committed, and the batch detail says so', async () => {
    const started = await call('POST', 'transfers/items/start', {});
    expect(started.status).toBe(202);
    const batchId = started.body.batch.batchId as string;
    expect(started.body.batch).toMatchObject({ state: 'extracting', rowCount: 250 });
    // Like Durable Functions' 202: where to poll, and when.
    expect(started.headers.location).toBe(`/api/ops/transfers/batches/${batchId}`);
    expect(started.headers['retry-after']).toBe('10');
    expect((await call('GET', started.headers.location!.replace('/api/ops/', ''))).body.batchId).toBe(batchId);
    const staged = fx.t.queues.take('keel-transfer-stage');
    expect(staged).toEqual([{ batchId }]);

    await transferStage(staged[0], context('transferStage'));
    const apply = fx.t.queues.take('keel-transfer-apply');
    expect(apply).toEqual([{ batchId }]);
    await transferApply(apply[0], context('transferApply'));

    const detail = await call('GET', `transfers/batches/${batchId}`);
    expect(detail.status).toBe(200);
    expect(detail.body).toMatchObject({ batchId, state: 'committed', status: 'committed', appliedCount: 250 });
    expect(detail.body.events.map((e: { event: string }) => e.event)).toEqual(
      expect.arrayContaining(['created', 'staged', 'apply_started']),
    );
    expect(Number((await fx.target.query('select count(*) from public.items')).rows[0].count)).toBe(250);

    // A duplicate apply message is a no-op that says so; the batch stays committed.
    await transferApply({ batchId }, context('transferApply'));
    expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('committed');
    const list = await call('GET', 'transfers/batches?transfer=items&limit=5');
    expect(list.body.items[0]).toMatchObject({ batchId, status: 'committed' });
    // Nothing new: no batch is created.
    const again = await call('POST', 'transfers/items/start', {});
    expect(again).toMatchObject({ status: 200, body: { started: false, reason: 'nothing_to_transfer' } });
    expect(again.headers.location).toBeUndefined();
    // Resuming a committed batch is refused; reconciling it returns it as it is.
    expect((await call('POST', `transfers/batches/${batchId}/resume`, {})).status).toBe(409);
    expect((await call('POST', `transfers/batches/${batchId}/reconcile`, {})).body.state).toBe('committed');
  });

  it('the timer creates a batch for new rows; a second firing does not create another', async () => {
    await addRows(251, 300);
    fx.t.queues.clear();
    await transferTimer(timer, context('transferTimer'));
    const msgs = fx.t.queues.take('keel-transfer-stage') as { batchId: string }[];
    expect(msgs).toHaveLength(1);
    await transferTimer(timer, context('transferTimer'));
    expect(fx.t.queues.take('keel-transfer-stage')).toHaveLength(0);
    // An apply message that arrives before staging sends the batch back to the stage step.
    await transferApply(msgs[0], context('transferApply'));
    expect(fx.t.queues.take('keel-transfer-stage')).toEqual([{ batchId: msgs[0]!.batchId }]);
    await transferStage(msgs[0], context('transferStage'));
    await transferApply(fx.t.queues.take('keel-transfer-apply')[0], context('transferApply'));
    expect((await call('GET', `transfers/batches/${msgs[0]!.batchId}`)).body).toMatchObject({
      state: 'committed',
      appliedCount: 50,
    });
  });

  it('maintenance reconciles stale batches and reports them', async () => {
    const ctx = context('maintenance');
    await maintenance(timer, ctx);
    const line = ctx.logs.find((l) => l.text.startsWith('maintenance:'))!.text;
    expect(JSON.parse(line.slice('maintenance: '.length)).transfers).toMatchObject({ reconciled: 0 });
    const r = await call('POST', 'transfers/reconcile', { olderThanMs: 0, limit: 5 });
    expect(r).toMatchObject({ status: 200, body: { count: 0 } });
  });

  it.each([
    ['not JSON', 'batch-1', 'malformed'],
    ['wrong shape', { id: 'x' }, 'malformed'],
    ['empty id', { batchId: '' }, 'malformed'],
    ['id not a UUID', { batchId: 'batch-7' }, 'malformed'],
    ['unknown batch', { batchId: '00000000-0000-0000-0000-000000000000' }, 'unknown_batch'],
  ] as const)('stage and apply poison %s messages, changing nothing', async (_n, message, reason) => {
    fx.t.queues.clear();
    const before = await snapshot(fx.t.pool);
    await transferStage(message, context('transferStage'));
    await transferApply(message, context('transferApply'));
    expect(await snapshot(fx.t.pool)).toEqual(before);
    expect(fx.t.queues.poisoned.map((p) => [p.queue, p.entry.reason])).toEqual([
      ['keel-transfer-stage', reason],
      ['keel-transfer-apply', reason],
    ]);
  });

  it('unknown transfer and unknown batch are 404', async () => {
    expect((await call('POST', 'transfers/nope/start', {})).status).toBe(404);
    const unknown = '6f9619ff-8b86-4d01-b42d-00cf4fc964ff';
    expect((await call('GET', `transfers/batches/${unknown}`)).status).toBe(404);
    expect((await call('POST', `transfers/batches/${unknown}/reconcile`, {})).status).toBe(404);
    expect((await call('GET', 'transfers/batches/nope')).body).toMatchObject({ error: 'invalid_request', field: 'id' });
    expect((await call('GET', 'transfers/batches?state=bogus')).body).toMatchObject({
      error: 'invalid_request',
      field: 'state',
    });
  });
});

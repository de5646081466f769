// Liveness of an `extracting` batch whose stage message was lost (poisoned after its dequeues, its retry chain at
// KEEL_TRANSFER_RETRY_LIMIT, a host gone between the insert and the post): maintenance re-posts it once it made no
// progress for KEEL_TRANSFER_STALE_MS. Before, only the transfer timer resumed an `extracting` batch, and only for
// a transfer listed in KEEL_SCHEDULED_TRANSFERS (none by default) and under its own name -- so a batch started by an
// operator, a replay (`items@replay-…`) or a re-baseline stayed open for ever, and a replay of the same range was
// refused (`open_batch_exists`) until someone abandoned it. Both cases run through the real entry points; the
// queue is the recorder of test/functions/support.ts.
import { describe, expect, it } from 'vitest';
import { maintenance } from '../../functions/maintenance.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { context, timer } from './support.js';
import { ITEMS_DDL, useItemsTransfer } from './itemsTransfer.js';

const STALE_MS = 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const fx = useItemsTransfer({
  label: 'fn_stalled_extracting',
  rows: 30,
  batchSize: 10,
  sourceDdl: [ITEMS_DDL, ITEMS_DDL.replace('public.items', 'public.others')],
  // KEEL_SCHEDULED_TRANSFERS: none (the default); one batch reconciled or re-posted per pass.
  env: { KEEL_TRANSFER_STALE_MS: String(STALE_MS), KEEL_TRANSFER_RECONCILE_LIMIT: '1' },
  moreTransfers: (items) => [
    {
      ...items,
      name: 'others',
      source: { ...items.source, table: 'public.others' },
      target: { ...items.target, table: 'public.others' },
      batchSize: 10,
    },
  ],
});

type Sent = { queue: string; message: { batchId: string }; delaySeconds: number };
const takeAll = () => fx.t.queues.sent.splice(0) as Sent[];
const batch = async (id: string) => (await fx.call('GET', `transfers/batches/${id}`)).body;

describe('an extracting batch whose stage message was lost', () => {
  it('started by an operator (no timer schedule): maintenance re-posts it after KEEL_TRANSFER_STALE_MS', async () => {
    const r = await fx.call('POST', 'transfers/items/start', {});
    expect(r.status).toBe(202);
    const batchId = r.body.batch.batchId as string;
    expect(takeAll()).toEqual([{ queue: 'keel-transfer-stage', message: { batchId }, delaySeconds: 0 }]); // lost
    // Not stale yet: nothing is posted (a stage step may still be on its way).
    await maintenance(timer, context('maintenance'));
    expect(takeAll()).toEqual([]);
    await sleep(STALE_MS + 200);
    await transferTimer(timer, context('transferTimer')); // not scheduled: the timer does not look at it
    expect(takeAll()).toEqual([]);
    const ctx = context('maintenance');
    await maintenance(timer, ctx);
    const resumed = takeAll();
    expect(resumed.map((m) => [m.queue, m.message.batchId])).toEqual([['keel-transfer-stage', batchId]]);
    expect(ctx.logs.map((l) => l.text).join('\n')).toContain('"resumed":true');
    fx.t.queues.sent.push(...resumed);
    await fx.pump(); // the batch, then catch-up's (10, 20], (20, 30]
    expect(await batch(batchId)).toMatchObject({ state: 'committed', appliedCount: 10 });
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(30);
    await sleep(STALE_MS + 200);
    await maintenance(timer, context('maintenance')); // nothing open: nothing posted
    expect(takeAll()).toEqual([]);
  });

  it('a replay: maintenance re-posts it; a paused transfer’s replay is left where it is until resumed', async () => {
    await fx.target.query(`delete from public.items where id between 11 and 20`);
    const r = await fx.call('POST', 'transfers/items/replay', { low: '10', high: '20' });
    expect(r.status).toBe(202);
    const batchId = r.body.batch.batchId as string;
    expect(takeAll()).toHaveLength(1); // lost
    // While the transfer is paused, nothing is re-posted.
    expect((await fx.call('POST', 'transfers/items/pause', { reason: 'test' })).status).toBe(200);
    await sleep(STALE_MS + 200);
    await maintenance(timer, context('maintenance'));
    expect(takeAll()).toEqual([]);
    expect((await fx.call('POST', 'transfers/items/resume', {})).status).toBe(200);
    takeAll(); // resume posts the transfer's own open batch (none here)
    await maintenance(timer, context('maintenance'));
    const resumed = takeAll();
    expect(resumed.map((m) => [m.queue, m.message.batchId])).toEqual([['keel-transfer-stage', batchId]]);
    fx.t.queues.sent.push(...resumed);
    await fx.pump();
    expect(await batch(batchId)).toMatchObject({ state: 'committed', appliedCount: 10 });
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(30);
  });

  it('a paused transfer’s batch, left and so the oldest, never hides the others from a bounded pass', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(31, 35) n`);
    await fx.source.query(`insert into public.others select n, 'other-' || n from generate_series(1, 5) n`);
    const items = await fx.call('POST', 'transfers/items/start', {});
    expect(items.status).toBe(202);
    expect((await fx.call('POST', 'transfers/items/pause', { reason: 'test' })).status).toBe(200);
    const others = await fx.call('POST', 'transfers/others/start', {});
    expect(others.status).toBe(202);
    takeAll(); // both stage messages, lost
    await sleep(STALE_MS + 200);
    // One batch per pass (KEEL_TRANSFER_RECONCILE_LIMIT 1), and the paused transfer's, the oldest, is left.
    await maintenance(timer, context('maintenance'));
    const resumed = takeAll();
    expect(resumed.map((m) => m.message.batchId)).toEqual([others.body.batch.batchId]);
    fx.t.queues.sent.push(...resumed);
    await fx.pump();
    expect(await batch(others.body.batch.batchId)).toMatchObject({ state: 'committed', appliedCount: 5 });
    expect(await batch(items.body.batch.batchId)).toMatchObject({ state: 'extracting' });
    expect((await fx.call('POST', 'transfers/items/resume', {})).body.openBatch).toMatchObject({ posted: true });
    await fx.pump();
    expect(await batch(items.body.batch.batchId)).toMatchObject({ state: 'committed', appliedCount: 5 });
  });
});

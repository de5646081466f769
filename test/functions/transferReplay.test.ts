// Replay of a committed range (issue 26, item 4): after rows vanished from the target (a DBA's delete) and a source
// row changed, POST /transfers/{name}/replay sends the committed windows (10, 20] again, from the source as it is
// now, as one new batch with every guarantee of a batch; preview first, nothing changed; misaligned or too large
// ranges are refused naming the field; the transfer's own window chain goes on untouched.
import { describe, expect, it } from 'vitest';
import { READER, snapshot } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({ label: 'fn_replay', rows: 30, batchSize: 10 });
const { call, pump } = fx;

describe('replay a committed range', () => {
  it('preview, refusals naming the field, then the range is sent again and the chain goes on', async () => {
    await call('POST', 'transfers/items/start', {});
    await pump(); // catch-up: (,10], (10,20], (20,30]
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(30);
    await fx.target.query(`delete from public.items where id between 11 and 20`);
    await fx.source.query(`update public.items set name = 'renamed' where id = 15`);

    const before = await snapshot(fx.t.pool);
    const preview = await call('POST', 'transfers/items/replay', { low: '10', high: '20', preview: true });
    expect(preview).toMatchObject({
      status: 200,
      body: { preview: true, plan: { transfer: 'items', window: { low: '10', high: '20' }, rows: 10 } },
    });
    expect(preview.body.plan.batches).toHaveLength(1);
    expect(await snapshot(fx.t.pool)).toEqual(before);
    expect(fx.t.queues.sent).toEqual([]);

    expect((await call('POST', 'transfers/items/replay', { low: '10', high: '15' })).body).toMatchObject({
      error: 'invalid_request',
      field: 'high',
    });
    expect((await call('POST', 'transfers/items/replay', { low: '5', high: '20' })).body).toMatchObject({
      error: 'invalid_request',
      field: 'low',
    });
    expect((await call('POST', 'transfers/items/replay', { low: null, high: '30' })).body).toMatchObject({
      error: 'invalid_request',
      field: 'high',
    });
    expect(
      (await call('POST', 'transfers/items/replay', { low: '10', high: '20' }, { 'x-ms-client-principal': READER }))
        .status,
    ).toBe(403);
    expect(await snapshot(fx.t.pool)).toEqual(before);

    const r = await call('POST', 'transfers/items/replay', { low: '10', high: '20' });
    expect(r.status).toBe(202);
    expect(r.body.batch).toMatchObject({ state: 'extracting', rowCount: 10, boundary: { low: '10', high: '20' } });
    expect(r.body.batch.transfer).toMatch(/^items@replay-\d+$/);
    await pump();
    expect((await call('GET', `transfers/batches/${r.body.batch.batchId}`)).body).toMatchObject({
      state: 'committed',
      appliedCount: 10,
    });
    const rows = await fx.target.query(
      `select count(*)::int as n, max(name) filter (where id = 15) as n15 from public.items`,
    );
    expect(rows.rows[0]).toEqual({ n: 30, n15: 'renamed' });

    // The same range again: another replay batch (its own chain), fine.
    const again = await call('POST', 'transfers/items/replay', { low: '10', high: '20' });
    expect(again.status).toBe(202);
    await pump();

    // The transfer's own chain is untouched: the next window starts after 30.
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(31, 35) n`);
    const next = await call('POST', 'transfers/items/start', {});
    expect(next.body.batch.boundary).toMatchObject({ low: '30', high: '35' });
    await pump();
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(35);
    const items = (await call('GET', 'transfers')).body.items;
    expect(items[0].lastCommitted).toMatchObject({ high: '35' });
  });
});

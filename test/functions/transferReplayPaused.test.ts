// A replay batch pauses with its transfer: its queue step leaves it as it is ("resuming the transfer posts it
// again"). But a replay is a chain of its own, not the transfer's open batch, and the resume route posted only that
// one: the replay waited, unposted, for maintenance's stale pass (KEEL_TRANSFER_STALE_MS). The resume now posts the
// open retryable replay batches too (openReplays), beside the transfer's own open batch, oldest first by the
// journal's seq (created_at ties within a millisecond and follows the database's clock, which may step back).
import { describe, expect, it } from 'vitest';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({ label: 'fn_replay_paused', rows: 20, batchSize: 10 });
const { call, pump } = fx;

describe('a replay batch of a paused transfer', () => {
  it('is posted again when the transfer is resumed, with the transfer open batch', async () => {
    await call('POST', 'transfers/items/start', {});
    await pump(); // (,10], (10,20]
    const replay = (await call('POST', 'transfers/items/replay', { low: '10', high: '20' })).body.batch;
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(21, 25) n`);
    const own = (await call('POST', 'transfers/items/start', {})).body.batch;
    expect((await call('POST', 'transfers/items/pause', { reason: 'maintenance' })).status).toBe(200);
    await pump(); // both stage steps leave their batch as it is
    for (const b of [replay, own])
      expect((await call('GET', `transfers/batches/${b.batchId}`)).body.state).toBe('extracting');
    expect(fx.t.queues.sent).toEqual([]);

    const resumed = await call('POST', 'transfers/items/resume', {});
    expect(resumed.body).toMatchObject({
      paused: false,
      openBatch: { batchId: own.batchId, posted: true },
      openReplays: [{ batchId: replay.batchId, state: 'extracting', posted: true }],
    });
    await pump();
    for (const b of [replay, own])
      expect((await call('GET', `transfers/batches/${b.batchId}`)).body.state).toBe('committed');
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(25);
  });

  it("lists the open replays in the journal's order, not by their created_at", async () => {
    const first = (await call('POST', 'transfers/items/replay', { low: '20', high: '25' })).body.batch;
    const second = (await call('POST', 'transfers/items/replay', { low: '10', high: '20' })).body.batch;
    expect((await call('POST', 'transfers/items/pause', { reason: 'order' })).status).toBe(200);
    await pump();
    // The first as if its host's clock had been ahead (or the database's stepped back since): created later.
    await fx.t.pool.query(
      `update keel.transfer_batches set created_at = created_at + interval '1 hour' where batch_id = $1`,
      [first.batchId],
    );
    const resumed = await call('POST', 'transfers/items/resume', {});
    expect(resumed.body.openReplays.map((r: { batchId: string }) => r.batchId)).toEqual([
      first.batchId,
      second.batchId,
    ]);
    await pump();
    for (const b of [first, second])
      expect((await call('GET', `transfers/batches/${b.batchId}`)).body.state).toBe('committed');
  });
});

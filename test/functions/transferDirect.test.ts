// Direct apply through the queue steps, with the default settings (KEEL_TRANSFER_DIRECT_APPLY on): a PostgreSQL ->
// PostgreSQL key window is committed by the stage step itself (docs/transfer.md, "Direct apply"), which then
// continues the catch-up chain as the apply step does; the apply queue is never used. The queue is the recorder of
// test/functions/support.ts, pumped in order as the host would deliver it.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { context, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({ label: 'fn_direct', batchSize: 10, env: { KEEL_SCHEDULED_TRANSFERS: '*' } });

async function pump(): Promise<{ stage: number; apply: number }> {
  const n = { stage: 0, apply: 0 };
  for (;;) {
    const m = fx.t.queues.sent.shift() as { queue: string; message: unknown; delaySeconds: number } | undefined;
    if (!m) return n;
    expect(m.delaySeconds).toBe(0);
    if (m.queue === 'keel-transfer-stage') {
      n.stage++;
      await transferStage(m.message, context('transferStage'));
    } else if (m.queue === 'keel-transfer-apply') {
      n.apply++;
      await transferApply(m.message, context('transferApply'));
    } else throw new Error(`unexpected queue ${m.queue}`);
  }
}

const targetRows = async () => (await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n;

describe('direct apply through the queue steps', () => {
  it('one timer tick, then the stage step alone commits every window and continues the chain', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 155) n`);
    await transferTimer(timer, context('transferTimer'));
    expect(await pump()).toEqual({ stage: 16, apply: 0 }); // 16 batches (15 full, one of 5 rows)
    expect(await targetRows()).toBe(155);
    const list = await fx.t.rt.transfers!.listBatches({ transfer: 'items', limit: 100 });
    expect(list.map((b) => b.state)).toEqual(Array(16).fill('committed'));
    expect(list.every((b) => b.stagedAt === null && b.attempts === 1)).toBe(true);
    expect((await fx.target.query(`select count(*)::int as n from keel_transfer.staged`)).rows[0].n).toBe(0);
  });

  it('a duplicate stage message of a committed batch does not start a second chain', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(156, 185) n`);
    await transferTimer(timer, context('transferTimer'));
    const first = fx.t.queues.sent[0]!.message as { batchId: string };
    await pump();
    expect(await targetRows()).toBe(185);
    await transferStage({ batchId: first.batchId }, context('transferStage'));
    expect(fx.t.queues.sent).toEqual([]);
  });
});

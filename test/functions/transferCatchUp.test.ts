// Catch-up (issue 26, item 1): with batchSize 10, a commit of a full window creates and posts the next batch at
// once, so a backlog is transferred through the queue steps alone after one timer tick; a chain stops at
// KEEL_TRANSFER_CATCHUP_ROWS, or once it has run KEEL_TRANSFER_CATCHUP_MS since its first batch was created (the
// messages carry the chain's start), and the next tick continues it. The queue is the recorder of
// test/functions/support.ts, pumped in order (first in, first out) as the host would deliver it.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { context, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({
  label: 'fn_catchup',
  batchSize: 10,
  // The staged flow (stage step, then apply step: what every pair but PostgreSQL -> PostgreSQL takes); the direct
  // apply's chain (the stage step commits and continues it) is in transferDirect.test.ts.
  env: {
    KEEL_SCHEDULED_TRANSFERS: '*',
    KEEL_TRANSFER_CATCHUP_ROWS: '200',
    KEEL_TRANSFER_CATCHUP_MS: '600000',
    KEEL_TRANSFER_DIRECT_APPLY: 'false',
  },
});

// Delivers every posted message, oldest first, until the queues are empty; returns how many were delivered.
async function pump(): Promise<number> {
  let n = 0;
  for (;;) {
    const m = fx.t.queues.sent.shift() as { queue: string; message: unknown; delaySeconds: number } | undefined;
    if (!m) return n;
    expect(m.delaySeconds).toBe(0); // nothing here waits for a retry
    n++;
    if (m.queue === 'keel-transfer-stage') await transferStage(m.message, context('transferStage'));
    else if (m.queue === 'keel-transfer-apply') await transferApply(m.message, context('transferApply'));
    else throw new Error(`unexpected queue ${m.queue}`);
  }
}

async function committed(): Promise<{ batches: number; rows: number }> {
  const list = await fx.t.rt.transfers!.listBatches({ transfer: 'items', limit: 1000 });
  const done = list.filter((b) => b.state === 'committed');
  return { batches: done.length, rows: done.reduce((s, b) => s + (b.appliedCount ?? 0), 0) };
}
const targetRows = async () => (await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n;

describe('catch-up', () => {
  it('one timer tick, then the queue steps alone move the whole backlog (155 rows, batchSize 10)', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 155) n`);
    await transferTimer(timer, context('transferTimer'));
    const delivered = await pump();
    expect(await targetRows()).toBe(155);
    // 16 batches (15 full, one of 5 rows that ends the chain), each a stage and an apply message.
    expect(await committed()).toEqual({ batches: 16, rows: 155 });
    expect(delivered).toBe(32);
    expect(await fx.t.rt.transfers!.listBatches({ transfer: 'items', state: 'extracting', limit: 5 })).toEqual([]);
  });

  it('a chain stops at KEEL_TRANSFER_CATCHUP_ROWS; the next tick continues', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(156, 455) n`);
    await transferTimer(timer, context('transferTimer'));
    await pump();
    // The chain commits full windows until 200 rows are committed, then waits for the timer.
    expect(await targetRows()).toBe(155 + 200);
    await transferTimer(timer, context('transferTimer'));
    await pump();
    expect(await targetRows()).toBe(455);
    expect(await committed()).toEqual({ batches: 16 + 30, rows: 455 });
  });

  it('a chain stops once it has run KEEL_TRANSFER_CATCHUP_MS since its first batch; the next tick continues', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(456, 505) n`);
    await transferTimer(timer, context('transferTimer'));
    const take = () => fx.t.queues.sent.shift() as { queue: string; message: Record<string, unknown> };
    const first = take();
    expect(first).toMatchObject({ queue: 'keel-transfer-stage', message: { batchId: expect.any(String) } });
    expect(first.message.chainStartedAt).toBeUndefined(); // the chain starts with this batch
    const startedAt = Date.parse((await fx.t.rt.transfers!.getBatch(first.message.batchId as string))!.createdAt);
    await transferStage(first.message, context('transferStage'));
    await transferApply(take().message, context('transferApply'));
    // The full window committed: the next batch carries the chain's rows and its start, through stage to apply.
    const second = take();
    expect(second.message).toMatchObject({ chainRows: 10, chainStartedAt: startedAt });
    await transferStage(second.message, context('transferStage'));
    const apply = take();
    expect(apply).toMatchObject({
      queue: 'keel-transfer-apply',
      message: { chainRows: 10, chainStartedAt: startedAt },
    });
    // The same message as if the chain had started 11 minutes ago (budget 10): it commits and the chain ends there.
    await transferApply({ ...apply.message, chainStartedAt: Date.now() - 11 * 60_000 }, context('transferApply'));
    expect(fx.t.queues.sent).toEqual([]);
    expect(await targetRows()).toBe(455 + 20);
    // The next tick starts a new chain, with a clock of its own: it moves the rest.
    await transferTimer(timer, context('transferTimer'));
    await pump();
    expect(await targetRows()).toBe(505);
  });

  it('a duplicate apply message of a committed batch does not start a second chain', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(506, 525) n`);
    await transferTimer(timer, context('transferTimer'));
    const first = fx.t.queues.sent[0]!.message as { batchId: string };
    await pump();
    expect(await targetRows()).toBe(525);
    const before = await committed();
    await transferApply({ batchId: first.batchId }, context('transferApply'));
    expect(fx.t.queues.sent).toEqual([]);
    expect(await committed()).toEqual(before);
  });
});

// Two steps of one batch (a duplicate message, a retry racing a resumed post): both read the batch uncommitted, one
// of them commits it, and only that one continues the catch-up chain (docs/transfer.md, "Catch-up"). The other one
// finds the batch committed by another run: it creates and posts nothing and logs no continuation, even when the
// first chain has ended meanwhile and the source has new rows (before, it started a second chain from the same
// commit: a second "catch-up: batch … created" line and a batch the timer should have started).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { transferApply } from '../../functions/transferApply.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferTimer } from '../../functions/transferTimer.js';
import type { BatchView } from '../../shared/transfer/service.js';
import { context, timer } from './support.js';
import { useItemsTransfer, type ItemsTransfer } from './itemsTransfer.js';

afterEach(() => vi.restoreAllMocks());

const take = (fx: ItemsTransfer) => fx.t.queues.sent.shift() as { queue: string; message: { batchId: string } };
const continuations = (logs: { text: string }[]) => logs.filter((l) => /catch-up/.test(l.text)).map((l) => l.text);

// Holds the first call of `step` (`inside` once it arrived) until `open()`; later calls run at once.
function gateFirst(step: (id: string) => Promise<BatchView>) {
  let open!: () => void;
  let entered!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const inside = new Promise<void>((r) => (entered = r));
  let calls = 0;
  return {
    open: () => open(),
    inside,
    impl: async (id: string): Promise<BatchView> => {
      if (calls++ === 0) {
        entered();
        await gate;
      }
      return step(id);
    },
  };
}

async function raceTwoSteps(
  fx: ItemsTransfer,
  method: 'stage' | 'apply',
  deliver: (m: unknown, ctx: ReturnType<typeof context>) => Promise<void>,
  message: { batchId: string },
) {
  const svc = fx.t.rt.transfers!;
  const g = gateFirst(svc[method].bind(svc));
  vi.spyOn(svc, method).mockImplementation(g.impl);
  // The late step reads the batch uncommitted, then waits inside its call.
  const lateCtx = context(method === 'stage' ? 'transferStage' : 'transferApply');
  const late = deliver(message, lateCtx);
  await g.inside;
  // The other step commits the batch and continues the chain; the chain runs to its end (25 rows: 10, 10, 5).
  await deliver(message, context(method === 'stage' ? 'transferStage' : 'transferApply'));
  await fx.pump();
  expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(25);
  // New rows at the source: a second chain from the first commit would take them now.
  await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(26, 35) n`);
  g.open();
  await late;
  expect(continuations(lateCtx.logs)).toEqual([]);
  expect(fx.t.queues.sent).toEqual([]);
  const batches = await svc.listBatches({ transfer: 'items', limit: 10 });
  expect(batches.map((b) => [b.state, b.rowCount])).toEqual([
    ['committed', 5],
    ['committed', 10],
    ['committed', 10],
  ]);
  // The next tick takes the new rows, as a chain of its own.
  vi.restoreAllMocks();
  await transferTimer(timer, context('transferTimer'));
  await fx.pump();
  expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(35);
}

describe('two apply steps of one batch (the staged flow)', () => {
  const fx = useItemsTransfer({
    label: 'fn_cu_race_a',
    rows: 25,
    batchSize: 10,
    env: { KEEL_SCHEDULED_TRANSFERS: '*', KEEL_TRANSFER_DIRECT_APPLY: 'false' },
  });
  it('continue the chain once: the step that lost the commit creates nothing', async () => {
    await transferTimer(timer, context('transferTimer'));
    await transferStage(take(fx).message, context('transferStage'));
    const apply = take(fx);
    expect(apply.queue).toBe('keel-transfer-apply');
    await raceTwoSteps(fx, 'apply', transferApply, apply.message);
  });
});

describe('two stage steps of one batch (direct apply)', () => {
  const fx = useItemsTransfer({
    label: 'fn_cu_race_s',
    rows: 25,
    batchSize: 10,
    env: { KEEL_SCHEDULED_TRANSFERS: '*' },
  });
  it('continue the chain once: the step that lost the commit creates nothing', async () => {
    await transferTimer(timer, context('transferTimer'));
    const stage = take(fx);
    expect(stage.queue).toBe('keel-transfer-stage');
    await raceTwoSteps(fx, 'stage', transferStage, stage.message);
  });
});

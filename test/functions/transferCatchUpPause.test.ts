// Pause during catch-up: an operator pauses the transfer while a queue step commits a full window. The chain stops
// (no next batch) and the commit does not report the paused transfer as caught up (freshness: paused transfers are
// not reported; docs/transfer.md "Alerts and freshness"), although rows are still behind at the source.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { transferTimer } from '../../functions/transferTimer.js';
import { telemetry } from '../../shared/telemetry/index.js';
import type { BatchView } from '../../shared/transfer/service.js';
import { context, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({ label: 'fn_cu_pause', rows: 25, batchSize: 10, env: { KEEL_SCHEDULED_TRANSFERS: '*' } });
afterEach(() => vi.restoreAllMocks());

describe('pause during catch-up', () => {
  it('the step that commits a full window while the transfer was paused creates nothing and reports no "caught up"', async () => {
    const svc = fx.t.rt.transfers!;
    await transferTimer(timer, context('transferTimer')); // batch 1 (rows 1..10), posted to the stage queue
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    // The pause lands while the step runs: after its own pause check, before it continues the chain.
    const pauseAfterCommit =
      (step: (id: string) => Promise<BatchView>) =>
      async (id: string): Promise<BatchView> => {
        const v = await step(id);
        if (v.state === 'committed') await svc.pauseTransfer('items', 'maintenance window', 'test');
        return v;
      };
    const [stage, apply] = [svc.stage.bind(svc), svc.apply.bind(svc)];
    vi.spyOn(svc, 'stage').mockImplementation(pauseAfterCommit(stage));
    vi.spyOn(svc, 'apply').mockImplementation(pauseAfterCommit(apply));
    await fx.pump();
    const batches = await svc.listBatches({ transfer: 'items', limit: 10 });
    expect(batches.map((b) => [b.state, b.rowCount])).toEqual([['committed', 10]]);
    expect(fresh.mock.calls.map((c) => c[0])).not.toContainEqual({ transfer: 'items', behindSince: null });
    // Resumed: the next tick goes on from there.
    await svc.resumeTransfer('items', 'test');
    vi.restoreAllMocks();
    await transferTimer(timer, context('transferTimer'));
    await fx.pump();
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(25);
  });
});

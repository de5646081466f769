// The timer's start refused because another run holds the transfer's window (another instance's start between the
// timer's read and its insert, or -- timestamp and rowversion windows -- an open replay the live window waits for:
// test/transfer/replayLiveWindow.test.ts). Before, the timer took every refusal for "nothing new" and reported the
// transfer caught up (freshness behindSince null) while rows waited at the source; now only nothing_to_transfer is.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runTransferSchedule } from '../../shared/app/transferSchedule.js';
import { telemetry } from '../../shared/telemetry/index.js';
import { TransferError } from '../../shared/transfer/errors.js';
import { context } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({
  label: 'fn_timer_busy',
  rows: 25,
  batchSize: 10,
  env: { KEEL_SCHEDULED_TRANSFERS: '*' },
});
afterEach(() => vi.restoreAllMocks());

describe('transfer timer: a start another run holds', () => {
  it('is open_batch_busy naming the batch, not "nothing new", and reports no "caught up"', async () => {
    const svc = fx.t.rt.transfers!;
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    for (const code of ['open_batch_exists', 'window_taken'] as const) {
      vi.spyOn(svc, 'createBatch').mockRejectedValueOnce(
        new TransferError(code, 'held by another run', { batchId: 'b-other' }),
      );
      const steps = await runTransferSchedule(fx.t.rt, context('transferTimer'), new Date());
      expect(steps.find((s) => s.transfer === 'items')).toEqual({
        transfer: 'items',
        action: 'open_batch_busy',
        batchId: 'b-other',
      });
    }
    expect(fresh.mock.calls.map((c) => c[0])).not.toContainEqual({ transfer: 'items', behindSince: null });
    expect(fx.t.queues.sent).toEqual([]);
    // The next tick starts it; with nothing new after the rows, the transfer is caught up.
    vi.restoreAllMocks();
    const started = await runTransferSchedule(fx.t.rt, context('transferTimer'), new Date());
    expect(started.find((s) => s.transfer === 'items')?.action).toBe('created');
  });
});

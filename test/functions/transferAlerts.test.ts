// Alerts and freshness (issue 26, item 5), through the functions' real entry points: a failing scheduled start
// (schema drift found when the timer creates the batch) and a failed batch each emit their event once; the timer
// and commits report the freshness gauge (0 when caught up, behind since the last commit otherwise). The facade's
// output (names, dimensions, the gauge's growth) is tested in test/telemetry/telemetry.test.ts; here, what calls it.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ops } from '../../functions/ops.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { telemetry } from '../../shared/telemetry/index.js';
import { context, jsonOf, request, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({
  label: 'fn_alert',
  rows: 15,
  batchSize: 10,
  env: { KEEL_SCHEDULED_TRANSFERS: '*' },
});
const { pump } = fx;
afterEach(() => vi.restoreAllMocks());

describe('transfer alerts and freshness', () => {
  it('freshness: behind since the commit of a full window, caught up after the last one and when nothing is new', async () => {
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    await transferTimer(timer, context('transferTimer'));
    // The timer's own report: behind (a batch was created, nothing committed yet).
    // Nothing committed yet: all 15 source rows are behind.
    expect(fresh).toHaveBeenLastCalledWith({ transfer: 'items', behindSince: expect.any(Number), rowsBehind: 15 });
    fresh.mockClear();
    await pump(); // 10 rows (full window: behind since that commit, 5 rows after it), then 5 (caught up)
    const reports = fresh.mock.calls.map((c) => c[0]);
    expect(reports).toHaveLength(2);
    expect(reports[0]!.behindSince).toBeGreaterThan(Date.now() - 60_000);
    expect(reports[0]!.rowsBehind).toBe(5);
    expect(reports[1]).toEqual({ transfer: 'items', behindSince: null });
    fresh.mockClear();
    await transferTimer(timer, context('transferTimer'));
    expect(fresh.mock.calls.map((c) => c[0])).toEqual([{ transfer: 'items', behindSince: null }]);
  });

  it('a failed batch emits one batch_failed event with its code', async () => {
    const failed = vi.spyOn(telemetry, 'transferBatchFailed');
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(16, 18) n`);
    const started = jsonOf(
      await ops(request('POST', 'transfers/items/start', { body: {}, operator: true }), context('ops')),
    );
    const id = started.batch.batchId as string;
    fx.t.queues.clear();
    const res = await ops(
      request('POST', `transfers/batches/${id}/abandon`, { body: { reason: 'test' }, operator: true }),
      context('ops'),
    );
    expect(res.status).toBe(200);
    // Abandoning it again changes nothing and reports nothing.
    await ops(
      request('POST', `transfers/batches/${id}/abandon`, { body: { reason: 'test' }, operator: true }),
      context('ops'),
    );
    expect(failed.mock.calls.map((c) => c[0])).toEqual([{ transfer: 'items', batchId: id, code: 'invalid_state' }]);
  });

  it('schema drift found when the timer creates a batch: a start_failed event at every tick, and the freshness keeps its last commit', async () => {
    const startFailed = vi.spyOn(telemetry, 'transferStartFailed');
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    await fx.source.query(`alter table public.items alter column id type integer`);
    for (let i = 0; i < 2; i++) await transferTimer(timer, context('transferTimer'));
    expect(startFailed.mock.calls.map((c) => c[0])).toEqual(
      Array(2).fill({
        transfer: 'items',
        source: 'timer',
        code: 'schema_drift',
        message: expect.stringContaining('acceptSchemaHash'),
      }),
    );
    const last = (await fx.t.rt.transfers!.transferStates()).find((s) => s.name === 'items')!;
    // Rows 16..18 (their batch was abandoned) are still behind. Behind since that commit, moved onto the host's
    // clock by the journal's and the host's difference at the tick (the same clock here: milliseconds).
    const report = fresh.mock.calls.at(-1)![0];
    expect(report).toMatchObject({ transfer: 'items', rowsBehind: 3 });
    expect(Math.abs(report.behindSince! - Date.parse(last.lastCommitted!.committedAt!))).toBeLessThan(5_000);
  });

  it('rows behind on GET /transfers: counted at the source past the last commit, capped, reused while the bound holds', async () => {
    await fx.source.query(`alter table public.items alter column id type bigint`); // the drift of the test above, undone
    const behind = async () =>
      (await fx.call('GET', 'transfers')).body.items.find((t: { name: string }) => t.name === 'items').rowsBehind;
    expect(await behind()).toMatchObject({ rows: 3, capped: false, countedAt: expect.any(String) });
    // The count is reused for 30 s while the last committed bound is the same: two more rows are not seen yet.
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(19, 20) n`);
    expect(await behind()).toMatchObject({ rows: 3 });
    // A cap stops the count: "at least".
    expect(await fx.t.rt.transfers!.rowsBehind('items', 4)).toMatchObject({ rows: 4, capped: true });
    expect(await fx.t.rt.transfers!.rowsBehind('items', 100)).toMatchObject({ rows: 5, capped: false });
    // A commit moves the bound: counted again, caught up.
    const started = await fx.call('POST', 'transfers/items/start', {});
    expect(started.status).toBe(202);
    await pump();
    expect(await behind()).toMatchObject({ rows: 0, capped: false });
  });
});

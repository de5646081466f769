// Alerts and freshness (issue 26, item 5), through the functions' real entry points: a failing scheduled start
// (schema drift found when the timer creates the batch) and a failed batch each emit their event once; the timer
// and commits report the freshness gauge (0 when caught up, behind since the last commit otherwise). The facade's
// output (names, dimensions, the gauge's growth) is tested in test/telemetry/telemetry.test.ts; here, what calls it.
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Timer } from '@azure/functions';
import { ops } from '../../functions/ops.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { telemetry } from '../../shared/telemetry/index.js';
import { createTestDatabase } from '../support/pg.js';
import { context, createTestRuntime, jsonOf, request, type TestRuntime } from './support.js';

let t: TestRuntime;
let source: pg.Pool;
let target: pg.Pool;
const timer: Timer = {
  isPastDue: false,
  schedule: { adjustForDST: true },
  scheduleStatus: { last: '', next: '', lastUpdated: '' },
};

beforeAll(async () => {
  const srcUrl = await createTestDatabase('fn_alert_src');
  const tgtUrl = await createTestDatabase('fn_alert_tgt');
  source = new pg.Pool({ connectionString: srcUrl, max: 2 });
  target = new pg.Pool({ connectionString: tgtUrl, max: 2 });
  await source.query(`create table public.items (id bigint primary key, name text not null)`);
  await target.query(`create table public.items (id bigint primary key, name text not null)`);
  await source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 15) n`);
  t = await createTestRuntime('fn_alert', {
    env: {
      FN_AL_SOURCE: srcUrl,
      FN_AL_TARGET: tgtUrl,
      KEEL_SCHEDULED_TRANSFERS: '*',
      KEEL_TRANSFERS: JSON.stringify([
        {
          name: 'items',
          source: { engine: 'postgres', connectionSetting: 'FN_AL_SOURCE', table: 'public.items' },
          target: { engine: 'postgres', connectionSetting: 'FN_AL_TARGET', table: 'public.items' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'id' },
            { source: 'name', target: 'name' },
          ],
          batchSize: 10,
        },
      ]),
    },
  });
});

afterAll(async () => {
  await t?.close();
  await source?.end();
  await target?.end();
});
afterEach(() => vi.restoreAllMocks());

async function pump(): Promise<void> {
  for (;;) {
    const m = t.queues.sent.shift();
    if (!m) return;
    if (m.queue === 'keel-transfer-stage') await transferStage(m.message, context('transferStage'));
    else await transferApply(m.message, context('transferApply'));
  }
}

describe('transfer alerts and freshness', () => {
  it('freshness: behind since the commit of a full window, caught up after the last one and when nothing is new', async () => {
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    await transferTimer(timer, context('transferTimer'));
    // The timer's own report: behind (a batch was created, nothing committed yet).
    expect(fresh).toHaveBeenLastCalledWith({ transfer: 'items', behindSince: expect.any(Number) });
    fresh.mockClear();
    await pump(); // 10 rows (full window: behind since that commit), then 5 (caught up)
    const reports = fresh.mock.calls.map((c) => c[0]);
    expect(reports).toHaveLength(2);
    expect(reports[0]!.behindSince).toBeGreaterThan(Date.now() - 60_000);
    expect(reports[1]).toEqual({ transfer: 'items', behindSince: null });
    fresh.mockClear();
    await transferTimer(timer, context('transferTimer'));
    expect(fresh.mock.calls.map((c) => c[0])).toEqual([{ transfer: 'items', behindSince: null }]);
  });

  it('a failed batch emits one batch_failed event with its code', async () => {
    const failed = vi.spyOn(telemetry, 'transferBatchFailed');
    await source.query(`insert into public.items select n, 'item-' || n from generate_series(16, 18) n`);
    const started = jsonOf(
      await ops(request('POST', 'transfers/items/start', { body: {}, operator: true }), context('ops')),
    );
    const id = started.batch.batchId as string;
    t.queues.clear();
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
    await source.query(`alter table public.items alter column id type integer`);
    for (let i = 0; i < 2; i++) await transferTimer(timer, context('transferTimer'));
    expect(startFailed.mock.calls.map((c) => c[0])).toEqual(
      Array(2).fill({
        transfer: 'items',
        source: 'timer',
        code: 'schema_drift',
        message: expect.stringContaining('acceptSchemaHash'),
      }),
    );
    const last = (await t.rt.transfers!.transferStates()).find((s) => s.name === 'items')!;
    expect(fresh).toHaveBeenLastCalledWith({
      transfer: 'items',
      behindSince: Date.parse(last.lastCommitted!.committedAt!),
    });
  });
});

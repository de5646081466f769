// 20 concurrent POST /api/ops/transfers/{name}/start of one transfer through the ops function, on the host's own
// wiring (journal pool of 4 connections): exactly one 202, nineteen 409 naming the open batch, nothing hangs,
// and every route still answers afterwards (issue 9, item 5: the journal used to wait on its own pool).
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { context } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';
import { within } from '../support/until.js';

const fx = useItemsTransfer({
  label: 'fn_starts',
  rows: 300,
  batchSize: 1000,
  env: { KEEL_TRANSFER_DIRECT_APPLY: 'false' }, // the staged flow's steps
  onPoolError: (err) => console.warn(`transferStarts test pool: ${err.message}`),
});
const { call } = fx;

describe('concurrent transfer starts', () => {
  it('20 at once: one 202, nineteen 409 naming the open batch; every route answers afterwards', async () => {
    const results = await within(
      Promise.all(Array.from({ length: 20 }, () => call('POST', 'transfers/items/start', {}))),
      30_000,
      '20 concurrent starts',
    );
    const statuses = results.map((r) => r.status).sort();
    expect(
      statuses,
      JSON.stringify(results.filter((r) => r.status !== 202 && r.status !== 409).map((r) => r.body)),
    ).toEqual([202, ...Array(19).fill(409)]);
    const created = results.find((r) => r.status === 202)!.body.batch;
    expect(created).toMatchObject({ state: 'extracting', rowCount: 300, boundary: { low: null, high: '300' } });
    for (const r of results.filter((x) => x.status === 409)) {
      expect(r.body).toMatchObject({
        error: 'conflict',
        code: 'open_batch_exists',
        detail: { batchId: created.batchId },
      });
    }
    // Only one batch exists and exactly one stage message was posted.
    expect(fx.t.queues.take('keel-transfer-stage')).toEqual([{ batchId: created.batchId }]);

    // Every route still answers, in time, while and after the storm.
    const after = await within(
      Promise.all([
        call('GET', 'health'),
        call('GET', 'transfers'),
        call('GET', 'transfers/batches?transfer=items&limit=50'),
        call('GET', `transfers/batches/${created.batchId}`),
        call('POST', 'transfers/items/start', {}),
        call('POST', 'transfers/reconcile', { olderThanMs: 0, limit: 5 }),
        call('GET', 'stats'),
      ]),
      15_000,
      'routes after the storm',
    );
    expect(after.map((r) => r.status)).toEqual([200, 200, 200, 200, 409, 200, 200]);
    expect(after[2]!.body.items.map((b: { batchId: string }) => b.batchId)).toEqual([created.batchId]);
    expect(after[3]!.body.events.map((e: { event: string }) => e.event)).toEqual(['created', 'manifest_recorded']);

    // And the batch runs to the end.
    await transferStage({ batchId: created.batchId }, context('transferStage'));
    expect(fx.t.queues.take('keel-transfer-apply')).toEqual([{ batchId: created.batchId }]);
    await transferApply({ batchId: created.batchId }, context('transferApply'));
    expect((await call('GET', `transfers/batches/${created.batchId}`)).body).toMatchObject({
      state: 'committed',
      appliedCount: 300,
    });
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(300);
  });
});

// Abandon as an operator route (issue 26, item 4): preview first (nothing changes), the operator role, a reason;
// the fence rules: a batch is failed and its window released only when the target says "not applied" under the
// final fence, after which no apply of that batch id can commit; a batch whose apply did commit on the target (the
// journal lost the reply) is recorded committed and the abandon is refused.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { context, READER, snapshot } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';
import { pgStatement } from '../../shared/engines/postgres/procedures.js';
import { JOURNAL_POSTGRES_FUNCTIONS } from '../../shared/engines/postgres/transferJournal.js';
import { transitionArgs } from '../../shared/transfer/journalProcedures.js';

const fx = useItemsTransfer({
  label: 'fn_abandon',
  rows: 40,
  batchSize: 20,
  env: { KEEL_TRANSFER_CATCHUP_ROWS: '0', KEEL_TRANSFER_DIRECT_APPLY: 'false' }, // staged batches to act on
});
const { call } = fx;
const count = async () => (await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n;

describe('abandon a batch', () => {
  it('preview changes nothing; the operator role and a reason are required', async () => {
    const started = await call('POST', 'transfers/items/start', {});
    const id = started.body.batch.batchId as string;
    await transferStage(fx.t.queues.take('keel-transfer-stage')[0], context('transferStage'));
    fx.t.queues.clear();
    const before = await snapshot(fx.t.pool);
    const preview = await call('POST', `transfers/batches/${id}/abandon`, { reason: 'wrong mapping', preview: true });
    expect(preview).toMatchObject({
      status: 200,
      body: { preview: true, abandonable: true, batch: { batchId: id, state: 'staged' } },
    });
    expect(preview.body.effect).toContain('final fence');
    expect(await snapshot(fx.t.pool)).toEqual(before);
    const asReader = await call(
      'POST',
      `transfers/batches/${id}/abandon`,
      { reason: 'x' },
      { 'x-ms-client-principal': READER },
    );
    expect(asReader.status).toBe(403);
    expect((await call('POST', `transfers/batches/${id}/abandon`, {})).body).toMatchObject({
      error: 'invalid_request',
      field: 'reason',
    });
    expect(await snapshot(fx.t.pool)).toEqual(before);
  });

  it('a staged batch: the target says not applied under the final fence -> failed, window released, a late apply cannot commit', async () => {
    const list = await call('GET', 'transfers/batches?transfer=items&limit=5');
    const id = list.body.items[0].batchId as string;
    const r = await call('POST', `transfers/batches/${id}/abandon`, { reason: 'wrong mapping' });
    expect(r).toMatchObject({ status: 200, body: { abandoned: true, batch: { batchId: id, state: 'failed' } } });
    expect(r.body.batch.lastError).toContain('abandoned by operator: wrong mapping (test-operator)');
    // The apply message that was on its way arrives: nothing is applied.
    await transferApply({ batchId: id }, context('transferApply'));
    expect((await call('GET', `transfers/batches/${id}`)).body.state).toBe('failed');
    expect(await count()).toBe(0);
    // The window is free: a new batch covers it and commits.
    const again = await call('POST', 'transfers/items/start', {});
    expect(again.body.batch.boundary).toMatchObject({ low: null, high: '20' });
    await transferStage(fx.t.queues.take('keel-transfer-stage')[0], context('transferStage'));
    await transferApply(fx.t.queues.take('keel-transfer-apply')[0], context('transferApply'));
    expect(await count()).toBe(20);
    // A committed batch: nothing to abandon.
    const done = await call('POST', `transfers/batches/${again.body.batch.batchId}/abandon`, { reason: 'x' });
    expect(done).toMatchObject({ status: 409 });
  });

  it('an apply that committed on the target while the journal lost the reply is never abandoned: recorded committed, 409', async () => {
    const started = await call('POST', 'transfers/items/start', {});
    const id = started.body.batch.batchId as string;
    await transferStage(fx.t.queues.take('keel-transfer-stage')[0], context('transferStage'));
    await transferApply(fx.t.queues.take('keel-transfer-apply')[0], context('transferApply'));
    expect(await count()).toBe(40);
    // The journal as a lost reply leaves it: 'applying', outcome unknown.
    const lostReply = pgStatement(
      'transfer_batch_transition',
      JOURNAL_POSTGRES_FUNCTIONS.transfer_batch_transition,
      transitionArgs(id, ['committed'], 'applying', {}, 'test_lost_reply'),
    );
    await fx.t.pool.query(lostReply.text, lostReply.values);
    const r = await call('POST', `transfers/batches/${id}/abandon`, { reason: 'looks stuck' });
    expect(r.status).toBe(409);
    expect(r.body.message).toContain('not abandoned');
    const b = (await call('GET', `transfers/batches/${id}`)).body;
    expect(b.state).toBe('committed');
    expect(b.events.map((e: { event: string }) => e.event)).toContain('reconciled_committed');
    // The window stays taken: no new batch for it.
    expect((await call('POST', 'transfers/items/start', {})).body).toMatchObject({ started: false });
    expect(await count()).toBe(40);
  });
});

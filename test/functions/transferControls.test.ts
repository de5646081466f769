// Per-transfer pause/resume (persisted in the journal, through the ops API with the operator role) and per-transfer
// schedules (issue 26, item 3): the timer, catch-up and the queue steps honour a pause; resuming re-posts the open
// batch; a transfer with its own NCRONTAB is started only when it is due.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { runTransferSchedule, scheduleDue } from '../../shared/app/transferSchedule.js';
import { context, READER, timer } from './support.js';
import { ITEMS_DDL, useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({
  label: 'fn_ctl',
  targetDdl: [ITEMS_DDL, `create table public.items_nightly (id bigint primary key, name text not null)`],
  batchSize: 10,
  env: { KEEL_SCHEDULED_TRANSFERS: '*', KEEL_TRANSFER_DIRECT_APPLY: 'false' }, // the staged flow's steps
  moreTransfers: (items) => [
    { ...items, name: 'nightly', target: { ...items.target, table: 'public.items_nightly' }, schedule: '0 0 3 * * *' },
  ],
});
const { call, pump } = fx;
const cols = [
  { source: 'id', target: 'id' },
  { source: 'name', target: 'name' },
];
const count = async (tbl: string) => (await fx.target.query(`select count(*)::int as n from public.${tbl}`)).rows[0].n;
const stateOf = async (name: string) =>
  (await call('GET', 'transfers')).body.items.find((x: { name: string }) => x.name === name);

describe('pause and resume', () => {
  it('needs the operator role, names the field at fault, and is persisted with who and why', async () => {
    expect((await call('POST', 'transfers/items/pause', {}, { 'x-ms-client-principal': READER })).status).toBe(403);
    expect((await call('POST', 'transfers/nope/pause', {})).status).toBe(404);
    expect((await call('POST', 'transfers/items/pause', { reason: 5 })).body).toMatchObject({
      error: 'invalid_request',
      field: 'reason',
    });
    const r = await call('POST', 'transfers/items/pause', { reason: 'target reindex' });
    expect(r).toMatchObject({ status: 200, body: { transfer: 'items', paused: true, reason: 'target reindex' } });
    expect(await stateOf('items')).toMatchObject({
      paused: true,
      pausedReason: 'target reindex',
      changedBy: 'test-operator',
      openBatch: null,
      lastCommitted: null,
      secondsSinceCommit: null,
    });
    expect(await stateOf('nightly')).toMatchObject({ paused: false, schedule: '0 0 3 * * *' });
  });

  it('a paused transfer: the timer creates nothing, start is refused, a queued batch is left where it is', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 25) n`);
    fx.t.queues.clear();
    // The batch was queued before the pause (resumed, then paused again while its message waits).
    await call('POST', 'transfers/items/resume', {});
    const started = await call('POST', 'transfers/items/start', {});
    expect(started.status).toBe(202);
    const batchId = started.body.batch.batchId as string;
    await call('POST', 'transfers/items/pause', {});
    const steps = await runTransferSchedule(fx.t.rt, context('transferTimer'), new Date());
    expect(steps.find((s) => s.transfer === 'items')).toEqual({ transfer: 'items', action: 'paused' });
    expect((await call('POST', 'transfers/items/start', {})).body).toMatchObject({ code: 'transfer_paused' });
    // The stage message arrives: nothing moves.
    // (The timer pass started the never-run transfer 'nightly': its message is set aside for later.)
    const all = fx.t.queues.sent.splice(0);
    const msgs = all.filter((m) => (m.message as { batchId: string }).batchId === batchId);
    expect(msgs.map((m) => m.message)).toEqual([{ batchId }]);
    const nightly = all.filter((m) => (m.message as { batchId: string }).batchId !== batchId);
    expect(nightly).toHaveLength(1);
    await transferStage(msgs[0]!.message, context('transferStage'));
    expect(fx.t.queues.sent).toEqual([]);
    expect((await call('GET', `transfers/batches/${batchId}`)).body.state).toBe('extracting');
    expect(await count('items')).toBe(0);

    // Resume: the open batch is posted again, and catch-up moves the rest (batchSize 10: 10, 10, 5).
    const resumed = await call('POST', 'transfers/items/resume', {});
    expect(resumed).toMatchObject({
      status: 200,
      body: { paused: false, openBatch: { batchId, state: 'extracting', posted: true } },
    });
    fx.t.queues.sent.push(...nightly);
    await pump();
    expect(await count('items')).toBe(25);
    expect(await count('items_nightly')).toBe(25);
    const st = await stateOf('items');
    expect(st).toMatchObject({ paused: false, openBatch: null, lastCommitted: { high: '25', rows: 5 } });
    expect(st.secondsSinceCommit).toBeGreaterThanOrEqual(0);
    expect(st.secondsSinceCommit).toBeLessThan(60);
  });

  it('a pause stops a catch-up chain at its next step; resume goes on from there', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(26, 55) n`);
    await transferTimer(timer, context('transferTimer'));
    // Stage, then apply: the full window commits and catch-up posts the next batch.
    for (let i = 0; i < 2; i++) {
      const m = fx.t.queues.sent.shift()!;
      if (m.queue === 'keel-transfer-stage') await transferStage(m.message, context('transferStage'));
      else await transferApply(m.message, context('transferApply'));
    }
    expect(await count('items')).toBe(35);
    const next = fx.t.queues.sent.map((m) => m.message as { batchId: string });
    expect(next).toHaveLength(1);
    await call('POST', 'transfers/items/pause', { reason: 'hold' });
    await pump(); // its stage step leaves it as it is
    expect(await count('items')).toBe(35);
    expect((await stateOf('items')).openBatch).toMatchObject({ batchId: next[0]!.batchId, state: 'extracting' });
    await call('POST', 'transfers/items/resume', {});
    await pump();
    expect(await count('items')).toBe(55);
    expect((await stateOf('items')).openBatch).toBeNull();
  });
});

describe('per-transfer schedule', () => {
  it('scheduleDue: an occurrence after the newest batch and not after now', () => {
    const cron = '0 0 3 * * *';
    expect(scheduleDue(cron, undefined, new Date('2026-03-01T10:00:00Z'))).toBe(true);
    expect(scheduleDue(cron, '2026-03-01T03:00:05Z', new Date('2026-03-01T23:59:59Z'))).toBe(false);
    expect(scheduleDue(cron, '2026-03-01T03:00:05Z', new Date('2026-03-02T03:00:00Z'))).toBe(true);
    expect(scheduleDue(cron, '2026-03-01T02:59:00Z', new Date('2026-03-01T03:00:00Z'))).toBe(true);
  });

  it('the timer starts a scheduled transfer when due and not at the ticks in between', async () => {
    fx.t.queues.clear();
    // 'nightly' ran (first pass, never run before: due at once); new rows, but its next 03:00 has not come: not
    // due, while the transfer without a schedule of its own runs at every tick.
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(56, 60) n`);
    const s2 = await runTransferSchedule(fx.t.rt, context('transferTimer'), new Date());
    expect(s2.find((s) => s.transfer === 'nightly')).toEqual({ transfer: 'nightly', action: 'not_due' });
    expect(s2.find((s) => s.transfer === 'items')).toMatchObject({ action: 'created' });
    await pump();
    // At the next 03:00 it is.
    const next3 = new Date();
    next3.setUTCDate(next3.getUTCDate() + 1);
    next3.setUTCHours(3, 0, 0, 0);
    const s3 = await runTransferSchedule(fx.t.rt, context('transferTimer'), next3);
    expect(s3.find((s) => s.transfer === 'nightly')).toMatchObject({ action: 'created' });
    await pump();
    expect(await count('items_nightly')).toBe(60);
    expect(await count('items')).toBe(60);
  });

  it('a schedule that is not a six-field NCRONTAB is refused at startup, naming the field', async () => {
    const { loadTransfers } = await import('../../shared/transfer/config.js');
    const { transferEngineRules } = await import('../../shared/engines/registry.js');
    const env = {
      KEEL_TRANSFERS: JSON.stringify([
        {
          name: 'bad',
          source: { engine: 'postgres', connectionSetting: 'X', table: 'public.items' },
          target: { engine: 'postgres', connectionSetting: 'Y', table: 'public.items' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: cols,
          schedule: '0 3 * * *',
        },
      ]),
    };
    expect(() => loadTransfers(transferEngineRules(), env)).toThrow(/KEEL_TRANSFERS\[0\]\.schedule/);
  });
});

// Deletes for a transfer without change tracking (docs/transfer.md "Deletes"): the key sets of source and target
// compared per committed key window; reported, and deleted on the target when the transfer declares keyCompare
// 'apply'.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  createLane,
  insertSourceRows,
  LANE_WRITES_DDL,
  laneTransfer,
  makeService,
  ordersTransfer,
  ORDERS_DDL,
  setupDatabases,
  TARGET_DDL,
  type Env,
} from './helpers.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { KeyTuple } from '../../shared/transfer/types.js';

describe('key-set comparison per committed key window', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_keycmp');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 100);
  });
  afterAll(async () => {
    await env?.close();
  });

  it('reports the target keys gone at the source, then deletes exactly those', async () => {
    const apply = ordersTransfer('orders_kc', { batchSize: 30, keyCompare: 'apply' });
    const svc = makeService(env, [apply]);
    try {
      for (;;) {
        const b = await svc.tryCreateBatch(apply.name);
        if (!b) break;
        expect((await svc.run(b.batchId)).state).toBe('committed');
      }
      await env.source.query(`delete from public.orders where id in (5, 40, 41, 99)`);
      const report = await svc.compareKeys(apply.name, { apply: false });
      expect(report.windows).toHaveLength(4);
      expect(report.goneAtSource).toBe(4);
      expect(report.deleted).toBe(0);
      expect(report.windows.map((w) => w.sample)).toEqual([['5'], ['40', '41'], [], ['99']]);
      expect((await env.target.query(`select count(*)::int as n from public.orders`)).rows[0].n).toBe(100);

      const applied = await svc.compareKeys(apply.name, { apply: true });
      expect(applied.deleted).toBe(4);
      const r = await assertExactlyOnce(env);
      expect(r.target).toBe(96);
      // nothing left to find
      expect((await svc.compareKeys(apply.name, { apply: true })).goneAtSource).toBe(0);
    } finally {
      await svc.close();
    }
  });

  it('report only: apply is refused; and the configuration refuses windows that move with updates', async () => {
    const report = ordersTransfer('orders_kc2', { keyCompare: 'report' });
    const svc = makeService(env, [report]);
    try {
      const err = await svc.compareKeys(report.name, { apply: true }).catch((e: unknown) => e);
      expect(isTransferError(err, 'invalid_state'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/keyCompare report/);
    } finally {
      await svc.close();
    }
    expect(() =>
      ordersTransfer('orders_kc3', { boundary: { column: 'placed_at', kind: 'timestamp' }, keyCompare: 'report' }),
    ).toThrow(/keyCompare: compares key windows/);
    expect(() => ordersTransfer('orders_kc4', { boundary: { kind: 'changes' }, keyCompare: 'apply' })).toThrow(
      /carries deletes itself/,
    );
    // a scheduled comparison needs keyCompare, and a valid NCRONTAB
    expect(() => ordersTransfer('orders_kc5', { keyCompareSchedule: '0 30 2 * * *' })).toThrow(
      /keyCompareSchedule: schedules a key-set comparison: set keyCompare/,
    );
    expect(() => ordersTransfer('orders_kc6', { keyCompare: 'report', keyCompareSchedule: 'daily' })).toThrow(
      /keyCompareSchedule: must be a six-field NCRONTAB/,
    );
    expect(
      ordersTransfer('orders_kc7', { keyCompare: 'report', keyCompareSchedule: '0 30 2 * * *' }).keyCompareSchedule,
    ).toBe('0 30 2 * * *');
  });

  // Another instance's replay of a window (a late row at the source) landing while the comparison reads that window:
  // a key the target holds must have been read at the source before the target had it, so the comparison reads the
  // target's keys first; read the other way round, the replayed row was in the target but not in the (older) source
  // read, and was deleted.
  it("a replay landing between the comparison's reads: the row it brought is not deleted", async () => {
    await env.target.query(LANE_WRITES_DDL);
    const table = 'kc_race';
    await createLane(env, table, 20);
    await env.source.query(`delete from public.kc_race where id = 15`);
    const t = laneTransfer(table, { batchSize: 10, keyCompare: 'apply' });
    const op = makeService(env, [t]); // the other instance: commits the windows, then replays one
    let sourceRead: Promise<KeyTuple[]> | null = null;
    let replayed = false;
    const cmp = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => {
        const source = new PostgresTransferSource(tc, env.source);
        const target = new PostgresTransferTarget(tc, env.target);
        const readSource = source.windowKeys.bind(source);
        source.windowKeys = (w, schema) => (sourceRead = readSource(w, schema));
        const readTarget = target.windowKeys.bind(target);
        target.windowKeys = async (w, schema) => {
          if (w.low !== null && !replayed) {
            replayed = true;
            await sourceRead; // a source read already sent finishes before the replay
            await insertSourceRows(env.source, 15, 15, `public.${table}`);
            const { batch } = await op.replay(t.name, w.low, w.high, false);
            expect((await op.run(batch!.batchId)).state).toBe('committed');
          }
          return readTarget(w, schema);
        };
        return { source, target };
      },
    });
    try {
      for (;;) {
        const b = await op.tryCreateBatch(t.name);
        if (!b) break;
        expect((await op.run(b.batchId)).state).toBe('committed');
      }
      const report = await cmp.compareKeys(t.name, { apply: true });
      expect(replayed).toBe(true);
      expect(report.deleted).toBe(0);
      const row = await env.target.query(`select count(*)::int as n from public.kc_race where id = 15`);
      expect(row.rows[0].n).toBe(1);
      // A key gone at the source is still found and deleted.
      await env.source.query(`delete from public.kc_race where id = 3`);
      expect((await cmp.compareKeys(t.name, { apply: true })).deleted).toBe(1);
    } finally {
      await cmp.close();
      await op.close();
    }
  });
});

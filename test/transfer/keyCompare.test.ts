// Deletes for a transfer without change tracking (docs/transfer.md "Deletes"): the key sets of source and target
// compared per committed key window; reported, and deleted on the target when the transfer declares keyCompare
// 'apply'.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  insertSourceRows,
  makeService,
  ordersTransfer,
  ORDERS_DDL,
  setupDatabases,
  TARGET_DDL,
  type Env,
} from './helpers.js';
import { isTransferError } from '../../shared/transfer/errors.js';

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
});

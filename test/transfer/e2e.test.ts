// End to end PostgreSQL -> PostgreSQL (two separate databases, journal in a third).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  insertSourceRows,
  makeService,
  ordersTransfer,
  setupDatabases,
  TARGET_DDL,
  ORDERS_DDL,
  type Env,
} from './helpers.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import type { TransferService } from '../../shared/transfer/service.js';
import pg from 'pg';
import { createTestDatabase } from '../support/pg.js';
import { composeTransferService } from '../../shared/app/transferAdapters.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';

describe('transfer end to end, PostgreSQL -> PostgreSQL', () => {
  let env: Env;
  let svc: TransferService;
  const envUrls = () => ({ source: env.sourceUrl });
  const envPools = () => ({ control: env.control });
  const t = ordersTransfer('orders_e2e', { batchSize: 700, chunkSize: 128 });

  beforeAll(async () => {
    env = await setupDatabases('tr_e2e');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 2000);
    svc = makeService(env, [t]);
  });
  afterAll(async () => {
    await svc?.close();
    await env?.close();
  });

  it('extracts, stages and applies consecutive windows; re-applying is a no-op', async () => {
    const b1 = await svc.createBatch(t.name);
    expect(b1.state).toBe('extracting');
    expect(b1.status).toBe('incomplete');
    expect(b1.boundary).toEqual({ kind: 'key', low: null, high: '700' });
    expect(b1.rowCount).toBe(700);
    expect(b1.checksum).toMatch(/^pg2:\d+$/); // PostgreSQL 14+ -> PostgreSQL 14+ uses keel-pg2

    // A second batch while one is open is refused.
    await expect(svc.createBatch(t.name)).rejects.toSatisfy((e) => isTransferError(e, 'open_batch_exists'));

    const r1 = await svc.run(b1.batchId);
    expect(r1.state).toBe('committed');
    expect(r1.status).toBe('committed');
    expect(r1.appliedCount).toBe(700);
    expect(r1.stagedChecksum).toBe(b1.checksum);
    expect(r1.nextAction).toMatch(/Nothing to do/);

    // Running again: nothing happens; the target says 'already committed' if asked directly.
    expect((await svc.run(b1.batchId)).state).toBe('committed');

    let next = await svc.createBatch(t.name);
    expect(next.boundary.low).toBe('700');
    while (true) {
      const done = await svc.run(next.batchId);
      expect(done.state).toBe('committed');
      const more = await svc.tryCreateBatch(t.name);
      if (!more) break;
      next = more;
    }
    await expect(svc.createBatch(t.name)).rejects.toSatisfy((e) => isTransferError(e, 'nothing_to_transfer'));
    const check = await assertExactlyOnce(env);
    expect(check).toEqual({ source: 2000, target: 2000, maxWrites: 1 });

    // New rows arrive and the next window picks them up.
    await insertSourceRows(env.source, 2001, 2100);
    const b = await svc.createBatch(t.name);
    expect(b.boundary).toMatchObject({ low: '2000', high: '2100' });
    expect((await svc.run(b.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(2100);

    const detail = await svc.getBatch(b1.batchId);
    expect(detail?.events.map((e) => e.event)).toEqual([
      'created',
      'manifest_recorded',
      'staged',
      'apply_started',
      'applied',
    ]);
    const list = await svc.listBatches({ transfer: t.name, limit: 2 });
    expect(list).toHaveLength(2);
    const page2 = await svc.listBatches({ transfer: t.name, limit: 10, afterId: list[1]!.batchId });
    expect(page2.length).toBeGreaterThan(0);
    expect(page2.map((p) => p.batchId)).not.toContain(list[0]!.batchId);
    expect(svc.listTransfers()[0]).toMatchObject({ name: t.name, boundary: { column: 'id', kind: 'key' } });

    // Staged rows of committed batches are purged.
    const stg = await env.target.query(`select count(*)::int as n from keel_transfer.stg_orders_e2e`);
    expect(stg.rows[0].n).toBe(0);
  });

  it('wires from app settings: KEEL_TRANSFERS, connection settings, target objects migrated on first use', async () => {
    const freshTarget = await createTestDatabase('tr_e2e_wired');
    const tp = new pg.Pool({ connectionString: freshTarget, max: 1 });
    await tp.query(TARGET_DDL);
    await tp.end();
    const env = {
      WIRED_SRC: envUrls().source,
      WIRED_TGT: freshTarget,
      KEEL_TRANSFERS: JSON.stringify([
        {
          name: 'wired',
          source: { engine: 'postgres', connectionSetting: 'WIRED_SRC', table: 'public.orders' },
          target: { engine: 'postgres', connectionSetting: 'WIRED_TGT', table: 'public.orders' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'].map((c) => ({
            source: c,
            target: c,
          })),
        },
      ]),
    };
    expect(() =>
      composeTransferService(new PostgresTransferJournal(envPools().control), { ...env, WIRED_TGT: undefined }),
    ).toThrow(/wired\.target\.connectionSetting: app setting WIRED_TGT is not set/);
    const wired = composeTransferService(new PostgresTransferJournal(envPools().control), env)!;
    const b = await wired.service.createBatch('wired');
    const v = await wired.service.run(b.batchId);
    expect(v.state).toBe('committed');
    expect(v.appliedCount).toBe(2100);
    await wired.service.close();
  });
});

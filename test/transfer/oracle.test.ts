// Oracle target: KEEL_TRANSFER objects migrated on a real server, PostgreSQL -> Oracle end to end, two appliers
// racing, and reconcile through TRY_CLAIM (and Transaction Guard when the service has COMMIT_OUTCOME).
// Runs when KEEL_TEST_ORACLE_URL (oracle://user:password@host:1521/service) is set, e.g. CI's gvenzl/oracle-free
// service container; skipped otherwise.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import path from 'node:path';
import pg from 'pg';
import oracledb from 'oracledb';
import { randomBytes } from 'node:crypto';
import { createOraclePool, OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { migrateOracleTarget, splitOracleBlocks } from '../../shared/engines/oracle/transferMigrate.js';
import { readMigrationFiles, readRepeatableFiles } from '../../shared/engines/migrationFiles.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createTestDatabase } from '../support/pg.js';
import { insertSourceRows, migrateJournal, ORDERS_DDL } from './helpers.js';

const TRANSFER_RULES = transferEngineRules();

const URL_ = process.env.KEEL_TEST_ORACLE_URL;

describe('Oracle migration files (no server needed)', () => {
  it('sql/oracle splits into whole PL/SQL units, each keeping its final semicolon', async () => {
    const dir = path.resolve(import.meta.dirname, '../../sql/oracle');
    const files = [...(await readMigrationFiles(dir)), ...(await readRepeatableFiles(dir))];
    expect(files.map((f) => f.file)).toEqual(['V001__keel_transfer.sql', 'R__010_keel_transfer_package.sql']);
    const blocks = files.flatMap((f) => splitOracleBlocks(f.text));
    const first = (b: string) =>
      b
        .split('\n')
        .filter((l) => !l.trim().startsWith('--') && l.trim() !== '')[0]!
        .trim();
    expect(blocks.map(first)).toEqual([
      'DECLARE',
      'DECLARE',
      'CREATE OR REPLACE PACKAGE KEEL_TRANSFER AUTHID CURRENT_USER AS',
      'CREATE OR REPLACE PACKAGE BODY KEEL_TRANSFER AS',
    ]);
    for (const b of blocks) expect(b.trimEnd().endsWith(';')).toBe(true);
  });
});
const suite = URL_ ? describe : describe.skip;
const title = URL_ ? 'Oracle transfer target' : 'Oracle transfer target (skipped: KEEL_TEST_ORACLE_URL is not set)';

suite(title, () => {
  let pool: oracledb.Pool;
  let source: pg.Pool;
  let control: pg.Pool;
  const table = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
  const name = `ora_${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    pool = await createOraclePool(URL_!);
    const c = await pool.getConnection();
    try {
      await migrateOracleTarget(c, path.resolve(import.meta.dirname, '../../sql/oracle'));
      await c.execute(`CREATE TABLE "${table}" ("ID" NUMBER(19) PRIMARY KEY, "CUSTOMER" VARCHAR2(200), "AMOUNT" NUMBER(12,2),
        "PLACED_AT" TIMESTAMP(6) WITH TIME ZONE, "FLAG" NUMBER(1), "NOTE" VARCHAR2(200), "PAYLOAD" RAW(16))`);
    } finally {
      await c.close();
    }
    source = new pg.Pool({ connectionString: await createTestDatabase('tr_ora_src'), max: 3 });
    control = new pg.Pool({ connectionString: await createTestDatabase('tr_ora_ctl'), max: 3 });
    await migrateJournal(control);
    await source.query(ORDERS_DDL);
    // Oracle stores '' as NULL, so the source has no empty strings here (the adapter refuses them explicitly).
    await insertSourceRows(source, 1, 900);
  });
  afterAll(async () => {
    const c = await pool?.getConnection();
    if (c) {
      await c.execute(`DROP TABLE "${table}" PURGE`).catch(() => undefined);
      await c.execute(`DROP TABLE "KEEL_STG_${name.toUpperCase()}" PURGE`).catch(() => undefined);
      await c.close();
    }
    await pool?.close(0);
    await source?.end();
    await control?.end();
  });

  function service() {
    const [t] = parseTransfers(
      [
        {
          name,
          source: { engine: 'postgres', connectionSetting: 'X', table: 'public.orders' },
          target: {
            engine: 'oracle',
            connectionSetting: 'Y',
            table,
            transactionGuard: process.env.KEEL_TEST_ORACLE_TG === '1',
          },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'].map((c) => ({
            source: c,
            target: c.toUpperCase(),
          })),
          batchSize: 400,
          chunkSize: 150,
          reconcileWaitMs: 1000,
        },
      ],
      TRANSFER_RULES,
    );
    const target = new OracleTransferTarget(t!, pool);
    const svc = new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t!],
      connect: (tc) => ({ source: new PostgresTransferSource(tc, source), target }),
    });
    return { t: t!, svc, target };
  }

  it('PostgreSQL -> Oracle end to end; re-apply is a no-op', async () => {
    const { svc, target, t } = service();
    let n = 0;
    for (;;) {
      const b = await svc.tryCreateBatch(name);
      if (!b) break;
      const v = await svc.run(b.batchId);
      expect(v.state, v.lastError ?? '').toBe('committed');
      n += v.appliedCount ?? 0;
      const detail = (await svc.getBatch(b.batchId))!;
      const again = await target.apply(
        {
          batchId: b.batchId,
          transfer: t.name,
          manifest: { rowCount: b.rowCount!, checksum: b.checksum! },
          schema: { columns: detail.schemaColumns, hash: detail.schemaHash },
        },
        { attempt: 2 },
      );
      expect(again.outcome).toBe('already_committed');
    }
    expect(n).toBe(900);
    const c = await pool.getConnection();
    try {
      const r = await c.execute<[number]>(`SELECT COUNT(*) FROM "${table}"`, [], {
        outFormat: oracledb.OUT_FORMAT_ARRAY,
      });
      expect(Number(r.rows![0]![0])).toBe(900);
    } finally {
      await c.close();
    }
  });

  it('two appliers race: exactly one applies; reconcile reads the outcome', async () => {
    await insertSourceRows(source, 901, 1200);
    const { svc, target, t } = service();
    const b = await svc.createBatch(name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    const detail = (await svc.getBatch(b.batchId))!;
    const req = {
      batchId: b.batchId,
      transfer: t.name,
      manifest: { rowCount: b.rowCount!, checksum: b.checksum! },
      schema: { columns: detail.schemaColumns, hash: detail.schemaHash },
    };
    const other = new OracleTransferTarget(t, pool);
    await other.prepare(req.schema);
    const results = await Promise.all([target.apply(req, { attempt: 1 }), other.apply(req, { attempt: 1 })]);
    expect(results.map((r) => r.outcome).sort()).toEqual(['already_committed', 'applied']);
    const rec = await target.reconcile(req, 1000, 1, null);
    expect(rec).toMatchObject({ outcome: 'committed', rowCount: b.rowCount });
  });

  it('a "not applied" verdict is final: TRY_CLAIM fences the attempts so far, a later attempt may still apply', async () => {
    await insertSourceRows(source, 1201, 1300);
    const { svc, target, t } = service();
    const b = await svc.createBatch(name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    const detail = (await svc.getBatch(b.batchId))!;
    const req = {
      batchId: b.batchId,
      transfer: t.name,
      manifest: { rowCount: b.rowCount!, checksum: b.checksum! },
      schema: { columns: detail.schemaColumns, hash: detail.schemaHash },
    };
    expect(await target.reconcile(req, 1000, 1, null)).toMatchObject({ outcome: 'not_applied', staged: true });
    // Attempt 1 arrives after the verdict (a call that was still on its way): refused, nothing applied.
    await expect(target.apply(req, { attempt: 1 })).rejects.toSatisfy((e) => isTransferError(e, 'attempt_fenced'));
    expect(await target.reconcile(req, 1000, 1, null)).toMatchObject({ outcome: 'not_applied' });
    // The retry is attempt 2: it takes the fence over and commits.
    expect((await target.apply(req, { attempt: 2 })).outcome).toBe('applied');
    expect(await target.reconcile(req, 1000, 2, null)).toMatchObject({ outcome: 'committed', rowCount: b.rowCount });
  });

  it('a target table without a key on the mapped key columns is refused at prepare', async () => {
    const { t } = service();
    const loose = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
    const c = await pool.getConnection();
    try {
      await c.execute(`CREATE TABLE "${loose}" ("ID" NUMBER(19), "CUSTOMER" VARCHAR2(200), "AMOUNT" NUMBER(12,2),
        "PLACED_AT" TIMESTAMP(6) WITH TIME ZONE, "FLAG" NUMBER(1), "NOTE" VARCHAR2(200), "PAYLOAD" RAW(16))`);
      const detail = await new PostgresTransferSource(t, source).readSchema();
      const target = new OracleTransferTarget({ ...t, target: { ...t.target, table: loose } }, pool);
      await expect(target.prepare(detail)).rejects.toSatisfy((e) => isTransferError(e, 'target_incompatible'));
    } finally {
      await c.execute(`DROP TABLE "${loose}" PURGE`).catch(() => undefined);
      await c.close();
    }
  });
});

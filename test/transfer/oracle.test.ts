// Oracle target, beyond the target adapter contract every target meets (test/contract/targetAdapterContract.ts, run
// by test/engines/oracle.targetAdapter.test.ts): how sql/oracle splits into PL/SQL units, and a target table without
// a key refused at prepare, and (KEEL_TEST_ORACLE_TG=1, the workflow's keel_tg service) that Transaction Guard is really
// on: without COMMIT_OUTCOME the adapter silently records no LTXID and the TG runs would test TRY_CLAIM alone.
// Runs when KEEL_TEST_ORACLE_URL (oracle://user:password@host:1521/service) is set, e.g. CI's gvenzl/oracle-free
// service container; skipped otherwise.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import path from 'node:path';
import pg from 'pg';
import oracledb from 'oracledb';
import { randomBytes, randomUUID } from 'node:crypto';
import { createOraclePool } from '../../shared/engines/oracle/session.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { migrateOracleTarget, splitOracleBlocks } from '../../shared/engines/oracle/transferMigrate.js';
import { readMigrationFiles, readRepeatableFiles } from '../../shared/engines/migrationFiles.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { createTestDatabase } from '../support/pg.js';
import { insertSourceRows, ORDERS_DDL } from './helpers.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { TransferService } from '../../shared/transfer/service.js';
import { migrateJournal } from '../support/journalMigrations.js';

const TRANSFER_RULES = transferEngineRules();

const URL_ = process.env.KEEL_TEST_ORACLE_URL;

describe('Oracle migration files (no server needed)', () => {
  it('sql/oracle splits into whole PL/SQL units, each keeping its final semicolon', async () => {
    const dir = path.resolve(import.meta.dirname, '../../sql/oracle');
    const files = [...(await readMigrationFiles(dir)), ...(await readRepeatableFiles(dir))];
    expect(files.map((f) => f.file)).toEqual([
      'V001__keel_transfer.sql',
      'V002__keel_transfer_changes.sql',
      'R__010_keel_transfer_package.sql',
    ]);
    const blocks = files.flatMap((f) => splitOracleBlocks(f.text));
    const first = (b: string) =>
      b
        .split('\n')
        .filter((l) => !l.trim().startsWith('--') && l.trim() !== '')[0]!
        .trim();
    expect(blocks.map(first)).toEqual([
      'DECLARE',
      'DECLARE',
      'DECLARE', // V002: KEEL_TRANSFER_COMPLETIONS.DELETED_COUNT
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
  const table = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
  const name = `ora_${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    pool = await createOraclePool(URL_!);
    const c = await pool.getConnection();
    try {
      await migrateOracleTarget(c, path.resolve(import.meta.dirname, '../../sql/oracle'));
      await c.execute(`CREATE TABLE "${table}" ("ID" NUMBER(19) PRIMARY KEY, "CUSTOMER" CLOB, "AMOUNT" NUMBER(12,2),
        "PLACED_AT" TIMESTAMP(6) WITH TIME ZONE, "FLAG" NUMBER(1), "NOTE" VARCHAR2(200 CHAR), "PAYLOAD" BLOB)`);
    } finally {
      await c.close();
    }
    source = new pg.Pool({ connectionString: await createTestDatabase('tr_ora_src'), max: 3 });
    await source.query(ORDERS_DDL);
    // Oracle stores '' as NULL, so the source has no empty strings here (the adapter refuses them explicitly).
    await insertSourceRows(source, 1, 10);
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
  });

  function transfer() {
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
    return t!;
  }

  it("a windowed baseline: APPLY_BATCH mirrors each key window's range only, in its transaction", async () => {
    // A 'changes' transfer from the twin's change capture: even keys 2..60 in key windows of 8; target-only keys
    // below, inside two windows' ranges and past the last key are deleted by the window of their range.
    const wt = `KEEL_W_${randomBytes(4).toString('hex').toUpperCase()}`;
    const wname = `oraw_${randomBytes(3).toString('hex')}`;
    const control = new pg.Pool({ connectionString: await createTestDatabase('tr_ora_wctl'), max: 2 });
    const src = new pg.Pool({ connectionString: await createTestDatabase('tr_ora_wsrc'), max: 2 });
    const c = await pool.getConnection();
    try {
      await migrateJournal(control);
      await migratePostgresChangeCapture(src);
      await src.query(`create table public.w (id bigint primary key, name varchar(10) not null)`);
      await src.query(`insert into public.w select 2 * n, 'n' || n from generate_series(1, 30) n`);
      await src.query(`select keel_changes.enable('public.w', array['id'])`);
      await c.execute(`CREATE TABLE "${wt}" ("ID" NUMBER(19) PRIMARY KEY, "NAME" VARCHAR2(10 CHAR) NOT NULL)`);
      for (const k of [-7, 9, 17, 1000])
        await c.execute(`INSERT INTO "${wt}" ("ID", "NAME") VALUES (:k, 'stale')`, { k });
      await c.commit();
      const [t] = parseTransfers(
        [
          {
            name: wname,
            source: { engine: 'postgres', connectionSetting: 'X', table: 'public.w' },
            target: { engine: 'oracle', connectionSetting: 'Y', table: wt },
            keyColumns: ['id'],
            boundary: { kind: 'changes' },
            columns: ['id', 'name'].map((col) => ({ source: col, target: col.toUpperCase() })),
            batchSize: 8,
          },
        ],
        TRANSFER_RULES,
      );
      const svc = new TransferService({
        journal: new PostgresTransferJournal(control),
        transfers: [t!],
        connect: (tc) => ({ source: new PostgresTransferSource(tc, src), target: new OracleTransferTarget(tc, pool) }),
      });
      try {
        const deleted: (number | null)[] = [];
        for (let i = 0; i < 20; i++) {
          const b = await svc.tryCreateBatch(t!.name);
          if (!b) break;
          const v = await svc.run(b.batchId);
          expect(v.state, v.lastError ?? '').toBe('committed');
          const r = await c.execute<[number | null]>(
            `SELECT DELETED_COUNT FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = :b`,
            { b: b.batchId },
          );
          deleted.push(r.rows![0]![0]);
          if (i === 0) await src.query(`delete from public.w where id = 4`); // mirrored already
        }
        // windows 2-16, 18-32, 34-48, 50-60 (open above), then the change window (the delete of 4)
        expect(deleted).toEqual([2, 1, 0, 1, 1]);
        const ids = await c.execute<[number]>(`SELECT "ID" FROM "${wt}" ORDER BY "ID"`);
        expect(ids.rows!.map((r) => r[0])).toEqual(
          Array.from({ length: 30 }, (_, i) => 2 * (i + 1)).filter((k) => k !== 4),
        );
      } finally {
        await svc.close();
      }
    } finally {
      await c.execute(`DROP TABLE "${wt}" PURGE`).catch(() => undefined);
      await c.execute(`DROP TABLE "KEEL_STG_${wname.toUpperCase()}" PURGE`).catch(() => undefined);
      await c.close();
      await control.end();
      await src.end();
    }
  });

  it('a target table without a key on the mapped key columns is refused at prepare', async () => {
    const t = transfer();
    const loose = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
    const c = await pool.getConnection();
    try {
      await c.execute(`CREATE TABLE "${loose}" ("ID" NUMBER(19), "CUSTOMER" CLOB, "AMOUNT" NUMBER(12,2),
        "PLACED_AT" TIMESTAMP(6) WITH TIME ZONE, "FLAG" NUMBER(1), "NOTE" VARCHAR2(200 CHAR), "PAYLOAD" BLOB)`);
      const detail = await new PostgresTransferSource(t, source).readSchema();
      const target = new OracleTransferTarget({ ...t, target: { ...t.target, table: loose } }, pool);
      await expect(target.prepare(detail)).rejects.toSatisfy((e) => isTransferError(e, 'target_incompatible'));
    } finally {
      await c.execute(`DROP TABLE "${loose}" PURGE`).catch(() => undefined);
      await c.close();
    }
  });

  it.runIf(process.env.KEEL_TEST_ORACLE_TG === '1')(
    'Transaction Guard (KEEL_TEST_ORACLE_TG=1): the service hands out an LTXID, apply records it as the reconcile token, and GET_LTXID_OUTCOME on another session says committed',
    async () => {
      const t = transfer();
      expect(t.target.transactionGuard).toBe(true);
      const src = new PostgresTransferSource(t, source);
      const schema = await src.readSchema();
      const w = { kind: 'key' as const, low: null, high: '10' };
      const manifest = await src.manifest(w, schema, 'keel-v1');
      const target = new OracleTransferTarget(t, pool);
      await target.prepare(schema);
      const req = { batchId: randomUUID(), transfer: t.name, manifest, schema };
      expect((await target.stage(req, { kind: 'rows', rows: src.streamRows(w, schema, 4) })).outcome).toBe('staged');
      let token: string | null = null;
      const r = await target.apply(req, {
        attempt: 1,
        onReconcileToken: async (tk) => {
          token = tk;
        },
      });
      expect(r).toMatchObject({ outcome: 'applied', rowCount: 10 });
      expect(token).toMatch(/^[0-9a-f]{20,}$/); // an LTXID: the service has COMMIT_OUTCOME
      // Asked on a session of another pool (never the one that committed it, which would fail with ORA-14906).
      const other = await createOraclePool(URL_!);
      try {
        const c = await other.getConnection();
        try {
          const out = await c.execute<{ o: number }>(
            `DECLARE committed BOOLEAN; completed BOOLEAN;
             BEGIN DBMS_APP_CONT.GET_LTXID_OUTCOME(HEXTORAW(:l), committed, completed);
               :o := CASE WHEN committed THEN 1 ELSE 0 END; END;`,
            { l: token, o: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER } },
          );
          expect(out.outBinds!.o).toBe(1);
        } finally {
          await c.close();
        }
      } finally {
        await other.close(0);
      }
      await target.close();
    },
  );
});

// Oracle target pieces that need no server (the real-server suite is test/transfer/oracle.test.ts, run where
// KEEL_TEST_ORACLE_URL is set): the pool's session callback (version floor, identifier length, NLS once per session
// instead of on every checkout), DEFAULT ON NULL target columns refused before anything is staged, and the
// SQL's bounded waits, LISTAGG-free staging check and self-repairing staging table. Reconcile and data errors:
// test/transfer/oracleReconcile.test.ts.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type oracledb from 'oracledb';
import { toCanonical } from '../../shared/engines/oracle/canonical.js';
import { KEEL_SESSION_SQL, KEEL_SESSION_TAG, oracleSessionCallback } from '../../shared/engines/oracle/session.js';
import { OracleTransferTarget, ORACLE_LOCK_WAIT_SECONDS } from '../../shared/engines/oracle/transferTarget.js';
import type { LogicalType } from '../../shared/transfer/checksum.js';
import { TransferError } from '../../shared/transfer/errors.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { FakeOracle, oraError } from './oracleFake.js';

function fakeSession(version: number, versionString: string) {
  const executed: string[] = [];
  const conn = {
    tag: '',
    oracleServerVersion: version,
    oracleServerVersionString: versionString,
    execute: async (sql: string) => {
      executed.push(sql);
      return {};
    },
  };
  return { conn, executed };
}

const run = (conn: Parameters<typeof oracleSessionCallback>[0]) =>
  new Promise<Error | undefined>((resolve) => oracleSessionCallback(conn, KEEL_SESSION_TAG, (err) => resolve(err)));

describe('Oracle target without a server', () => {
  it('sets a new session up once (NLS) and tags it, so the pool skips the callback on later checkouts', async () => {
    const { conn, executed } = fakeSession(1903000000, '19.3.0.0.0');
    expect(await run(conn as never)).toBeUndefined();
    expect(executed).toEqual([KEEL_SESSION_SQL]);
    expect(conn.tag).toBe(KEEL_SESSION_TAG);
  });

  it('refuses a server older than 12.2, saying which version is needed', async () => {
    const { conn, executed } = fakeSession(1201000200, '12.1.0.2.0');
    const err = await run(conn as never);
    expect(err?.message).toMatch(
      /Oracle 12\.1\.0\.2\.0 is not supported as a transfer target: Keel needs 12\.2 or later/,
    );
    expect(executed).toEqual([]);
  });

  it('refuses a server whose identifiers are limited to 30 bytes (COMPATIBLE below 12.2)', async () => {
    const { conn, executed } = fakeSession(1903000000, '19.3.0.0.0');
    const err = await run({ ...conn, maxIdentifierLength: 30 } as never);
    expect(err?.message).toMatch(/allows identifiers of 30 bytes \(COMPATIBLE below 12\.2\): Keel needs 128/);
    expect(executed).toEqual([]);
    expect(await run({ ...fakeSession(1903000000, '19.3.0.0.0').conn, maxIdentifierLength: 128 } as never)).toBe(
      undefined,
    );
  });

  it('refuses a DEFAULT ON NULL target column (it would replace a verified NULL) and a name DBMS_ASSERT refuses', async () => {
    const fake = new FakeOracle();
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N', 'NO'],
      ['NOTE', 'VARCHAR2', null, null, 100, 100, 'B', 'Y', 'YES'],
    ];
    const t = {
      name: 'notes',
      source: { engine: 'postgres', connectionSetting: 'S', table: 'public.notes' },
      target: { engine: 'oracle', connectionSetting: 'T', table: 'NOTES' },
      keyColumns: ['id'],
      boundary: { column: 'id', kind: 'key' },
      columns: [
        { source: 'id', target: 'ID' },
        { source: 'note', target: 'NOTE' },
      ],
      chunkSize: 100,
    } as unknown as TransferConfig;
    const schema = {
      columns: [
        { name: 'id', type: 'bigint', logical: 'int', nullable: false },
        { name: 'note', type: 'text', logical: 'text', nullable: true },
      ],
    };
    const err = await new OracleTransferTarget(t, fake.pool).prepare(schema as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransferError);
    expect((err as TransferError).code).toBe('target_incompatible');
    expect((err as TransferError).message).toMatch(/target column NOTE is declared DEFAULT ON NULL/);
    expect(fake.callsOf('ENSURE_STAGING')).toEqual([]);

    // A name DBMS_ASSERT refuses (ORA-44003) can never pass: target_incompatible, not a retried error.
    fake.columns = fake.columns.map((r) => [...r.slice(0, 8), 'NO']);
    fake.failNext.set('ENSURE_STAGING', oraError(44003, 'invalid SQL name'));
    const named = await new OracleTransferTarget(t, fake.pool).prepare(schema as never).catch((e: unknown) => e);
    expect((named as TransferError).code).toBe('target_incompatible');
    expect((named as TransferError).message).toMatch(/not a simple Oracle SQL name .*ORA-44003/);
  });

  it('checks out connections with the session tag and runs no ALTER SESSION itself', async () => {
    const requested: unknown[] = [];
    const executed: string[] = [];
    const pool = {
      getConnection: async (opts?: unknown) => {
        requested.push(opts);
        return {
          callTimeout: 0,
          execute: async (sql: string) => {
            executed.push(sql);
            if (/all_tab_columns/.test(sql))
              return {
                rows: [
                  ['ID', 'NUMBER', 0],
                  ['DATA', 'BLOB', null],
                ],
              };
            return { rows: [] };
          },
          close: async () => undefined,
        };
      },
    } as unknown as oracledb.Pool;
    const t = {
      name: 'files',
      source: { engine: 'postgres', connectionSetting: 'S', table: 'public.files' },
      target: { engine: 'oracle', connectionSetting: 'T', table: 'FILES' },
      keyColumns: ['id'],
      boundary: { column: 'id', kind: 'key' },
      columns: [
        { source: 'id', target: 'ID' },
        { source: 'data', target: 'DATA' },
      ],
      chunkSize: 100,
    } as unknown as TransferConfig;
    const target = new OracleTransferTarget(t, pool);
    const schema = {
      columns: [
        { name: 'id', type: 'bigint', logical: 'int', nullable: false },
        { name: 'data', type: 'bytea', logical: 'bytes', nullable: true },
      ],
    };
    const err = await target.prepare(schema as never).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TransferError);
    expect((err as TransferError).code).toBe('target_incompatible');
    // A BLOB column is taken (bytes travel as Buffers); this pool knows no key, so prepare stops at the key check.
    expect((err as TransferError).message).toMatch(/target table FILES needs a primary key/);
    expect(requested).toEqual([{ tag: KEEL_SESSION_TAG }]);
    expect(executed.some((s) => /ALTER SESSION/i.test(s))).toBe(false);
  });

  it("reads back NULL as NULL: every readback that appends a suffix with || guards NULL first (Oracle's NULL || 'Z' is 'Z')", () => {
    const cases: [LogicalType, string][] = [
      ['int', 'NUMBER'],
      ['decimal', 'NUMBER'],
      ['float', 'BINARY_DOUBLE'],
      ['float', 'NUMBER'],
      ['text', 'VARCHAR2'],
      ['text', 'CHAR'],
      ['bool', 'NUMBER'],
      ['bool', 'BOOLEAN'],
      ['date', 'DATE'],
      ['timestamp', 'TIMESTAMP(6)'],
      ['timestamp', 'DATE'],
      ['timestamptz', 'TIMESTAMP(6) WITH TIME ZONE'],
      ['bytes', 'RAW'],
      ['bytes', 'BLOB'],
      ['uuid', 'RAW'],
      ['uuid', 'VARCHAR2'],
    ];
    const suffixed = cases.map(([l, d]) => toCanonical('"C"', l, d)).filter((sql) => sql.includes('||'));
    expect(suffixed.length).toBe(2); // DATE for a timestamp, and timestamptz
    for (const sql of suffixed) expect(sql).toMatch(/^CASE WHEN "C" IS NOT NULL THEN .* END$/);
  });

  it('the target SQL bounds the apply lock wait and builds column lists without LISTAGG', () => {
    const sql = readFileSync(
      path.resolve(import.meta.dirname, '../../sql/oracle/R__010_keel_transfer_package.sql'),
      'utf8',
    ).replace(/--[^\n]*/g, '');
    expect(sql).not.toMatch(/LISTAGG/i);
    expect(sql).not.toMatch(/FOR UPDATE\s*;/i); // every row lock waits a bounded time
    expect(sql).toContain(`FOR UPDATE WAIT ${ORACLE_LOCK_WAIT_SECONDS};`);
  });

  it('ENSURE_STAGING creates KEEL_BATCH_ID NOT NULL in the CTAS itself, and checks index and NOT NULL on every call', () => {
    const sql = readFileSync(
      path.resolve(import.meta.dirname, '../../sql/oracle/R__010_keel_transfer_package.sql'),
      'utf8',
    ).replace(/--[^\n]*/g, '');
    const body = /PROCEDURE ENSURE_STAGING[\s\S]*?END ENSURE_STAGING;/.exec(sql.slice(sql.indexOf('PACKAGE BODY')))![0];
    // One statement creates the column with its constraint (a racing loser never sees the table without it).
    expect(body).toMatch(/'CREATE TABLE ' \|\| [^;]*' \(KEEL_BATCH_ID NOT NULL, '/);
    // The early return of the old fast path skipped the repair: the repair now follows the creation branch, which
    // has no RETURN, so an existing table whose index a raced DDL left out (ORA-00054) is repaired on the next call.
    expect(body).not.toMatch(/\bRETURN\s*;/);
    const created = body.indexOf("'CREATE TABLE '");
    expect(body.indexOf('FROM ALL_INDEXES', created)).toBeGreaterThan(created);
    expect(body.indexOf("COLUMN_NAME = 'KEEL_BATCH_ID'", created)).toBeGreaterThan(created);
    expect(body).toMatch(/WHEN e_ddl_busy OR e_exists THEN NULL/);
  });

  // Staging tables, the KEEL_TRANSFER_* tables and an unqualified target table are named unqualified, so they live in
  // the session's CURRENT_SCHEMA (a logon trigger may set it apart from the login). A dictionary read through USER_*
  // views or owner = USER looks in the login's schema instead: ENSURE_STAGING then found no staging table on every
  // call (CREATE, ORA-00955, -20004: every prepare refused), and prepare checked the types and key of another
  // schema's table (or none) than the one the MERGE writes.
  it("reads the dictionary in the session's current schema, never the login's (USER_* views, owner = USER)", () => {
    const files = [
      ...['R__010_keel_transfer_package.sql', 'V001__keel_transfer.sql', 'V002__keel_transfer_changes.sql'].map((f) =>
        path.resolve(import.meta.dirname, '../../sql/oracle', f),
      ),
      ...['transferTarget.ts', 'transferMigrate.ts', 'transferEndpoints.ts', 'canonical.ts', 'session.ts'].map((f) =>
        path.resolve(import.meta.dirname, '../../shared/engines/oracle', f),
      ),
    ];
    const found: string[] = [];
    let dictionaryReads = 0;
    for (const file of files) {
      const code = readFileSync(file, 'utf8').replace(/(--|\/\/)[^\n]*/g, '');
      for (const m of code.matchAll(/\bUSER_[A-Z_]+\b|NVL\([^()]*,\s*USER\s*\)|=\s*USER\b(?!ENV)/gi))
        found.push(`${path.basename(file)}: ${m[0]}`);
      dictionaryReads += [...code.matchAll(/\bALL_(TAB_COLUMNS|INDEXES|CONSTRAINTS|OBJECTS|ERRORS)\b/gi)].length;
    }
    expect(found).toEqual([]);
    expect(dictionaryReads).toBeGreaterThanOrEqual(8); // not vacuous: the reads are there, in ALL_* views
  });

  it('APPLY_BATCH builds its MERGE in a CLOB, so wide mappings do not overflow 32,767 bytes', () => {
    const sql = readFileSync(
      path.resolve(import.meta.dirname, '../../sql/oracle/R__010_keel_transfer_package.sql'),
      'utf8',
    );
    const body = /PROCEDURE APPLY_BATCH[\s\S]*?END APPLY_BATCH;/.exec(sql.slice(sql.indexOf('PACKAGE BODY')))![0];
    expect(body).toMatch(/\bv_sql CLOB;/);
    // The first operand is a CLOB, so the whole concatenation is one (a VARCHAR2-only expression stops at 32,767).
    expect(body).toMatch(/v_sql := TO_CLOB\('MERGE INTO '\) \|\|/);
  });
});

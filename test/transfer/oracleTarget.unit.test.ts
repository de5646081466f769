// Oracle target pieces that need no server (the real-server suite is test/transfer/oracle.test.ts, run where
// KEEL_TEST_ORACLE_URL is set): the pool's session callback (version floor, NLS once per session instead of on every
// checkout), BLOB target columns refused before anything is staged, and the SQL's bounded waits and LISTAGG-free
// staging check.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type oracledb from 'oracledb';
import {
  KEEL_SESSION_SQL,
  KEEL_SESSION_TAG,
  OracleTransferTarget,
  oracleSessionCallback,
  ORACLE_LOCK_WAIT_SECONDS,
} from '../../shared/engines/oracle/transferTarget.js';
import { TransferError } from '../../shared/transfer/errors.js';
import type { TransferConfig } from '../../shared/transfer/config.js';

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
    expect((err as TransferError).message).toMatch(
      /target column DATA is a BLOB, which the Oracle target does not take: values over 2,000 bytes/,
    );
    expect(requested).toEqual([{ tag: KEEL_SESSION_TAG }]);
    expect(executed.some((s) => /ALTER SESSION/i.test(s))).toBe(false);
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
});

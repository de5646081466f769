// prepare checks every mapped column against its target column before anything is staged (issues 23 and 26):
// lengths, precision and scale, fraction digits, nullability and fixed-width padding, naming the column. And a value
// the target refuses at staging or apply fails the batch once (terminal), instead of being retried for ever. On the
// twin (PostgreSQL target) and on the model of the Oracle target (./oracleFake.ts), with the real PostgreSQL source.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { mssqlFacets, mssqlLogicalType } from '../../shared/engines/sqlserver/transferSource.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { setupDatabases, type Env } from './helpers.js';
import { FakeOracle } from './oracleFake.js';

const RULES = transferEngineRules();

function transfer(name: string, table: string, cols: string[], target: 'postgres' | 'oracle'): TransferConfig {
  return parseTransfers(
    [
      {
        name,
        source: { engine: 'postgres', connectionSetting: 'S', table: `public.${table}` },
        target: {
          engine: target,
          connectionSetting: 'T',
          table: target === 'oracle' ? table.toUpperCase() : `public.${table}`,
        },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns: ['id', ...cols].map((c) => ({ source: c, target: target === 'oracle' ? c.toUpperCase() : c })),
        batchSize: 100,
        reconcileWaitMs: 300,
      },
    ],
    RULES,
  )[0]!;
}

// The source: one table per case, `id bigint primary key` plus the column under test.
const SOURCE: Record<string, string> = {
  s_len: 'v varchar(20)',
  s_num: 'v numeric(12,2)',
  s_int: 'v bigint',
  s_null: 'v text',
  s_ts: 'v timestamp(6)',
  s_fixed: 'v char(4)',
  s_var: 'v varchar(4)',
  s_ok: 'v varchar(10) not null',
};

describe('prepare checks each mapped column against the target', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_prepare');
    for (const [table, col] of Object.entries(SOURCE))
      await env.source.query(`create table public.${table} (id bigint primary key, ${col})`);
  });
  afterAll(async () => {
    await env?.close();
  });

  async function pgPrepare(table: string, targetCol: string): Promise<unknown> {
    await env.target.query(`drop table if exists public.${table}`);
    await env.target.query(`create table public.${table} (id bigint primary key, v ${targetCol})`);
    const t = transfer(`pp_${table}`, table, ['v'], 'postgres');
    const schema = await new PostgresTransferSource(t, env.source).readSchema();
    return new PostgresTransferTarget(t, env.target).prepare(schema).then(
      () => null,
      (e: unknown) => e,
    );
  }

  it.each([
    [
      's_len',
      'varchar(10)',
      /target column v \(character varying\(10\)\) .* source column v \(character varying\(20\)\): the source allows 20 characters, the target 10/,
    ],
    ['s_num', 'numeric(10,2)', /source column v \(numeric\(12,2\)\): up to 10 digits before the point, the target 8/],
    ['s_num', 'numeric(12,1)', /source column v \(numeric\(12,2\)\): 2 digits after the point would be rounded to 1/],
    ['s_int', 'integer', /source column v \(bigint\): a 64-bit integer does not fit a 32-bit one/],
    [
      's_null',
      'text not null',
      /target column v \(text\) .*: the column is NOT NULL and the source column allows NULL/,
    ],
    ['s_ts', 'timestamp(3)', /6 fraction digits would be rounded to 3 \(declare "datetime": "seconds" to cut them/],
    [
      's_var',
      'char(4)',
      /a fixed-width column pads values to 4 characters, so only a fixed-width source of the same length/,
    ],
    ['s_fixed', 'char(6)', /a fixed-width column pads values to 6 characters/],
  ])('PostgreSQL target: %s into %s is refused, naming the column', async (table, targetCol, message) => {
    const err = await pgPrepare(table, targetCol);
    expect(isTransferError(err, 'target_incompatible')).toBe(true);
    expect((err as Error).message).toMatch(/^transfer pp_\w+: target column v /);
    expect((err as Error).message).toMatch(message);
  });

  it.each([
    ['s_len', 'varchar(20)'],
    ['s_len', 'text'],
    ['s_num', 'numeric(14,3)'],
    ['s_num', 'numeric'],
    ['s_int', 'bigint'],
    ['s_null', 'text'],
    ['s_ts', 'timestamp(6)'],
    ['s_fixed', 'char(4)'],
    ['s_fixed', 'varchar(4)'],
    ['s_ok', 'varchar(10) not null'],
  ])('PostgreSQL target: %s into %s is accepted', async (table, targetCol) => {
    expect(await pgPrepare(table, targetCol)).toBeNull();
  });

  async function oraclePrepare(table: string, column: unknown[]): Promise<unknown> {
    const fake = new FakeOracle();
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
      ['V', ...column],
    ];
    const t = transfer(`op_${table}`, table, ['v'], 'oracle');
    const schema = await new PostgresTransferSource(t, env.source).readSchema();
    return new OracleTransferTarget(t, fake.pool).prepare(schema).then(
      () => null,
      (e: unknown) => e,
    );
  }

  // data_type, data_scale, data_precision, data_length, char_length, char_used, nullable
  it.each([
    [
      's_len',
      ['VARCHAR2', null, null, 20, 20, 'B', 'Y'],
      /V \(VARCHAR2\(20 BYTE\)\) .*: the source allows 80 bytes of UTF-8, the target 20 bytes \(with character length semantics, e\.g\. VARCHAR2\(n CHAR\), it counts characters\)/,
    ],
    [
      's_len',
      ['VARCHAR2', null, null, 40, 10, 'C', 'Y'],
      /V \(VARCHAR2\(10 CHAR\)\) .*: the source allows 20 characters, the target 10/,
    ],
    ['s_int', ['NUMBER', 0, 10, 22, 0, null, 'Y'], /V \(NUMBER\(10,0\)\) .*: a 64-bit integer has up to 19 digits/],
    [
      's_num',
      ['NUMBER', 2, 10, 22, 0, null, 'Y'],
      /V \(NUMBER\(10,2\)\) .*: up to 10 digits before the point, the target 8/,
    ],
    [
      's_null',
      ['CLOB', null, null, 4000, 0, null, 'N'],
      /V \(CLOB\) .*: the column is NOT NULL and the source column allows NULL/,
    ],
    ['s_ts', ['TIMESTAMP(3)', 3, null, 11, 0, null, 'Y'], /6 fraction digits would be rounded to 3/],
    [
      's_var',
      ['CHAR', null, null, 4, 4, 'C', 'Y'],
      /V \(CHAR\(4 CHAR\)\) .*: a fixed-width column pads values to 4 characters/,
    ],
  ])('Oracle target: %s into %j is refused, naming the column', async (table, column, message) => {
    const err = await oraclePrepare(table, column);
    expect(isTransferError(err, 'target_incompatible')).toBe(true);
    expect((err as Error).message).toMatch(/^transfer op_\w+: target column V /);
    expect((err as Error).message).toMatch(message);
  });

  it.each([
    ['s_len', ['VARCHAR2', null, null, 80, 20, 'C', 'Y']],
    ['s_len', ['VARCHAR2', null, null, 80, 80, 'B', 'Y']],
    ['s_len', ['NVARCHAR2', null, null, 40, 20, 'C', 'Y']],
    ['s_int', ['NUMBER', 0, 19, 22, 0, null, 'Y']],
    ['s_int', ['NUMBER', null, null, 22, 0, null, 'Y']],
    ['s_num', ['NUMBER', 2, 12, 22, 0, null, 'Y']],
    ['s_ts', ['TIMESTAMP(6)', 6, null, 11, 0, null, 'Y']],
    ['s_fixed', ['CHAR', null, null, 16, 4, 'C', 'Y']],
  ])('Oracle target: %s into %j is accepted', async (table, column) => {
    expect(await oraclePrepare(table, column)).toBeNull();
  });

  it('PostgreSQL target: "empty": "null" into a NOT NULL column is refused, naming the column and the policy', async () => {
    await env.target.query(`drop table if exists public.s_ok`);
    await env.target.query(`create table public.s_ok (id bigint primary key, v varchar(10) not null)`);
    const t = parseTransfers(
      [
        {
          name: 'pp_empty',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.s_ok' },
          target: { engine: 'postgres', connectionSetting: 'T', table: 'public.s_ok' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'id' },
            { source: 'v', target: 'v', empty: 'null' },
          ],
        },
      ],
      RULES,
    )[0]!;
    const schema = await new PostgresTransferSource(t, env.source).readSchema();
    await expect(new PostgresTransferTarget(t, env.target).prepare(schema)).rejects.toThrow(
      /transfer pp_empty: target column v .*: the column is NOT NULL and the declared "empty": "null" turns an empty value into NULL/,
    );
  });

  it('reads SQL Server type bounds (UTF-8 worst case, money, datetime ticks)', () => {
    expect(mssqlFacets('nvarchar(40)', 'text')).toEqual({ maxChars: 40, maxBytes: 120, fixed: false });
    expect(mssqlFacets('varchar(max)', 'text')).toEqual({ maxChars: null, maxBytes: null, fixed: false });
    expect(mssqlFacets('nchar(3)', 'text')).toEqual({ maxChars: 3, maxBytes: 9, fixed: true });
    expect(mssqlFacets('decimal(18,4)', 'decimal')).toEqual({ precision: 18, scale: 4 });
    expect(mssqlFacets('money', 'decimal')).toEqual({ precision: 19, scale: 4 });
    expect(mssqlFacets('tinyint', 'int')).toEqual({ intBits: 8 });
    expect(mssqlFacets('datetime', 'timestamp')).toEqual({ fraction: 7 });
    expect(mssqlFacets('datetime2(3)', 'timestamp')).toEqual({ fraction: 3 });
    expect(mssqlFacets('varbinary(50)', 'bytes')).toEqual({ maxBytes: 50 });
    // float and real have a logical type, usable only through a declared float policy
    expect(['float', 'real', 'float(24)'].map(mssqlLogicalType)).toEqual(['float', 'float', 'float']);
  });
});

describe('a value the PostgreSQL target refuses fails the batch once (terminal)', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_dataerr');
    await env.source.query(`create table public.amounts (id bigint primary key, v numeric(12,2));
      insert into public.amounts values (1, 5), (2, -3)`);
    await env.target.query(`create table public.amounts (id bigint primary key, v numeric(12,2) check (v > 0))`);
  });
  afterAll(async () => {
    await env?.close();
  });

  it('a NULL into NOT NULL from a query source (nullability unknown to prepare) fails the batch once', async () => {
    await env.source.query(`create table public.maybe (id bigint primary key, v text);
      insert into public.maybe values (1, 'a'), (2, null)`);
    await env.target.query(`create table public.maybe (id bigint primary key, v text not null)`);
    const t = parseTransfers(
      [
        {
          name: 'maybe',
          source: { engine: 'postgres', connectionSetting: 'S', query: 'select id, v from public.maybe' },
          target: { engine: 'postgres', connectionSetting: 'T', table: 'public.maybe' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'id' },
            { source: 'v', target: 'v' },
          ],
          reconcileWaitMs: 300,
        },
      ],
      RULES,
    )[0]!;
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    const v = await svc.run((await svc.createBatch(t.name)).batchId);
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('unsupported_type');
    expect(v.lastError).toMatch(/SQLSTATE 23502 .*at column v/);
    await svc.close();
  });

  it('a CHECK violation at apply is unsupported_type, the window released, not retried', async () => {
    const t = transfer('amounts', 'amounts', ['v'], 'postgres');
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('unsupported_type');
    expect(v.lastError).toMatch(/SQLSTATE 23514 .*The same value fails on every retry/);
    expect((await env.target.query(`select count(*)::int as n from public.amounts`)).rows[0].n).toBe(0);
    await svc.close();
  });
});

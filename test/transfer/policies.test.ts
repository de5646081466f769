// Declared value policies (shared/transfer/policies.ts, docs/transfer.md "Value policies"): validated with errors that
// name the transfer and the column, applied once to the source's canonical rows so that both checksums cover the
// converted value, and refused by default. Run on the twin (PostgreSQL -> PostgreSQL, canonical rows) and on the
// model of the Oracle target (./oracleFake.ts), which stores values the way Oracle's column types do.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import oracledb from 'oracledb';
import { bindDef } from '../../shared/engines/oracle/canonical.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { ChecksumAccumulator, canonicalFloat, type CanonicalRow } from '../../shared/transfer/checksum.js';
import { parseTransfers, type TransferConfig, type TransferInput } from '../../shared/transfer/config.js';
import { isTransferError, type TransferError } from '../../shared/transfer/errors.js';
import { policyConverter, roundDecimal } from '../../shared/transfer/policies.js';
import { TransferService } from '../../shared/transfer/service.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { setupDatabases, type Env } from './helpers.js';
import { FakeOracle } from './oracleFake.js';

const RULES = transferEngineRules();

type Column = TransferInput['columns'][number];

function transfer(name: string, columns: Column[], target: 'postgres' | 'oracle' = 'postgres'): TransferConfig {
  return parseTransfers(
    [
      {
        name,
        source: { engine: 'postgres', connectionSetting: 'S', table: 'public.vals' },
        target: { engine: target, connectionSetting: 'T', table: target === 'oracle' ? 'VALS' : 'public.vals' },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns,
        batchSize: 100,
        chunkSize: 2,
        reconcileWaitMs: 300,
      },
    ],
    RULES,
  )[0]!;
}

const up = (c: string, oracle: boolean) => (oracle ? c.toUpperCase() : c);

// The mapping with every policy: note '' -> NULL, rate -> decimal(12,4), qty (real) and ratio -> exact double, at cut
// to whole seconds, bin '' -> NULL; code char(4) travels padded (no policy).
function policyColumns(oracle = false, omit: string[] = []): Column[] {
  const all: Column[] = [
    { source: 'id', target: up('id', oracle) },
    { source: 'note', target: up('note', oracle), empty: 'null' },
    { source: 'rate', target: up('rate', oracle), float: { decimal: [12, 4] } },
    { source: 'qty', target: up('qty', oracle), float: 'double' },
    { source: 'ratio', target: up('ratio', oracle), float: 'double' },
    { source: 'at', target: up('at', oracle), datetime: 'seconds' },
    { source: 'bin', target: up('bin', oracle), empty: 'null' },
    { source: 'code', target: up('code', oracle) },
  ];
  return all.map((c) => {
    if (!omit.includes(c.source)) return c;
    const { empty: _e, float: _f, datetime: _d, ...bare } = c;
    return bare;
  });
}

const SOURCE_DDL = `create table public.vals (id bigint primary key, note varchar(20), rate double precision, qty real,
  ratio double precision, at timestamp(6), bin bytea, code char(4))`;
const SOURCE_ROWS = `insert into public.vals values
  (1, '', 0.1, 0.1, 0.1, '2024-01-01 10:00:00.987654', '\\x', 'ab'),
  (2, 'x', 1234.56785, 1.5, 1e-7, '1999-12-31 23:59:59.999999', '\\x00ff', 'abcd'),
  (3, null, null, null, null, null, null, null)`;

// The converted canonical rows both checksums must cover, whatever the target.
const EXPECTED: CanonicalRow[] = [
  ['1', null, '0.1', '0.1', '0.1', '2024-01-01T10:00:00.000000', null, 'ab  '],
  ['2', 'x', '1234.5679', '1.5', '0.0000001', '1999-12-31T23:59:59.000000', '00ff', 'abcd'],
  ['3', null, null, null, null, null, null, null],
];
function expectedChecksum(): string {
  const acc = new ChecksumAccumulator();
  for (const r of EXPECTED) acc.add(r);
  return acc.checksum;
}

describe('value policies: configuration', () => {
  const base = (columns: unknown[]) => ({
    name: 'vals',
    source: { engine: 'postgres', connectionSetting: 'S', table: 'public.vals' },
    target: { engine: 'oracle', connectionSetting: 'T', table: 'VALS' },
    keyColumns: ['id'],
    boundary: { column: 'id', kind: 'key' },
    columns,
  });
  const message = (columns: unknown[]) => {
    try {
      parseTransfers([base(columns)], RULES);
    } catch (err) {
      return (err as Error).message;
    }
    return '';
  };

  it('accepts each declared policy, and refusing stays the default', () => {
    const [t] = parseTransfers([base(policyColumns(true))], RULES);
    expect(t!.columns.map((c) => [c.empty, c.float, c.datetime])).toEqual([
      [undefined, undefined, undefined],
      ['null', undefined, undefined],
      [undefined, { decimal: [12, 4] }, undefined],
      [undefined, 'double', undefined],
      [undefined, 'double', undefined],
      [undefined, undefined, 'seconds'],
      ['null', undefined, undefined],
      [undefined, undefined, undefined],
    ]);
  });

  it('names the transfer and the column of an invalid policy', () => {
    const id = { source: 'id', target: 'ID' };
    expect(message([id, { source: 'rate', target: 'RATE', float: { decimal: [4, 6] } }])).toMatch(
      /KEEL_TRANSFERS\[0\]\.columns\[1\]\.float\.decimal \(transfer vals, column rate\): \[4, 6\] is not a decimal\(p, s\)/,
    );
    expect(message([id, { source: 'rate', target: 'RATE', float: { decimal: [39, 2] } }])).toMatch(
      /columns\[1\]\.float.* \(transfer vals, column rate\)/,
    );
    expect(message([id, { source: 'note', target: 'NOTE', empty: 'blank' }])).toMatch(
      /columns\[1\]\.empty \(transfer vals, column note\)/,
    );
    expect(message([id, { source: 'at', target: 'AT', datetime: 'seconds', empty: 'null' }])).toMatch(
      /\(transfer vals, column at\): column at declares both empty and datetime; a column takes at most one value policy/,
    );
    expect(message([{ source: 'id', target: 'ID', empty: 'null' }])).toMatch(
      /columns\[0\]\.empty \(transfer vals, column id\): key column id cannot take a value policy/,
    );
  });

  it('refuses a float column without a policy, and a policy on a column of another type, naming both', async () => {
    const t = transfer('vals', policyColumns(false, ['rate']));
    const { buildSourceSchema } = await import('../../shared/transfer/schema.js');
    const found = new Map([
      ['id', 'bigint'],
      ['note', 'character varying(20)'],
      ['rate', 'double precision'],
      ['qty', 'real'],
      ['ratio', 'double precision'],
      ['at', 'timestamp(6) without time zone'],
      ['bin', 'bytea'],
      ['code', 'character(4)'],
    ]);
    const { pgLogicalType } = await import('../../shared/engines/postgres/transferSql.js');
    const err = (() => {
      try {
        buildSourceSchema(t, found, pgLogicalType, () => true);
      } catch (e) {
        return e as TransferError;
      }
      return null;
    })();
    expect(err?.code).toBe('unsupported_type');
    expect(err?.message).toMatch(
      /transfer vals: source column rate has type double precision, .* declare how to convert it in its mapping: "float": "double" .* or "float": \{"decimal": \[p, s\]\}/,
    );
    const wrong = transfer('vals', [
      { source: 'id', target: 'id' },
      { source: 'code', target: 'code', float: 'double' },
    ]);
    expect(() => buildSourceSchema(wrong, found, pgLogicalType, () => true)).toThrow(
      /transfer vals: column code declares "float", which applies to float and real columns; code has type character\(4\)/,
    );
  });
});

describe('value policies: conversions', () => {
  it('rounds decimal text half away from zero on its digits', () => {
    expect(roundDecimal('1234.56785', 4)).toBe('1234.5679');
    expect(roundDecimal('-2.5', 0)).toBe('-3');
    expect(roundDecimal('0.005', 2)).toBe('0.01');
    expect(roundDecimal('-0.000025', 4)).toBe('0');
    expect(roundDecimal('9.99995', 4)).toBe('10');
    expect(roundDecimal('12', 2)).toBe('12');
  });

  it('writes a double as its shortest exact decimal, from a number or from server text', () => {
    expect(canonicalFloat(0.1)).toBe('0.1');
    expect(canonicalFloat('1e-07')).toBe('0.0000001');
    expect(canonicalFloat('0.10000000000000001')).toBe('0.1');
    expect(canonicalFloat(-0)).toBe('0');
    expect(canonicalFloat(1.5e300)).toBe(`15${'0'.repeat(299)}`);
    expect(() => canonicalFloat('NaN')).toThrow(/not finite/);
    expect(() => canonicalFloat(Infinity)).toThrow(/not finite/);
  });

  it('refuses a float over the declared precision, naming the transfer, the column and the row key', () => {
    const t = transfer('vals', [
      { source: 'id', target: 'id' },
      { source: 'rate', target: 'rate', float: { decimal: [6, 2] } },
    ]);
    const convert = policyConverter(t, {
      hash: 'h',
      columns: [
        { name: 'id', type: 'bigint', logical: 'int' },
        { name: 'rate', type: 'double precision', logical: 'float' },
      ],
    })!;
    expect(convert(['1', '9999.994'])).toEqual(['1', '9999.99']);
    expect(() => convert(['7', '9999.996'])).toThrow(
      /transfer vals: column rate, row with key id=7: 9999.996 has 5 integer digits, more than decimal\(6, 2\) holds/,
    );
    expect(() => convert(['8', 'Infinity'])).toThrow(/column rate, row with key id=8: float Infinity is not finite/);
  });
});

describe('value policies end to end', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_policies');
    await env.source.query(SOURCE_DDL);
    await env.source.query(SOURCE_ROWS);
    await env.source.query(
      `create table public.bad_times (id bigint primary key, at timestamp, born date);
       insert into public.bad_times values (1, '2024-01-01', '2024-01-01'), (2, 'infinity', '2024-01-02'),
         (3, '2024-01-03', '0044-03-15 BC')`,
    );
  });
  afterAll(async () => {
    await env?.close();
  });

  function service(t: TransferConfig, target: (t: TransferConfig) => PostgresTransferTarget | OracleTransferTarget) {
    return new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({ source: new PostgresTransferSource(tc, env.source), target: target(tc) }),
    });
  }

  it('PostgreSQL -> PostgreSQL: every policy commits, and both checksums cover the converted rows', async () => {
    await env.target.query(`create table public.vals (id bigint primary key, note varchar(20), rate numeric(12,4),
      qty double precision, ratio double precision, at timestamp(0), bin bytea, code char(4))`);
    const t = transfer('pg_policies', policyColumns());
    const svc = service(t, (tc) => new PostgresTransferTarget(tc, env.target));
    const b = await svc.createBatch(t.name);
    // Policies take the row path (no COPY passthrough), and the PostgreSQL source reads a snapshot: one source read,
    // the manifest is computed from the staged rows (docs/transfer.md "One source read").
    expect(b.checksum).toBeNull();
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('committed');
    expect(v.checksum).toBe(expectedChecksum()); // keel-v1 over the converted rows, not keel-pg2
    const rows = await env.target.query(
      `select id::text, note, rate::text, qty::text, ratio::text, to_char(at, 'YYYY-MM-DD HH24:MI:SS.US') as at, encode(bin, 'hex') as bin, textin(bpcharout(code)) as code from public.vals order by id`,
    );
    expect(rows.rows.map((r) => Object.values(r))).toEqual([
      ['1', null, '0.1000', '0.1', '0.1', '2024-01-01 10:00:00.000000', null, 'ab  '],
      ['2', 'x', '1234.5679', '1.5', '1e-07', '1999-12-31 23:59:59.000000', '00ff', 'abcd'],
      ['3', null, null, null, null, null, null, null],
    ]);
    await svc.close();
  });

  it('PostgreSQL -> PostgreSQL: a float over its declared decimal fails the batch once, terminally, before staging', async () => {
    await env.source.query(`create table public.big (id bigint primary key, rate double precision);
      insert into public.big values (1, 1.25), (2, 123456.5)`);
    await env.target.query(`create table public.big (id bigint primary key, rate numeric(6,2))`);
    const t = parseTransfers(
      [
        {
          ...transfer('big', [{ source: 'id', target: 'id' }]),
          name: 'big',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.big' },
          target: { engine: 'postgres', connectionSetting: 'T', table: 'public.big' },
          columns: [
            { source: 'id', target: 'id' },
            { source: 'rate', target: 'rate', float: { decimal: [6, 2] } },
          ],
        },
      ],
      RULES,
    )[0]!;
    const svc = service(t, (tc) => new PostgresTransferTarget(tc, env.target));
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('unsupported_type');
    expect(v.lastError).toMatch(/column rate, row with key id=2: 123456.5 has 6 integer digits/);
    expect(
      (await env.target.query(`select count(*)::int as n from keel_transfer.staged where batch_id = $1`, [b.batchId]))
        .rows[0].n,
    ).toBe(0);
    await svc.close();
  });

  it('Oracle model: every policy commits into BINARY_DOUBLE, NUMBER(p,s), DATE, BLOB and CHAR, with the same checksum', async () => {
    const fake = new FakeOracle();
    // column_name, data_type, data_scale, data_precision, data_length, char_length, char_used, nullable
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
      ['NOTE', 'VARCHAR2', null, null, 80, 20, 'C', 'Y'],
      ['RATE', 'NUMBER', 4, 12, 22, 0, null, 'Y'],
      ['QTY', 'BINARY_DOUBLE', null, null, 8, 0, null, 'Y'],
      ['RATIO', 'BINARY_DOUBLE', null, null, 8, 0, null, 'Y'],
      ['AT', 'DATE', null, null, 7, 0, null, 'Y'],
      ['BIN', 'BLOB', null, null, 4000, 0, null, 'Y'],
      ['CODE', 'CHAR', null, null, 16, 4, 'C', 'Y'],
    ];
    const t = transfer('ora_policies', policyColumns(true), 'oracle');
    const svc = service(t, (tc) => new OracleTransferTarget(tc, fake.pool));
    const b = await svc.createBatch(t.name);
    expect(b.checksum).toBe(expectedChecksum()); // the same canonical checksum as on the twin
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('committed');
    // What the staging held, as Oracle's types store it: numbers for BINARY_DOUBLE, Buffers for the BLOB.
    expect([...fake.applied.values()].sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual([
      ['1', null, '0.1', 0.1, 0.1, '2024-01-01T10:00:00.000000', null, 'ab  '],
      ['2', 'x', '1234.5679', 1.5, 1e-7, '1999-12-31T23:59:59.000000', Buffer.from('00ff', 'hex'), 'abcd'],
      ['3', null, null, null, null, null, null, null],
    ]);
    await svc.close();
  });

  it('Oracle model: without a declared policy each of these columns is refused, naming it', async () => {
    const fake = new FakeOracle();
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
      ['NOTE', 'VARCHAR2', null, null, 80, 20, 'C', 'Y'],
      ['AT', 'DATE', null, null, 7, 0, null, 'Y'],
    ];
    const cols = (extra: Column[]) => [{ source: 'id', target: 'ID' }, ...extra];
    // '' in a text column: refused at staging (the default), the batch failed once
    const tEmpty = transfer('ora_empty', cols([{ source: 'note', target: 'NOTE' }]), 'oracle');
    let svc = service(tEmpty, (tc) => new OracleTransferTarget(tc, fake.pool));
    const v = await svc.run((await svc.createBatch(tEmpty.name)).batchId);
    expect(v.state).toBe('failed');
    expect(v.lastError).toMatch(/column note holds an empty string, which Oracle stores as NULL.*"empty": "null"/);
    await svc.close();
    // a timestamp into DATE: refused by prepare, before any batch is staged
    const tDate = transfer('ora_date', cols([{ source: 'at', target: 'AT' }]), 'oracle');
    svc = service(tDate, (tc) => new OracleTransferTarget(tc, fake.pool));
    await expect(svc.createBatch(tDate.name)).rejects.toSatisfy(
      (e) =>
        isTransferError(e, 'target_incompatible') &&
        /target column AT \(DATE\) cannot hold source column at .*declare "datetime": "seconds"/.test(
          (e as Error).message,
        ),
    );
    expect(fake.callsOf('BEGIN_STAGE').length).toBe(1); // only the first transfer's
    await svc.close();
  });

  it('Oracle model: text goes to NVARCHAR2 as national characters and to CLOB as a LOB, any length, unchanged', async () => {
    await env.source.query(`create table public.texts (id bigint primary key, n varchar(10), c text);
      insert into public.texts values (1, '😀 ok', repeat('€', 40000)), (2, null, 'short')`);
    const fake = new FakeOracle();
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
      ['N', 'NVARCHAR2', null, null, 40, 20, 'C', 'Y'],
      ['C', 'CLOB', null, null, 4000, 0, null, 'Y'],
    ];
    const t = parseTransfers(
      [
        {
          name: 'texts',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.texts' },
          target: { engine: 'oracle', connectionSetting: 'T', table: 'TEXTS' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'ID' },
            { source: 'n', target: 'N' },
            { source: 'c', target: 'C' },
          ],
        },
      ],
      RULES,
    )[0]!;
    const svc = service(t, (tc) => new OracleTransferTarget(tc, fake.pool));
    const v = await svc.run((await svc.createBatch(t.name)).batchId);
    expect(v.state).toBe('committed');
    expect(fake.applied.get('1')).toEqual(['1', '😀 ok', '€'.repeat(40000)]);
    // a chunk of short values binds as VARCHAR2/RAW (no LOB round trips), a longer one as a LOB
    expect(bindDef('clob', 4000).type).toBe(oracledb.DB_TYPE_VARCHAR);
    expect(bindDef('clob', 4001).type).toBe(oracledb.DB_TYPE_CLOB);
    expect(bindDef('blob', 2000).type).toBe(oracledb.DB_TYPE_RAW);
    expect(bindDef('blob', 2001).type).toBe(oracledb.DB_TYPE_BLOB);
    await svc.close();
  });

  it('F8: infinity and BC dates are refused with the column named before staging (canonical rows); keel-pg2 keeps them', async () => {
    const t = parseTransfers(
      [
        {
          name: 'bad_times',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.bad_times' },
          target: { engine: 'oracle', connectionSetting: 'T', table: 'BAD_TIMES' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'ID' },
            { source: 'at', target: 'AT' },
            { source: 'born', target: 'BORN' },
          ],
        },
      ],
      RULES,
    )[0]!;
    const src = new PostgresTransferSource(t, env.source);
    const schema = await src.readSchema();
    const all = { kind: 'key' as const, low: null, high: '3' };
    await expect(src.manifest(all, schema, 'keel-v1')).rejects.toSatisfy(
      (e) =>
        isTransferError(e, 'unsupported_type') &&
        /source column at \(timestamp without time zone\) holds a value outside years 1\.\.9999 or an infinity \(row with key \(2\)\)/.test(
          (e as Error).message,
        ),
    );
    const onlyBorn = { kind: 'key' as const, low: '2', high: '3' };
    await expect(src.manifest(onlyBorn, schema, 'keel-v1')).rejects.toThrow(
      /source column born \(date\).*\(row with key \(3\)\)/,
    );
    const streamed = (async () => {
      for await (const _ of src.streamRows(all, schema, 10)) void _;
    })();
    await expect(streamed).rejects.toThrow(/source column at .* \(row with key \(2\)\)/);
    expect((await src.manifest(all, schema, 'keel-pg2')).rowCount).toBe(3);

    // Through the service with the Oracle model: failed once, nothing staged.
    const fake = new FakeOracle();
    fake.columns = [
      ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
      ['AT', 'TIMESTAMP(6)', 6, null, 11, 0, null, 'Y'],
      ['BORN', 'DATE', null, null, 7, 0, null, 'Y'],
    ];
    const svc = service(t, (tc) => new OracleTransferTarget(tc, fake.pool));
    const v = await svc.run((await svc.createBatch(t.name)).batchId);
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('unsupported_type');
    expect(v.lastError).toMatch(/source column at/);
    expect(fake.callsOf('staging insert')).toEqual([]);
    expect(fake.callsOf('BEGIN_STAGE')).toEqual([]);
    await svc.close();
  });
});

// The canonical-row path, run per source and target engine (issue 23): every row travels as canonical text under
// keel-v1 -- what the Oracle target always receives -- never as a PostgreSQL COPY stream, so the PostgreSQL twin
// exercises the code that differs from Oracle. The cases are the data cases of the Oracle review ("Test cases", T1-T4):
// '' in NOT NULL and nullable columns, bigints near 2^63, decimals at full precision, infinity and BC dates,
// timestamptz / datetimeoffset at the edge offsets, CHAR(n) padding, one character or byte over the target's size,
// binary over 2,000 bytes. Each asserts its exact outcome on each target: the values stored (read back as canonical
// text), or the refusal with its code, naming the column, and what the next batch of the window does.
// The journal is PostgreSQL's on the run's embedded server; sources and targets come from the engines' harnesses
// (test/contract/transferHarness.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { algorithmOf, type LogicalType } from '../../shared/transfer/checksum.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError, type TransferErrorCode } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal } from '../transfer/helpers.js';
import type { CaseColumn, DataCaseSourceHarness, DataCaseTargetHarness } from './transferHarness.js';

type SourceEngine = 'postgres' | 'sqlserver';
type TargetEngine = 'postgres' | 'oracle';
type Value = string | null;

type Outcome =
  // committed: the rows read back from the target, canonical text, in key order
  | { committed: Value[][] }
  // refused by prepare (createBatch fails, nothing staged)
  | { prepare: TransferErrorCode; message: RegExp }
  // the batch fails terminally (once; the next batch of the window fails the same way)
  | { batch: TransferErrorCode; message: RegExp };

interface DataColumn {
  name: string;
  logical: LogicalType;
  source: Partial<Record<SourceEngine, string>>; // declared type per source engine; absent: not run from it
  target: Record<TargetEngine, string>;
  notNull?: boolean;
}

interface DataCase {
  title: string;
  columns: DataColumn[]; // after the key column id
  // Row values (id first) as each source engine's text input (bytes: hex); `all` for every source engine.
  rows: Partial<Record<SourceEngine | 'all', Value[][]>>;
  expect: Partial<Record<TargetEngine | 'all', Outcome>>;
}

const text = (name: string, src: string, pgT: string, ora: string, notNull = false): DataColumn => ({
  name,
  logical: 'text',
  source: { postgres: src, sqlserver: `n${src}` },
  target: { postgres: pgT, oracle: ora },
  notNull,
});
const hex = (byte: string, n: number) => byte.repeat(n);

export const DATA_CASES: DataCase[] = [
  {
    title: "T1: '' in a NOT NULL text column",
    columns: [text('name', 'varchar(20)', 'varchar(20)', 'VARCHAR2(20 CHAR)', true)],
    rows: {
      all: [
        ['1', ''],
        ['2', 'x'],
      ],
    },
    expect: {
      postgres: {
        committed: [
          ['1', ''],
          ['2', 'x'],
        ],
      },
      oracle: { batch: 'unsupported_type', message: /column name holds an empty string, which Oracle stores as NULL/ },
    },
  },
  {
    title: "T1: '' in a nullable text column",
    columns: [text('note', 'varchar(20)', 'varchar(20)', 'VARCHAR2(20 CHAR)')],
    rows: {
      all: [
        ['1', null],
        ['2', ''],
        ['3', 'y'],
      ],
    },
    expect: {
      postgres: {
        committed: [
          ['1', null],
          ['2', ''],
          ['3', 'y'],
        ],
      },
      oracle: { batch: 'unsupported_type', message: /column note holds an empty string, which Oracle stores as NULL/ },
    },
  },
  {
    title: 'T1: an empty binary value',
    columns: [
      {
        name: 'bin',
        logical: 'bytes',
        source: { postgres: 'bytea', sqlserver: 'varbinary(50)' },
        target: { postgres: 'bytea', oracle: 'BLOB' },
      },
    ],
    rows: {
      all: [
        ['1', '00'],
        ['2', ''],
      ],
    },
    expect: {
      postgres: {
        committed: [
          ['1', '00'],
          ['2', ''],
        ],
      },
      oracle: {
        batch: 'unsupported_type',
        message: /column bin holds an empty binary value, which Oracle stores as NULL/,
      },
    },
  },
  {
    title: 'T1: blanks, trailing spaces, a tab and a zero byte are values, stored unchanged',
    columns: [
      text('name', 'varchar(20)', 'varchar(20)', 'VARCHAR2(20 CHAR)', true),
      text('note', 'varchar(20)', 'varchar(20)', 'VARCHAR2(20 CHAR)'),
      {
        name: 'bin',
        logical: 'bytes',
        source: { postgres: 'bytea', sqlserver: 'varbinary(50)' },
        target: { postgres: 'bytea', oracle: 'BLOB' },
      },
    ],
    rows: {
      all: [
        ['3', ' ', '  ', '00'],
        ['4', 'abc  ', 'a\tb', null],
      ],
    },
    expect: {
      all: {
        committed: [
          ['3', ' ', '  ', '00'],
          ['4', 'abc  ', 'a\tb', null],
        ],
      },
    },
  },
  {
    title: 'T2: bigints near 2^63, exact',
    columns: [
      {
        name: 'v',
        logical: 'int',
        source: { postgres: 'bigint', sqlserver: 'bigint' },
        target: { postgres: 'bigint', oracle: 'NUMBER(19)' },
      },
    ],
    rows: {
      all: [
        ['-9223372036854775808', '9223372036854775807'],
        ['9007199254740993', '-9007199254740993'],
        ['1152921504606846976', '1152921504606846977'],
        ['9223372036854775807', '-9223372036854775808'],
      ],
    },
    expect: {
      all: {
        committed: [
          ['-9223372036854775808', '9223372036854775807'],
          ['9007199254740993', '-9007199254740993'],
          ['1152921504606846976', '1152921504606846977'],
          ['9223372036854775807', '-9223372036854775808'],
        ],
      },
    },
  },
  {
    title: 'T2: decimals at full precision (38, 10), exact',
    columns: [
      {
        name: 'amt',
        logical: 'decimal',
        source: { postgres: 'numeric(38,10)', sqlserver: 'decimal(38,10)' },
        target: { postgres: 'numeric(38,10)', oracle: 'NUMBER(38,10)' },
      },
    ],
    rows: {
      all: [
        ['1', '1234567890123456789012345678.0123456789'],
        ['2', '-9999999999999999999999999999.9999999999'],
        ['3', '-0.0000000001'],
        ['4', '0'],
        ['5', null],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', '1234567890123456789012345678.0123456789'],
          ['2', '-9999999999999999999999999999.9999999999'],
          ['3', '-0.0000000001'],
          ['4', '0'],
          ['5', null],
        ],
      },
    },
  },
  {
    title:
      "T2: a numeric 'NaN' (PostgreSQL only): the twin keeps it, Oracle refuses it terminally (ORA-01722), naming the column and the row",
    columns: [
      {
        name: 'amt',
        logical: 'decimal',
        source: { postgres: 'numeric(12,2)' },
        target: { postgres: 'numeric(12,2)', oracle: 'NUMBER(12,2)' },
      },
    ],
    rows: {
      postgres: [
        ['1', '1.50'],
        ['2', 'NaN'],
      ],
    },
    expect: {
      postgres: {
        committed: [
          ['1', '1.5'],
          ['2', 'NaN'],
        ],
      },
      oracle: { batch: 'unsupported_type', message: /ORA-01722 .*column amt \(AMT\), row with key id=2/ },
    },
  },
  {
    title: 'T3: timestamp infinity is refused before staging, naming the column and the row',
    columns: [
      {
        name: 'at',
        logical: 'timestamp',
        source: { postgres: 'timestamp(6)' },
        target: { postgres: 'timestamp(6)', oracle: 'TIMESTAMP(6)' },
      },
    ],
    rows: {
      postgres: [
        ['1', '2024-01-01 10:00:00'],
        ['2', 'infinity'],
      ],
    },
    expect: {
      all: {
        batch: 'unsupported_type',
        message:
          /source column at \(timestamp\(6\) without time zone\) holds a value outside years 1\.\.9999 or an infinity \(row with key \(2\)\)/,
      },
    },
  },
  {
    title: 'T3: timestamptz -infinity is refused before staging, naming the column and the row',
    columns: [
      {
        name: 'ts',
        logical: 'timestamptz',
        source: { postgres: 'timestamptz(6)' },
        target: { postgres: 'timestamptz(6)', oracle: 'TIMESTAMP(6) WITH TIME ZONE' },
      },
    ],
    rows: { postgres: [['1', '-infinity']] },
    expect: {
      all: {
        batch: 'unsupported_type',
        message:
          /source column ts \(timestamp\(6\) with time zone\) holds a value outside years 1\.\.9999 or an infinity \(row with key \(1\)\)/,
      },
    },
  },
  {
    title: 'T3: a BC date is refused before staging, naming the column and the row',
    columns: [
      {
        name: 'born',
        logical: 'date',
        source: { postgres: 'date' },
        target: { postgres: 'date', oracle: 'DATE' },
      },
    ],
    rows: {
      postgres: [
        ['1', '2024-03-15'],
        ['7', '0044-03-15 BC'],
      ],
    },
    expect: {
      all: {
        batch: 'unsupported_type',
        message:
          /source column born \(date\) holds a value outside years 1\.\.9999 or an infinity \(row with key \(7\)\)/,
      },
    },
  },
  {
    title: 'T3: timestamptz / datetimeoffset at the edge offsets (+14:00, -14:00), stored as the same UTC instant',
    columns: [
      {
        name: 'ts',
        logical: 'timestamptz',
        source: { postgres: 'timestamptz(6)', sqlserver: 'datetimeoffset(6)' },
        target: { postgres: 'timestamptz(6)', oracle: 'TIMESTAMP(6) WITH TIME ZONE' },
      },
    ],
    rows: {
      postgres: [
        ['1', '2024-03-31 02:30:00.123456+02'],
        ['2', '0001-01-01 14:00:00+14'],
        ['3', '9999-12-31 09:59:59.999999-14'],
        ['4', null],
      ],
      sqlserver: [
        ['1', '2024-03-31 02:30:00.123456 +02:00'],
        ['2', '0001-01-01 14:00:00 +14:00'],
        ['3', '9999-12-31 09:59:59.999999 -14:00'],
        ['4', null],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', '2024-03-31T00:30:00.123456Z'],
          ['2', '0001-01-01T00:00:00.000000Z'],
          ['3', '9999-12-31T23:59:59.999999Z'],
          ['4', null],
        ],
      },
    },
  },
  {
    title: 'T3: a timestamptz whose UTC instant is past year 9999 is refused before staging',
    columns: [
      {
        name: 'ts',
        logical: 'timestamptz',
        source: { postgres: 'timestamptz(6)' },
        target: { postgres: 'timestamptz(6)', oracle: 'TIMESTAMP(6) WITH TIME ZONE' },
      },
    ],
    rows: { postgres: [['1', '9999-12-31 23:00:00-14']] },
    expect: {
      all: {
        batch: 'unsupported_type',
        message: /source column ts .* holds a value outside years 1\.\.9999 or an infinity \(row with key \(1\)\)/,
      },
    },
  },
  {
    title:
      'T3: 1582-10-10 (inside the Julian-Gregorian gap of Oracle, valid in SQL Server and PostgreSQL): the twin keeps it, Oracle refuses it terminally (ORA-01839), naming the column and the row',
    columns: [
      {
        name: 'born',
        logical: 'date',
        source: { postgres: 'date', sqlserver: 'date' },
        target: { postgres: 'date', oracle: 'DATE' },
      },
    ],
    rows: {
      all: [
        ['1', '1582-10-15'],
        ['2', '1582-10-10'],
        ['3', '0001-01-01'],
      ],
    },
    expect: {
      postgres: {
        committed: [
          ['1', '1582-10-15'],
          ['2', '1582-10-10'],
          ['3', '0001-01-01'],
        ],
      },
      oracle: { batch: 'unsupported_type', message: /ORA-01839 .*column born \(BORN\), row with key id=2/ },
    },
  },
  {
    title:
      'T3: seven fraction digits (SQL Server datetime2(7), datetimeoffset(7)) are cut to six, never rounded into the next second',
    columns: [
      {
        name: 'at',
        logical: 'timestamp',
        source: { sqlserver: 'datetime2(7)' },
        target: { postgres: 'timestamp(6)', oracle: 'TIMESTAMP(6)' },
      },
      {
        name: 'ts',
        logical: 'timestamptz',
        source: { sqlserver: 'datetimeoffset(7)' },
        target: { postgres: 'timestamptz(6)', oracle: 'TIMESTAMP(6) WITH TIME ZONE' },
      },
    ],
    rows: {
      sqlserver: [
        ['1', '1900-01-01 00:00:00.0000001', '2024-03-31 02:30:00.1234567 +02:00'],
        ['2', '9999-12-31 23:59:59.9999999', '9999-12-31 23:59:59.9999999 +00:00'],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', '1900-01-01T00:00:00.000000', '2024-03-31T00:30:00.123456Z'],
          ['2', '9999-12-31T23:59:59.999999', '9999-12-31T23:59:59.999999Z'],
        ],
      },
    },
  },
  {
    title:
      "T3: SQL Server datetime into a three-digit fraction is refused by prepare (its 1/300 s ticks read as .xxx3333: '.003' would be stored rounded, and verification would fail after staging)",
    columns: [
      {
        name: 'at',
        logical: 'timestamp',
        source: { sqlserver: 'datetime' },
        target: { postgres: 'timestamp(3)', oracle: 'TIMESTAMP(3)' },
      },
    ],
    rows: { sqlserver: [['1', '2024-01-01 10:00:00.003']] },
    expect: {
      all: { prepare: 'target_incompatible', message: /column at .*6 fraction digits would be rounded to 3/ },
    },
  },
  {
    title: 'T4: CHAR(n) from a fixed-width source of the same length keeps its padding',
    columns: [text('code', 'char(10)', 'character(10)', 'CHAR(10 CHAR)')],
    rows: {
      all: [
        ['1', 'abc'],
        ['2', 'abcdefghij'],
        ['3', null],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', 'abc       '],
          ['2', 'abcdefghij'],
          ['3', null],
        ],
      },
    },
  },
  {
    title: 'T4: CHAR(n) from a variable-width source is refused by prepare, naming the column',
    columns: [text('code', 'varchar(10)', 'character(10)', 'CHAR(10 CHAR)')],
    rows: { all: [['1', 'abc']] },
    expect: {
      all: {
        prepare: 'target_incompatible',
        message:
          /target column (code|CODE) \(.*\) cannot hold every value of source column code .*a fixed-width column pads values to 10 characters/,
      },
    },
  },
  {
    title: 'T4: a source one character longer than the target column is refused by prepare, naming the column',
    columns: [text('name', 'varchar(11)', 'varchar(10)', 'VARCHAR2(10 CHAR)')],
    rows: { all: [['1', 'abcdefghijk']] },
    expect: {
      all: {
        prepare: 'target_incompatible',
        message:
          /target column (name|NAME) \(.*\) cannot hold every value of source column name .*the source allows 11 characters, the target 10/,
      },
    },
  },
  {
    title: 'T4: a value of exactly the target size fits, ten 3-byte characters included',
    columns: [text('name', 'varchar(10)', 'varchar(10)', 'VARCHAR2(10 CHAR)')],
    rows: {
      all: [
        ['1', 'abcdefghij'],
        ['2', '€€€€€€€€€€'],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', 'abcdefghij'],
          ['2', '€€€€€€€€€€'],
        ],
      },
    },
  },
  {
    title: 'T4: ten characters into a 10-byte column (Oracle BYTE semantics) are refused by prepare',
    columns: [text('name', 'varchar(10)', 'varchar(10)', 'VARCHAR2(10 BYTE)')],
    rows: { all: [['1', '€€€€€€€€€€']] },
    expect: {
      postgres: { committed: [['1', '€€€€€€€€€€']] },
      oracle: {
        prepare: 'target_incompatible',
        message: /target column NAME \(.*\) cannot hold every value of source column name .*UTF-8, the target 10 bytes/,
      },
    },
  },
  {
    title: 'T4: binary values over 2,000 bytes, exact',
    columns: [
      {
        name: 'bin',
        logical: 'bytes',
        source: { postgres: 'bytea', sqlserver: 'varbinary(max)' },
        target: { postgres: 'bytea', oracle: 'BLOB' },
      },
    ],
    rows: {
      all: [
        ['1', hex('ab', 2001)],
        ['2', hex('c0', 20_000)],
        ['3', '00'],
        ['4', null],
      ],
    },
    expect: {
      all: {
        committed: [
          ['1', hex('ab', 2001)],
          ['2', hex('c0', 20_000)],
          ['3', '00'],
          ['4', null],
        ],
      },
    },
  },
];

export function defineCanonicalRowsContract(
  makeSource: () => DataCaseSourceHarness,
  makeTarget: () => DataCaseTargetHarness,
  engines: { source: SourceEngine; target: TargetEngine },
): void {
  let src: DataCaseSourceHarness;
  let tgt: DataCaseTargetHarness;
  let control: pg.Pool;

  beforeAll(async () => {
    src = makeSource();
    tgt = makeTarget();
    control = new pg.Pool({ connectionString: await createTestDatabase('cr_ctl'), max: 4 });
    control.on('error', poolErrorLogger('postgres', 'transfer', 'canonical rows contract pool'));
    await migrateJournal(control);
  });
  afterAll(async () => {
    await tgt?.close();
    await src?.close();
    await control?.end();
  });

  for (const c of DATA_CASES) {
    const rows = c.rows[engines.source] ?? c.rows.all;
    const outcome = c.expect[engines.target] ?? c.expect.all;
    if (!rows || !outcome || c.columns.some((col) => !col.source[engines.source])) continue; // not this source's case

    it(c.title, async () => {
      const keyCol = (type: string): CaseColumn => ({ name: 'id', type, notNull: true, key: true });
      const source = await src.createCaseTable(
        [
          keyCol('bigint'),
          ...c.columns.map((col) => ({ name: col.name, type: col.source[engines.source]!, notNull: col.notNull })),
        ],
        rows,
      );
      const target = await tgt.createCaseTable([
        keyCol(engines.target === 'oracle' ? 'NUMBER(19)' : 'bigint'),
        ...c.columns.map((col) => ({ name: col.name, type: col.target[engines.target], notNull: col.notNull })),
      ]);
      const [t] = parseTransfers(
        [
          {
            name: `cr_${randomBytes(4).toString('hex')}`,
            source,
            target,
            keyColumns: ['id'],
            boundary: { column: 'id', kind: 'key' },
            columns: ['id', ...c.columns.map((col) => col.name)].map((n) => ({ source: n, target: tgt.column(n) })),
            batchSize: 1000,
            chunkSize: 3, // several chunks per batch
            reconcileWaitMs: 1000,
          },
        ],
        transferEngineRules(),
      );
      const tc: TransferConfig = t!;
      const adapters = { source: await src.openRowSource(tc), target: await tgt.openTarget(tc) };
      const svc = new TransferService({
        journal: new PostgresTransferJournal(control),
        transfers: [tc],
        connect: () => adapters,
      });
      const stored = () =>
        tgt.readRows(tc, [
          { target: tgt.column('id'), type: engines.target === 'oracle' ? 'NUMBER' : 'bigint', logical: 'int' },
          ...c.columns.map((col) => ({
            target: tgt.column(col.name),
            type: col.target[engines.target],
            logical: col.logical,
          })),
        ]);
      try {
        if ('prepare' in outcome) {
          await expect(svc.createBatch(tc.name)).rejects.toSatisfy(
            (e) => isTransferError(e, outcome.prepare) && outcome.message.test((e as Error).message),
          );
          expect(await stored()).toEqual([]);
          return;
        }
        const b = await svc.createBatch(tc.name);
        const v = b.state === 'failed' ? b : await svc.run(b.batchId);
        if ('committed' in outcome) {
          // Key windows span at most batchSize key values, so sparse keys take several batches: run them all.
          let applied = 0;
          for (let cur = v; ;) {
            expect(cur.state, cur.lastError ?? '').toBe('committed');
            expect(algorithmOf(cur.checksum!)).toBe('keel-v1'); // canonical rows, not a native stream's checksum
            applied += cur.appliedCount!;
            const next = await svc.tryCreateBatch(tc.name);
            if (!next) break;
            cur = await svc.run(next.batchId);
          }
          expect(applied).toBe(outcome.committed.length);
          expect(await stored()).toEqual(outcome.committed);
          return;
        }
        expect(v.state).toBe('failed');
        expect(v.lastErrorCode).toBe(outcome.batch);
        expect(v.lastError).toMatch(outcome.message);
        expect(await stored()).toEqual([]);
        // The failed batch released its window: the next batch covers the same rows and fails the same way, so the
        // transfer stays at this window until the data or the mapping changes (terminal, never retried in a loop).
        const again = await svc.createBatch(tc.name);
        expect([again.boundary.low, again.boundary.high]).toEqual([b.boundary.low, b.boundary.high]);
        const v2 = again.state === 'failed' ? again : await svc.run(again.batchId);
        expect([v2.state, v2.lastErrorCode]).toEqual(['failed', outcome.batch]);
        expect(v2.attempts).toBeLessThanOrEqual(1);
      } finally {
        await svc.close();
        await adapters.source.close().catch(() => undefined);
        await adapters.target.close().catch(() => undefined);
      }
    });
  }
}

// SQL Server: a SQL Server -> PostgreSQL transfer (rowversion window
// bounded by MIN_ACTIVE_ROWVERSION(), rows streamed with pause/resume). Runs when KEEL_TEST_MSSQL_URL is set
// (CI's mssql service container); skipped otherwise.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import path from 'node:path';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { sharedSqlServerPool, type SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { migrateSqlServer } from '../../shared/engines/sqlserver/migrate.js';
import { SqlServerTransferJournal } from '../../shared/engines/sqlserver/transferJournal.js';
import {
  mssqlChangesSelect,
  mssqlSelectExpr,
  SqlServerTransferSource,
} from '../../shared/engines/sqlserver/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { migratePostgresTarget } from '../../shared/engines/postgres/transferEndpoints.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createTestDatabase } from '../support/pg.js';

const TRANSFER_RULES = transferEngineRules();

const URL_ = process.env.KEEL_TEST_MSSQL_URL;

describe('SQL Server source SQL text (no server needed)', () => {
  it('money/smallmoney keep four decimals (style 2; the default style rounds to two)', () => {
    expect(mssqlSelectExpr('[m]', 'decimal', 'money')).toBe('CONVERT(varchar(64), [m], 2)');
    expect(mssqlSelectExpr('[m]', 'decimal', 'smallmoney')).toBe('CONVERT(varchar(64), [m], 2)');
    expect(mssqlSelectExpr('[d]', 'decimal', 'decimal(12,2)')).toBe('CONVERT(varchar(64), [d])');
  });

  it('a change window: keys from CHANGETABLE, other columns only for upserts, the operation last, bounded by @high', () => {
    const mapped = [
      { source: 'id', expr: (r: string) => mssqlSelectExpr(r, 'int') },
      { source: 'amount', expr: (r: string) => mssqlSelectExpr(r, 'decimal', 'decimal(12,2)') },
    ];
    const sqlText = mssqlChangesSelect('[dbo].[orders]', ['id'], mapped, false).replace(/\s+/g, ' ');
    expect(sqlText).toBe(
      "SELECT CONVERT(varchar(20), ct.[id]), CASE WHEN ct.SYS_CHANGE_OPERATION <> N'D' THEN CONVERT(varchar(64), b.[amount]) END, " +
        "CASE WHEN ct.SYS_CHANGE_OPERATION <> N'D' AND b.[id] IS NOT NULL THEN 'U' ELSE 'D' END AS keel_op " +
        'FROM CHANGETABLE(CHANGES [dbo].[orders], @low) AS ct LEFT JOIN [dbo].[orders] AS b ON b.[id] = ct.[id] ' +
        'WHERE ct.SYS_CHANGE_VERSION <= @high',
    );
    expect(mssqlChangesSelect('[dbo].[orders]', ['id'], mapped, true)).toBe(
      "SELECT CONVERT(varchar(20), b.[id]), CONVERT(varchar(64), b.[amount]), 'U' AS keel_op FROM [dbo].[orders] AS b",
    );
  });
});
const suite = URL_ ? describe : describe.skip;
const title = URL_
  ? 'SQL Server transfer journal and source'
  : 'SQL Server transfer journal and source (skipped: KEEL_TEST_MSSQL_URL is not set)';

suite(title, () => {
  let pool: SqlServerPool;
  let target: pg.Pool;
  const table = `keel_src_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    pool = sharedSqlServerPool(URL_!);
    await migrateSqlServer(await pool.get(), { dir: path.resolve(import.meta.dirname, '../../sql/sqlserver') });
    await (
      await pool.request()
    ).query(`CREATE TABLE dbo.${table} (
      id bigint NOT NULL PRIMARY KEY, customer nvarchar(100) NULL, amount decimal(12,2) NULL, placed_at datetime2(6) NULL,
      placed_tz datetimeoffset(6) NULL, flag bit NULL, ref uniqueidentifier NULL, raw varbinary(16) NULL, rv rowversion NOT NULL)`);
    await (
      await pool.request()
    ).query(`INSERT INTO dbo.${table} (id, customer, amount, placed_at, placed_tz, flag, ref, raw)
      SELECT n, CONCAT(N'customer ', n, CASE WHEN n % 10 = 0 THEN N' ✓ "quoted", (x)' ELSE N'' END), CAST(n * 1.25 AS decimal(12,2)),
             DATEADD(microsecond, n, CAST('2026-01-01T00:00:00' AS datetime2(6))), TODATETIMEOFFSET(DATEADD(second, n, CAST('2026-01-01T00:00:00' AS datetime2(6))), '+02:00'),
             n % 2, NEWID(), CAST(n AS varbinary(16))
        FROM (SELECT TOP (1200) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n FROM sys.all_objects a CROSS JOIN sys.all_objects b) s`);
    const url = await createTestDatabase('tr_mssql_tgt');
    target = new pg.Pool({ connectionString: url, max: 3 });
    await migratePostgresTarget(target);
    await target.query(
      `create table public.orders (id bigint primary key, customer text, amount numeric(12,2), placed_at timestamp(6), placed_tz timestamptz, flag boolean, ref uuid, raw bytea)`,
    );
  });
  afterAll(async () => {
    await (await pool?.request())?.query(`DROP TABLE IF EXISTS dbo.${table}`).catch(() => undefined);
    await target?.end();
    await pool?.close();
  });

  it('SQL Server -> PostgreSQL with rowversion windows', async () => {
    const [t] = parseTransfers(
      [
        {
          name: `mssql_${randomBytes(3).toString('hex')}`,
          source: { engine: 'sqlserver', connectionSetting: 'X', table: `dbo.${table}` },
          target: { engine: 'postgres', connectionSetting: 'Y', table: 'public.orders' },
          keyColumns: ['id'],
          boundary: { column: 'rv', kind: 'rowversion' },
          columns: ['id', 'customer', 'amount', 'placed_at', 'placed_tz', 'flag', 'ref', 'raw'].map((c) => ({
            source: c,
            target: c,
          })),
          batchSize: 500,
          chunkSize: 97,
        },
      ],
      TRANSFER_RULES,
    );
    const svc = new TransferService({
      journal: new SqlServerTransferJournal(pool),
      transfers: [t!],
      connect: (tc) => ({
        source: new SqlServerTransferSource(tc, pool),
        target: new PostgresTransferTarget(tc, target),
      }),
    });
    let batches = 0;
    for (;;) {
      const b = await svc.tryCreateBatch(t!.name);
      if (!b) break;
      expect(b.boundary.kind).toBe('rowversion');
      const v = await svc.run(b.batchId);
      expect(v.state, v.lastError ?? '').toBe('committed');
      batches++;
    }
    expect(batches).toBe(3);
    const n = await target.query(`select count(*)::int as n, count(distinct ref)::int as refs from public.orders`);
    expect(n.rows[0]).toEqual({ n: 1200, refs: 1200 });
    // An update moves the row past the last window: the next batch carries it.
    await (await pool.request()).query(`UPDATE dbo.${table} SET customer = N'changed' WHERE id = 7`);
    const b = await svc.createBatch(t!.name);
    expect(b.rowCount).toBe(1);
    expect((await svc.run(b.batchId)).state).toBe('committed');
    expect((await target.query(`select customer from public.orders where id = 7`)).rows[0].customer).toBe('changed');
  });

  it('Change Tracking windows (baseline, then deletes, updates and inserts) into PostgreSQL', async () => {
    const src = `keel_ct_${randomBytes(4).toString('hex')}`;
    const dst = `ct_${randomBytes(3).toString('hex')}`;
    const q = async (text: string) => (await pool.request()).query(text);
    // Change Tracking needs snapshot isolation for the consistent reads (docs/transfer.md, "Deletes").
    await q(`IF NOT EXISTS (SELECT 1 FROM sys.change_tracking_databases WHERE database_id = DB_ID())
               EXEC (N'ALTER DATABASE CURRENT SET CHANGE_TRACKING = ON (CHANGE_RETENTION = 2 DAYS, AUTO_CLEANUP = ON)');
             IF (SELECT snapshot_isolation_state FROM sys.databases WHERE database_id = DB_ID()) = 0
               EXEC (N'ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON');`);
    await q(`CREATE TABLE dbo.${src} (id bigint NOT NULL PRIMARY KEY, note nvarchar(40) NULL);
             ALTER TABLE dbo.${src} ENABLE CHANGE_TRACKING;
             INSERT INTO dbo.${src} (id, note) SELECT TOP (50) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)), N'n' FROM sys.all_objects;`);
    await target.query(`create table public.${dst} (id bigint primary key, note text)`);
    // target-only keys below the source's first key and past its last: the first and the last key window delete them
    await target.query(`insert into public.${dst} values (-3, 'stale'), (1000, 'stale')`);
    try {
      const [t] = parseTransfers(
        [
          {
            name: `mssql_ct_${randomBytes(3).toString('hex')}`,
            source: { engine: 'sqlserver', connectionSetting: 'X', table: `dbo.${src}` },
            target: { engine: 'postgres', connectionSetting: 'Y', table: `public.${dst}` },
            keyColumns: ['id'],
            boundary: { kind: 'changes' },
            columns: ['id', 'note'].map((c) => ({ source: c, target: c })),
            batchSize: 10,
          },
        ],
        TRANSFER_RULES,
      );
      const svc = new TransferService({
        journal: new SqlServerTransferJournal(pool),
        transfers: [t!],
        connect: (tc) => ({
          source: new SqlServerTransferSource(tc, pool),
          target: new PostgresTransferTarget(tc, target),
        }),
      });
      const highs: string[] = [];
      const drain = async (afterFirst?: () => Promise<unknown>) => {
        for (let i = 0; i < 50; i++) {
          const b = await svc.tryCreateBatch(t!.name);
          if (!b) return;
          highs.push(b.boundary.high);
          const v = await svc.run(b.batchId);
          expect(v.state, v.lastError ?? '').toBe('committed');
          if (i === 0) await afterFirst?.();
        }
      };
      // The baseline, in key windows of 10 (the PostgreSQL target mirrors key ranges), at the version captured before
      // the first; deletes in a range already mirrored (2) and still to come (44), and an insert past the last key (60),
      // made meanwhile, are on the target after the first change window.
      await drain(() =>
        q(`DELETE FROM dbo.${src} WHERE id IN (2, 44); INSERT INTO dbo.${src} (id, note) VALUES (60, N'late');`),
      );
      expect(highs[0]).toMatch(/^baseline@\d+:10$/);
      const version = /^baseline@(\d+):/.exec(highs[0]!)![1]!;
      expect(highs.slice(1, 4)).toEqual([20, 30, 40].map((k) => `baseline@${version}:${k}`));
      expect(highs[4]).toBe(version); // the last key window (41-50 without 44, and 60: 10 rows), open above
      expect(highs.length).toBe(6); // then the first change window
      expect(
        (await target.query(`select count(*)::int as n, min(id)::int as lo, max(id)::int as hi from public.${dst}`))
          .rows[0],
      ).toEqual({ n: 49, lo: 1, hi: 60 });
      await q(`DELETE FROM dbo.${src} WHERE id BETWEEN 1 AND 5; UPDATE dbo.${src} SET note = N'u' WHERE id = 6;`);
      await q(`INSERT INTO dbo.${src} (id, note) VALUES (100, N'new')`);
      await drain();
      const rows = await target.query(
        `select count(*)::int as n, min(id)::int as lo, max(id)::int as hi from public.${dst}`,
      );
      expect(rows.rows[0]).toEqual({ n: 46, lo: 6, hi: 100 });
      expect((await target.query(`select note from public.${dst} where id = 6`)).rows[0].note).toBe('u');
    } finally {
      await q(`DROP TABLE IF EXISTS dbo.${src}`).catch(() => undefined);
    }
  });

  it('timestamp windows on datetime2(7) and datetimeoffset(7): every row arrives once; money keeps four decimals', async () => {
    const src = `keel_ts_${randomBytes(4).toString('hex')}`;
    // Every value has a 7th fraction digit (100 ns ticks) and the offsets are negative: the window's high bound must
    // be rounded up to the microsecond and computed in UTC, or rows are left behind for good.
    await (
      await pool.request()
    ).query(
      `CREATE TABLE dbo.${src} (id bigint NOT NULL PRIMARY KEY, price money NULL, ts datetime2(7) NOT NULL, tz datetimeoffset(7) NOT NULL)`,
    );
    try {
      await (
        await pool.request()
      ).query(`INSERT INTO dbo.${src} (id, price, ts, tz)
        SELECT n, CAST(n AS money) + 0.1234, DATEADD(nanosecond, 123456700, DATEADD(second, n, CAST('2020-01-01T00:00:00' AS datetime2(7)))),
               TODATETIMEOFFSET(DATEADD(nanosecond, 123456700, DATEADD(second, n, CAST('2020-01-01T00:00:00' AS datetime2(7)))), '-05:00')
          FROM (SELECT TOP (45) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n FROM sys.all_objects) s`);
      for (const column of ['ts', 'tz']) {
        const dst = `ts_${column}_${randomBytes(3).toString('hex')}`;
        await target.query(
          `create table public.${dst} (id bigint primary key, price numeric(19,4), ts timestamp(6), tz timestamptz)`,
        );
        const [t] = parseTransfers(
          [
            {
              name: `mssql_${column}_${randomBytes(3).toString('hex')}`,
              source: { engine: 'sqlserver', connectionSetting: 'X', table: `dbo.${src}` },
              target: { engine: 'postgres', connectionSetting: 'Y', table: `public.${dst}` },
              keyColumns: ['id'],
              boundary: { column, kind: 'timestamp', settleMs: 0 },
              columns: ['id', 'price', 'ts', 'tz'].map((c) => ({ source: c, target: c })),
              batchSize: 10,
              chunkSize: 4,
            },
          ],
          TRANSFER_RULES,
        );
        const svc = new TransferService({
          journal: new SqlServerTransferJournal(pool),
          transfers: [t!],
          connect: (tc) => ({
            source: new SqlServerTransferSource(tc, pool),
            target: new PostgresTransferTarget(tc, target),
          }),
        });
        for (let i = 0; i < 20; i++) {
          const b = await svc.tryCreateBatch(t!.name);
          if (!b) break;
          expect((await svc.run(b.batchId)).state).toBe('committed');
        }
        const r = await target.query(
          `select count(*)::int as n, sum(price)::text as s, min(ts)::text as ts, min(tz at time zone 'UTC')::text as tz from public.${dst}`,
        );
        expect(r.rows[0]).toEqual({
          n: 45,
          s: '1040.5530',
          ts: '2020-01-01 00:00:01.123456',
          tz: '2020-01-01 05:00:01.123456',
        });
      }
    } finally {
      await (await pool.request()).query(`DROP TABLE IF EXISTS dbo.${src}`).catch(() => undefined);
    }
  });
});

// The transfer harnesses for SQL Server (test/contract/transferHarness.ts): the journal in a fresh database made by
// SqlServerHarness (migrated with the real runner, called as the keel_executor login, so the journal procedures are
// proven to need no table rights), and source tables in the database of KEEL_TEST_MSSQL_URL (dropped at close).
import sql from 'mssql';
import { randomBytes } from 'node:crypto';
import { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { SqlServerTransferJournal } from '../../shared/engines/sqlserver/transferJournal.js';
import { SqlServerTransferSource } from '../../shared/engines/sqlserver/transferSource.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import {
  canonicalRowsOnly,
  type CaseColumn,
  type DataCaseSourceHarness,
  type JournalHarness,
  type SourceHarness,
} from '../contract/transferHarness.js';
import { SqlServerHarness } from './sqlserver.harness.js';

const TABLE_NAME = /^keel_src_[0-9a-f]{8}$/;

export class SqlServerJournalHarness implements JournalHarness {
  readonly engine = 'sqlserver';
  private readonly database: SqlServerHarness;
  private readonly pools: SqlServerPool[] = [];

  constructor(url: string) {
    this.database = new SqlServerHarness(url);
  }

  async openJournal(opts: { poolSize?: number } = {}): Promise<SqlServerTransferJournal> {
    // The journal's pool belongs to the host in production (closed with the shared pools); here to the harness.
    const pool = SqlServerPool.create(await this.database.storeConnection(), {
      max: opts.poolSize ?? 8,
      applicationName: 'keel-transfer-journal',
    });
    this.pools.push(pool);
    return new SqlServerTransferJournal(pool);
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.pools.map((p) => p.close()));
    await this.database.close();
  }
}

export class SqlServerSourceHarness implements SourceHarness, DataCaseSourceHarness {
  readonly engine = 'sqlserver';
  private admin: SqlServerPool | undefined;
  private readonly pools: SqlServerPool[] = [];
  private readonly tables: string[] = [];

  constructor(private readonly url: string) {}

  private db(): SqlServerPool {
    this.admin ??= SqlServerPool.create(this.url, { max: 2, applicationName: 'keel-harness' });
    return this.admin;
  }

  async createTable() {
    const table = `keel_src_${randomBytes(4).toString('hex')}`;
    await (
      await this.db().request()
    ).batch(
      `CREATE TABLE dbo.${table} (id bigint NOT NULL PRIMARY KEY, customer nvarchar(100) NULL, amount decimal(12,2) NULL, flag bit NULL)`,
    );
    this.tables.push(table);
    return { source: { engine: 'sqlserver', connectionSetting: 'TEST_SOURCE', table: `dbo.${table}` }, table };
  }

  async insertRows(table: string, from: number, to: number): Promise<void> {
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    const req = await this.db().request();
    req.input('From', sql.BigInt, from);
    req.input('To', sql.BigInt, to);
    await req.query(`INSERT INTO dbo.${table} (id, customer, amount, flag)
      SELECT n, CONCAT(N'customer ', n), CASE WHEN n % 7 = 0 THEN NULL ELSE CAST(ROUND(n * 1.25, 2) AS decimal(12,2)) END,
             CAST(CASE WHEN n % 2 = 0 THEN 1 ELSE 0 END AS bit)
        FROM (SELECT TOP (@To - @From + 1) @From - 1 + ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n
                FROM sys.all_objects a CROSS JOIN sys.all_objects b) s`);
  }

  async updateRow(table: string, id: number): Promise<void> {
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    const req = await this.db().request();
    req.input('Id', sql.BigInt, id);
    await req.query(`UPDATE dbo.${table} SET customer = CONCAT(customer, N' (changed)') WHERE id = @Id`);
  }

  async openSource(t: TransferConfig): Promise<SqlServerTransferSource> {
    const pool = SqlServerPool.create(this.url, { max: 3, applicationName: 'keel-transfer' });
    this.pools.push(pool);
    return new SqlServerTransferSource(t, pool);
  }

  // A data case's table (test/contract/canonicalRowsContract.ts): the case's declared types (test constants), rows
  // bound as parameters and converted by the server from their text (binary: from hex digits, style 2).
  async createCaseTable(columns: CaseColumn[], rows: (string | null)[][]) {
    const table = `keel_src_${randomBytes(4).toString('hex')}`;
    const defs = columns.map(
      (c) => `${c.name} ${c.type} ${c.notNull ? 'NOT NULL' : 'NULL'}${c.key ? ' PRIMARY KEY' : ''}`,
    );
    await (await this.db().request()).batch(`CREATE TABLE dbo.${table} (${defs.join(', ')})`);
    this.tables.push(table);
    const binary = columns.map((c) => /binary/i.test(c.type));
    const values = columns.map((c, i) => (binary[i] ? `CONVERT(${c.type}, @p${i}, 2)` : `CAST(@p${i} AS ${c.type})`));
    for (const row of rows) {
      const req = await this.db().request();
      row.forEach((v, i) => req.input(`p${i}`, binary[i] ? sql.VarChar(sql.MAX) : sql.NVarChar(sql.MAX), v));
      await req.query(
        `INSERT INTO dbo.${table} (${columns.map((c) => c.name).join(', ')}) VALUES (${values.join(', ')})`,
      );
    }
    return { engine: 'sqlserver', connectionSetting: 'TEST_SOURCE', table: `dbo.${table}` };
  }

  async openRowSource(t: TransferConfig) {
    return canonicalRowsOnly(await this.openSource(t));
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.pools.map((p) => p.close()));
    if (!this.admin) return;
    for (const table of this.tables)
      await (await this.admin.request()).batch(`DROP TABLE IF EXISTS dbo.${table}`).catch(() => undefined);
    await this.admin.close().catch(() => undefined);
  }
}

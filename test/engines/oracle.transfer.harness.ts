// The transfer target harness for Oracle (test/contract/transferHarness.ts), on the server at KEEL_TEST_ORACLE_URL
// (oracle://user:password@host:1521/service, e.g. CI's gvenzl/oracle-free container): the KEEL_TRANSFER objects
// migrated in the user's schema, a "KEEL_T_<random>" table per createTable (dropped at close, with its staging
// table). KEEL_TEST_ORACLE_TG=1 turns Transaction Guard on (the service needs COMMIT_OUTCOME).
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import oracledb from 'oracledb';
import { toCanonical } from '../../shared/engines/oracle/canonical.js';
import { createOraclePool } from '../../shared/engines/oracle/session.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { migrateOracleTarget } from '../../shared/engines/oracle/transferMigrate.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { canonicalValue, type LogicalType } from '../../shared/transfer/checksum.js';
import type { CaseColumn, DataCaseTargetHarness, TargetHarness } from '../contract/transferHarness.js';

const ORACLE_SQL_DIR = path.resolve(import.meta.dirname, '../../sql/oracle');
const TABLE_NAME = /^KEEL_T_[0-9A-F]{8}$/;

export function oracleTestUrl(): string | undefined {
  const url = process.env.KEEL_TEST_ORACLE_URL;
  return url && url.trim() ? url.trim() : undefined;
}

export class OracleTargetHarness implements TargetHarness, DataCaseTargetHarness {
  readonly engine = 'oracle';
  private admin: Promise<oracledb.Pool> | undefined;
  private readonly pools: oracledb.Pool[] = [];
  private readonly tables: string[] = [];
  private readonly transfers: string[] = [];
  private readonly holders = new Set<oracledb.Connection>();
  // Connections the targets under test have checked out and not closed yet (what cutApplies interrupts).
  private readonly inUse = new Set<oracledb.Connection>();

  constructor(private readonly url: string) {}

  private pool(): Promise<oracledb.Pool> {
    this.admin ??= (async () => {
      const pool = await createOraclePool(this.url);
      const c = await pool.getConnection();
      try {
        await migrateOracleTarget(c, ORACLE_SQL_DIR);
      } finally {
        await c.close();
      }
      return pool;
    })();
    return this.admin;
  }

  private async withConnection<T>(fn: (c: oracledb.Connection) => Promise<T>): Promise<T> {
    const c = await (await this.pool()).getConnection();
    try {
      return await fn(c);
    } finally {
      await c.close();
    }
  }

  async createTable() {
    const table = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
    await this.withConnection((c) =>
      c.execute(`CREATE TABLE "${table}" ("ID" NUMBER(19) PRIMARY KEY, "CUSTOMER" CLOB, "AMOUNT" NUMBER(12,2),
        "PLACED_AT" TIMESTAMP(6) WITH TIME ZONE, "FLAG" NUMBER(1), "NOTE" VARCHAR2(200 CHAR), "PAYLOAD" BLOB)`),
    );
    this.tables.push(table);
    return {
      target: {
        engine: 'oracle',
        connectionSetting: 'TEST_TARGET',
        table,
        transactionGuard: process.env.KEEL_TEST_ORACLE_TG === '1',
      },
      column: (source: string) => source.toUpperCase(),
    };
  }

  // A data case's table (test/contract/canonicalRowsContract.ts): the case's declared Oracle types (test constants),
  // columns named in upper case.
  async createCaseTable(columns: CaseColumn[]) {
    const table = `KEEL_T_${randomBytes(4).toString('hex').toUpperCase()}`;
    const defs = columns.map(
      (c) => `"${c.name.toUpperCase()}" ${c.type}${c.notNull ? ' NOT NULL' : ''}${c.key ? ' PRIMARY KEY' : ''}`,
    );
    await this.withConnection((c) => c.execute(`CREATE TABLE "${table}" (${defs.join(', ')})`));
    this.tables.push(table);
    return {
      engine: 'oracle',
      connectionSetting: 'TEST_TARGET',
      table,
      transactionGuard: process.env.KEEL_TEST_ORACLE_TG === '1',
    };
  }

  column(source: string): string {
    return source.toUpperCase();
  }

  // Read back with the target's own canonical SQL (toCanonical, as its staging verification reads), in key order.
  async readRows(t: TransferConfig, columns: { target: string; type: string; logical: LogicalType }[]) {
    const table = t.target.table;
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    const refs = columns.map((c) => {
      if (!/^[A-Z][A-Z0-9_]*$/.test(c.target)) throw new Error(`bad column ${c.target}`);
      return toCanonical(`"${c.target}"`, c.logical, c.type.replace(/\(.*$/, '').trim());
    });
    return this.withConnection(async (c) => {
      const r = await c.execute<unknown[]>(
        `SELECT ${refs.join(', ')} FROM "${table}" ORDER BY "${columns[0]!.target}"`,
        [],
        {
          outFormat: oracledb.OUT_FORMAT_ARRAY,
          fetchTypeHandler: (meta: oracledb.Metadata<unknown>) =>
            meta.dbType === oracledb.DB_TYPE_RAW || meta.dbType === oracledb.DB_TYPE_BLOB
              ? { type: oracledb.BUFFER }
              : { type: oracledb.STRING },
        },
      );
      return (r.rows ?? []).map((row) => row.map((v, i) => canonicalValue(columns[i]!.logical, v)));
    });
  }

  async openTarget(t: TransferConfig): Promise<OracleTransferTarget> {
    await this.pool(); // migrated
    const pool = await createOraclePool(this.url);
    this.pools.push(pool);
    this.transfers.push(t.name);
    // The same pool, except that the connections it hands out are known to the harness until they are closed.
    const inUse = this.inUse;
    const tracked = new Proxy(pool, {
      get(target, prop) {
        if (prop === 'getConnection')
          return async (opts?: oracledb.PoolAttributes) => {
            const c = await target.getConnection(opts ?? {});
            inUse.add(c);
            const close = c.close.bind(c);
            c.close = (async (o?: oracledb.CloseConnectionOptions) => {
              inUse.delete(c);
              return o ? close(o) : close();
            }) as typeof c.close;
            return c;
          };
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    return new OracleTransferTarget(t, tracked);
  }

  async narrowAmountScale(t: TransferConfig): Promise<void> {
    const table = t.target.table;
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    // Oracle decreases a NUMBER's scale only on an empty column (ORA-01440): the contract's table is empty here.
    await this.withConnection((c) => c.execute(`ALTER TABLE "${table}" MODIFY ("AMOUNT" NUMBER(12,1))`));
  }

  async countRows(t: TransferConfig): Promise<number> {
    const table = t.target.table;
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    return this.withConnection(async (c) => {
      const r = await c.execute<[number]>(`SELECT COUNT(*) FROM "${table}"`, [], {
        outFormat: oracledb.OUT_FORMAT_ARRAY,
      });
      return Number(r.rows![0]![0]);
    });
  }

  async completion(batchId: string) {
    return this.withConnection(async (c) => {
      const r = await c.execute<[string, number]>(
        `SELECT STATE, FENCED_THROUGH FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = :b`,
        { b: batchId },
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      const row = r.rows?.[0];
      if (!row) return null;
      return {
        state: row[0].toLowerCase() as 'claimed' | 'committed' | 'fenced',
        fencedThrough: Number(row[1]),
      };
    });
  }

  // APPLY_BATCH and TRY_CLAIM both lock the batch's staging registry row first (FOR UPDATE WAIT): holding that lock
  // in an open transaction is what an apply still running holds.
  async holdClaim(batchId: string) {
    const c = await (await this.pool()).getConnection();
    this.holders.add(c);
    const r = await c.execute(`SELECT BATCH_ID FROM KEEL_TRANSFER_STAGED WHERE BATCH_ID = :b FOR UPDATE`, {
      b: batchId,
    });
    if ((r.rows ?? []).length !== 1) throw new Error(`oracle harness: batch ${batchId} is not staged`);
    return {
      release: async () => {
        if (!this.holders.delete(c)) return;
        await c.rollback().catch(() => undefined);
        await c.close().catch(() => undefined);
      },
    };
  }

  // The harness's login may not kill sessions (ALTER SYSTEM KILL SESSION needs a privilege CI's application user
  // lacks), so it breaks the calls in progress on the targets' connections (connection.break(): the server cancels
  // the running call, ORA-01013, and the adapter then closes the connection, which rolls back its transaction). For
  // an apply waiting behind holdClaim that is the same outcome as a cut connection: nothing committed.
  async cutApplies(): Promise<void> {
    await Promise.allSettled([...this.inUse].map((c) => c.break()));
  }

  async close(): Promise<void> {
    for (const c of this.holders) {
      await c.rollback().catch(() => undefined);
      await c.close().catch(() => undefined);
    }
    this.holders.clear();
    await Promise.allSettled(this.pools.map((p) => p.close(0)));
    if (!this.admin) return;
    const pool = await this.admin;
    const c = await pool.getConnection();
    try {
      for (const table of this.tables) await c.execute(`DROP TABLE "${table}" PURGE`).catch(() => undefined);
      for (const name of this.transfers)
        await c.execute(`DROP TABLE "KEEL_STG_${name.toUpperCase()}" PURGE`).catch(() => undefined);
    } finally {
      await c.close();
    }
    await pool.close(0);
  }
}

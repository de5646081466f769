// Default wiring: adapters per transfer from the configured app settings, with one pool per connection setting.
import pg from 'pg';
import path from 'node:path';
import { connectionString, loadTransfers, type TransferConfig } from '../transfer/config.js';
import type { TransferJournal } from '../transfer/journal.js';
import { TransferService } from '../transfer/service.js';
import { pgTransferPoolConfig, transferTimeouts, type TransferTimeouts } from '../transfer/timeouts.js';
import type { Adapters, SourceAdapter, TargetAdapter } from '../transfer/types.js';
import { migrate } from '../engines/postgres/migrate.js';
import { sqlDir } from '../config/sqlDir.js';
import { poolErrorLogger } from '../engines/poolErrors.js';
import { PostgresTransferSource } from '../engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../engines/postgres/transferTarget.js';

export const PG_TARGET_LEDGER = 'keel_transfer.schema_migrations';

// Applies sql/postgres/target/V*.sql to a PostgreSQL target database (idempotent, under an advisory lock).
export async function migratePostgresTarget(pool: pg.Pool, env: NodeJS.ProcessEnv = process.env) {
  return migrate(pool, { dir: path.join(sqlDir(env), 'postgres', 'target'), ledger: PG_TARGET_LEDGER });
}

export interface AdapterFactoryOptions {
  env?: NodeJS.ProcessEnv;
  pgPoolSize?: number;
}

// Creates adapters lazily; pools are shared by transfers that name the same connection setting.
export class AdapterFactory {
  private readonly pgPools = new Map<string, pg.Pool>();
  private readonly migratedTargets = new Map<string, Promise<unknown>>();
  private readonly oraclePools = new Map<string, Promise<import('oracledb').Pool>>();
  private readonly closers: (() => Promise<void>)[] = [];
  private readonly env: NodeJS.ProcessEnv;
  readonly timeouts: TransferTimeouts;

  constructor(private readonly opts: AdapterFactoryOptions = {}) {
    this.env = opts.env ?? process.env;
    this.timeouts = transferTimeouts(this.env); // invalid settings fail here, at startup
  }

  private pgPool(setting: string, what: string): pg.Pool {
    let p = this.pgPools.get(setting);
    if (!p) {
      // Connect, statement, client read, idle-in-transaction and lock timeouts: shared/transfer/timeouts.ts.
      p = new pg.Pool(pgTransferPoolConfig(connectionString(setting, what, this.env), this.timeouts, this.opts.pgPoolSize ?? 4));
      p.on('error', poolErrorLogger('postgres', `transfer pool ${setting}`));
      this.pgPools.set(setting, p);
    }
    return p;
  }

  connect = async (t: TransferConfig): Promise<Adapters> => {
    let source: SourceAdapter;
    let target: TargetAdapter;
    if (t.source.engine === 'postgres') {
      source = new PostgresTransferSource(t, this.pgPool(t.source.connectionSetting, `${t.name}.source`));
    } else {
      const { SqlServerTransferSource, createMssqlPool } = await import('../engines/sqlserver/transferSource.js');
      // Shared per process with the rest of the SQL Server code (closed with the host's shared pools).
      const pool = createMssqlPool(connectionString(t.source.connectionSetting, `${t.name}.source`, this.env), this.timeouts);
      source = new SqlServerTransferSource(t, pool);
    }
    if (t.target.engine === 'postgres') {
      const pool = this.pgPool(t.target.connectionSetting, `${t.name}.target`);
      let m = this.migratedTargets.get(t.target.connectionSetting);
      if (!m) {
        m = migratePostgresTarget(pool, this.env);
        this.migratedTargets.set(t.target.connectionSetting, m);
        m.catch(() => this.migratedTargets.delete(t.target.connectionSetting)); // retried on the next connect
      }
      await m;
      target = new PostgresTransferTarget(t, pool, { stallMs: this.timeouts.stallMs });
    } else {
      const { OracleTransferTarget, createOraclePool } = await import('../engines/oracle/transferTarget.js');
      let pool = this.oraclePools.get(t.target.connectionSetting);
      if (!pool) {
        const what = `${t.name}.target`;
        const connect = connectionString(t.target.connectionSetting, what, this.env);
        pool = createOraclePool(
          t.target.userSetting && t.target.passwordSetting
            ? {
                connectString: connect,
                user: connectionString(t.target.userSetting, what, this.env, 'userSetting'),
                password: connectionString(t.target.passwordSetting, what, this.env, 'passwordSetting'),
              }
            : connect,
          this.timeouts.connectMs,
        );
        this.oraclePools.set(t.target.connectionSetting, pool);
        const p = pool;
        this.closers.push(async () => (await p).close(10));
      }
      pool = pool.catch((err) => {
        this.oraclePools.delete(t.target.connectionSetting);
        throw err;
      });
      await pool;
      if (this.env.KEEL_TRANSFER_MIGRATE_ORACLE === 'true') {
        // Opt-in: Oracle DDL commits implicitly, so enable this on one instance (or run the migration at deploy).
        let m = this.migratedTargets.get(t.target.connectionSetting);
        if (!m) {
          const { migrateOracleTarget } = await import('../engines/oracle/transferMigrate.js');
          const p = await pool;
          m = (async () => {
            const conn = await p.getConnection();
            try {
              return await migrateOracleTarget(conn, path.join(sqlDir(this.env), 'oracle'));
            } finally {
              await conn.close();
            }
          })();
          this.migratedTargets.set(t.target.connectionSetting, m);
          m.catch(() => this.migratedTargets.delete(t.target.connectionSetting));
        }
        await m;
      }
      target = new OracleTransferTarget(t, await pool);
    }
    return { source, target };
  };

  async close(): Promise<void> {
    for (const c of this.closers.splice(0)) await c().catch(() => undefined);
    for (const p of this.pgPools.values()) await p.end().catch(() => undefined);
    this.pgPools.clear();
  }
}

// A service from app settings: transfers from KEEL_TRANSFERS / KEEL_TRANSFERS_FILE (validated now, so bad
// configuration fails at startup), journal supplied by the caller (the control database's engine).
export function createTransferService(journal: TransferJournal, env: NodeJS.ProcessEnv = process.env): { service: TransferService; transfers: TransferConfig[] } | null {
  const transfers = loadTransfers(env);
  if (transfers.length === 0) return null;
  for (const t of transfers) {
    connectionString(t.source.connectionSetting, `${t.name}.source`, env);
    connectionString(t.target.connectionSetting, `${t.name}.target`, env);
  }
  const factory = new AdapterFactory({ env });
  const service = new TransferService({ journal, transfers, connect: factory.connect, onClose: () => factory.close() });
  return { service, transfers };
}

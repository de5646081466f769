// Oracle as a transfer target: one pool per connection setting; the target schema applied on first use only when
// KEEL_TRANSFER_MIGRATE_ORACLE=true (Oracle DDL commits implicitly, so enable it on one instance, or run the
// migration at deploy).
import path from 'node:path';
import type oracledb from 'oracledb';
import { sqlDir } from '../../config/sqlDir.js';
import { connectionString, type TransferConfig } from '../../transfer/config.js';
import type { TargetAdapter } from '../../transfer/types.js';
import type { TransferEndpointOptions, TransferEndpoints } from '../descriptor.js';
import { migrateOracleTarget } from './transferMigrate.js';
import { createOraclePool } from './session.js';
import { OracleTransferTarget } from './transferTarget.js';

export class OracleTransferEndpoints implements TransferEndpoints {
  private readonly pools = new Map<string, Promise<oracledb.Pool>>();
  private readonly migratedTargets = new Map<string, Promise<unknown>>();
  private readonly closers: (() => Promise<void>)[] = [];

  constructor(private readonly opts: TransferEndpointOptions) {}

  async target(t: TransferConfig): Promise<TargetAdapter> {
    const env = this.opts.env;
    let pool = this.pools.get(t.target.connectionSetting);
    if (!pool) {
      const what = `${t.name}.target`;
      const connect = connectionString(t.target.connectionSetting, what, env);
      pool = createOraclePool(
        t.target.userSetting && t.target.passwordSetting
          ? {
              connectString: connect,
              user: connectionString(t.target.userSetting, what, env, 'userSetting'),
              password: connectionString(t.target.passwordSetting, what, env, 'passwordSetting'),
            }
          : connect,
        this.opts.timeouts.connectMs,
      );
      this.pools.set(t.target.connectionSetting, pool);
      const p = pool;
      this.closers.push(async () => (await p).close(10));
    }
    pool = pool.catch((err) => {
      this.pools.delete(t.target.connectionSetting);
      throw err;
    });
    await pool;
    if (env.KEEL_TRANSFER_MIGRATE_ORACLE === 'true') {
      let m = this.migratedTargets.get(t.target.connectionSetting);
      if (!m) {
        const p = await pool;
        m = (async () => {
          const conn = await p.getConnection();
          try {
            return await migrateOracleTarget(conn, path.join(sqlDir(env.KEEL_SQL_DIR), 'oracle'));
          } finally {
            await conn.close();
          }
        })();
        this.migratedTargets.set(t.target.connectionSetting, m);
        m.catch(() => this.migratedTargets.delete(t.target.connectionSetting));
      }
      await m;
    }
    return new OracleTransferTarget(t, await pool, { stallMs: this.opts.timeouts.stallMs });
  }

  async close(): Promise<void> {
    for (const c of this.closers.splice(0)) await c().catch(() => undefined);
  }
}

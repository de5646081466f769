// PostgreSQL as a transfer source and target: one pool per connection setting (a source and a target naming the
// same setting share it), the target's keel_transfer schema applied once per setting before first use.
import path from 'node:path';
import pg from 'pg';
import { sqlDir } from '../../config/sqlDir.js';
import { connectionString, type TransferConfig } from '../../transfer/config.js';
import { pgTransferPoolConfig } from '../../transfer/timeouts.js';
import type { SourceAdapter, TargetAdapter } from '../../transfer/types.js';
import type { TransferEndpointOptions, TransferEndpoints } from '../descriptor.js';
import { poolErrorLogger } from '../poolErrors.js';
import { migrate } from './migrate.js';
import { readCommittedOptions } from './readCommitted.js';
import { PostgresTransferSource } from './transferSource.js';
import { PostgresTransferTarget } from './transferTarget.js';

export const PG_TARGET_LEDGER = 'keel_transfer.schema_migrations';

// Applies sql/postgres/target/V*.sql to a PostgreSQL target database (idempotent, under an advisory lock).
// `sqlRoot`: the sql/ folder (KEEL_SQL_DIR when set); the packaged one by default.
export async function migratePostgresTarget(pool: pg.Pool, sqlRoot?: string) {
  return migrate(pool, { dir: path.join(sqlDir(sqlRoot), 'postgres', 'target'), ledger: PG_TARGET_LEDGER });
}

export class PostgresTransferEndpoints implements TransferEndpoints {
  private readonly pools = new Map<string, pg.Pool>();
  private readonly migratedTargets = new Map<string, Promise<unknown>>();

  constructor(private readonly opts: TransferEndpointOptions) {}

  private pool(setting: string, what: string): pg.Pool {
    let p = this.pools.get(setting);
    if (!p) {
      // Connect, statement, client read, idle-in-transaction and lock timeouts: shared/transfer/timeouts.ts.
      const config = pgTransferPoolConfig(
        connectionString(setting, what, this.opts.env),
        this.opts.timeouts,
        this.opts.poolSize ?? 4,
      );
      // READ COMMITTED whatever the database's default (readCommitted.ts): the target's claim, fence and staging
      // registry and the source's change-capture stamp wait for a lock, then read what the other transaction
      // committed; under a default of REPEATABLE READ or SERIALIZABLE they failed with 40001 instead. The reads that
      // need one snapshot (a change window, a one-read stream) name REPEATABLE READ themselves.
      p = new pg.Pool({ ...config, ...readCommittedOptions(config.connectionString!) });
      p.on('error', poolErrorLogger('postgres', 'transfer', `transfer pool ${setting}`));
      this.pools.set(setting, p);
    }
    return p;
  }

  async source(t: TransferConfig): Promise<SourceAdapter> {
    return new PostgresTransferSource(t, this.pool(t.source.connectionSetting, `${t.name}.source`));
  }

  async target(t: TransferConfig): Promise<TargetAdapter> {
    const pool = this.pool(t.target.connectionSetting, `${t.name}.target`);
    let m = this.migratedTargets.get(t.target.connectionSetting);
    if (!m) {
      m = migratePostgresTarget(pool, this.opts.env.KEEL_SQL_DIR);
      this.migratedTargets.set(t.target.connectionSetting, m);
      m.catch(() => this.migratedTargets.delete(t.target.connectionSetting)); // retried on the next connect
    }
    await m;
    return new PostgresTransferTarget(t, pool, { stallMs: this.opts.timeouts.stallMs });
  }

  async close(): Promise<void> {
    for (const p of this.pools.values()) await p.end().catch(() => undefined);
    this.pools.clear();
  }
}

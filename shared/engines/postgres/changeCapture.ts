// Change capture on a PostgreSQL SOURCE database (sql/postgres/source): the twin of SQL Server Change Tracking that
// transfers with boundary kind 'changes' read (docs/transfer.md, "Deletes"). An operator (or a test) applies it once
// per source database with the table owner's login, then tracks each table:
//   select keel_changes.enable('public.orders', array['id']);
import path from 'node:path';
import type pg from 'pg';
import { sqlDir } from '../../config/sqlDir.js';
import { migrate } from './migrate.js';

export const PG_CHANGES_LEDGER = 'keel_changes.schema_migrations';

// `sqlRoot`: the sql/ folder (KEEL_SQL_DIR when set); the packaged one by default.
export async function migratePostgresChangeCapture(pool: pg.Pool, sqlRoot?: string) {
  return migrate(pool, { dir: path.join(sqlDir(sqlRoot), 'postgres', 'source'), ledger: PG_CHANGES_LEDGER });
}

// npm run migrate: apply Keel's versioned schema to the control database of the configured engine.
//   KEEL_STORE_ENGINE=postgres (default): KEEL_PG_URL
//   KEEL_STORE_ENGINE=sqlserver:          KEEL_SQL_CONNECTION (mssql://… or ADO style; Entra ID supported)
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migratePostgres } from '../shared/engines/postgres/jobStore.js';
import { SqlServerPool } from '../shared/engines/sqlserver/pool.js';
import { migrateSqlServer } from '../shared/engines/sqlserver/migrate.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const engine = process.env.KEEL_STORE_ENGINE ?? 'postgres';

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set: it must point at the ${engine} database to migrate`);
    process.exit(2);
  }
  return value;
}

if (engine === 'postgres') {
  // The owner's URL when the app's own (KEEL_PG_URL) is the least-privilege login (docs/postgres.md).
  const pool = new pg.Pool({ connectionString: process.env.KEEL_PG_MIGRATE_URL || required('KEEL_PG_URL'), max: 1 });
  try {
    const result = await migratePostgres(pool);
    console.log(`postgres: applied ${result.applied.length} migration(s)${result.applied.length ? `: ${result.applied.join(', ')}` : ''}; ${result.alreadyApplied} already applied`);
  } finally {
    await pool.end();
  }
} else if (engine === 'sqlserver') {
  const pool = SqlServerPool.create(required('KEEL_SQL_CONNECTION'), { max: 1, applicationName: 'keel-migrate' });
  try {
    const result = await migrateSqlServer(await pool.get(), { dir: path.join(root, 'sql/sqlserver'), log: (l) => console.log(l) });
    console.log(`sqlserver: applied ${result.applied.length} migration(s); ${result.alreadyApplied} already applied`);
  } finally {
    await pool.close();
  }
} else {
  console.error(`KEEL_STORE_ENGINE must be postgres or sqlserver (got "${engine}")`);
  process.exit(2);
}

import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { migrate, readMigrations } from '../../shared/engines/postgres/migrate.js';
import { POSTGRES_SQL_DIR, migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { createTestDatabase } from '../support/pg.js';

describe('postgres migrations', () => {
  it('concurrent runners apply each migration exactly once under the advisory lock; re-running is a no-op', async () => {
    const url = await createTestDatabase('migrate');
    const pools = Array.from({ length: 3 }, () => new pg.Pool({ connectionString: url, max: 1 }));
    try {
      const results = await Promise.all(pools.map((p) => migratePostgres(p)));
      const files = await readMigrations(POSTGRES_SQL_DIR);
      expect(results.reduce((n, r) => n + r.applied.length, 0)).toBe(files.length);
      const again = await migratePostgres(pools[0]!);
      expect(again).toEqual({ applied: [], alreadyApplied: files.length });
      const { rows } = await pools[0]!.query('select version from keel.schema_migrations order by version');
      expect(rows.map((r) => r.version)).toEqual(files.map((f) => f.version));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('refuses a migration edited after it was applied, and rolls back a failing one', async () => {
    const url = await createTestDatabase('migrate_edit');
    const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-mig-'));
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await writeFile(path.join(dir, 'V001__one.sql'), 'create table public.one (id int);');
      await migrate(pool, { dir, ledger: 'public.test_ledger' });
      await writeFile(path.join(dir, 'V001__one.sql'), 'create table public.one (id bigint);');
      await expect(migrate(pool, { dir, ledger: 'public.test_ledger' })).rejects.toThrow(/V001__one\.sql changed after it was applied/);
      await writeFile(path.join(dir, 'V001__one.sql'), 'create table public.one (id int);');
      await writeFile(path.join(dir, 'V002__bad.sql'), 'create table public.two (id int); select 1/0;');
      await expect(migrate(pool, { dir, ledger: 'public.test_ledger' })).rejects.toThrow(/V002__bad\.sql failed/);
      const { rows } = await pool.query(`select to_regclass('public.two') as t`);
      expect(rows[0].t).toBeNull();
      await writeFile(path.join(dir, 'bad-name.sql'), 'select 1;');
      await expect(readMigrations(dir)).rejects.toThrow(/must be named V<number>__<name>\.sql/);
    } finally {
      await pool.end();
    }
  });
});

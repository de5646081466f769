import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { cp, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { migrate, readMigrations } from '../../shared/engines/postgres/migrate.js';
import { readRepeatableFiles } from '../../shared/engines/migrationFiles.js';
import { POSTGRES_SQL_DIR, migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { postgres } from '../../shared/engines/postgres/index.js';
import { parseSettings } from '../../shared/config/settings.js';
import { createTestDatabase } from '../support/pg.js';

describe('postgres migrations', () => {
  it('concurrent runners apply each migration exactly once under the advisory lock; re-running is a no-op', async () => {
    const url = await createTestDatabase('migrate');
    const pools = Array.from({ length: 3 }, () => new pg.Pool({ connectionString: url, max: 1 }));
    try {
      const results = await Promise.all(pools.map((p) => migratePostgres(p)));
      const files = await readMigrations(POSTGRES_SQL_DIR);
      const logic = await readRepeatableFiles(POSTGRES_SQL_DIR);
      expect(logic.length).toBeGreaterThan(0);
      expect(results.reduce((n, r) => n + r.applied.length, 0)).toBe(files.length + logic.length);
      const again = await migratePostgres(pools[0]!);
      expect(again).toEqual({ applied: [], alreadyApplied: files.length + logic.length });
      const { rows } = await pools[0]!.query('select version from keel.schema_migrations order by version');
      expect(rows.map((r) => r.version)).toEqual(files.map((f) => f.version));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('migrates at start-up from the sql/ folder the KEEL_SQL_DIR setting names (handed down in Settings)', async () => {
    const url = await createTestDatabase('migrate_sql_dir');
    const root = await mkdtemp(path.join(os.tmpdir(), 'keel-sql-dir-'));
    await cp(POSTGRES_SQL_DIR, path.join(root, 'postgres'), { recursive: true });
    await writeFile(
      path.join(root, 'postgres', 'V999__sql_dir_marker.sql'),
      'create table public.sql_dir_marker (id int);',
    );
    const store = await postgres.openJobStore!(parseSettings({ KEEL_PG_URL: url, KEEL_SQL_DIR: root }));
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const { rows } = await pool.query(`select to_regclass('public.sql_dir_marker') as t`);
      expect(rows[0].t).toBe('sql_dir_marker');
    } finally {
      await store.close();
      await pool.end();
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
      await expect(migrate(pool, { dir, ledger: 'public.test_ledger' })).rejects.toThrow(
        /V001__one\.sql changed after it was applied/,
      );
      await writeFile(path.join(dir, 'V001__one.sql'), 'create table public.one (id int);');
      await writeFile(path.join(dir, 'V002__bad.sql'), 'create table public.two (id int); select 1/0;');
      await expect(migrate(pool, { dir, ledger: 'public.test_ledger' })).rejects.toThrow(/V002__bad\.sql failed/);
      const { rows } = await pool.query(`select to_regclass('public.two') as t`);
      expect(rows[0].t).toBeNull();
      await writeFile(path.join(dir, 'bad-name.sql'), 'select 1;');
      await expect(readMigrations(dir)).rejects.toThrow(/must be named V<number>__<name>\.sql or R__<name>\.sql/);
    } finally {
      await pool.end();
    }
  });

  it('re-applies just the repeatable logic script whose text changed, after the versioned ones; a failing one rolls back', async () => {
    const url = await createTestDatabase('migrate_repeatable');
    const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-mig-'));
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const ledger = 'public.rep_ledger';
    const answer = async (fn: string) => (await pool.query(`select public.${fn}() as v`)).rows[0].v as number;
    try {
      await writeFile(path.join(dir, 'V001__tables.sql'), 'create table public.t (id int);');
      await writeFile(
        path.join(dir, 'R__10_one.sql'),
        'create or replace function public.one() returns int language sql as $$ select 1 $$;',
      );
      await writeFile(
        path.join(dir, 'R__20_two.sql'),
        'create or replace function public.two() returns int language sql as $$ select count(*)::int + 2 from public.t $$;',
      );
      expect((await migrate(pool, { dir, ledger })).applied).toEqual([
        'V001__tables.sql',
        'R__10_one.sql',
        'R__20_two.sql',
      ]);
      expect(await migrate(pool, { dir, ledger })).toEqual({ applied: [], alreadyApplied: 3 });

      await writeFile(
        path.join(dir, 'R__20_two.sql'),
        'create or replace function public.two() returns int language sql as $$ select count(*)::int + 20 from public.t $$;',
      );
      expect(await migrate(pool, { dir, ledger })).toEqual({ applied: ['R__20_two.sql'], alreadyApplied: 2 });
      expect(await answer('two')).toBe(20);
      expect(await answer('one')).toBe(1);

      // A new versioned migration runs before the repeatables, and re-applies all of them: a table change may have
      // dropped what they built (here the function is dropped with the column it reads).
      await writeFile(
        path.join(dir, 'V002__more.sql'),
        'alter table public.t add column note text; drop function public.one();',
      );
      await writeFile(
        path.join(dir, 'R__20_two.sql'),
        'create or replace function public.two() returns int language sql as $$ select count(note)::int + 200 from public.t $$;',
      );
      expect((await migrate(pool, { dir, ledger })).applied).toEqual([
        'V002__more.sql',
        'R__10_one.sql',
        'R__20_two.sql',
      ]);
      expect(await answer('two')).toBe(200);
      expect(await answer('one')).toBe(1);

      // A broken logic script changes nothing and stays pending; an edited versioned file is still refused.
      await writeFile(
        path.join(dir, 'R__10_one.sql'),
        'create or replace function public.one() returns int language sql as $$ select 11 $$; select 1/0;',
      );
      await expect(migrate(pool, { dir, ledger })).rejects.toThrow(/repeatable script R__10_one\.sql failed/);
      expect(await answer('one')).toBe(1);
      await writeFile(
        path.join(dir, 'R__10_one.sql'),
        'create or replace function public.one() returns int language sql as $$ select 11 $$;',
      );
      expect((await migrate(pool, { dir, ledger })).applied).toEqual(['R__10_one.sql']);
      expect(await answer('one')).toBe(11);
      await writeFile(path.join(dir, 'V001__tables.sql'), 'create table public.t (id bigint);');
      await expect(migrate(pool, { dir, ledger })).rejects.toThrow(/V001__tables\.sql changed after it was applied/);
    } finally {
      await pool.end();
    }
  });

  it('commits the repeatables with the scripts run after them (the grants), or neither', async () => {
    const url = await createTestDatabase('migrate_always');
    const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-mig-'));
    const grants = path.join(await mkdtemp(path.join(os.tmpdir(), 'keel-mig-always-')), 'grants.sql');
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const ledger = 'public.always_ledger';
    const answer = async () => (await pool.query(`select public.f() as v`)).rows[0].v as number;
    try {
      await writeFile(
        path.join(dir, 'R__10_f.sql'),
        'create or replace function public.f() returns int language sql as $$ select 1 $$;',
      );
      await writeFile(grants, `comment on function public.f() is 'granted';`);
      await migrate(pool, { dir, ledger, always: [grants] });
      expect(await answer()).toBe(1);
      // The function is dropped and re-created (a changed signature), and the script after it fails: the new
      // function must not stay without what that script gives it.
      await writeFile(
        path.join(dir, 'R__10_f.sql'),
        'drop function public.f(); create function public.f() returns int language sql as $$ select 2 $$;',
      );
      await writeFile(grants, `comment on function public.f() is 'granted'; select 1/0;`);
      await expect(migrate(pool, { dir, ledger, always: [grants] })).rejects.toThrow(/grants\.sql .*failed/);
      expect(await answer()).toBe(1);
      const comment = async () =>
        (await pool.query(`select obj_description('public.f()'::regprocedure) as c`)).rows[0].c as string | null;
      expect(await comment()).toBe('granted');
      await writeFile(grants, `comment on function public.f() is 'granted';`);
      expect((await migrate(pool, { dir, ledger, always: [grants] })).applied).toEqual(['R__10_f.sql']);
      expect(await answer()).toBe(2);
      expect(await comment()).toBe('granted');
    } finally {
      await pool.end();
    }
  });
});

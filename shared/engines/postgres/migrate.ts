// Versioned migrations for PostgreSQL: files named V<number>__<name>.sql, applied in order, each in its own
// transaction, recorded in a ledger table, under an advisory lock so two instances never migrate at once.
import { readdir, readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import path from 'node:path';
import type pg from 'pg';

export interface MigrationFile {
  version: number;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

export interface MigrateOptions {
  dir: string; // folder of V<n>__<name>.sql files
  ledger?: string; // ledger table (schema-qualified); default keel.schema_migrations
  lockKey?: number; // advisory lock key; default derived from the ledger name
}

export interface MigrateResult {
  applied: string[];
  alreadyApplied: number;
}

const FILE_PATTERN = /^V(\d+)__([A-Za-z0-9_]+)\.sql$/;
const IDENTIFIER = /^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;

export async function readMigrations(dir: string): Promise<MigrationFile[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const migrations: MigrationFile[] = [];
  for (const file of files) {
    const m = FILE_PATTERN.exec(file);
    if (!m) throw new Error(`migration file ${path.join(dir, file)} must be named V<number>__<name>.sql`);
    const sql = await readFile(path.join(dir, file), 'utf8');
    migrations.push({
      version: Number(m[1]),
      name: m[2]!,
      file,
      sql,
      checksum: createHash('sha256').update(sql).digest('hex'),
    });
  }
  migrations.sort((a, b) => a.version - b.version);
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version === migrations[i - 1]!.version) {
      throw new Error(`two migrations in ${dir} share version ${migrations[i]!.version}`);
    }
  }
  return migrations;
}

function lockKeyFor(ledger: string): number {
  return createHash('sha256').update(`keel-migrate:${ledger}`).digest().readInt32BE(0);
}

export async function migrate(pool: pg.Pool, opts: MigrateOptions): Promise<MigrateResult> {
  const ledger = opts.ledger ?? 'keel.schema_migrations';
  if (!IDENTIFIER.test(ledger)) throw new Error(`ledger table name "${ledger}" is not a plain identifier`);
  const lockKey = opts.lockKey ?? lockKeyFor(ledger);
  const migrations = await readMigrations(opts.dir);
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    // Session-level lock: held across the per-migration transactions, released in finally.
    await client.query('select pg_advisory_lock($1)', [lockKey]);
    const schema = ledger.includes('.') ? ledger.split('.')[0]! : 'public';
    await client.query(`create schema if not exists ${schema}`);
    await client.query(
      `create table if not exists ${ledger} (
         version integer primary key,
         name text not null,
         checksum text not null,
         applied_at timestamptz not null default now())`,
    );
    const done = new Map<number, string>();
    for (const row of (await client.query(`select version, checksum from ${ledger}`)).rows) {
      done.set(Number(row.version), String(row.checksum));
    }
    for (const m of migrations) {
      const previous = done.get(m.version);
      if (previous !== undefined) {
        if (previous !== m.checksum) {
          throw new Error(`migration ${m.file} changed after it was applied (checksum differs); add a new migration instead`);
        }
        continue;
      }
      try {
        await client.query('begin');
        await client.query(m.sql);
        await client.query(`insert into ${ledger} (version, name, checksum) values ($1, $2, $3)`, [m.version, m.name, m.checksum]);
        await client.query('commit');
        applied.push(m.file);
      } catch (err) {
        await client.query('rollback').catch(() => undefined);
        throw new Error(`migration ${m.file} failed: ${(err as Error).message}`, { cause: err });
      }
    }
    return { applied, alreadyApplied: migrations.length - applied.length };
  } finally {
    await client.query('select pg_advisory_unlock($1)', [lockKey]).catch(() => undefined);
    client.release();
  }
}

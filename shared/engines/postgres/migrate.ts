// Migrations for PostgreSQL: versioned files V<number>__<name>.sql applied once in order, each in its own transaction,
// then repeatable logic scripts R__<name>.sql (functions, grants) re-applied whenever their checksum changed, together
// with the always-run scripts in one transaction; recorded in a ledger table (<ledger> and <ledger>_repeatable), under
// an advisory lock so two instances never migrate at once.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { pendingMigrations, pendingRepeatables, readMigrationFiles, readRepeatableFiles } from '../migrationFiles.js';

export interface MigrationFile {
  version: number;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

export interface MigrateOptions {
  dir: string; // folder of V<n>__<name>.sql and R__<name>.sql files
  ledger?: string; // ledger table (schema-qualified); default keel.schema_migrations
  lockKey?: number; // advisory lock key; default derived from the ledger name
  // Scripts run after the pending migrations on every run, in order, in the repeatables' transaction and under the
  // same lock (grants that must cover whatever any migration created). They must be idempotent.
  always?: string[];
}

export interface MigrateResult {
  applied: string[];
  alreadyApplied: number;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;

export async function readMigrations(dir: string): Promise<MigrationFile[]> {
  return (await readMigrationFiles(dir)).map((m) => ({
    version: m.version,
    name: m.name,
    file: m.file,
    sql: m.text,
    checksum: m.checksum,
  }));
}

function lockKeyFor(ledger: string): number {
  return createHash('sha256').update(`keel-migrate:${ledger}`).digest().readInt32BE(0);
}

export async function migrate(pool: pg.Pool, opts: MigrateOptions): Promise<MigrateResult> {
  const ledger = opts.ledger ?? 'keel.schema_migrations';
  if (!IDENTIFIER.test(ledger)) throw new Error(`ledger table name "${ledger}" is not a plain identifier`);
  const lockKey = opts.lockKey ?? lockKeyFor(ledger);
  const migrations = await readMigrations(opts.dir);
  const repeatables = await readRepeatableFiles(opts.dir);
  const repeatableLedger = `${ledger}_repeatable`;
  const client = await pool.connect();
  // pg emits 'error' on a client whose connection ends unexpectedly, even while a query runs: without a listener a
  // cut during a migration (the transfer target's, run through its pool on first use) crashed the process.
  let lost: Error | undefined;
  const onLost = (err: Error) => {
    lost ??= err;
  };
  client.on('error', onLost);
  const applied: string[] = [];
  try {
    // A migration (an index on a large table) and the wait for another runner's lock may take longer than the
    // statement_timeout of the pool it runs on (the job store's): none for this session, restored in finally.
    await client.query('set statement_timeout = 0');
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
    await client.query(
      `create table if not exists ${repeatableLedger} (
         name text primary key,
         checksum text not null,
         applied_at timestamptz not null default now())`,
    );
    const done = new Map<number, string>();
    for (const row of (await client.query(`select version, checksum from ${ledger}`)).rows) {
      done.set(Number(row.version), String(row.checksum));
    }
    for (const m of pendingMigrations(migrations, done)) {
      try {
        await client.query('begin');
        await client.query(m.sql);
        await client.query(`insert into ${ledger} (version, name, checksum) values ($1, $2, $3)`, [
          m.version,
          m.name,
          m.checksum,
        ]);
        await client.query('commit');
        applied.push(m.file);
      } catch (err) {
        await client.query('rollback').catch(() => undefined);
        throw new Error(`migration ${m.file} failed: ${(err as Error).message}`, { cause: err });
      }
    }
    const doneRepeatable = new Map<string, string>();
    for (const row of (await client.query(`select name, checksum from ${repeatableLedger}`)).rows) {
      doneRepeatable.set(String(row.name), String(row.checksum));
    }
    // The repeatables and the scripts that run after them (the roles script) commit together: CREATE OR REPLACE
    // FUNCTION resets SECURITY DEFINER and SET search_path, and a dropped and re-created function loses its grants,
    // which only the roles script puts back. Committed apart, a running app would meet functions it may not execute
    // (or that run without their owner's rights) between the two commits.
    await client.query('begin');
    let current = '';
    try {
      for (const r of pendingRepeatables(repeatables, doneRepeatable, applied.length > 0)) {
        current = `repeatable script ${r.file}`;
        await client.query(r.text);
        await client.query(
          `insert into ${repeatableLedger} (name, checksum) values ($1, $2)
           on conflict (name) do update set checksum = excluded.checksum, applied_at = now()`,
          [r.name, r.checksum],
        );
        applied.push(r.file);
      }
      for (const file of opts.always ?? []) {
        current = `${path.basename(file)} (run after the migrations)`;
        await client.query((await readFile(file, 'utf8')).replace(/^\uFEFF/, ''));
      }
      await client.query('commit');
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw new Error(`${current} failed: ${(err as Error).message}`, { cause: err });
    }
    return { applied, alreadyApplied: migrations.length + repeatables.length - applied.length };
  } finally {
    await client.query('select pg_advisory_unlock($1)', [lockKey]).catch(() => undefined);
    await client.query('reset statement_timeout').catch(() => undefined);
    if (!lost) client.off('error', onLost);
    client.release(lost); // a lost connection is destroyed, not handed out again
  }
}

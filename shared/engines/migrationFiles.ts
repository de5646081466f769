// Migration files, the same for every engine (Flyway's naming):
// - versioned V<number>__<name>.sql (tables, indexes, data): applied once, in version order; the SHA-256 of each
//   file's text is recorded, and a file edited after it was applied is refused;
// - repeatable R__<name>.sql (procedures, functions, packages, grants): written to be re-run (`CREATE OR ALTER`,
//   `create or replace`), applied after the versioned ones in file-name order whenever their checksum changed, and
//   all of them again whenever a versioned migration was applied in the same run (a table change may have dropped
//   or invalidated the logic built on it, e.g. a SQL Server table type recreated with the procedures that take it).
// Engines split the text their own way (PostgreSQL: one script; SQL Server: GO batches; Oracle: "/" blocks).
import { readdir, readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import path from 'node:path';

export interface MigrationFileText {
  version: number;
  name: string;
  file: string;
  text: string; // BOM removed, line endings normalised to \n
  checksum: string;
}

export interface RepeatableFileText {
  name: string; // the file name without R__ and .sql; the ledger's key
  file: string;
  text: string;
  checksum: string;
}

const FILE_PATTERN = /^V(\d+)__([A-Za-z0-9_]+)\.sql$/;
const REPEATABLE_PATTERN = /^R__([A-Za-z0-9_]+)\.sql$/;

async function readSqlText(file: string): Promise<{ text: string; checksum: string }> {
  const text = (await readFile(file, 'utf8')).replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
  return { text, checksum: createHash('sha256').update(text).digest('hex') };
}

async function sqlFileNames(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  return entries.filter((e) => e.isFile() && e.name.endsWith('.sql')).map((e) => e.name);
}

export async function readMigrationFiles(dir: string): Promise<MigrationFileText[]> {
  const migrations: MigrationFileText[] = [];
  for (const name of await sqlFileNames(dir)) {
    if (REPEATABLE_PATTERN.test(name)) continue;
    const m = FILE_PATTERN.exec(name);
    if (!m)
      throw new Error(`migration file ${path.join(dir, name)} must be named V<number>__<name>.sql or R__<name>.sql`);
    migrations.push({ version: Number(m[1]), name: m[2]!, file: name, ...(await readSqlText(path.join(dir, name))) });
  }
  migrations.sort((a, b) => a.version - b.version);
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version === migrations[i - 1]!.version) {
      throw new Error(`two migrations in ${dir} share version ${migrations[i]!.version}`);
    }
  }
  return migrations;
}

// Repeatable scripts in the order they run: by file name (prefix them with a number to order them).
export async function readRepeatableFiles(dir: string): Promise<RepeatableFileText[]> {
  const scripts: RepeatableFileText[] = [];
  for (const name of (await sqlFileNames(dir)).sort()) {
    const m = REPEATABLE_PATTERN.exec(name);
    if (m) scripts.push({ name: m[1]!, file: name, ...(await readSqlText(path.join(dir, name))) });
  }
  return scripts;
}

// The repeatable scripts to (re)apply, given the ledger (name -> checksum): new ones and changed ones, in order;
// every one of them when `schemaChanged` (a versioned migration was applied in this run).
export function pendingRepeatables<T extends { name: string; checksum: string }>(
  all: T[],
  applied: Map<string, string>,
  schemaChanged: boolean,
): T[] {
  return schemaChanged ? all : all.filter((r) => applied.get(r.name) !== r.checksum);
}

// The migrations still to apply, given the ledger (version -> checksum). A file edited after it was applied is refused.
export function pendingMigrations<T extends { version: number; file: string; checksum: string }>(
  all: T[],
  applied: Map<number, string>,
): T[] {
  return all.filter((m) => {
    const previous = applied.get(m.version);
    if (previous === undefined) return true;
    if (previous !== m.checksum) {
      throw new Error(
        `migration ${m.file} changed after it was applied (checksum differs); add a new migration instead`,
      );
    }
    return false;
  });
}

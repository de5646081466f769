// Versioned migration files, the same for every engine: V<number>__<name>.sql, ordered by version, each with the
// SHA-256 of its text so a file edited after it was applied is refused. Engines split the text their own way
// (PostgreSQL: one script; SQL Server: GO batches; Oracle: "/" blocks).
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

const FILE_PATTERN = /^V(\d+)__([A-Za-z0-9_]+)\.sql$/;

export async function readMigrationFiles(dir: string): Promise<MigrationFileText[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const migrations: MigrationFileText[] = [];
  for (const entry of entries) {
    if (!entry.isFile() || !entry.name.endsWith('.sql')) continue;
    const m = FILE_PATTERN.exec(entry.name);
    if (!m) throw new Error(`migration file ${path.join(dir, entry.name)} must be named V<number>__<name>.sql`);
    const text = (await readFile(path.join(dir, entry.name), 'utf8')).replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
    migrations.push({
      version: Number(m[1]),
      name: m[2]!,
      file: entry.name,
      text,
      checksum: createHash('sha256').update(text).digest('hex'),
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

// The migrations still to apply, given the ledger (version -> checksum). A file edited after it was applied is refused.
export function pendingMigrations<T extends { version: number; file: string; checksum: string }>(all: T[], applied: Map<number, string>): T[] {
  return all.filter((m) => {
    const previous = applied.get(m.version);
    if (previous === undefined) return true;
    if (previous !== m.checksum) {
      throw new Error(`migration ${m.file} changed after it was applied (checksum differs); add a new migration instead`);
    }
    return false;
  });
}

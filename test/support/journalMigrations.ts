// The transfer journal's PostgreSQL files alone (tables V020..V039, functions R__030_transfer_journal*), applied to a
// control database that holds no job store: for the transfer tests and the transfer benchmark. No vitest import, so
// bench/ can use it too.
import path from 'node:path';
import os from 'node:os';
import { mkdtemp, copyFile, readdir, rm } from 'node:fs/promises';
import type pg from 'pg';
import { migrate } from '../../shared/engines/postgres/migrate.js';

const repo = path.resolve(import.meta.dirname, '../..');

export function isTransferJournalFile(name: string): boolean {
  const m = /^V(\d+)__/.exec(name);
  return (m !== null && Number(m[1]) >= 20 && Number(m[1]) <= 39) || name.startsWith('R__030_transfer_journal');
}

export async function migrateJournal(pool: pg.Pool, ledger = 'keel.transfer_test_migrations'): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-transfer-journal-'));
  try {
    for (const f of await readdir(path.join(repo, 'sql/postgres')))
      if (isTransferJournalFile(f)) await copyFile(path.join(repo, 'sql/postgres', f), path.join(dir, f));
    await migrate(pool, { dir, ledger });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

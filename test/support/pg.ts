// Per-test-file PostgreSQL databases on the run's server.
import pg from 'pg';
import { inject } from 'vitest';
import { randomBytes } from 'node:crypto';
import { withDatabase, withLogin } from '../../dev/pgAdmin.js';

export function adminUrl(): string {
  return inject('pgAdminUrl');
}

// The same database as the application logs in: keel_app_test, a member of keel_executor (globalSetup), which may
// only execute Keel's public functions. Use it for every store and runtime under test; keep the admin URL (the
// schema owner) for migrations and for the harness's inspections.
export function appUrl(databaseUrl: string): string {
  const login = inject('pgAppLogin');
  return withLogin(databaseUrl, login.user, login.password);
}

// Creates an empty database named keel_<prefix>_<random> and returns its URL.
export async function createTestDatabase(prefix: string): Promise<string> {
  const name = `keel_${prefix.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`); // name is built from [a-z0-9_] only
  } finally {
    await admin.end();
  }
  return withDatabase(adminUrl(), name);
}

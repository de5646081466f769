// One throwaway PostgreSQL cluster per test run (or the server at KEEL_PG_URL); each test file makes its own database.
// Stores under test log in as keel_app_test, a member of keel_executor (EXECUTE on Keel's public functions only, like
// keel_executor on SQL Server); migrations and harness inspections use the admin login, which owns the schema.
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../dev/embeddedPostgres.js';
import { ensureExecutorLogin } from '../../shared/engines/postgres/client.js';
import os from 'node:os';
import path from 'node:path';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgAppLogin: { user: string; password: string };
  }
}

export const TEST_APP_LOGIN = { user: 'keel_app_test', password: 'keel-app-test' };

let server: EmbeddedServer | undefined;

export default async function setup(project: TestProject) {
  let adminUrl = process.env.KEEL_PG_URL;
  if (!adminUrl) {
    const dir = path.join(os.tmpdir(), `keel-test-pg-${process.pid}-${Date.now()}`);
    // The whole folder goes at the end, not just the cluster in it (no empty keel-* folders left behind).
    server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), removeOnStop: dir, fastUnsafe: true });
    adminUrl = server.url;
  }
  await ensureExecutorLogin(adminUrl, TEST_APP_LOGIN.user, TEST_APP_LOGIN.password);
  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgAppLogin', TEST_APP_LOGIN);
  return async () => {
    await server?.stop();
  };
}

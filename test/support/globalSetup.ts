// One throwaway PostgreSQL cluster per test run (or the server at KEEL_PG_URL); each test file makes its own database.
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../shared/engines/postgres/embedded.js';
import os from 'node:os';
import path from 'node:path';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
  }
}

let server: EmbeddedServer | undefined;

export default async function setup(project: TestProject) {
  let adminUrl = process.env.KEEL_PG_URL;
  if (!adminUrl) {
    const dir = path.join(os.tmpdir(), `keel-test-pg-${process.pid}-${Date.now()}`);
    // The whole folder goes at the end, not just the cluster in it (no empty keel-* folders left behind).
    server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), removeOnStop: dir, fastUnsafe: true });
    adminUrl = server.url;
  }
  project.provide('pgAdminUrl', adminUrl);
  return async () => {
    await server?.stop();
  };
}

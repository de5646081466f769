import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const root = path.dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'handlers/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
    globalSetup: ['test/support/globalSetup.ts'],
    // Every runtime a test builds (and every `npm start` a test spawns) loads this fixture folder, never the real
    // handlers/: a user's own handlers and schedules cannot turn the project's suite red (test/handlers/isolation.test.ts).
    // The tests also stand in for the local host, which states its caller's roles in x-ms-client-principal
    // (shared/ops/auth.ts); tests of the hosted modes remove KEEL_TRUST_CLIENT_PRINCIPAL.
    env: {
      KEEL_HANDLERS_DIR: path.join(root, 'test', 'fixtures', 'handlers'),
      KEEL_TRUST_CLIENT_PRINCIPAL: 'local',
    },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 2,
    reporters: ['default'],
  },
});

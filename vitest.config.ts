import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'handlers/**/*.test.ts'],
    globalSetup: ['test/support/globalSetup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 2,
    reporters: ['default'],
    // The tests stand in for the local host, which states its caller's roles in x-ms-client-principal
    // (shared/ops/auth.ts); tests of the hosted modes remove it.
    env: { KEEL_TRUST_CLIENT_PRINCIPAL: 'local' },
  },
});

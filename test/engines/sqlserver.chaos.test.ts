import { describe, it } from 'vitest';
import { defineChaosSuite } from '../contract/chaos.js';
import { SqlServerHarness, mssqlTestUrl } from './sqlserver.harness.js';

const url = mssqlTestUrl();

if (url) {
  describe('chaos: sqlserver', () => {
    defineChaosSuite(() => new SqlServerHarness(url), {
      jobs: 5000,
      workers: 8,
      crashes: 6,
      connectionKills: 3,
      chaosMs: 8000,
      settleMs: 120_000,
    });
  }, 240_000);
} else {
  describe.skip('SQL Server chaos suite skipped: set KEEL_TEST_MSSQL_URL (mssql://user:pass@host:1433/db) to run', () => {
    it('8 workers over 5,000 jobs with crashes and connection kills against a real SQL Server', () => undefined);
  });
}

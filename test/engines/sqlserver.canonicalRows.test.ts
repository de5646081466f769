// The canonical-row contract's data cases from a SQL Server source (whose rows always travel as canonical text) into
// the PostgreSQL target, against the server at KEEL_TEST_MSSQL_URL (the GitHub workflow's mssql service); skipped with
// the reason otherwise.
import { describe } from 'vitest';
import { defineCanonicalRowsContract } from '../contract/canonicalRowsContract.js';
import { mssqlTestUrl } from './sqlserver.harness.js';
import { PostgresTargetHarness } from './postgres.transfer.harness.js';
import { SqlServerSourceHarness } from './sqlserver.transfer.harness.js';

const url = mssqlTestUrl();

if (url)
  describe('canonical rows contract: sqlserver source -> postgres target', () => {
    defineCanonicalRowsContract(
      () => new SqlServerSourceHarness(url),
      () => new PostgresTargetHarness(),
      { source: 'sqlserver', target: 'postgres' },
    );
  });
else
  describe.skip('canonical rows contract: sqlserver source -> postgres target (skipped: KEEL_TEST_MSSQL_URL is not set)', () => {
    defineCanonicalRowsContract(
      () => new SqlServerSourceHarness(''),
      () => new PostgresTargetHarness(),
      { source: 'sqlserver', target: 'postgres' },
    );
  });

// Runs against the server at KEEL_TEST_MSSQL_URL (the GitHub workflow's mssql service); skipped with the reason
// otherwise.
import { describe } from 'vitest';
import { defineTransferSourceContract } from '../contract/transferSourceContract.js';
import { mssqlTestUrl } from './sqlserver.harness.js';
import { SqlServerSourceHarness } from './sqlserver.transfer.harness.js';

const url = mssqlTestUrl();

if (url)
  describe('transfer source contract: sqlserver', () => {
    defineTransferSourceContract(() => new SqlServerSourceHarness(url));
  });
else
  describe.skip('transfer source contract: sqlserver (skipped: KEEL_TEST_MSSQL_URL is not set)', () => {
    defineTransferSourceContract(() => new SqlServerSourceHarness(''));
  });

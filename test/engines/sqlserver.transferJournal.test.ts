// Runs against the server at KEEL_TEST_MSSQL_URL (the GitHub workflow's mssql service); skipped with the reason
// otherwise.
import { describe } from 'vitest';
import { defineTransferJournalContract } from '../contract/transferJournalContract.js';
import { mssqlTestUrl } from './sqlserver.harness.js';
import { SqlServerJournalHarness } from './sqlserver.transfer.harness.js';

const url = mssqlTestUrl();

if (url)
  describe('transfer journal contract: sqlserver', () => {
    defineTransferJournalContract(() => new SqlServerJournalHarness(url));
  });
else
  describe.skip('transfer journal contract: sqlserver (skipped: KEEL_TEST_MSSQL_URL is not set)', () => {
    defineTransferJournalContract(() => new SqlServerJournalHarness(''));
  });

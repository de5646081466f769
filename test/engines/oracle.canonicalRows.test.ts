// The canonical-row contract's data cases from a PostgreSQL source into the Oracle target, against the server at
// KEEL_TEST_ORACLE_URL (the GitHub workflow's oracle service; KEEL_TEST_ORACLE_TG=1 with Transaction Guard); skipped
// with the reason otherwise. The same cases run on the PostgreSQL twin (postgres.canonicalRows.test.ts).
import { describe } from 'vitest';
import { defineCanonicalRowsContract } from '../contract/canonicalRowsContract.js';
import { OracleTargetHarness, oracleTestUrl } from './oracle.transfer.harness.js';
import { PostgresSourceHarness } from './postgres.transfer.harness.js';

const url = oracleTestUrl();

if (url)
  describe('canonical rows contract: postgres source -> oracle target', () => {
    defineCanonicalRowsContract(
      () => new PostgresSourceHarness(),
      () => new OracleTargetHarness(url),
      { source: 'postgres', target: 'oracle' },
    );
  });
else
  describe.skip('canonical rows contract: postgres source -> oracle target (skipped: KEEL_TEST_ORACLE_URL is not set)', () => {
    defineCanonicalRowsContract(
      () => new PostgresSourceHarness(),
      () => new OracleTargetHarness(''),
      { source: 'postgres', target: 'oracle' },
    );
  });

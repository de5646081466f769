// Runs against the server at KEEL_TEST_ORACLE_URL (the GitHub workflow's oracle service; KEEL_TEST_ORACLE_TG=1 for
// Transaction Guard); skipped with the reason otherwise.
import { describe } from 'vitest';
import { defineTargetAdapterContract } from '../contract/targetAdapterContract.js';
import { OracleTargetHarness, oracleTestUrl } from './oracle.transfer.harness.js';

const url = oracleTestUrl();

if (url)
  describe('target adapter contract: oracle', () => {
    defineTargetAdapterContract(() => new OracleTargetHarness(url));
  });
else
  describe.skip('target adapter contract: oracle (skipped: KEEL_TEST_ORACLE_URL is not set)', () => {
    defineTargetAdapterContract(() => new OracleTargetHarness(''));
  });

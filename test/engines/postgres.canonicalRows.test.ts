// The canonical-row path (what the Oracle target receives) on the PostgreSQL twin: a PostgreSQL source made to send
// canonical rows under keel-v1 into the PostgreSQL target, with the data cases of test/contract/canonicalRowsContract.ts.
import { describe } from 'vitest';
import { defineCanonicalRowsContract } from '../contract/canonicalRowsContract.js';
import { PostgresSourceHarness, PostgresTargetHarness } from './postgres.transfer.harness.js';

describe('canonical rows contract: postgres source -> postgres target', () => {
  defineCanonicalRowsContract(
    () => new PostgresSourceHarness(),
    () => new PostgresTargetHarness(),
    { source: 'postgres', target: 'postgres' },
  );
});

import { describe } from 'vitest';
import { defineTransferJournalContract } from '../contract/transferJournalContract.js';
import { PostgresJournalHarness } from './postgres.transfer.harness.js';

describe('transfer journal contract: postgres', () => {
  defineTransferJournalContract(() => new PostgresJournalHarness());
});

import { describe } from 'vitest';
import { defineTransferSourceContract } from '../contract/transferSourceContract.js';
import { PostgresSourceHarness } from './postgres.transfer.harness.js';

describe('transfer source contract: postgres', () => {
  defineTransferSourceContract(() => new PostgresSourceHarness());
});

import { describe } from 'vitest';
import { defineTargetAdapterContract } from '../contract/targetAdapterContract.js';
import { PostgresTargetHarness } from './postgres.transfer.harness.js';

describe('target adapter contract: postgres', () => {
  defineTargetAdapterContract(() => new PostgresTargetHarness());
});

import { describe } from 'vitest';
import { defineJobStoreContract } from '../contract/jobStoreContract.js';
import { PostgresHarness } from './postgres.harness.js';

describe('job store contract: postgres', () => {
  defineJobStoreContract(() => new PostgresHarness());
});

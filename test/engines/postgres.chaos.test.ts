import { describe } from 'vitest';
import { defineChaosSuite } from '../contract/chaos.js';
import { PostgresHarness } from './postgres.harness.js';

describe('chaos: postgres', () => {
  defineChaosSuite(() => new PostgresHarness(), {
    jobs: 5000,
    workers: 8,
    crashes: 6,
    connectionKills: 3,
    chaosMs: 8000,
    settleMs: 90_000,
    flows: 150,
  });
}, 180_000);

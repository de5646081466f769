// A migration run whose connection is cut (found by test/transfer/chaos.test.ts: the transfer target's migration, run
// through the target pool when a process first uses the target). pg emits 'error' on a client whose connection ends
// unexpectedly, even while a query is running; migrate() held its checked-out client without a listener, so a cut
// during a migration crashed the process (an uncaught exception) instead of failing the migration. Now the run
// rejects, the broken client is destroyed, and a run after it completes.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { FaultProxy } from '../support/faultProxy.js';
import { createTestDatabase } from '../support/pg.js';
import { migratePostgresTarget } from '../../shared/engines/postgres/transferEndpoints.js';

describe('a postgres migration run cut mid-way', () => {
  it('rejects without an uncaught error; the next run completes', async () => {
    const url = await createTestDatabase('migrate_cut');
    const u = new URL(url);
    const proxy = await FaultProxy.start(u.hostname, Number(u.port));
    const pool = new pg.Pool({ connectionString: proxy.urlFor(url), max: 1 });
    pool.on('error', () => undefined); // an idle client's loss is the pool's (as in production)
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      for (const [trigger, kind] of [
        [/create or replace function/i, 'cut-after-ms'],
        [/pg_advisory_lock/, 'drop-reply'],
      ] as const) {
        const fired = proxy.arm(
          kind === 'cut-after-ms'
            ? { kind, trigger: (s) => trigger.test(s), delayMs: 0 }
            : { kind, trigger: (s) => trigger.test(s) },
        );
        await expect(migratePostgresTarget(pool)).rejects.toThrow();
        await fired;
        await new Promise((r) => setTimeout(r, 50)); // an 'error' event emitted after the rejection
        expect(uncaught).toEqual([]);
      }
      await migratePostgresTarget(pool);
      const { rows } = await pool.query(`select count(*)::int as n from keel_transfer.schema_migrations`);
      expect(rows[0].n).toBeGreaterThan(0);
    } finally {
      process.off('uncaughtException', onUncaught);
      await pool.end();
      await proxy.close();
    }
  });
});

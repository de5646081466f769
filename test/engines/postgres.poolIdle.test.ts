// The job store's pool keeps an unused connection for KEEL_PG_POOL_IDLE_MS (60 s by default), not pg-pool's 10 s: a
// Worker idle between bursts reopened every connection, ~13-16 ms of server CPU each (bench/README.md). Still bounded,
// so an idle instance gives its connections back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { parseSettings } from '../../shared/config/settings.js';
import { engineNamed } from '../../shared/engines/registry.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

let url: string;
const stores: PostgresJobStore[] = [];

async function open(env: Record<string, string>): Promise<PostgresJobStore> {
  const settings = parseSettings({
    KEEL_PG_URL: appUrl(url),
    KEEL_PG_MIGRATE_URL: url,
    KEEL_PG_POOL_SIZE: '2',
    ...env,
  });
  const store = (await engineNamed('postgres').openJobStore!(settings)) as PostgresJobStore;
  stores.push(store);
  return store;
}

// The store's backends on the server (its application_name is keel).
async function backends(): Promise<number> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()
          and application_name = 'keel'`,
    );
    return rows[0]!.n;
  } finally {
    await admin.end();
  }
}

beforeAll(async () => {
  url = await createTestDatabase('pool_idle');
}, 60_000);

afterAll(async () => {
  for (const s of stores) await s.close();
});

describe('the job store pool idle timeout', () => {
  it('is 60 s by default and KEEL_PG_POOL_IDLE_MS sets it; out of bounds is refused', async () => {
    expect(parseSettings({ KEEL_PG_URL: 'postgres://x@h/d' }).KEEL_PG_POOL_IDLE_MS).toBe(60_000);
    const store = await open({});
    expect(store.pool.options.idleTimeoutMillis).toBe(60_000);
    const set = await open({ KEEL_PG_POOL_IDLE_MS: '300000' });
    expect(set.pool.options.idleTimeoutMillis).toBe(300_000);
    // Connections are never held for ever (0 would) nor dropped at once.
    for (const v of ['0', '999', '3600001'])
      expect(() => parseSettings({ KEEL_PG_URL: 'postgres://x@h/d', KEEL_PG_POOL_IDLE_MS: v })).toThrow(
        /KEEL_PG_POOL_IDLE_MS/,
      );
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });

  it('an idle connection is given back once the timeout passes', async () => {
    const store = await open({ KEEL_PG_POOL_IDLE_MS: '1000' });
    await store.stats();
    expect(store.pool.totalCount).toBeGreaterThan(0);
    // Polled, not timed: a loaded machine only makes it later.
    const deadline = Date.now() + 30_000;
    while (store.pool.totalCount > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(store.pool.totalCount).toBe(0);
    await expect.poll(backends, { timeout: 15_000, interval: 200 }).toBe(0);
  });
});

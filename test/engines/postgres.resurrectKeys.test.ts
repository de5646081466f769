// A resurrect that races an enqueue of the same idempotency key (PostgreSQL): the enqueue's insert is in flight (its
// transaction open) when the resurrect checks the key, and commits while the resurrect inserts. The resurrect then
// leaves its job in the DLQ, as for a key already held; it used to fail with a unique violation (an ERROR in the
// server log, a 500 for the operator) and, inside a bulk resurrect, take every other job of the call down with it.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';

let h: PostgresHarness;
let store: PostgresJobStore;
let owner: pg.Client;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  h = new PostgresHarness();
  store = await h.createStore({ poolSize: 4 });
  owner = await h.connectOwner();
});
afterAll(async () => h?.close());

it('a resurrect racing an enqueue of the same key leaves its job in the DLQ and resurrects the others', async () => {
  const queue = `race-${Date.now()}`;
  const key = 'k-race';
  const [dead, other] = await store.enqueueMany([
    { queue, type: 't', payload: { n: 1 }, idempotencyKey: key },
    { queue, type: 't', payload: { n: 2 } },
  ]);
  await store.cancelMany([dead!.id, other!.id]); // pending: straight to the DLQ, as 'cancelled'
  expect(await h.countRows('dlq', queue)).toBe(2);

  // The producer's enqueue of the key, its transaction still open.
  await owner.query('begin');
  await owner.query('select keel.enqueue_many($1::jsonb)', [
    JSON.stringify([{ queue, type: 't', payload: { n: 3 }, idempotencyKey: key }]),
  ]);
  const resurrect = store.resurrect([dead!.id, other!.id]);
  // The resurrect's insert of the key waits for the open enqueue (the unique index), then the enqueue commits.
  const watcher = await h.connectOwner();
  for (let i = 0; i < 500; i++) {
    const { rows } = await watcher.query<{ n: number }>(
      `select count(*)::int n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and query like '%resurrect%'`,
    );
    if (rows[0]!.n > 0) break;
    await sleep(20);
  }
  await owner.query('commit');
  expect(await resurrect).toEqual([other!.id]);
  expect(await h.countRows('dlq', queue)).toBe(1);
  expect(await h.countRows('hot', queue)).toBe(2); // the enqueued job and the other one
  expect((await h.statsRow(queue)).resurrected).toBe(1);
  expect((await store.stats()).find((s) => s.queue === queue)).toMatchObject({ pending: 2, dlq: 1 });
});

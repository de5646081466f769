// The Worker's statements (claim_and_start, complete_many) go as named statements, parsed once per server
// connection; a connection that cannot run them named (a pooler that lost them, a plan a migration changed) gets the
// call again unnamed, and the store goes on unnamed, with no job claimed or completed twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';

describe('postgres named statements for the claim loop', () => {
  const h = new PostgresHarness();
  let store: PostgresJobStore;
  let admin: pg.Client;

  beforeAll(async () => {
    store = await h.createStore({ poolSize: 1 });
    admin = await h.connectOwner();
  });
  afterAll(async () => {
    await h.close();
  });

  const prepared = async () => {
    // The store's one connection lists its own prepared statements.
    const { rows } = await store.pool.query<{ name: string }>('select name from pg_prepared_statements order by name');
    return rows.map((r) => r.name);
  };

  it('claims and completes through named statements, and falls back to unnamed ones once they are gone', async () => {
    const queue = `named-${Date.now()}`;
    await store.enqueueMany(Array.from({ length: 6 }, () => ({ queue, type: 't' })));
    const claim = () => store.claimAndStart({ workerId: 'w', queues: [queue], limit: 2, leaseSeconds: 60 });

    const first = await claim();
    expect(first).toHaveLength(2);
    expect(await store.completeMany(first.map((j) => ({ jobId: j.id, leaseId: j.leaseId })))).toEqual(
      first.map((j) => ({ jobId: j.id, status: 'ok' })),
    );
    const names = await prepared();
    expect(names.some((n) => n.startsWith('keel_claim_and_start_'))).toBe(true);
    expect(names.some((n) => n.startsWith('keel_complete_many_'))).toBe(true);

    // The server forgets them behind the driver's back (as a pooler's other server connection would not have them):
    // the next calls fail at Bind before anything runs, and are run again unnamed.
    await store.pool.query('deallocate all');
    const second = await claim();
    expect(second).toHaveLength(2);
    expect(second.map((j) => j.id).filter((id) => first.some((f) => f.id === id))).toEqual([]);
    expect(await store.completeMany(second.map((j) => ({ jobId: j.id, leaseId: j.leaseId })))).toEqual(
      second.map((j) => ({ jobId: j.id, status: 'ok' })),
    );
    const third = await claim();
    expect(third).toHaveLength(2);
    expect(await prepared()).toEqual([]); // unnamed from then on
    // A completion fenced by the lease still says lease_lost.
    expect(
      await store.completeMany([{ jobId: third[0]!.id, leaseId: '00000000-0000-4000-8000-000000000000' }]),
    ).toEqual([{ jobId: third[0]!.id, status: 'lease_lost' }]);

    const counts = await admin.query(
      `select (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
              (select count(*) from keel.jobs_hot where queue = $1 and state = 'processing')::int as processing,
              (select count(*) from keel.jobs_hot where queue = $1 and state = 'pending')::int as pending`,
      [queue],
    );
    expect(counts.rows[0]).toEqual({ archived: 4, processing: 2, pending: 0 });
  });
});

// A database whose default_transaction_isolation a DBA set to REPEATABLE READ or SERIALIZABLE (ALTER DATABASE … SET).
// Keel's functions are written for READ COMMITTED: a heartbeat, a progress write or a completion that waits for a row
// lock another transaction holds re-reads the row once that one commits. Under the database's REPEATABLE READ the
// same call failed with 40001 "could not serialize access due to concurrent update" (found by chaos hunt 5, run 1445:
// claims, heartbeats and progress writes of several Workers in an error loop, 130 server ERRORs in 80 s). Now the
// store's and the journal's sessions set READ COMMITTED back as they connect (shared/engines/postgres/readCommitted.ts).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { createJournalPool } from '../../shared/engines/postgres/transferJournal.js';
import { READ_COMMITTED_OPTION, readCommittedOptions } from '../../shared/engines/postgres/readCommitted.js';
import type { LeaseRef } from '../../shared/jobs/contract.js';
import { withClient } from '../../dev/pgAdmin.js';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { until, within } from '../support/until.js';

let url = ''; // the schema owner's
let store: PostgresJobStore;

beforeAll(async () => {
  url = await createTestDatabase('isolation');
  const db = decodeURIComponent(new URL(url).pathname.slice(1));
  await (await PostgresJobStore.connect(appUrl(url), { poolSize: 1, migrateUrl: url })).close();
  await withClient(url, (c) => c.query(`alter database "${db}" set default_transaction_isolation = 'repeatable read'`));
  store = await PostgresJobStore.connect(appUrl(url), { poolSize: 2, migrate: false, applicationName: 'keel-iso' });
});

afterAll(async () => {
  await store?.close();
});

// The job's row updated by another transaction that commits while `call` waits for its lock.
async function behindAWriter<T>(jobId: string, call: () => Promise<T>): Promise<T> {
  const writer = new pg.Client({ connectionString: url, application_name: 'keel-iso-writer' });
  await writer.connect();
  try {
    await writer.query('begin isolation level read committed');
    await writer.query('update keel.jobs_hot set priority = priority where id = $1', [jobId]);
    const p = call();
    p.catch(() => undefined); // awaited below
    await until('the store call waits for the row lock', async () => {
      const r = await writer.query(
        `select 1 from pg_stat_activity where application_name = 'keel-iso' and wait_event_type = 'Lock'`,
      );
      return r.rowCount! > 0;
    });
    await writer.query('commit');
    return await within(p, 10_000, 'the store call');
  } finally {
    await writer.end();
  }
}

async function running(queue: string): Promise<LeaseRef> {
  const { id } = await store.enqueue({ queue, type: 't', payload: {} });
  const [job] = await store.claimAndStart({ workerId: 'w-iso', queues: [queue], limit: 1 });
  expect(job?.id).toBe(id);
  return { jobId: job!.id, leaseId: job!.leaseId };
}

describe("a database whose default isolation is REPEATABLE READ: the store's calls behind a concurrent writer", () => {
  it("the store's and the journal's sessions run READ COMMITTED", async () => {
    const level = `select current_setting('transaction_isolation') as v`;
    const owner = await withClient(url, (c) => c.query<{ v: string }>(level));
    expect(owner.rows[0]!.v).toBe('repeatable read'); // the database's default, as a plain session sees it
    expect((await store.pool.query<{ v: string }>(level)).rows[0]!.v).toBe('read committed');
    const journal = createJournalPool(appUrl(url), { max: 1 });
    try {
      expect((await journal.query<{ v: string }>(level)).rows[0]!.v).toBe('read committed');
    } finally {
      await journal.end();
    }
  });

  it("the user's own startup options still apply (the URL's, else the pool's)", async () => {
    const u = new URL(appUrl(url));
    u.searchParams.set('options', '-c statement_timeout=900');
    const own = await PostgresJobStore.connect(u.toString(), { poolSize: 1, migrate: false });
    try {
      const r = await own.pool.query<{ i: string; t: string }>(
        `select current_setting('transaction_isolation') as i, current_setting('statement_timeout') as t`,
      );
      expect(r.rows[0]).toEqual({ i: 'read committed', t: '900ms' });
    } finally {
      await own.close();
    }
    const plain = 'postgres://a@h:5432/d';
    expect(readCommittedOptions(plain)).toEqual({ connectionString: plain, options: READ_COMMITTED_OPTION });
    expect(readCommittedOptions(plain, '-c a=1').options).toBe(`-c a=1 ${READ_COMMITTED_OPTION}`);
    expect(readCommittedOptions(`${plain}?options=-c%20c%3D3&sslmode=disable`, '-c a=1')).toEqual({
      connectionString: `${plain}?sslmode=disable`,
      options: `-c c=3 ${READ_COMMITTED_OPTION}`,
    });
  });

  it('a heartbeat, a progress write and a completion wait for the writer, then succeed', async () => {
    const ref = await running('iso-a');
    expect((await behindAWriter(ref.jobId, () => store.heartbeat(ref))).status).toBe('ok');
    expect(
      await behindAWriter(ref.jobId, () =>
        store.reportProgress(ref, { fraction: 0.5, done: null, total: null, note: null }),
      ),
    ).toBe('ok');
    expect(await behindAWriter(ref.jobId, () => store.complete(ref))).toBe('ok');
    expect((await store.getJob(ref.jobId))?.location).toBe('archive');
  });
});

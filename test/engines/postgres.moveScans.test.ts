// The one-row moves lock their job row once (sql/postgres/R__010_jobs_functions.sql): fail, cancel, and retry and
// interrupt of a job whose cancel was requested read the row `for update` to decide where it goes, then move that
// locked row (keel._dead_letter_held) instead of looking it up and locking it again through keel._dead_letter; and a
// final move locks the waiting rows of a flow it settles once, before its first delete (keel._lock_settled). What
// is checked is what the server counted: the scans of keel.jobs_hot in the call's transaction (pg_stat_xact_*), the
// locking read and the delete, so two (three when the row is locked twice), whichever plan each one takes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import type { StartedJob } from '../../shared/jobs/contract.js';

describe('postgres one-row moves lock their row once', () => {
  const h = new PostgresHarness();
  let store: PostgresJobStore;
  let owner: pg.Client;

  beforeAll(async () => {
    store = await h.createStore({ poolSize: 2 });
    owner = await h.connectOwner();
  });
  afterAll(async () => {
    await owner?.end();
    await h.close();
  });

  const queue = `scans-${Date.now()}`;

  async function started(cancelRequested: boolean): Promise<StartedJob> {
    await store.enqueue({ queue, type: 't' });
    const [job] = await store.claimAndStart({ workerId: 'w', queues: [queue], limit: 1, leaseSeconds: 60 });
    expect(job).toBeDefined();
    if (cancelRequested) expect(await store.cancel(job!.id)).toBe('cancel_requested');
    return job!;
  }

  // Runs one call in a transaction of its own and answers what it returned, how many times it scanned jobs_hot, and
  // where the job is after it (the transaction commits: the move is real).
  async function scansOf(sql: string, params: unknown[], jobId: string) {
    const scans = async () =>
      (
        await owner.query(
          `select coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0)::int as n
           from pg_stat_xact_user_tables where schemaname = 'keel' and relname = 'jobs_hot'`,
        )
      ).rows[0].n as number;
    await owner.query('begin');
    try {
      const before = await scans();
      const answer = Object.values((await owner.query(sql, params)).rows[0] as Record<string, unknown>)[0];
      const n = (await scans()) - before;
      await owner.query('commit');
      const job = await store.getJob(jobId);
      return { answer, scans: n, location: job?.location, reason: job?.location === 'dlq' ? job.reason : undefined };
    } catch (err) {
      await owner.query('rollback');
      throw err;
    }
  }

  it('fail: one locking read and the delete', async () => {
    const job = await started(false);
    expect(await scansOf('select keel.fail($1, $2, $3, $4)', [job.id, job.leaseId, 'fatal', 'boom'], job.id)).toEqual({
      answer: 'ok',
      scans: 2,
      location: 'dlq',
      reason: 'fatal',
    });
  });

  it('fail of a job whose cancel was requested: cancelled, the row still locked once', async () => {
    const job = await started(true);
    expect(await scansOf('select keel.fail($1, $2, $3, $4)', [job.id, job.leaseId, 'fatal', 'boom'], job.id)).toEqual({
      answer: 'cancelled',
      scans: 2,
      location: 'dlq',
      reason: 'cancelled',
    });
  });

  it('retry and interrupt of a job whose cancel was requested: cancelled, the row locked once', async () => {
    const a = await started(true);
    expect(await scansOf('select keel.retry($1, $2, null, $3, 10)', [a.id, a.leaseId, 'try again'], a.id)).toEqual({
      answer: 'cancelled',
      scans: 2,
      location: 'dlq',
      reason: 'cancelled',
    });
    const b = await started(true);
    expect(await scansOf('select keel.interrupt($1, $2, $3)', [b.id, b.leaseId, 'shutdown'], b.id)).toEqual({
      answer: 'cancelled',
      scans: 2,
      location: 'dlq',
      reason: 'cancelled',
    });
  });

  it('cancel of a pending job: the row locked once', async () => {
    const { id } = await store.enqueue({ queue, type: 't', runAt: new Date(Date.now() + 3_600_000) });
    expect(await scansOf('select keel.cancel($1)', [id], id)).toEqual({
      answer: 'cancelled',
      scans: 2,
      location: 'dlq',
      reason: 'cancelled',
    });
  });

  // The many-row moves that hold their rows before they move them (cancel_many, a flow's settle) move them as held,
  // too: the scans are the locking reads and the delete, none of them of a row already locked.
  it('cancel_many of a pending job: its rows read and locked once each, then the delete', async () => {
    const { id } = await store.enqueue({ queue, type: 't', runAt: new Date(Date.now() + 3_600_000) });
    // Scans of jobs_hot: the named waiting rows, the lock of the others (one probe per id), the named rows with
    // dependents, the named rows' states under the lock, and the delete: 5 (a second lock of the row: 6).
    const r = await scansOf('select status from keel.cancel_many($1::bigint[])', [[id]], id);
    expect(r).toEqual({ answer: 'cancelled', scans: 5, location: 'dlq', reason: 'cancelled' });
  });

  it("a flow's settle: the failed parent's waiting child is dead-lettered without being locked again", async () => {
    const parent = await started(false);
    const { id: child } = await store.enqueue({ queue, type: 't', after: [parent.id] });
    const r = await scansOf('select keel.fail($1, $2, $3, $4)', [parent.id, parent.leaseId, 'fatal', 'boom'], child);
    // The parent: its locking read and its delete (2); the child: locked before the delete (keel._lock_settled), its
    // state read, and its delete (3): 5 (locked again by keel._parents_finished, as it was: 6).
    expect(r).toEqual({ answer: 'ok', scans: 5, location: 'dlq', reason: 'parent_failed' });
  });

  // A final move locks the waiting rows it settles once, before its first delete (keel._lock_settled), and settles
  // them as held: keel._parents_finished and the cascade's own dead-letter moves lock none of them again (they did:
  // a second probe of each, and of a cascade's deeper rows a third, every one after the move's deletes).
  it('a complete of a parent: its waiting child locked once, before the delete, then released', async () => {
    const parent = await started(false);
    const { id: child } = await store.enqueue({ queue, type: 't', after: [parent.id] });
    const leases = JSON.stringify([{ jobId: parent.id, leaseId: parent.leaseId }]);
    const r = await scansOf('select ok from keel.complete_many($1::jsonb)', [leases], child);
    // The parent: its locking read and its delete (2); the child: locked (keel._lock_settled), its state read, made
    // due, its queue read for the wake-up (4): 6 (locked again: 7).
    expect(r).toEqual({ answer: [parent.id], scans: 6, location: 'hot', reason: undefined });
    expect(await store.getJob(child)).toMatchObject({ state: 'pending' });
  });

  it("a failure's cascade (child, grandchild): each waiting row locked once, before the first delete", async () => {
    const parent = await started(false);
    const { id: child } = await store.enqueue({ queue, type: 't', after: [parent.id] });
    const { id: grandchild } = await store.enqueue({ queue, type: 't', after: [child] });
    const r = await scansOf(
      'select keel.fail($1, $2, $3, $4)',
      [parent.id, parent.leaseId, 'fatal', 'boom'],
      grandchild,
    );
    // The parent: its locking read and its delete (2); the cascade locked at once, one probe a row (2); each of the
    // child and the grandchild: its state read and its delete (4): 8 (the child's and the grandchild's locks taken
    // again by the settle, and the grandchild's a third time by the child's move: 12).
    expect(r).toEqual({ answer: 'ok', scans: 8, location: 'dlq', reason: 'parent_failed' });
    expect(await store.getJob(child)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
  });

  it("zombie rescue dead-lettering a parent: its waiting child locked once, with the pass's others", async () => {
    const zq = `${queue}-zombie`;
    await store.updateQueue(zq, { zombiePolicy: 'dlq' });
    await store.enqueue({ queue: zq, type: 't' });
    const [parent] = await store.claimAndStart({ workerId: 'w', queues: [zq], limit: 1, leaseSeconds: 60 });
    const { id: child } = await store.enqueue({ queue: zq, type: 't', after: [parent!.id] });
    await h.backdate(parent!.id, 'heartbeat_at', 3600);
    const r = await scansOf('select dead_lettered from keel.rescue_zombies(100)', [], child);
    // The pass's three skip-locked reads (fetched, processing, expired) and its read of the rows with dependents (4);
    // the child locked (1); the parent's locking read and delete (2); the child's state read and delete (2): 9
    // (the child locked again by the parent's move and by its settle: 11).
    expect(r).toEqual({ answer: 2, scans: 9, location: 'dlq', reason: 'parent_failed' });
    expect(await store.getJob(parent!.id)).toMatchObject({ location: 'dlq', reason: 'zombie' });
  });

  it('a lost lease moves nothing', async () => {
    const job = await started(false);
    const other = '00000000-0000-4000-8000-000000000000';
    const r = await scansOf('select keel.fail($1, $2, $3, $4)', [job.id, other, 'fatal', 'boom'], job.id);
    expect(r).toMatchObject({ answer: 'lease_lost', location: 'hot' });
    expect(await store.fail({ jobId: job.id, leaseId: job.leaseId }, 'fatal', 'done')).toBe('ok');
  });
});

// A move that releases an idempotency key racing a flow enqueue of that key (PostgreSQL). An enqueue with `after`
// locks its parents first (a waiting parent included), then inserts its keyed jobs; an insert of a key whose hot row
// another transaction has deleted, not yet committed, waits for that transaction (the unique index). A final move
// used to delete its rows first and lock the waiting children of the parents among them after: a completion batch
// (or a failure) holding a job of the key and the parent of the enqueue's waiting parent then waited for the
// enqueue's lock while the enqueue waited for its delete: `deadlock detected`, one of the two calls failed. The moves
// now lock the waiting rows they will settle before they delete anything (sql/README.md, Lock order 3a). The same
// wait, two more ways: a resurrect that locked a revived job's running parent after inserting the job's key (now
// every row first, then the inserts), and an enqueue that flagged a duplicate { index } parent after its inserts
// while another enqueue, naming that parent by id, waited for its key (now the key's holder is locked first).
// Staged deterministically: an owner transaction holds another key of the enqueue's batch, so the enqueue waits
// there holding its parent's lock until the move is queued behind it. A deadlock fails one of the two calls (40P01),
// which each test checks.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import type { StartedJob } from '../../shared/jobs/contract.js';

let h: PostgresHarness;
let store: PostgresJobStore;
let owner: pg.Client;
let watcher: pg.Client;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  h = new PostgresHarness();
  store = await h.createStore({ poolSize: 6 });
  owner = await h.connectOwner();
  watcher = await h.connectOwner();
});
afterAll(async () => h?.close());

// Waits until a backend running a statement that matches `like` waits for a lock.
async function waitsForLock(like: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    const { rows } = await watcher.query<{ n: number }>(
      `select count(*)::int n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and query like $1`,
      [like],
    );
    if (rows[0]!.n > 0) return;
    await sleep(20);
  }
  const { rows } = await watcher.query(
    `select pid, state, wait_event_type, wait_event, left(query, 80) q from pg_stat_activity where datname = current_database()`,
  );
  throw new Error(`nothing waits for a lock in ${like}: ${JSON.stringify(rows)}`);
}

const ref = (j: StartedJob) => ({ jobId: j.id, leaseId: j.leaseId });

// A running parent A with a waiting child X, and a running job J of queue/type/key (q, 't', key). Returns them
// started, and X's id.
async function flowAndKeyedJob(q: string, key: string, parentKey?: string) {
  const [a, x] = await store.enqueueMany([
    {
      queue: q,
      type: parentKey ? 't' : 'p',
      payload: { n: parentKey ? 1 : 0 },
      ...(parentKey ? { idempotencyKey: parentKey } : {}),
    },
    { queue: q, type: 'c', after: [{ index: 0 }] },
  ]);
  const j = parentKey
    ? undefined
    : (await store.enqueueMany([{ queue: q, type: 't', payload: { n: 1 }, idempotencyKey: key }]))[0];
  const started = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 5 });
  return {
    a: started.find((s) => s.id === a!.id)!,
    j: j ? started.find((s) => s.id === j.id)! : undefined,
    x: x!.id,
  };
}

// The enqueue: a job of another key first (the owner's open transaction holds it, so the enqueue waits there with
// X locked), then a job of `key` (J's), both after X.
async function stagedEnqueue(q: string, key: string, x: string) {
  await owner.query('begin');
  await owner.query('select keel.enqueue_many($1::jsonb)', [
    JSON.stringify([{ queue: q, type: 't', payload: { n: 9 }, idempotencyKey: `a-${key}` }]),
  ]);
  const enqueue = store.enqueueMany([
    { queue: q, type: 't', payload: { n: 9 }, idempotencyKey: `a-${key}`, after: [x] },
    { queue: q, type: 't', payload: { n: 1 }, idempotencyKey: key, after: [x] },
  ]);
  enqueue.catch(() => undefined);
  await waitsForLock('%enqueue_many%');
  return { enqueue }; // not the promise itself: an async function's caller would wait for it
}

it('a completion batch releasing a key and a flow enqueue of that key after a waiting child: no deadlock', async () => {
  const q = `fk-complete-${Date.now()}`;
  const { a, j, x } = await flowAndKeyedJob(q, 'b-key');
  const { enqueue } = await stagedEnqueue(q, 'b-key', x);
  // One batch: A (X's parent) and J (the key). It must wait for X, which the enqueue holds.
  const complete = store.completeMany([ref(a), ref(j!)]);
  complete.catch(() => undefined);
  await waitsForLock('%complete_many%');
  await owner.query('rollback'); // the enqueue goes on: its next key is J's
  const [enq, done] = await Promise.allSettled([enqueue, complete]);
  expect(enq.status === 'rejected' ? String(enq.reason) : 'ok').toBe('ok');
  expect(done.status === 'rejected' ? String(done.reason) : 'ok').toBe('ok');
  expect((done as PromiseFulfilledResult<{ status: string }[]>).value.map((r) => r.status)).toEqual(['ok', 'ok']);
  // The enqueue saw J still hot (the batch waited for X before deleting it): its keyed job is J, a duplicate.
  const got = (enq as PromiseFulfilledResult<{ id: string; duplicate: boolean }[]>).value;
  expect(got[1]).toEqual({ id: j!.id, duplicate: true });
  // A succeeded, so X is due; the enqueue's new child waits for X.
  expect(await store.getJob(x)).toMatchObject({ location: 'hot', state: 'pending' });
  expect(await store.getJob(got[0]!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
});

it('a failure releasing its own key and a flow enqueue of that key after its waiting child: no deadlock', async () => {
  const q = `fk-fail-${Date.now()}`;
  const { a, x } = await flowAndKeyedJob(q, 'b-key', 'b-key');
  const { enqueue } = await stagedEnqueue(q, 'b-key', x);
  // A fails: its cascade takes X (dead-lettered as parent_failed), which the enqueue holds.
  const fail = store.fail(ref(a), 'fatal', 'boom');
  fail.catch(() => undefined);
  await waitsForLock('%fail%');
  await owner.query('rollback');
  const [enq, failed] = await Promise.allSettled([enqueue, fail]);
  expect(enq.status === 'rejected' ? String(enq.reason) : 'ok').toBe('ok');
  expect(failed.status === 'rejected' ? String(failed.reason) : failed.value).toBe('ok');
  const got = (enq as PromiseFulfilledResult<{ id: string; duplicate: boolean }[]>).value;
  expect(got[1]).toEqual({ id: a.id, duplicate: true });
  // X and the enqueue's new child went to the DLQ with A's failure.
  expect(await store.getJob(x)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
  expect(await store.getJob(got[0]!.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
});

it('a resurrect of a keyed child and a flow enqueue of its key after its running parent: no deadlock', async () => {
  const q = `fk-resurrect-${Date.now()}`;
  // P runs; its child C (keyed) was cancelled while it waited: C is in the DLQ, its edge from P open again once revived.
  const [p, c] = await store.enqueueMany([
    { queue: q, type: 'p', payload: { n: 0 } },
    { queue: q, type: 't', payload: { n: 1 }, idempotencyKey: 'b-key', after: [{ index: 0 }] },
  ]);
  await store.claimAndStart({ workerId: 'w', queues: [q], limit: 5 });
  expect(await store.cancel(c!.id)).toBe('cancelled');
  // The enqueue: after P (locked first), keys a-b-key (held by the owner's open transaction: it waits there) and b-key.
  await owner.query('begin');
  await owner.query('select keel.enqueue_many($1::jsonb)', [
    JSON.stringify([{ queue: q, type: 't', payload: { n: 9 }, idempotencyKey: 'a-b-key' }]),
  ]);
  const enqueue = store.enqueueMany([
    { queue: q, type: 't', payload: { n: 9 }, idempotencyKey: 'a-b-key', after: [p!.id] },
    { queue: q, type: 't', payload: { n: 1 }, idempotencyKey: 'b-key', after: [p!.id] },
  ]);
  enqueue.catch(() => undefined);
  await waitsForLock('%enqueue_many%');
  // The resurrect of C (key b-key) must wait for P, which the enqueue holds.
  const resurrect = store.resurrect([c!.id]);
  resurrect.catch(() => undefined);
  await waitsForLock('%resurrect%');
  await owner.query('rollback');
  const [enq, back] = await Promise.allSettled([enqueue, resurrect]);
  expect(enq.status === 'rejected' ? String(enq.reason) : 'ok').toBe('ok');
  expect(back.status === 'rejected' ? String(back.reason) : 'ok').toBe('ok');
  // The enqueue went first: its b-key job holds the key, so C stays in the DLQ.
  const got = (enq as PromiseFulfilledResult<{ id: string; duplicate: boolean }[]>).value;
  expect(got.map((g) => g.duplicate)).toEqual([false, false]);
  expect((back as PromiseFulfilledResult<string[]>).value).toEqual([]);
  expect(await store.getJob(c!.id)).toMatchObject({ location: 'dlq' });
});

it('two flow enqueues sharing a child key, one naming the parent by id, one by a duplicate of its key: no deadlock', async () => {
  const q = `fk-dupparent-${Date.now()}`;
  const [z] = await store.enqueueMany([{ queue: q, type: 'p', payload: { n: 0 }, idempotencyKey: 'z-key' }]);
  // The first enqueue names Z by id (locked first), then waits at a-b-key (the owner's open transaction).
  await owner.query('begin');
  await owner.query('select keel.enqueue_many($1::jsonb)', [
    JSON.stringify([{ queue: q, type: 't', payload: { n: 9 }, idempotencyKey: 'a-b-key' }]),
  ]);
  const byId = store.enqueueMany([
    { queue: q, type: 't', payload: { n: 9 }, idempotencyKey: 'a-b-key', after: [z!.id] },
    { queue: q, type: 't', payload: { n: 1 }, idempotencyKey: 'b-key', after: [z!.id] },
  ]);
  byId.catch(() => undefined);
  await waitsForLock('%enqueue_many%');
  // The second enqueues Z again (its key: a duplicate, Z itself) and a child of b-key after it.
  const byKey = store.enqueueMany([
    { queue: q, type: 'p', payload: { n: 0 }, idempotencyKey: 'z-key' },
    { queue: q, type: 't', payload: { n: 1 }, idempotencyKey: 'b-key', after: [{ index: 0 }] },
  ]);
  byKey.catch(() => undefined);
  for (let i = 0; i < 1000; i++) {
    const { rows } = await watcher.query<{ n: number }>(
      `select count(*)::int n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and query like '%enqueue_many%'`,
    );
    if (rows[0]!.n >= 2) break;
    await sleep(20);
  }
  await owner.query('rollback');
  const [a, b] = await Promise.allSettled([byId, byKey]);
  expect(a.status === 'rejected' ? String(a.reason) : 'ok').toBe('ok');
  expect(b.status === 'rejected' ? String(b.reason) : 'ok').toBe('ok');
  const first = (a as PromiseFulfilledResult<{ id: string; duplicate: boolean }[]>).value;
  const second = (b as PromiseFulfilledResult<{ id: string; duplicate: boolean }[]>).value;
  // One b-key job, after Z, whichever enqueue inserted it; Z is a duplicate of itself.
  expect(second[0]).toEqual({ id: z!.id, duplicate: true });
  expect(second[1]!.id).toBe(first[1]!.id);
  expect(await store.getJob(first[1]!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
});

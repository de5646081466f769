// The job store contract suite: written once, run against every engine through its EngineHarness.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  CANCEL_MANY_CHUNK,
  IdempotencyConflictError,
  STATS_DUE_COUNT_CAP,
  TEXT_SEARCH_SCAN_ROWS_MAX,
} from '../../shared/jobs/contract.js';
import type {
  AuditEntry,
  AuditSearch,
  ClaimedJob,
  EnqueueRequest,
  JobStore,
  LeaseRef,
  StartedJob,
  WorkerRegistration,
} from '../../shared/jobs/contract.js';
import { LIMITS, MAX_RETRY_DELAY_MS, ValidationError } from '../../shared/jobs/validate.js';
import { normalizeProgress, resultJson } from '../../shared/jobs/progress.js';
import { jobLogLine } from '../../shared/jobs/jobLog.js';
import { JOB_ATTEMPT_ERROR_CHARS, JOB_ATTEMPTS_KEPT, jobTimeline } from '../../shared/jobs/attempts.js';
import type { EngineHarness, PillarTable } from './harness.js';
import { seededRandom } from '../support/seededRandom.js';
import { flowJobs, flowResult, type Flow } from '../../packages/client/src/flow.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';

const ref = (j: ClaimedJob): LeaseRef => ({ jobId: j.id, leaseId: j.leaseId });
let queueSeq = 0;
// Every test uses its own queue, so tests share one database without seeing each other's jobs.
const freshQueue = (label: string) => `${label}-${++queueSeq}-${Math.random().toString(36).slice(2, 7)}`;
const STALE_LEASE = '00000000-0000-4000-8000-000000000000';

// A processor's registration as the registry stores it (shared/jobs/presence.ts builds the real one).
const workerRow = (workerId: string, extra: Partial<WorkerRegistration> = {}): WorkerRegistration => ({
  workerId,
  host: 'host-a',
  instanceId: null,
  pid: 4242,
  appVersion: '1.2.3',
  buildId: null,
  queues: null,
  concurrency: 32,
  startedAt: new Date(Date.now() - 60_000),
  jobsDone: 0,
  ...extra,
});

export function defineJobStoreContract(makeHarness: () => EngineHarness): void {
  let h: EngineHarness;
  let store: JobStore;

  async function where(id: string): Promise<PillarTable[]> {
    const found: PillarTable[] = [];
    for (const t of ['hot', 'archive', 'dlq'] as PillarTable[]) if ((await h.ids(t)).includes(id)) found.push(t);
    return found;
  }

  async function claimOne(queue: string, workerId = 'w1'): Promise<ClaimedJob> {
    const [job] = await store.claimNext({ workerId, queues: [queue], limit: 1 });
    if (!job) throw new Error(`nothing to claim in ${queue}`);
    return job;
  }

  async function startedJob(queue: string, extra: Record<string, unknown> = {}): Promise<ClaimedJob> {
    await store.enqueue({ queue, type: 't', payload: { n: 1 }, ...extra });
    const job = await claimOne(queue);
    expect((await store.start(ref(job))).status).toBe('ok');
    return job;
  }

  beforeAll(async () => {
    h = makeHarness();
    store = await h.createStore({ poolSize: 12 });
  });
  afterAll(async () => {
    await h?.close();
    // Every test above, the races included, on engines that count deadlocks: none may have happened.
    const deadlocks = (await h?.deadlocks?.()) ?? [];
    if (deadlocks.length)
      throw new Error(`${h.engine}: deadlocks during the job store contract:\n${deadlocks.join('\n')}`);
  });

  describe('enqueue', () => {
    it('enqueues single and batch jobs into the hot table as pending', async () => {
      const q = freshQueue('enq');
      const one = await store.enqueue({ queue: q, type: 'a', payload: { x: 1 }, tags: ['t1'], priority: 3 });
      expect(one.duplicate).toBe(false);
      const many = await store.enqueueMany([
        { queue: q, type: 'b', payload: [1, 2] },
        { queue: q, type: 'c' },
      ]);
      expect(many).toHaveLength(2);
      expect(new Set([one.id, ...many.map((m) => m.id)]).size).toBe(3);
      expect(await h.countRows('hot', q)).toBe(3);
      const rec = await store.getJob(one.id);
      expect(rec).toMatchObject({
        location: 'hot',
        state: 'pending',
        queue: q,
        type: 'a',
        payload: { x: 1 },
        tags: ['t1'],
        priority: 3,
        attempts: 0,
      });
    });

    it('returns the existing id for a duplicate idempotency key among hot jobs, in batch and single calls', async () => {
      const q = freshQueue('idem');
      const key = `key-${q}`;
      const first = await store.enqueue({ queue: q, type: 't', idempotencyKey: key });
      const again = await store.enqueue({ queue: q, type: 't', idempotencyKey: key });
      expect(again).toEqual({ id: first.id, duplicate: true });
      const batch = await store.enqueueMany([
        { queue: q, type: 't', idempotencyKey: `${key}-b` },
        { queue: q, type: 't', idempotencyKey: `${key}-b` },
        { queue: q, type: 't', idempotencyKey: key },
      ]);
      expect(batch[0]!.duplicate).toBe(false);
      expect(batch[1]).toEqual({ id: batch[0]!.id, duplicate: true });
      expect(batch[2]).toEqual({ id: first.id, duplicate: true });
      expect(await h.countRows('hot', q)).toBe(2);
    });

    it('scopes idempotency keys to (queue, type): the same key in another queue or type is another job', async () => {
      const q = freshQueue('idem-scope');
      const key = `order-${q}`;
      // An attacker enqueues the key first, on its own queue and under another type of the victim's queue.
      const squatA = await store.enqueue({
        queue: `${q}-attacker`,
        type: 'charge',
        payload: { to: 'x' },
        idempotencyKey: key,
      });
      const squatB = await store.enqueue({ queue: q, type: 'refund', payload: { to: 'x' }, idempotencyKey: key });
      const real = await store.enqueue({ queue: q, type: 'charge', payload: { to: 'y' }, idempotencyKey: key });
      expect(real.duplicate).toBe(false);
      expect(new Set([squatA.id, squatB.id, real.id]).size).toBe(3);
      expect(await store.getJob(real.id)).toMatchObject({ queue: q, type: 'charge', payload: { to: 'y' } });
    });

    it('refuses a key held with another payload as a conflict (nothing enqueued), and counts the same payload as a duplicate', async () => {
      const q = freshQueue('idem-conflict');
      const key = `charge-${q}`;
      // A predictable producer key taken first with the attacker's payload.
      const squat = await store.enqueue({
        queue: q,
        type: 'charge',
        payload: { amount: 1, to: 'attacker' },
        idempotencyKey: key,
      });
      const err = await store
        .enqueueMany([
          { queue: q, type: 'charge', payload: { other: true } },
          { queue: q, type: 'charge', payload: { amount: 1, to: 'merchant' }, idempotencyKey: key },
        ])
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(IdempotencyConflictError);
      expect(err).toMatchObject({ index: 1, queue: q, type: 'charge', idempotencyKey: key });
      expect((err as IdempotencyConflictError).field(2)).toBe('jobs[1].idempotencyKey');
      // The whole batch was refused: only the squatter's job is there.
      expect(await h.countRows('hot', q)).toBe(1);
      await expect(
        store.enqueue({ queue: q, type: 'charge', payload: { amount: 1, to: 'merchant' }, idempotencyKey: key }),
      ).rejects.toThrow(IdempotencyConflictError);
      // The same payload is a true duplicate.
      expect(
        await store.enqueue({ queue: q, type: 'charge', payload: { amount: 1, to: 'attacker' }, idempotencyKey: key }),
      ).toEqual({ id: squat.id, duplicate: true });
      // Inside one batch too: a key repeated with another payload is a conflict.
      await expect(
        store.enqueueMany([
          { queue: q, type: 'charge', payload: 1, idempotencyKey: `${key}-b` },
          { queue: q, type: 'charge', payload: 2, idempotencyKey: `${key}-b` },
        ]),
      ).rejects.toMatchObject({ name: 'IdempotencyConflictError', index: 1 });
      expect(await h.countRows('hot', q)).toBe(1);
    });

    it('reserves "schedule:" keys for the scheduler: enqueue and enqueueMany refuse them', async () => {
      const q = freshQueue('idem-reserved');
      await expect(
        store.enqueue({
          queue: q,
          type: 't',
          idempotencyKey: 'schedule:nightly:2031-01-01T00:00:00.000Z',
          delayMs: 1000,
        }),
      ).rejects.toThrow(/^idempotencyKey: keys starting with "schedule:" are reserved/);
      await expect(
        store.enqueueMany([
          { queue: q, type: 't' },
          { queue: q, type: 't', idempotencyKey: 'schedule:x' },
        ]),
      ).rejects.toThrow(/^jobs\[1\]\.idempotencyKey: keys starting with "schedule:"/);
      expect(await h.countRows('hot', q)).toBe(0);
    });

    it('takes a batch of 20,000 jobs in one call with the idempotency guarantees, and refuses 20,001', async () => {
      const q = freshQueue('big-batch');
      const held = await store.enqueue({ queue: q, type: 't', idempotencyKey: `${q}-held` });
      const jobs = Array.from({ length: 20_000 }, (_, i) => ({
        queue: q,
        type: 't',
        // a repeated key comes with its first job's payload (another payload would be a conflict)
        ...(i === 5 ? {} : { payload: { i: i % 10 === 9 ? i - 1 : i } }),
        // every 10th job repeats the key of the job before it; job 5 reuses the key of a job already hot
        idempotencyKey: i === 5 ? `${q}-held` : `${q}-${i % 10 === 9 ? i - 1 : i}`,
      }));
      const results = await store.enqueueMany(jobs);
      expect(results).toHaveLength(20_000);
      expect(results[5]).toEqual({ id: held.id, duplicate: true });
      expect(results[9]).toEqual({ id: results[8]!.id, duplicate: true });
      expect(results.filter((r) => r.duplicate)).toHaveLength(2001);
      expect(new Set(results.map((r) => r.id)).size).toBe(18_000);
      expect(await h.countRows('hot', q)).toBe(18_000);
      await expect(store.enqueueMany(Array.from({ length: 20_001 }, () => ({ queue: q, type: 't' })))).rejects.toThrow(
        /at most 20000 jobs/,
      );
      expect(await h.countRows('hot', q)).toBe(18_000);
    });

    it('lets a key be reused once its job has left the hot table', async () => {
      const q = freshQueue('idem-reuse');
      const first = await store.enqueue({ queue: q, type: 't', idempotencyKey: `k-${q}` });
      const job = await claimOne(q);
      await store.start(ref(job));
      expect(await store.complete(ref(job))).toBe('ok');
      const second = await store.enqueue({ queue: q, type: 't', idempotencyKey: `k-${q}` });
      expect(second.duplicate).toBe(false);
      expect(second.id).not.toBe(first.id);
    });

    it('refuses an oversized payload and bad fields with an error naming the field, writing nothing', async () => {
      const q = freshQueue('bad');
      const big = 'x'.repeat(300 * 1024);
      await expect(store.enqueue({ queue: q, type: 't', payload: { big } })).rejects.toThrow(/payload: is \d+ bytes/);
      await expect(
        store.enqueueMany([
          { queue: q, type: 't' },
          { queue: q, type: 't', priority: 1.5 },
        ]),
      ).rejects.toThrow(/jobs\[1\]\.priority/);
      await expect(store.enqueue({ queue: '', type: 't' })).rejects.toBeInstanceOf(ValidationError);
      await expect(store.enqueue({ queue: q, type: 't', delayMs: 5, runAt: new Date() })).rejects.toThrow(/runAt/);
      // Text no engine can store: NUL, lone surrogates (in payload strings and keys, tags, idempotency keys).
      await expect(store.enqueue({ queue: q, type: 't', payload: { a: ['x\u0000'] } })).rejects.toThrow(
        /^payload\.a\[0\]: .*NUL/,
      );
      await expect(store.enqueue({ queue: q, type: 't', payload: { ['k\ud800']: 1 } })).rejects.toThrow(
        /lone surrogate/,
      );
      await expect(store.enqueue({ queue: q, type: 't', tags: ['\udc00'] })).rejects.toThrow(/^tags\[0\]: /);
      await expect(store.enqueue({ queue: q, type: 't', idempotencyKey: 'k\u0000' })).rejects.toThrow(
        /^idempotencyKey: /,
      );
      await expect(store.enqueue({ queue: q, type: 't', priority: Infinity })).rejects.toThrow(/priority: .*finite/i);
      expect(await h.countRows('hot', q)).toBe(0);
    });
  });

  describe('claims', () => {
    it('claims by priority then due time, mints a lease per claim, and skips delayed jobs until due', async () => {
      const q = freshQueue('order');
      const low = await store.enqueue({ queue: q, type: 't', priority: 0 });
      const high = await store.enqueue({ queue: q, type: 't', priority: 10 });
      const delayed = await store.enqueue({ queue: q, type: 't', priority: 100, delayMs: 60_000 });
      const claimed = await store.claimNext({ workerId: 'w', queues: [q], limit: 10 });
      expect(claimed.map((c) => c.id)).toEqual([high.id, low.id]);
      expect(new Set(claimed.map((c) => c.leaseId)).size).toBe(2);
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 10 })).toEqual([]);
      await h.backdate(delayed.id, 'run_at', 1);
      expect((await store.claimNext({ workerId: 'w', queues: [q], limit: 10 })).map((c) => c.id)).toEqual([delayed.id]);
    });

    it('claims across queues in one priority-then-due-time order, walking down priority levels as the limit allows', async () => {
      const a = freshQueue('multi-a');
      const b = freshQueue('multi-b');
      const a0 = await store.enqueue({ queue: a, type: 't', priority: 0 });
      const b5 = await store.enqueue({ queue: b, type: 't', priority: 5 });
      const b0 = await store.enqueue({ queue: b, type: 't', priority: 0 });
      const a5 = await store.enqueue({ queue: a, type: 't', priority: 5 });
      const a9 = await store.enqueue({ queue: a, type: 't', priority: 9 });
      // Backdate so due times are distinct and known: within a level the older due job of either queue comes first.
      await h.backdate(b5.id, 'run_at', 30);
      await h.backdate(a5.id, 'run_at', 20);
      await h.backdate(b0.id, 'run_at', 40);
      await h.backdate(a0.id, 'run_at', 10);
      const first = await store.claimNext({ workerId: 'w', queues: [a, b], limit: 3 });
      expect(first.map((c) => c.id)).toEqual([a9.id, b5.id, a5.id]);
      const rest = await store.claimNext({ workerId: 'w', queues: [b, a, b], limit: 10 });
      expect(rest.map((c) => c.id)).toEqual([b0.id, a0.id]);
    });

    it('delayed jobs of higher priority neither block nor get claimed before due jobs of lower priority', async () => {
      const q = freshQueue('delayed-high');
      await store.enqueueMany(
        Array.from({ length: 50 }, () => ({ queue: q, type: 't', priority: 50, delayMs: 600_000 })),
      );
      const due = await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue: q, type: 't', priority: 1 })));
      await store.updateQueue(q, { maxConcurrency: 2 });
      const limited = await store.claimNext({ workerId: 'w', queues: [q], limit: 10 });
      expect(limited.map((c) => c.id)).toEqual(due.slice(0, 2).map((d) => d.id));
      await store.updateQueue(q, { maxConcurrency: null });
      const claimed = await store.claimNext({ workerId: 'w', queues: [q], limit: 10 });
      expect(claimed.map((c) => c.id)).toEqual([due[2]!.id]);
      expect(claimed[0]!.priority).toBe(1);
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 10 })).toEqual([]);
    });

    it('claims by id only a due pending job, once', async () => {
      const q = freshQueue('byid');
      const { id } = await store.enqueue({ queue: q, type: 't' });
      const job = await store.claimById(id, 'w');
      expect(job?.id).toBe(id);
      expect(await store.claimById(id, 'w2')).toBeNull();
      expect(await store.claimById('999999999999', 'w')).toBeNull();
      expect(await store.claimById('not-a-number', 'w')).toBeNull();
      expect(await store.claimById('9999999999999999999', 'w')).toBeNull(); // above bigint: no job, no error
      expect(await store.getJob('9223372036854775808')).toBeNull();
      expect(await store.cancel('9999999999999999999')).toBe('not_found');
      const later = await store.enqueue({ queue: q, type: 't', delayMs: 60_000 });
      expect(await store.claimById(later.id, 'w')).toBeNull();
    });

    it('respects pause and resume', async () => {
      const q = freshQueue('pause');
      const { id } = await store.enqueue({ queue: q, type: 't' });
      await store.updateQueue(q, { paused: true });
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 5 })).toEqual([]);
      expect(await store.claimById(id, 'w')).toBeNull();
      await store.updateQueue(q, { paused: false });
      expect((await store.claimNext({ workerId: 'w', queues: [q], limit: 5 })).map((j) => j.id)).toEqual([id]);
    });

    it('enforces max concurrency globally across concurrent claimers', async () => {
      const q = freshQueue('maxc');
      await store.enqueueMany(Array.from({ length: 20 }, () => ({ queue: q, type: 't' })));
      await store.updateQueue(q, { maxConcurrency: 3 });
      const results = await Promise.all(
        Array.from({ length: 6 }, (_, i) => store.claimNext({ workerId: `w${i}`, queues: [q], limit: 5 })),
      );
      expect(results.flat()).toHaveLength(3);
      const job = results.flat()[0]!;
      await store.start(ref(job));
      await store.complete(ref(job));
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 5 })).toHaveLength(1);
      await store.updateQueue(q, { maxConcurrency: null });
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 5 })).toHaveLength(5);
    });

    it('never hands one job to two concurrent claimers', async () => {
      const q = freshQueue('skip');
      await store.enqueueMany(Array.from({ length: 60 }, () => ({ queue: q, type: 't' })));
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => store.claimNext({ workerId: `w${i}`, queues: [q], limit: 10 })),
      );
      const ids = results.flat().map((j) => j.id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.length).toBe(60);
    });
  });

  describe('claim and start', () => {
    it('returns jobs already processing under a new lease, the attempt counted, and they finish like started jobs', async () => {
      const q = freshQueue('cas');
      const { id } = await store.enqueue({ queue: q, type: 't', payload: { n: 7 }, tags: ['x'] });
      const before = Date.now();
      const [job, ...more] = await store.claimAndStart({ workerId: 'w-cas', queues: [q], limit: 5 });
      expect(more).toEqual([]);
      expect(job).toMatchObject({ id, queue: q, type: 't', payload: { n: 7 }, tags: ['x'], attempts: 0, attempt: 1 });
      expect(job!.leaseId).toMatch(/^[0-9a-f-]{36}$/);
      const rec = (await store.getJob(id))!;
      expect(rec).toMatchObject({ location: 'hot', state: 'processing', attempts: 1, leaseId: job!.leaseId });
      expect(rec.workerId).toBe('w-cas');
      expect(rec.startedAt!.getTime()).toBeGreaterThanOrEqual(before - 5_000);
      // The claim's times are the row's, whatever form the engine sends them in.
      expect(job!.runAt.getTime()).toBe(rec.runAt!.getTime());
      expect(job!.createdAt.getTime()).toBe(rec.createdAt.getTime());
      expect(job!.leaseExpiresAt.getTime()).toBeGreaterThan(before + 50_000); // default lease 60 s
      expect(job!.leaseExpiresAt.getTime()).toBeLessThan(Date.now() + 70_000);
      expect(job!.queueZombieTimeoutSeconds).toBe(300); // no settings row: the rescue's default
      expect(await store.claimAndStart({ workerId: 'w2', queues: [q], limit: 5 })).toEqual([]);
      expect(await store.claimNext({ workerId: 'w2', queues: [q], limit: 5 })).toEqual([]);
      expect(await store.heartbeat(ref(job!))).toEqual({
        status: 'ok',
        cancelRequested: false,
        zombieTimeoutSeconds: 300, // the queue's timeout as it is now: no settings row
      });
      // A retried job comes back as its next attempt.
      expect(await store.retry(ref(job!), new Date(), 'again')).toBe('ok');
      const [second] = await store.claimAndStart({ workerId: 'w-cas', queues: [q], limit: 5 });
      expect(second).toMatchObject({ id, attempts: 1, attempt: 2 });
      expect(second!.leaseId).not.toBe(job!.leaseId);
      expect(await store.complete(ref(second!))).toBe('ok');
      expect(await where(id)).toEqual(['archive']);
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 1, retried: 1 });
      expect((await h.bucketTotals(q, 'succeeded')).count).toBe(1);
      expect(await store.getJob(id)).toMatchObject({ location: 'archive', attempts: 2 });
    });

    it('is fenced by its lease: stale leases change nothing, and a started job cannot be started or released again', async () => {
      const q = freshQueue('cas-fence');
      await store.enqueue({ queue: q, type: 't' });
      const [job] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      const stale = { jobId: job!.id, leaseId: STALE_LEASE };
      expect(await store.start(ref(job!))).toEqual({ status: 'lease_lost', attempt: 0 });
      expect(await store.release(ref(job!))).toBe('lease_lost');
      expect(await store.heartbeat(stale)).toEqual({ status: 'lease_lost', cancelRequested: false });
      expect(await store.complete(stale)).toBe('lease_lost');
      expect(await store.retry(stale, new Date(), 'x')).toBe('lease_lost');
      expect(await store.interrupt(stale, 'x')).toBe('lease_lost');
      expect(await store.fail(stale, 'fatal', 'x')).toBe('lease_lost');
      expect(await store.getJob(job!.id)).toMatchObject({ location: 'hot', state: 'processing', attempts: 1 });
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 0, failed: 0, retried: 0 });
      expect(await store.fail(ref(job!), 'fatal', 'boom')).toBe('ok');
      expect(await store.getJob(job!.id)).toMatchObject({ location: 'dlq', reason: 'fatal', attempts: 1 });
    });

    it('chooses as claimNext does: priority, then due time across queues; delayed and expired jobs are never started', async () => {
      const a = freshQueue('cas-a');
      const b = freshQueue('cas-b');
      const a0 = await store.enqueue({ queue: a, type: 't', priority: 0 });
      const b5 = await store.enqueue({ queue: b, type: 't', priority: 5 });
      const b0 = await store.enqueue({ queue: b, type: 't', priority: 0 });
      const a5 = await store.enqueue({ queue: a, type: 't', priority: 5 });
      const a9 = await store.enqueue({ queue: a, type: 't', priority: 9 });
      const delayed = await store.enqueue({ queue: a, type: 't', priority: 100, delayMs: 60_000 });
      const expired = await store.enqueue({
        queue: b,
        type: 't',
        priority: 50,
        expiresAt: new Date(Date.now() + 60_000),
      });
      await h.backdate(expired.id, 'expires_at', 1);
      await h.backdate(b5.id, 'run_at', 30);
      await h.backdate(a5.id, 'run_at', 20);
      await h.backdate(b0.id, 'run_at', 40);
      await h.backdate(a0.id, 'run_at', 10);
      const first = await store.claimAndStart({ workerId: 'w', queues: [a, b], limit: 3 });
      expect(first.map((c) => c.id)).toEqual([a9.id, b5.id, a5.id]);
      const rest = await store.claimAndStart({ workerId: 'w', queues: [b, a, b], limit: 10 });
      expect(rest.map((c) => c.id)).toEqual([b0.id, a0.id]);
      expect(await store.getJob(delayed.id)).toMatchObject({ state: 'pending', attempts: 0 });
      expect(await store.getJob(expired.id)).toMatchObject({ state: 'pending', attempts: 0 });
      expect(await store.claimAndStart({ workerId: 'w', queues: [a, b], limit: 10 })).toEqual([]);
      expect((await store.rescueZombies(100)).expired).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(expired.id)).toMatchObject({ location: 'dlq', reason: 'expired', attempts: 0 });
    });

    it('gives nothing from a paused queue and takes at most the free slots of a limited one, fetched jobs included', async () => {
      const q = freshQueue('cas-limit');
      await store.enqueueMany(Array.from({ length: 12 }, () => ({ queue: q, type: 't' })));
      await store.updateQueue(q, { paused: true });
      expect(await store.claimAndStart({ workerId: 'w', queues: [q], limit: 5 })).toEqual([]);
      await store.updateQueue(q, { paused: false, maxConcurrency: 4 });
      const fetched = await claimOne(q); // holds a slot while merely fetched
      const results = await Promise.all(
        Array.from({ length: 5 }, (_, i) => store.claimAndStart({ workerId: `w${i}`, queues: [q], limit: 3 })),
      );
      expect(results.flat()).toHaveLength(3);
      expect((await store.stats()).find((s) => s.queue === q)).toMatchObject({ fetched: 1, processing: 3 });
      expect(await store.claimAndStart({ workerId: 'w', queues: [q], limit: 3 })).toEqual([]);
      expect(await store.release(ref(fetched))).toBe('ok');
      expect(await store.claimAndStart({ workerId: 'w', queues: [q], limit: 3 })).toHaveLength(1);
      await store.updateQueue(q, { maxConcurrency: null });
      expect(await store.claimAndStart({ workerId: 'w', queues: [q], limit: 5 })).toHaveLength(5);
    });

    it('over a limited and an unlimited queue keeps the best jobs of both within the limit, with either claim', async () => {
      for (const claim of ['claimNext', 'claimAndStart'] as const) {
        const open = freshQueue('cas-open');
        const limited = freshQueue('cas-lim');
        await store.updateQueue(limited, { maxConcurrency: 5 });
        const o1 = await store.enqueue({ queue: open, type: 't', priority: 1 });
        const o3 = await store.enqueue({ queue: open, type: 't', priority: 3 });
        const l2 = await store.enqueue({ queue: limited, type: 't', priority: 2 });
        const l4 = await store.enqueue({ queue: limited, type: 't', priority: 4 });
        const first = await store[claim]({ workerId: 'w', queues: [open, limited], limit: 3 });
        expect(first.map((j) => j.id)).toEqual([l4.id, o3.id, l2.id]);
        // The job left out is untouched: still pending, no lease, no attempt.
        expect(await store.getJob(o1.id)).toMatchObject({ state: 'pending', attempts: 0, leaseId: null });
        const rest = await store[claim]({ workerId: 'w', queues: [open, limited], limit: 3 });
        expect(rest.map((j) => j.id)).toEqual([o1.id]);
      }
    });

    it('pickDue names the jobs claimNext would take, in its order, and leaves them pending: pause, free slots, due time', async () => {
      const open = freshQueue('pick-open');
      const limited = freshQueue('pick-lim');
      await store.updateQueue(limited, { maxConcurrency: 3 });
      const o1 = await store.enqueue({ queue: open, type: 't', priority: 1 });
      const o3 = await store.enqueue({ queue: open, type: 't', priority: 3 });
      await store.enqueue({ queue: open, type: 't', priority: 9, delayMs: 60_000 }); // not due
      const l2 = await store.enqueue({ queue: limited, type: 't', priority: 2 });
      const l4 = await store.enqueue({ queue: limited, type: 't', priority: 4 });
      const l0 = await store.enqueue({ queue: limited, type: 't', priority: 0 });
      // The counts a claim changes (oldestDueAgeMs grows with the clock).
      const counts = async () =>
        (await store.stats())
          .filter((s) => s.queue === open || s.queue === limited)
          .map(({ queue, pending, due, fetched, processing }) => ({ queue, pending, due, fetched, processing }));
      const before = await counts();
      expect(await store.pickDue([open, limited], 3)).toEqual([l4.id, o3.id, l2.id]);
      expect(await store.pickDue([limited, open, limited], 10)).toEqual([l4.id, o3.id, l2.id, o1.id, l0.id]);
      // Nothing was claimed: the same jobs pending, no lease, no attempt, the counters unchanged.
      for (const id of [o1.id, o3.id, l2.id, l4.id, l0.id])
        expect(await store.getJob(id)).toMatchObject({ state: 'pending', attempts: 0, leaseId: null });
      expect(await counts()).toEqual(before);
      // A limited queue gives at most its free slots (fetched and processing jobs hold theirs); a paused one none.
      const held = await store.claimNext({ workerId: 'w', queues: [limited], limit: 2 });
      expect(held.map((j) => j.id)).toEqual([l4.id, l2.id]);
      expect(await store.pickDue([limited], 10)).toEqual([l0.id]);
      await store.updateQueue(open, { paused: true });
      expect(await store.pickDue([open], 10)).toEqual([]);
      expect(await store.pickDue([open, limited], 10)).toEqual([l0.id]);
      // And what it named is what a claim then takes.
      await store.updateQueue(open, { paused: false });
      const claimed = await store.claimNext({ workerId: 'w', queues: [open, limited], limit: 10 });
      expect(claimed.map((j) => j.id)).toEqual([o3.id, o1.id, l0.id]);
    });

    it('never hands one job to two concurrent claimers, whichever claim they use', async () => {
      const q = freshQueue('cas-skip');
      await store.enqueueMany(Array.from({ length: 60 }, () => ({ queue: q, type: 't' })));
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          i % 2
            ? store.claimAndStart({ workerId: `w${i}`, queues: [q], limit: 10 })
            : store.claimNext({ workerId: `w${i}`, queues: [q], limit: 10 }),
        ),
      );
      const ids = results.flat().map((j) => j.id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.length).toBe(60);
    });

    it('a started job is rescued by its heartbeat, not its claim lease; max attempts and cancel requests hold', async () => {
      const q = freshQueue('cas-zombie');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 2 });
      const { id } = await store.enqueue({ queue: q, type: 't' });
      const [first] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1, leaseSeconds: 1 });
      await h.backdate(id, 'lease_expires_at', 5); // a claim lease long gone does not matter to a running job
      await store.rescueZombies(100); // (its counts are every queue's: other tests' leases may run out meanwhile)
      expect(await store.getJob(id)).toMatchObject({ state: 'processing', attempts: 1 });
      await h.backdate(id, 'heartbeat_at', 31);
      expect((await store.rescueZombies(100)).retried).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(id)).toMatchObject({ state: 'pending', attempts: 1 });
      expect(await store.heartbeat(ref(first!))).toMatchObject({ status: 'lease_lost' });
      expect(first!.queueZombieTimeoutSeconds).toBe(30); // the lease the worker keeps by heartbeats
      const [second] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(second).toMatchObject({ id, attempt: 2, queueMaxAttempts: 2, queueZombieTimeoutSeconds: 30 });
      // The two-step claims say it too (claimNext, claimById), for a queue with settings and one without.
      const other = freshQueue('cas-zombie-default');
      const { id: a } = await store.enqueue({ queue: q, type: 't' });
      const { id: b } = await store.enqueue({ queue: other, type: 't' });
      const twoStep = await store.claimNext({ workerId: 'w', queues: [q, other], limit: 5 });
      expect(twoStep).toHaveLength(2);
      expect(twoStep).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ id: a, queueZombieTimeoutSeconds: 30 }),
          expect.objectContaining({ id: b, queueZombieTimeoutSeconds: 300 }),
        ]),
      );
      for (const j of twoStep) expect(await store.release(ref(j))).toBe('ok');
      const byId = await store.claimById(a, 'w');
      expect(byId).toMatchObject({ id: a, queueZombieTimeoutSeconds: 30 });
      expect(await store.release(ref(byId!))).toBe('ok');
      // A claim and start over several queues: each job carries its own queue's settings (the defaults without a row).
      const both = await store.claimAndStart({ workerId: 'w', queues: [q, other], limit: 5 });
      expect(both).toHaveLength(2);
      expect(both).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ id: a, queueMaxAttempts: 2, queueZombieTimeoutSeconds: 30 }),
          expect.objectContaining({ id: b, queueMaxAttempts: 5, queueZombieTimeoutSeconds: 300 }),
        ]),
      );
      expect((await store.completeMany(both.map(ref))).map((r) => r.status)).toEqual(['ok', 'ok']);
      expect(await store.cancel(id)).toBe('cancel_requested');
      expect(await store.heartbeat(ref(second!))).toMatchObject({ status: 'ok', cancelRequested: true });
      await h.backdate(id, 'heartbeat_at', 31); // its worker died before it stopped: cancelled, attempts used up
      expect((await store.rescueZombies(100)).deadLettered).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'cancelled', attempts: 2 });
      expect(await h.statsRow(q)).toMatchObject({ zombie: 1, cancelled: 1, failed: 1 });
    });
  });

  describe('lease fencing', () => {
    it('heartbeatMany beats, in one call, every job still running under its lease and reports each other one lost, in the order given', async () => {
      const q = freshQueue('beat-many');
      const other = freshQueue('beat-many-default');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 5 });
      await store.enqueueMany(Array.from({ length: 4 }, () => ({ queue: q, type: 't' })));
      await store.enqueue({ queue: other, type: 't' });
      const jobs = await store.claimAndStart({ workerId: 'w', queues: [q, other], limit: 5 });
      expect(jobs).toHaveLength(5);
      const [a, b, c, d] = jobs.filter((j) => j.queue === q) as [StartedJob, StartedJob, StartedJob, StartedJob];
      const e = jobs.find((j) => j.queue === other)!;
      // b: rescued and claimed again (its old lease is stale); c: cancel requested; d: finished; a and e: running.
      await h.backdate(b.id, 'heartbeat_at', 31);
      expect((await store.rescueZombies(100)).retried).toBeGreaterThanOrEqual(1);
      const [b2] = await store.claimAndStart({ workerId: 'w2', queues: [q], limit: 1 });
      expect(b2).toMatchObject({ id: b.id, attempt: 2 });
      expect(await store.cancel(c.id)).toBe('cancel_requested');
      expect(await store.complete(ref(d))).toBe('ok');
      for (const j of [a, e, c]) await h.backdate(j.id, 'heartbeat_at', 20);
      const refs = [ref(e), ref(b), { jobId: a.id, leaseId: 'garbage' }, ref(c), ref(d), ref(a)];
      expect(await store.heartbeatMany(refs)).toEqual([
        { jobId: e.id, status: 'ok', cancelRequested: false, zombieTimeoutSeconds: 300 }, // no settings row
        { jobId: b.id, status: 'lease_lost', cancelRequested: false }, // its lease changed: fenced
        { jobId: a.id, status: 'lease_lost', cancelRequested: false }, // a lease no job can hold
        { jobId: c.id, status: 'ok', cancelRequested: true, zombieTimeoutSeconds: 30 },
        { jobId: d.id, status: 'lease_lost', cancelRequested: false }, // archived
        { jobId: a.id, status: 'ok', cancelRequested: false, zombieTimeoutSeconds: 30 },
      ]);
      // The beats landed: heartbeat_at is now (by the server's clock), no longer 20 s ago.
      for (const j of [a, e, c]) {
        const rec = (await store.getJob(j.id))!;
        expect(rec).toMatchObject({ state: 'processing', attempts: 1 });
        expect(rec.heartbeatAt!.getTime()).toBeGreaterThan(Date.now() - 10_000);
      }
      await store.rescueZombies(100);
      for (const j of [a, c]) expect(await store.getJob(j.id)).toMatchObject({ state: 'processing', attempts: 1 });
      // The fenced one was left alone: its new lease's holder still has it, and beats it.
      expect(await store.getJob(b.id)).toMatchObject({ state: 'processing', attempts: 2, leaseId: b2!.leaseId });
      expect(await store.heartbeatMany([ref(b2!)])).toEqual([
        { jobId: b.id, status: 'ok', cancelRequested: false, zombieTimeoutSeconds: 30 },
      ]);
      expect(await store.heartbeatMany([])).toEqual([]);
      // Counters untouched: a beat moves nothing.
      expect(await h.hotTruth(q)).toMatchObject({ processing: 3 });
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 1, retried: 0, zombie: 1 });
      for (const j of [a, c, b2!, e]) expect(await store.complete(ref(j))).not.toBe('lease_lost');
    });

    it('reports lease_lost for every owner-scoped call with a stale lease, changing nothing', async () => {
      const q = freshQueue('fence');
      await store.enqueue({ queue: q, type: 't' });
      const job = await claimOne(q);
      const stale = { jobId: job.id, leaseId: STALE_LEASE };
      expect(await store.start(stale)).toEqual({ status: 'lease_lost', attempt: 0 });
      expect(await store.release(stale)).toBe('lease_lost');
      expect(await store.release({ jobId: job.id, leaseId: 'garbage' })).toBe('lease_lost');
      // Its own lease, but only fetched: interrupt hands back started jobs only (a fetched one is released).
      expect(await store.interrupt(ref(job), 'x')).toBe('lease_lost');
      expect(await store.getJob(job.id)).toMatchObject({ state: 'fetched', attempts: 0, lastError: null });
      expect((await store.start(ref(job))).status).toBe('ok');
      expect(await store.heartbeat(stale)).toEqual({ status: 'lease_lost', cancelRequested: false });
      expect(await store.complete(stale)).toBe('lease_lost');
      expect(await store.completeMany([stale, { jobId: '999999999', leaseId: job.leaseId }])).toEqual([
        { jobId: job.id, status: 'lease_lost' },
        { jobId: '999999999', status: 'lease_lost' },
      ]);
      expect(await store.retry(stale, new Date(), 'x')).toBe('lease_lost');
      expect(await store.interrupt(stale, 'x')).toBe('lease_lost');
      expect(await store.fail(stale, 'fatal', 'x')).toBe('lease_lost');
      expect(await where(job.id)).toEqual(['hot']);
      expect(await store.getJob(job.id)).toMatchObject({ state: 'processing', attempts: 1 });
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 0, failed: 0, retried: 0 });
    });

    it('a lease minted by a later claim fences out the earlier owner', async () => {
      const q = freshQueue('fence2');
      await store.enqueue({ queue: q, type: 't' });
      const first = await claimOne(q, 'old');
      await h.backdate(first.id, 'lease_expires_at', 5);
      expect((await store.rescueZombies(100)).releasedFetched).toBeGreaterThanOrEqual(1);
      const second = await claimOne(q, 'new');
      expect(second.leaseId).not.toBe(first.leaseId);
      expect((await store.start(ref(first))).status).toBe('lease_lost');
      expect((await store.start(ref(second))).status).toBe('ok');
      expect(await store.complete(ref(first))).toBe('lease_lost');
      expect(await store.complete(ref(second))).toBe('ok');
    });
  });

  describe('argument checks (one table for every engine: STORE_ARGUMENT_CHECKS)', () => {
    // Every engine must refuse these with exactly this ValidationError, before touching the database.
    const now = new Date();
    const invalid = new Date('nope');
    const lease = { jobId: '1', leaseId: STALE_LEASE };
    const refused: [string, (s: JobStore) => Promise<unknown>, string][] = [
      [
        'claimNext limit 0',
        (s) => s.claimNext({ workerId: 'w', queues: ['q'], limit: 0 }),
        'limit: must be an integer from 1 to 10000 (got 0)',
      ],
      [
        'claimNext limit too high',
        (s) => s.claimNext({ workerId: 'w', queues: ['q'], limit: LIMITS.claimJobs + 1 }),
        `limit: must be an integer from 1 to ${LIMITS.claimJobs} (got ${LIMITS.claimJobs + 1})`,
      ],
      ['pickDue limit 0', (s) => s.pickDue(['q'], 0), 'limit: must be an integer from 1 to 10000 (got 0)'],
      ['retry at an invalid date', (s) => s.retry(lease, invalid, 'x'), 'runAt: must be a valid Date'],
      [
        'retry after a negative delay',
        (s) => s.retry(lease, { delayMs: -1 }, 'x'),
        `delayMs: must be an integer from 0 to ${MAX_RETRY_DELAY_MS} (got -1)`,
      ],
      [
        'retry after a fractional delay',
        (s) => s.retry(lease, { delayMs: 1.5 }, 'x'),
        `delayMs: must be an integer from 0 to ${MAX_RETRY_DELAY_MS} (got 1.5)`,
      ],
      [
        'fail with an unknown reason',
        (s) => s.fail(lease, 'nonsense' as never, 'x'),
        'reason: must be one of exhausted, fatal, timeout, cancelled, zombie, expired',
      ],
      [
        'fail with a reason only a flow gives',
        (s) => s.fail(lease, 'parent_failed', 'x'),
        'reason: must be one of exhausted, fatal, timeout, cancelled, zombie, expired',
      ],
      [
        'rescue limit 1.5',
        (s) => s.rescueZombies(1.5),
        `limit: must be an integer from 1 to ${LIMITS.rescueJobs} (got 1.5)`,
      ],
      [
        'rescue with a bad type',
        (s) => s.rescueZombies(10, { 'bad type': 1 }),
        'maxAttemptsByType.bad type: is not a valid job type',
      ],
      [
        'resurrect a non-id',
        (s) => s.resurrect(['1', 'x']),
        'jobIds[1]: must be a job id (a positive integer as a string)',
      ],
      [
        'resurrectByFilter limit',
        (s) => s.resurrectByFilter({ limit: LIMITS.resurrectJobs + 1 }),
        `limit: must be an integer from 1 to ${LIMITS.resurrectJobs} (got ${LIMITS.resurrectJobs + 1})`,
      ],
      [
        'resurrectByFilter reason',
        (s) => s.resurrectByFilter({ limit: 1, reason: 'gone' as never }),
        'reason: must be one of exhausted, fatal, timeout, cancelled, zombie, expired, parent_failed, skipped',
      ],
      [
        'resurrectByFilter queue',
        (s) => s.resurrectByFilter({ limit: 1, queue: 'a b' }),
        'queue: letters, digits and _ . : - only',
      ],
      [
        'resurrectByFilter date',
        (s) => s.resurrectByFilter({ limit: 1, failedAfter: invalid }),
        'failedAfter: must be a valid Date',
      ],
      ['purge target', (s) => s.purge('hot' as never, null, now, 10), 'target: must be one of archive, dlq, metrics'],
      [
        'purge batch size',
        (s) => s.purge('dlq', null, now, LIMITS.purgeBatchRows + 1),
        `batchSize: must be an integer from 1 to ${LIMITS.purgeBatchRows} (got ${LIMITS.purgeBatchRows + 1})`,
      ],
      ['purge cutoff', (s) => s.purge('dlq', null, invalid, 10), 'olderThan: must be a valid Date'],
      [
        'metrics window',
        (s) => s.metrics(LIMITS.metricsWindowMinutes + 1),
        `windowMinutes: must be an integer from 1 to ${LIMITS.metricsWindowMinutes} (got ${LIMITS.metricsWindowMinutes + 1})`,
      ],
      [
        'updateQueue retention',
        (s) => s.updateQueue('q', { dlqRetentionSeconds: LIMITS.maxRetentionSeconds + 1 }),
        `dlqRetentionSeconds: Too big: expected number to be <=${LIMITS.maxRetentionSeconds}`,
      ],
      ['updateQueue name', (s) => s.updateQueue('a b', { maxAttempts: 2 }), 'name: letters, digits and _ . : - only'],
      [
        'searchJobs limit',
        (s) => s.searchJobs({ location: 'hot', limit: LIMITS.searchJobs + 1 }),
        `limit: must be an integer from 1 to ${LIMITS.searchJobs} (got ${LIMITS.searchJobs + 1})`,
      ],
      [
        'searchJobs location',
        (s) => s.searchJobs({ location: 'attic' as never, limit: 1 }),
        'location: must be one of hot, archive, dlq',
      ],
      [
        'searchJobs afterId',
        (s) => s.searchJobs({ location: 'hot', limit: 1, afterId: '0' }),
        'afterId: must be a job id (a positive integer as a string)',
      ],
      [
        'searchJobs tag longer than a tag can be',
        (s) => s.searchJobs({ location: 'hot', limit: 1, tag: 'x'.repeat(LIMITS.tagLength + 1) }),
        `tag: Too big: expected string to have <=${LIMITS.tagLength} characters`,
      ],
      [
        'searchJobs text',
        (s) => s.searchJobs({ location: 'dlq', limit: 1, text: 'a\u0000b' }),
        'text: must not contain the NUL character (\\u0000)',
      ],
      [
        'searchJobs state',
        (s) => s.searchJobs({ location: 'hot', limit: 1, state: 'done' as never }),
        'state: must be one of pending, fetched, processing, waiting',
      ],
      [
        'listSchedules name',
        (s) => s.listSchedules('bad name!'),
        'name: must be a schedule name (1-100 letters, digits and _ . : -)',
      ],
      ['fireSchedule tick', (s) => s.fireSchedule('sched', null, invalid, []), 'tick: must be a valid Date'],
      [
        'registerWorker queue name',
        (s) => s.registerWorker({ ...workerRow('w-bad'), queues: ['ok', 'bad queue'] }),
        'queues[1]: letters, digits and _ . : - only',
      ],
      [
        'registerWorker workerId too long',
        (s) => s.registerWorker(workerRow('w'.repeat(201))),
        'workerId: Too big: expected string to have <=200 characters',
      ],
      [
        'registerWorker concurrency',
        (s) => s.registerWorker({ ...workerRow('w-c'), concurrency: 0 }),
        'concurrency: must be an integer from 1 to 1000000 (got 0)',
      ],
      ['pruneWorkers cutoff', (s) => s.pruneWorkers(invalid), 'olderThan: must be a valid Date'],
    ];
    it.each(refused)('refuses %s with the same ValidationError', async (_name, call, message) => {
      const err = await call(store).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as Error).message).toBe(message);
    });

    it('answers ids and leases that can name no job without an error: not found, lease_lost', async () => {
      const q = freshQueue('noid');
      await store.enqueue({ queue: q, type: 't' });
      const job = await claimOne(q);
      const malformed = [
        { jobId: job.id, leaseId: `${job.leaseId}junk` },
        { jobId: job.id, leaseId: 'garbage' },
        { jobId: '0', leaseId: job.leaseId },
        { jobId: '99999999999999999999', leaseId: job.leaseId },
      ];
      for (const bad of malformed) {
        expect(await store.startMany([bad])).toEqual([{ jobId: bad.jobId, status: 'lease_lost', attempt: 0 }]);
        expect(await store.heartbeat(bad)).toEqual({ status: 'lease_lost', cancelRequested: false });
        expect(await store.retry(bad, new Date(), 'x')).toBe('lease_lost');
        expect(await store.fail(bad, 'fatal', 'x')).toBe('lease_lost');
        expect(await store.release(bad)).toBe('lease_lost');
        expect(await store.interrupt(bad, 'x')).toBe('lease_lost');
        expect(await store.completeMany([bad])).toEqual([{ jobId: bad.jobId, status: 'lease_lost' }]);
      }
      expect(await store.getQueue('q'.repeat(LIMITS.nameLength + 1))).toBeNull();
      expect(await store.getQueue('a b')).toBeNull();
      for (const id of ['0', 'x', '99999999999999999999', ' 1']) {
        expect(await store.getJob(id)).toBeNull();
        expect(await store.claimById(id, 'w')).toBeNull();
        expect(await store.cancel(id)).toBe('not_found');
      }
      // The job was untouched by all of it: still fetched under its lease.
      expect(await store.getJob(job.id)).toMatchObject({ location: 'hot', state: 'fetched', leaseId: job.leaseId });
    });
  });

  describe('moves and counters', () => {
    it('complete moves hot -> archive with counters and a succeeded bucket', async () => {
      const q = freshQueue('complete');
      const job = await startedJob(q);
      expect(await store.complete(ref(job))).toBe('ok');
      expect(await where(job.id)).toEqual(['archive']);
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 1, failed: 0 });
      expect((await h.bucketTotals(q, 'succeeded')).count).toBe(1);
      const rec = await store.getJob(job.id);
      expect(rec).toMatchObject({ location: 'archive', state: 'succeeded', attempts: 1 });
      expect(rec!.durationMs).toBeGreaterThanOrEqual(0);
      expect(await store.complete(ref(job))).toBe('lease_lost');
    });

    it('completeMany archives many jobs in one call and reports each', async () => {
      const q = freshQueue('many');
      await store.enqueueMany(Array.from({ length: 25 }, () => ({ queue: q, type: 't' })));
      const jobs = await store.claimNext({ workerId: 'w', queues: [q], limit: 25 });
      const started = await store.startMany(jobs.map(ref));
      expect(started.every((s) => s.status === 'ok' && s.attempt === 1)).toBe(true);
      const res = await store.completeMany(jobs.map(ref));
      expect(res.every((r) => r.status === 'ok')).toBe(true);
      expect(await h.countRows('archive', q)).toBe(25);
      expect(await h.countRows('hot', q)).toBe(0);
      expect((await h.statsRow(q)).succeeded).toBe(25);
      expect((await h.bucketTotals(q, 'succeeded')).count).toBe(25);
    });

    it('completeMany and startMany answer a mixed batch per job, in input order, moving only the owned jobs', async () => {
      const q = freshQueue('mixed');
      const a = await startedJob(q);
      const b = await startedJob(q);
      const c = await startedJob(q);
      await store.enqueueMany([
        { queue: q, type: 't' },
        { queue: q, type: 't' },
      ]);
      const fetched = await claimOne(q);
      const other = await claimOne(q);
      const foreign = '00000000-0000-4000-8000-000000000000';
      // startMany: only a fetched job under its own lease starts; a started job or a foreign lease does not.
      expect(await store.startMany([ref(a), ref(fetched), { jobId: other.id, leaseId: foreign }])).toEqual([
        { jobId: a.id, status: 'lease_lost', attempt: 0 },
        { jobId: fetched.id, status: 'ok', attempt: 1 },
        { jobId: other.id, status: 'lease_lost', attempt: 0 },
      ]);
      const unknown = { jobId: '999999999', leaseId: a.leaseId };
      expect(
        await store.completeMany([{ jobId: c.id, leaseId: foreign }, ref(b), unknown, ref(other), ref(a)]),
      ).toEqual([
        { jobId: c.id, status: 'lease_lost' },
        { jobId: b.id, status: 'ok' },
        { jobId: '999999999', status: 'lease_lost' },
        { jobId: other.id, status: 'lease_lost' }, // fetched, never started
        { jobId: a.id, status: 'ok' },
      ]);
      expect(await where(a.id)).toEqual(['archive']);
      expect(await where(b.id)).toEqual(['archive']);
      expect(await store.getJob(c.id)).toMatchObject({ location: 'hot', state: 'processing' });
      expect(await store.getJob(other.id)).toMatchObject({ location: 'hot', state: 'fetched' });
      expect(await store.getJob(fetched.id)).toMatchObject({ location: 'hot', state: 'processing', attempts: 1 });
      expect((await h.statsRow(q)).succeeded).toBe(2);
      expect((await h.bucketTotals(q, 'succeeded')).count).toBe(2);
    });

    it('fail moves hot -> DLQ with the reason, error, counters and a failed bucket', async () => {
      const q = freshQueue('fail');
      const job = await startedJob(q);
      expect(await store.fail(ref(job), 'exhausted', 'boom')).toBe('ok');
      const rec = await store.getJob(job.id);
      expect(rec).toMatchObject({ location: 'dlq', reason: 'exhausted', lastError: 'boom' });
      expect(await h.statsRow(q)).toMatchObject({ failed: 1, succeeded: 0 });
      expect((await h.bucketTotals(q, 'failed', 'exhausted')).count).toBe(1);
      await expect(store.fail(ref(job), 'nonsense' as never, 'x')).rejects.toThrow(/reason/);
    });

    it('retry returns the job to pending at run_at; release returns a fetched job without using an attempt', async () => {
      const q = freshQueue('retry');
      const job = await startedJob(q);
      const runAt = new Date(Date.now() + 60_000);
      expect(await store.retry(ref(job), runAt, 'transient')).toBe('ok');
      const rec = await store.getJob(job.id);
      expect(rec).toMatchObject({ location: 'hot', state: 'pending', attempts: 1, lastError: 'transient' });
      expect(Math.abs(rec!.runAt!.getTime() - runAt.getTime())).toBeLessThan(1000);
      expect((await h.statsRow(q)).retried).toBe(1);
      await h.backdate(job.id, 'run_at', 1);
      const again = await claimOne(q);
      expect(again.attempts).toBe(1);
      expect(await store.release(ref(again))).toBe('ok');
      const third = await claimOne(q);
      expect(third.attempts).toBe(1);
      expect((await store.start(ref(third))).attempt).toBe(2);
    });

    it("retry after a delay is due that long after the server's now, not the caller's", async () => {
      const q = freshQueue('retry-delay');
      const job = await startedJob(q);
      const started = (await store.getJob(job.id))!.startedAt!.getTime(); // the server's clock
      expect(await store.retry(ref(job), { delayMs: 60_000 }, 'later')).toBe('ok');
      const rec = (await store.getJob(job.id))!;
      expect(rec).toMatchObject({ location: 'hot', state: 'pending', lastError: 'later' });
      // started_at and run_at are both the server's: the gap is the delay and the time the calls took
      expect(rec.runAt!.getTime() - started).toBeGreaterThanOrEqual(60_000);
      expect(rec.runAt!.getTime() - started).toBeLessThan(60_000 + 30_000);
      expect(await store.claimNext({ workerId: 'w', queues: [q], limit: 1 })).toEqual([]); // not due yet
      const now = await startedJob(q);
      expect(await store.retry(ref(now), { delayMs: 0 }, 'now')).toBe('ok');
      expect(await claimOne(q)).toMatchObject({ id: now.id }); // due at once
    });

    it('cancel: pending goes to the DLQ at once; processing is flagged and reported by heartbeat', async () => {
      const q = freshQueue('cancel');
      const pending = await store.enqueue({ queue: q, type: 't' });
      expect(await store.cancel(pending.id)).toBe('cancelled');
      expect((await store.getJob(pending.id))!.reason).toBe('cancelled');
      const job = await startedJob(q);
      expect(await store.cancel(job.id)).toBe('cancel_requested');
      expect(await store.heartbeat(ref(job))).toMatchObject({ status: 'ok', cancelRequested: true });
      expect(await store.fail(ref(job), 'cancelled', 'stopped')).toBe('ok');
      expect(await h.statsRow(q)).toMatchObject({ failed: 2, cancelled: 2 });
      expect(await store.cancel(job.id)).toBe('not_found');
      expect(await store.cancel('123456789012')).toBe('not_found');
    });

    it('cancelMany: per id what cancel answers (pending, fetched, processing, finished, unknown), counted once', async () => {
      const q = freshQueue('cancel-many');
      // Each claim takes the oldest due job: the finished one first, the pending one last.
      const done = await startedJob(q);
      expect(await store.complete(ref(done))).toBe('ok');
      const running = await startedJob(q);
      await store.enqueue({ queue: q, type: 't' });
      const fetched = await claimOne(q);
      const pending = await store.enqueue({ queue: q, type: 't' });
      const asked = [running.id, '123456789012', pending.id, done.id, 'not-an-id', fetched.id, pending.id];
      expect(await store.cancelMany(asked)).toEqual([
        { jobId: running.id, result: 'cancel_requested' },
        { jobId: '123456789012', result: 'not_found' },
        { jobId: pending.id, result: 'cancelled' },
        { jobId: done.id, result: 'not_found' },
        { jobId: 'not-an-id', result: 'not_found' },
        { jobId: fetched.id, result: 'cancelled' },
      ]);
      expect(await store.getJob(pending.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(await store.getJob(fetched.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(await store.heartbeat(ref(running))).toMatchObject({ status: 'ok', cancelRequested: true });
      expect(await store.start(ref(fetched))).toMatchObject({ status: 'lease_lost' });
      expect(await h.statsRow(q)).toMatchObject({ failed: 2, cancelled: 2, succeeded: 1 });
      // Again: the dead-lettered ones are gone from the hot table, the running one is still asked to stop.
      expect(await store.cancelMany([pending.id, running.id])).toEqual([
        { jobId: pending.id, result: 'not_found' },
        { jobId: running.id, result: 'cancel_requested' },
      ]);
      expect(await store.cancelMany([])).toEqual([]);
      expect(await h.statsRow(q)).toMatchObject({ failed: 2, cancelled: 2 });
    });

    it('cancelMany: more ids than one chunk all cancelled, in chunks', async () => {
      const q = freshQueue('cancel-chunks');
      const n = CANCEL_MANY_CHUNK + 17;
      const ids = (await store.enqueueMany(Array.from({ length: n }, () => ({ queue: q, type: 't' })))).map(
        (r) => r.id,
      );
      const reversed = [...ids].reverse();
      const out = await store.cancelMany(reversed);
      expect(out.map((r) => r.jobId)).toEqual(reversed);
      expect(out.every((r) => r.result === 'cancelled')).toBe(true);
      expect(await h.statsRow(q)).toMatchObject({ failed: n, cancelled: n });
      expect((await store.stats()).find((x) => x.queue === q)).toMatchObject({ pending: 0, dlq: n });
    });

    it('cancelMany of a flow: named waiting children and a parent together, the cascade dead-letters the rest', async () => {
      const q = freshQueue('cancel-flow');
      const [parent, child, grandchild, other] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }] },
        { queue: q, type: 'g', after: [{ index: 1 }] },
        { queue: q, type: 'o', after: [{ index: 0 }] },
      ]);
      expect(await store.getJob(grandchild!.id)).toMatchObject({ state: 'waiting' });
      // The grandchild first, then the parent: the child and the other are cascaded (not named).
      expect(await store.cancelMany([grandchild!.id, parent!.id])).toEqual([
        { jobId: grandchild!.id, result: 'cancelled' },
        { jobId: parent!.id, result: 'cancelled' },
      ]);
      expect(await store.getJob(parent!.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(await store.getJob(grandchild!.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      for (const j of [child!, other!])
        expect(await store.getJob(j.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
      expect((await store.stats()).find((x) => x.queue === q)).toMatchObject({ pending: 0, waiting: 0, dlq: 4 });
    });

    it('cancelMany: two overlapping selections at once, in opposite orders, cancel each job once and never deadlock', async () => {
      const q = freshQueue('cancel-race');
      const ids = (await store.enqueueMany(Array.from({ length: 60 }, () => ({ queue: q, type: 't' })))).map(
        (r) => r.id,
      );
      const [a, b] = await Promise.all([store.cancelMany(ids), store.cancelMany([...ids].reverse())]);
      for (const id of ids) {
        const results = [a!.find((r) => r.jobId === id)!.result, b!.find((r) => r.jobId === id)!.result].sort();
        expect(results).toEqual(['cancelled', 'not_found']);
      }
      expect(await h.statsRow(q)).toMatchObject({ cancelled: 60 });
      expect((await store.stats()).find((x) => x.queue === q)).toMatchObject({ pending: 0, dlq: 60 });
    });

    it('a retry after a cancel request dead-letters the job as cancelled', async () => {
      const q = freshQueue('cancel-retry');
      const job = await startedJob(q);
      await store.cancel(job.id);
      expect(await store.retry(ref(job), new Date(), 'failed anyway')).toBe('cancelled');
      expect((await store.getJob(job.id))!.reason).toBe('cancelled');
    });

    it('interrupt hands a started job back due now with its attempt given back, and is not a retry', async () => {
      const q = freshQueue('interrupt');
      const { id } = await store.enqueue({ queue: q, type: 't' });
      const [first] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(first).toMatchObject({ id, attempt: 1 });
      const before = Date.now();
      expect(await store.interrupt(ref(first!), 'interrupted by worker shutdown')).toBe('ok');
      const rec = (await store.getJob(id))!;
      expect(rec).toMatchObject({
        location: 'hot',
        state: 'pending',
        attempts: 0,
        lastError: 'interrupted by worker shutdown',
        leaseId: null,
        workerId: null,
      });
      expect(rec.runAt!.getTime()).toBeLessThanOrEqual(Date.now() + 1000);
      expect(rec.runAt!.getTime()).toBeGreaterThanOrEqual(before - 5_000);
      // Its lease is gone: a second interrupt (or any owner call) under it changes nothing.
      expect(await store.interrupt(ref(first!), 'again')).toBe('lease_lost');
      expect(await store.heartbeat(ref(first!))).toMatchObject({ status: 'lease_lost' });
      // Due at once, and the same attempt runs again: however often it is interrupted.
      const [second] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(second).toMatchObject({ id, attempts: 0, attempt: 1 });
      expect(await store.interrupt(ref(second!), 'interrupted by worker shutdown')).toBe('ok');
      const third = await claimOne(q); // the two-step path: claim, start
      expect(third.attempts).toBe(0);
      expect(await store.start(ref(third))).toEqual({ status: 'ok', attempt: 1 });
      // Attempts before the interrupted one stay counted: only the interrupted one is given back.
      expect(await store.retry(ref(third), new Date(), 'transient')).toBe('ok');
      const [fourth] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(fourth).toMatchObject({ id, attempt: 2 });
      expect(await store.interrupt(ref(fourth!), 'interrupted by worker shutdown')).toBe('ok');
      expect(await store.getJob(id)).toMatchObject({ state: 'pending', attempts: 1 });
      const [fifth] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(fifth).toMatchObject({ id, attempt: 2 });
      expect(await store.complete(ref(fifth!))).toBe('ok');
      expect(await store.getJob(id)).toMatchObject({ location: 'archive', attempts: 2 });
      // Three interrupts, one retry: only the retry is counted as one; nothing failed.
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 1, retried: 1, failed: 0, zombie: 0 });
    });

    it('interrupt refuses a job that is not processing under the lease: pending, fetched, or another lease', async () => {
      const q = freshQueue('interrupt-fence');
      const pending = await store.enqueue({ queue: q, type: 't' });
      expect(await store.interrupt({ jobId: pending.id, leaseId: STALE_LEASE }, 'x')).toBe('lease_lost');
      const fetched = await claimOne(q);
      expect(await store.interrupt(ref(fetched), 'x')).toBe('lease_lost');
      expect(await store.interrupt({ jobId: fetched.id, leaseId: STALE_LEASE }, 'x')).toBe('lease_lost');
      expect(await store.getJob(fetched.id)).toMatchObject({
        state: 'fetched',
        attempts: 0,
        leaseId: fetched.leaseId,
        lastError: null,
      });
      expect((await store.start(ref(fetched))).attempt).toBe(1);
      expect(await store.interrupt({ jobId: fetched.id, leaseId: STALE_LEASE }, 'x')).toBe('lease_lost');
      expect(await store.getJob(fetched.id)).toMatchObject({ state: 'processing', attempts: 1, lastError: null });
      expect(await store.interrupt(ref(fetched), 'x')).toBe('ok');
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 0, failed: 0, retried: 0 });
    });

    it('an interrupt after a cancel request dead-letters the job as cancelled, counted as such', async () => {
      const q = freshQueue('cancel-interrupt');
      const job = await startedJob(q);
      expect(await store.cancel(job.id)).toBe('cancel_requested');
      expect(await store.interrupt(ref(job), 'interrupted by worker shutdown')).toBe('cancelled');
      expect(await store.getJob(job.id)).toMatchObject({
        location: 'dlq',
        reason: 'cancelled',
        attempts: 1,
        lastError: 'interrupted by worker shutdown',
      });
      expect(await h.statsRow(q)).toMatchObject({ failed: 1, cancelled: 1, retried: 0 });
      expect((await h.bucketTotals(q, 'failed', 'cancelled')).count).toBe(1);
      expect(await store.interrupt(ref(job), 'x')).toBe('lease_lost');
      expect((await store.stats()).find((s) => s.queue === q)).toMatchObject({ processing: 0, pending: 0, dlq: 1 });
    });

    it('a completion after a cancel request dead-letters the job as cancelled (the cancel answer holds)', async () => {
      const q = freshQueue('cancel-complete');
      const cancelled = await startedJob(q);
      const other = await startedJob(q);
      expect(await store.cancel(cancelled.id)).toBe('cancel_requested');
      // The handler finished before it saw the request; one batch holds it and a job nobody cancelled.
      expect(await store.completeMany([ref(cancelled), ref(other)])).toEqual([
        { jobId: cancelled.id, status: 'cancelled' },
        { jobId: other.id, status: 'ok' },
      ]);
      expect(await store.getJob(cancelled.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(await store.getJob(other.id)).toMatchObject({ location: 'archive' });
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 1, failed: 1, cancelled: 1 });
      expect(await store.complete(ref(cancelled))).toBe('lease_lost');
      const single = await startedJob(q);
      await store.cancel(single.id);
      expect(await store.complete(ref(single))).toBe('cancelled');
      expect(await where(single.id)).toEqual(['dlq']);
    });
  });

  describe('results and progress', () => {
    it('stores what each job of a completion batch returned on its archive row; getJob returns it, searches do not', async () => {
      const q = freshQueue('results');
      await store.enqueueMany(Array.from({ length: 4 }, (_, i) => ({ queue: q, type: 't', payload: { i } })));
      const jobs = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 4 });
      expect(jobs).toHaveLength(4);
      const results = [{ rows: 3, names: ['a', 'é'] }, 'done', 42];
      const res = await store.completeMany(
        jobs.map((j, i) => ({ ...ref(j), ...(i < 3 ? { resultJson: resultJson(results[i], 1024) } : {}) })),
      );
      expect(res.map((r) => r.status)).toEqual(['ok', 'ok', 'ok', 'ok']);
      for (let i = 0; i < 4; i++) {
        const rec = await store.getJob(jobs[i]!.id);
        expect(rec!.location).toBe('archive');
        if (i < 3) expect(rec!.result).toEqual(results[i]);
        else expect(rec!.result).toBeUndefined();
      }
      const page = await store.searchJobs({ location: 'archive', queue: q, limit: 10 });
      expect(page.items).toHaveLength(4);
      expect(page.items.every((r) => r.result === undefined)).toBe(true);
      // A result refused by the database (not JSON) refuses the whole batch: nothing moved.
      const q2 = freshQueue('results-bad');
      await store.enqueue({ queue: q2, type: 't' });
      const [bad] = await store.claimAndStart({ workerId: 'w', queues: [q2], limit: 1 });
      await expect(store.completeMany([{ ...ref(bad!), resultJson: '{not json' }])).rejects.toThrow();
      expect(await where(bad!.id)).toEqual(['hot']);
      expect(await store.complete({ ...ref(bad!), resultJson: '"fine"' })).toBe('ok');
      expect((await store.getJob(bad!.id))!.result).toBe('fine');
    });

    it('a cancelled completion keeps no result; a stale lease stores none', async () => {
      const q = freshQueue('results-cancel');
      const job = await startedJob(q);
      expect(await store.cancel(job.id)).toBe('cancel_requested');
      expect(await store.complete({ ...ref(job), resultJson: '{"x":1}' })).toBe('cancelled');
      const rec = await store.getJob(job.id);
      expect(rec).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(rec!.result).toBeUndefined();
      expect(await store.complete({ ...ref(job), resultJson: '{"x":1}' })).toBe('lease_lost');
    });

    it('reports progress under the lease, shows it on the hot job, and clears it when the next attempt starts', async () => {
      const q = freshQueue('progress');
      const job = await startedJob(q);
      const p1 = normalizeProgress({ done: 40, total: 100, note: 'rows copied' });
      expect(await store.reportProgress(ref(job), p1)).toBe('ok');
      expect((await store.getJob(job.id))!.progress).toEqual({
        fraction: 0.4,
        done: 40,
        total: 100,
        note: 'rows copied',
      });
      const inList = (await store.searchJobs({ location: 'hot', queue: q, limit: 5 })).items[0]!;
      expect(inList.progress).toEqual(p1);
      expect(await store.reportProgress({ ...ref(job), leaseId: STALE_LEASE }, normalizeProgress(0.9))).toBe(
        'lease_lost',
      );
      expect(await store.reportProgress({ jobId: 'nope', leaseId: job.leaseId }, normalizeProgress(0.9))).toBe(
        'lease_lost',
      );
      expect((await store.getJob(job.id))!.progress!.fraction).toBe(0.4);
      // The attempt ends in a retry: its progress stays visible while the job waits, and the next start clears it.
      expect(await store.retry(ref(job), new Date(Date.now() - 1000), 'again')).toBe('ok');
      expect((await store.getJob(job.id))!.progress!.fraction).toBe(0.4);
      expect(await store.reportProgress(ref(job), normalizeProgress(0.5))).toBe('lease_lost'); // pending now
      const [again] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(again!.id).toBe(job.id);
      expect((await store.getJob(job.id))!.progress).toBeNull();
      expect(await store.reportProgress(ref(again!), normalizeProgress(1))).toBe('ok');
      expect(await store.complete(ref(again!))).toBe('ok');
      const archived = await store.getJob(job.id);
      expect(archived!.progress).toBeNull();
      // A fetched job (claimNext, not yet started) takes no progress; start clears what an earlier attempt left.
      const q3 = freshQueue('progress-fetched');
      await store.enqueue({ queue: q3, type: 't' });
      const fetched = await claimOne(q3);
      expect(await store.reportProgress(ref(fetched), normalizeProgress(0.1))).toBe('lease_lost');
      expect((await store.start(ref(fetched))).status).toBe('ok');
      expect(await store.reportProgress(ref(fetched), normalizeProgress(0.1))).toBe('ok');
    });
  });

  describe('job logs', () => {
    const lines = (attempt: number, ...messages: string[]) =>
      messages.map((m) => jobLogLine(attempt, 'info', m, { m }, new Date('2030-01-01T00:00:00Z')));

    it('appends lines under the lease, keeps the newest maxLines, and every move carries them', async () => {
      const q = freshQueue('joblog');
      const job = await startedJob(q);
      expect(await store.appendJobLog(ref(job), lines(1, 'a', 'b', 'c'), 4)).toBe('ok');
      expect(await store.appendJobLog(ref(job), lines(1, 'd', 'e'), 4)).toBe('ok');
      const hot = await store.getJob(job.id);
      expect(hot!.logs!.map((l) => l.message)).toEqual(['b', 'c', 'd', 'e']);
      expect(hot!.logs![0]).toEqual({
        attempt: 1,
        at: '2030-01-01T00:00:00.000Z',
        level: 'info',
        message: 'b',
        fields: { m: 'b' },
      });
      // Lists leave logs out; the job itself has them.
      expect((await store.searchJobs({ location: 'hot', queue: q, limit: 5 })).items[0]!.logs).toBeUndefined();
      // Fenced: a stale lease, a job that is not running, nothing appended.
      expect(await store.appendJobLog({ ...ref(job), leaseId: STALE_LEASE }, lines(1, 'x'), 4)).toBe('lease_lost');
      // Hot -> DLQ carries them ...
      expect(await store.fail(ref(job), 'fatal', 'boom')).toBe('ok');
      expect(await store.appendJobLog(ref(job), lines(1, 'late'), 4)).toBe('lease_lost');
      expect((await store.getJob(job.id))!.logs!.map((l) => l.message)).toEqual(['b', 'c', 'd', 'e']);
      expect((await store.searchJobs({ location: 'dlq', queue: q, limit: 5 })).items[0]!.logs).toBeUndefined();
      // ... DLQ -> hot keeps them, and the next attempt adds its own ...
      expect(await store.resurrect([job.id])).toEqual([job.id]);
      const [again] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      expect(await store.appendJobLog(ref(again!), lines(1, 'f'), 4)).toBe('ok');
      // ... and hot -> archive too.
      expect(await store.complete(ref(again!))).toBe('ok');
      const archived = await store.getJob(job.id);
      expect(archived!.location).toBe('archive');
      expect(archived!.logs!.map((l) => l.message)).toEqual(['c', 'd', 'e', 'f']);
      expect((await store.searchJobs({ location: 'archive', queue: q, limit: 5 })).items[0]!.logs).toBeUndefined();
    });

    it('takes lines from a fetched job, refuses bad arguments by name, and a job that logged nothing has no log', async () => {
      const q = freshQueue('joblog-args');
      await store.enqueue({ queue: q, type: 't' });
      const fetched = await claimOne(q);
      expect(await store.appendJobLog(ref(fetched), lines(1, 'claimed'), 10)).toBe('ok');
      await expect(store.appendJobLog(ref(fetched), lines(1, 'x'), 0)).rejects.toMatchObject({ field: 'maxLines' });
      await expect(store.appendJobLog(ref(fetched), 'x' as never, 10)).rejects.toMatchObject({ field: 'lines' });
      expect(await store.appendJobLog({ jobId: 'nope', leaseId: fetched.leaseId }, lines(1, 'x'), 10)).toBe(
        'lease_lost',
      );
      const quiet = await startedJob(freshQueue('joblog-quiet'));
      expect(await store.complete(ref(quiet))).toBe('ok');
      expect((await store.getJob(quiet.id))!.logs).toBeUndefined();
    });
  });

  describe('attempts', () => {
    const outcomes = (rec: { attemptLog?: { attempt: number; outcome: string }[] } | null) =>
      (rec?.attemptLog ?? []).map((a) => `${a.attempt}:${a.outcome}`);
    const timeline = async (id: string) => jobTimeline((await store.getJob(id))!);

    it('records each failed attempt with its worker, times and error, through retry and the DLQ; the success is the archive row', async () => {
      const q = freshQueue('att');
      const { id } = await store.enqueue({ queue: q, type: 't', maxAttempts: 4 });
      const [first] = await store.claimAndStart({ workerId: 'w-one', queues: [q], limit: 1 });
      const running = (await store.getJob(id))!;
      // A running job: its lease expiry, its heartbeat and its own limit; the running attempt is its row.
      expect(running).toMatchObject({ state: 'processing', attempts: 1, maxAttempts: 4, workerId: 'w-one' });
      expect(running.leaseExpiresAt!.getTime()).toBeGreaterThan(Date.now() - 1000);
      expect(running.heartbeatAt!.getTime()).toBeGreaterThan(Date.now() - 60_000);
      expect(running.attemptLog).toBeUndefined();
      expect(jobTimeline(running)).toEqual([
        {
          attempt: 1,
          worker: 'w-one',
          startedAt: running.startedAt!.toISOString(),
          endedAt: null,
          outcome: 'running',
          error: null,
        },
      ]);
      expect(await store.retry(ref(first!), new Date(), 'first boom')).toBe('ok');
      const [second] = await store.claimAndStart({ workerId: 'w-two', queues: [q], limit: 1 });
      expect(await store.retry(ref(second!), new Date(), 'x'.repeat(JOB_ATTEMPT_ERROR_CHARS + 50))).toBe('ok');
      const pending = (await store.getJob(id))!;
      expect(outcomes(pending)).toEqual(['1:retried', '2:retried']);
      const [a1, a2] = pending.attemptLog!;
      expect(a1).toMatchObject({ worker: 'w-one', error: 'first boom' });
      expect(new Date(a1!.startedAt!).getTime()).toBeLessThanOrEqual(new Date(a1!.endedAt!).getTime());
      expect(a2!.worker).toBe('w-two');
      expect(a2!.error).toBe(`${'x'.repeat(JOB_ATTEMPT_ERROR_CHARS)}…`); // cut; the job's last error is whole
      expect(pending.lastError).toHaveLength(JOB_ATTEMPT_ERROR_CHARS + 50);
      // ctx.log lines and attempts share the column, each in its own field.
      const [third] = await store.claimAndStart({ workerId: 'w-three', queues: [q], limit: 1 });
      expect(await store.appendJobLog(ref(third!), [jobLogLine(3, 'info', 'third try', undefined)], 10)).toBe('ok');
      expect(await store.complete(ref(third!))).toBe('ok');
      const done = (await store.getJob(id))!;
      expect(done.logs!.map((l) => l.message)).toEqual(['third try']);
      expect(outcomes(done)).toEqual(['1:retried', '2:retried']); // the archive move adds nothing
      expect((await timeline(id)).map((a) => `${a.attempt}:${a.outcome}:${a.worker}`)).toEqual([
        '1:retried:w-one',
        '2:retried:w-two',
        '3:succeeded:w-three',
      ]);
      expect((await timeline(id))[2]!.endedAt).toBe(done.finishedAt!.toISOString());
      // Lists leave them out.
      expect(
        (await store.searchJobs({ location: 'archive', queue: q, limit: 5 })).items[0]!.attemptLog,
      ).toBeUndefined();

      // A job that never failed records nothing.
      const clean = await startedJob(q);
      expect(await store.complete(ref(clean))).toBe('ok');
      expect((await store.getJob(clean.id))!.attemptLog).toBeUndefined();
      expect((await timeline(clean.id)).map((a) => a.outcome)).toEqual(['succeeded']);
    });

    it('records the last attempt of a dead letter (fail, retry or interrupt after a cancel, a cancelled completion), none for one that never ran', async () => {
      const q = freshQueue('att-dlq');
      const failed = await startedJob(q);
      expect(await store.fail(ref(failed), 'fatal', 'bad input')).toBe('ok');
      expect((await store.getJob(failed.id))!.attemptLog).toEqual([
        expect.objectContaining({ attempt: 1, worker: 'w1', outcome: 'fatal', error: 'bad input' }),
      ]);
      const cancelledRetry = await startedJob(q);
      await store.cancel(cancelledRetry.id);
      // 'cancelled', not 'ok': the worker reports where the job went.
      expect(await store.retry(ref(cancelledRetry), new Date(), 'boom')).toBe('cancelled');
      expect(outcomes(await store.getJob(cancelledRetry.id))).toEqual(['1:cancelled']);
      const cancelledInterrupt = await startedJob(q);
      await store.cancel(cancelledInterrupt.id);
      expect(await store.interrupt(ref(cancelledInterrupt), 'shutdown')).toBe('cancelled');
      expect(outcomes(await store.getJob(cancelledInterrupt.id))).toEqual(['1:cancelled']);
      // A handler's failure after the cancel request: the job still ends as 'cancelled' (the operator was told
      // 'cancel_requested'), with the handler's error, and the answer says so.
      const cancelledFail = await startedJob(q);
      await store.cancel(cancelledFail.id);
      expect(await store.fail(ref(cancelledFail), 'fatal', 'bad input')).toBe('cancelled');
      expect(await store.getJob(cancelledFail.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect((await store.getJob(cancelledFail.id))!.attemptLog).toEqual([
        expect.objectContaining({ attempt: 1, outcome: 'cancelled', error: 'bad input' }),
      ]);
      // The processor's own cancel (its handler aborted by the request) fails it as 'cancelled': plainly 'ok'.
      const selfCancelled = await startedJob(q);
      await store.cancel(selfCancelled.id);
      expect(await store.fail(ref(selfCancelled), 'cancelled', 'cancelled')).toBe('ok');
      expect(await store.getJob(selfCancelled.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      const cancelledComplete = await startedJob(q);
      await store.cancel(cancelledComplete.id);
      expect(await store.complete(ref(cancelledComplete))).toBe('cancelled');
      expect(outcomes(await store.getJob(cancelledComplete.id))).toEqual(['1:cancelled']);
      // Cancelled while pending, or failed while only fetched: no attempt ran, none is recorded.
      const pending = await store.enqueue({ queue: q, type: 't' });
      expect(await store.cancel(pending.id)).toBe('cancelled');
      expect((await store.getJob(pending.id))!.attemptLog).toBeUndefined();
      await store.enqueue({ queue: q, type: 't' });
      const fetched = await claimOne(q);
      expect(await store.fail(ref(fetched), 'fatal', 'unknown type')).toBe('ok');
      expect((await store.getJob(fetched.id))!.attemptLog).toBeUndefined();
      // A stale lease records nothing.
      expect(await store.fail({ jobId: failed.id, leaseId: STALE_LEASE }, 'fatal', 'x')).toBe('lease_lost');
      expect(outcomes(await store.getJob(failed.id))).toEqual(['1:fatal']);
      // Resurrected, it keeps its attempts, and the next ones follow.
      expect(await store.resurrect([failed.id])).toEqual([failed.id]);
      const [again] = await store.claimAndStart({ workerId: 'w2', queues: [q], limit: 1 });
      expect(again!.id).toBe(failed.id);
      expect(await store.complete(ref(again!))).toBe('ok');
      expect((await timeline(failed.id)).map((a) => `${a.attempt}:${a.outcome}`)).toEqual(['1:fatal', '1:succeeded']);
    });

    it('records an interrupted attempt (its number used again) and a zombie, retried or dead-lettered', async () => {
      const q = freshQueue('att-int');
      const { id } = await store.enqueue({ queue: q, type: 't' });
      const [first] = await store.claimAndStart({ workerId: 'w-a', queues: [q], limit: 1 });
      expect(await store.interrupt(ref(first!), 'interrupted by worker shutdown')).toBe('ok');
      expect((await store.getJob(id))!.attemptLog).toEqual([
        expect.objectContaining({
          attempt: 1,
          worker: 'w-a',
          outcome: 'interrupted',
          error: 'interrupted by worker shutdown',
        }),
      ]);
      const qz = freshQueue('att-zombie');
      await store.updateQueue(qz, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 2 });
      const z = await startedJob(qz);
      await h.backdate(z.id, 'heartbeat_at', 31);
      expect((await store.rescueZombies(100)).retried).toBeGreaterThanOrEqual(1);
      const retried = (await store.getJob(z.id))!;
      expect(outcomes(retried)).toEqual(['1:zombie']);
      expect(retried.attemptLog![0]!.error).toMatch(/^zombie: no heartbeat since /);
      expect(retried.attemptLog![0]!.worker).toBe('w1');
      const z2 = await claimOne(qz, 'w-z');
      expect(await store.start(ref(z2))).toEqual({ status: 'ok', attempt: 2 });
      await h.backdate(z.id, 'heartbeat_at', 31);
      expect((await store.rescueZombies(100)).deadLettered).toBeGreaterThanOrEqual(1);
      const dead = (await store.getJob(z.id))!;
      expect(dead).toMatchObject({ location: 'dlq', reason: 'zombie' });
      expect(outcomes(dead)).toEqual(['1:zombie', '2:zombie']);
      expect(dead.attemptLog![1]!.worker).toBe('w-z');
    });

    it(`keeps the newest ${JOB_ATTEMPTS_KEPT} attempts, and log lines never push them out (nor they the lines)`, async () => {
      const q = freshQueue('att-bound');
      const { id } = await store.enqueue({ queue: q, type: 't', maxAttempts: 1000 });
      const runs = JOB_ATTEMPTS_KEPT + 3;
      for (let n = 0; n < runs; n++) {
        const [job] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
        expect(
          await store.appendJobLog(
            ref(job!),
            [jobLogLine(n, 'info', `a${n}`, undefined), jobLogLine(n, 'info', `b${n}`, undefined)],
            2,
          ),
        ).toBe('ok');
        expect(await store.retry(ref(job!), new Date(), `e${n}`)).toBe('ok');
      }
      const rec = (await store.getJob(id))!;
      expect(rec.logs!.map((l) => l.message)).toEqual([`a${runs - 1}`, `b${runs - 1}`]);
      expect(rec.attemptLog).toHaveLength(JOB_ATTEMPTS_KEPT);
      expect(rec.attemptLog![0]).toMatchObject({ attempt: 4, error: 'e3' });
      expect(rec.attemptLog![JOB_ATTEMPTS_KEPT - 1]).toMatchObject({ attempt: runs, error: `e${runs - 1}` });
    });
  });

  describe('zombies and expiry', () => {
    it('returns fetched jobs past their lease to pending, without using an attempt', async () => {
      const q = freshQueue('zf');
      await store.enqueue({ queue: q, type: 't' });
      const job = await claimOne(q);
      await h.backdate(job.id, 'lease_expires_at', 1);
      const r = await store.rescueZombies(100);
      expect(r.releasedFetched).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(job.id)).toMatchObject({ state: 'pending', attempts: 0 });
    });

    it('retries or dead-letters processing jobs past the heartbeat timeout per queue policy', async () => {
      const qr = freshQueue('zr');
      const qd = freshQueue('zd');
      await store.updateQueue(qr, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry' });
      await store.updateQueue(qd, { zombieTimeoutSeconds: 30, zombiePolicy: 'dlq' });
      const jr = await startedJob(qr);
      const jd = await startedJob(qd);
      const fresh = await startedJob(qr);
      await h.backdate(jr.id, 'heartbeat_at', 31);
      await h.backdate(jd.id, 'heartbeat_at', 31);
      await h.backdate(fresh.id, 'heartbeat_at', 10);
      const r = await store.rescueZombies(100);
      expect(r.retried).toBeGreaterThanOrEqual(1);
      expect(r.deadLettered).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(jr.id)).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
      expect(await store.getJob(jd.id)).toMatchObject({ location: 'dlq', reason: 'zombie' });
      expect(await store.getJob(fresh.id)).toMatchObject({ state: 'processing' });
      expect((await h.statsRow(qr)).zombie).toBe(1);
      expect(await h.statsRow(qd)).toMatchObject({ zombie: 1, failed: 1 });
      expect(await store.complete(ref(jr))).toBe('lease_lost');
      // Finished, not left running: 20 s on, it would be a zombie of the next test's rescue (a slow machine's).
      expect(await store.complete(ref(fresh))).toBe('ok');
    });

    it('dead-letters a zombie whose attempts are used up, and expires pending jobs past expiresAt', async () => {
      const q = freshQueue('zx');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 1 });
      const job = await startedJob(q);
      await h.backdate(job.id, 'heartbeat_at', 60);
      const exp = await store.enqueue({ queue: q, type: 't', expiresAt: new Date(Date.now() + 60_000) });
      await h.backdate(exp.id, 'expires_at', 1);
      expect(await store.claimById(exp.id, 'w')).toBeNull();
      const r = await store.rescueZombies(100);
      expect(r.expired).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(job.id)).toMatchObject({ location: 'dlq', reason: 'zombie' });
      expect(await store.getJob(exp.id)).toMatchObject({ location: 'dlq', reason: 'expired' });
    });

    it("applies the handler's own max attempts to zombies: the job's own, else its type's, else the queue's", async () => {
      const q = freshQueue('zt');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 5 });
      const limited = await startedJob(q, { type: 'limited' }); // its handler allows 1 attempt
      const ownLimit = await startedJob(q, { type: 'limited', maxAttempts: 3 }); // the job's own limit wins
      const queueLimit = await startedJob(q, { type: 'unlimited' }); // no handler limit: the queue's 5
      for (const j of [limited, ownLimit, queueLimit]) await h.backdate(j.id, 'heartbeat_at', 31);
      const r = await store.rescueZombies(100, { limited: 1, other: 7 });
      // At least: a rescue counts every queue's moves, and another test's job may time out meanwhile.
      expect(r.retried).toBeGreaterThanOrEqual(2);
      expect(r.deadLettered).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(limited.id)).toMatchObject({ location: 'dlq', reason: 'zombie', attempts: 1 });
      expect(await store.getJob(ownLimit.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect(await store.getJob(queueLimit.id)).toMatchObject({ location: 'hot', state: 'pending' });
      await expect(store.rescueZombies(100, { 'bad type': 1 })).rejects.toThrow(ValidationError);
      await expect(store.rescueZombies(100, { limited: 0 })).rejects.toThrow(ValidationError);
    });

    it('rescues in bounded batches', async () => {
      const q = freshQueue('zb');
      await store.enqueueMany(Array.from({ length: 7 }, () => ({ queue: q, type: 't' })));
      const jobs = await store.claimNext({ workerId: 'w', queues: [q], limit: 7 });
      for (const j of jobs) await h.backdate(j.id, 'lease_expires_at', 1);
      const first = await store.rescueZombies(3);
      expect(first.releasedFetched).toBeLessThanOrEqual(3);
      let total = first.releasedFetched;
      for (let i = 0; i < 10 && total < 7; i++) total += (await store.rescueZombies(3)).releasedFetched;
      expect(total).toBeGreaterThanOrEqual(7);
    });
  });

  describe('resurrect and purge', () => {
    it('resurrects by id: attempts reset, idempotency key kept, counters updated', async () => {
      const q = freshQueue('res');
      const job = await startedJob(q, { idempotencyKey: `rk-${q}` });
      await store.fail(ref(job), 'fatal', 'bad');
      expect(await store.resurrect([job.id])).toEqual([job.id]);
      expect(await store.getJob(job.id)).toMatchObject({
        location: 'hot',
        state: 'pending',
        attempts: 0,
        idempotencyKey: `rk-${q}`,
      });
      expect((await h.statsRow(q)).resurrected).toBe(1);
      expect(await store.resurrect([job.id])).toEqual([]);
      expect(
        (await store.enqueue({ queue: q, type: 't', payload: { n: 1 }, idempotencyKey: `rk-${q}` })).duplicate,
      ).toBe(true);
    });

    it("checks a resurrected job's key within its own queue and type only", async () => {
      const q = freshQueue('res-scope');
      const job = await startedJob(q, { idempotencyKey: `scoped-${q}` });
      await store.fail(ref(job), 'fatal', 'bad');
      // The same key held in another queue and under another type of this queue: neither is this job's.
      await store.enqueue({ queue: `${q}-other`, type: 't', idempotencyKey: `scoped-${q}` });
      await store.enqueue({ queue: q, type: 'u', idempotencyKey: `scoped-${q}` });
      expect(await store.resurrect([job.id])).toEqual([job.id]);
      expect(await where(job.id)).toEqual(['hot']);
    });

    it('leaves a job in the DLQ when a hot job now holds its idempotency key', async () => {
      const q = freshQueue('res-key');
      const job = await startedJob(q, { idempotencyKey: `dup-${q}` });
      await store.fail(ref(job), 'fatal', 'bad');
      await store.enqueue({ queue: q, type: 't', idempotencyKey: `dup-${q}` });
      expect(await store.resurrect([job.id])).toEqual([]);
      expect(await where(job.id)).toEqual(['dlq']);
    });

    // A key fails, is enqueued again and fails again: two dead letters of one key. Resurrecting both (by id, or by a
    // filter that matches both) brings back the newest and leaves the other where it is; it used to fail the whole
    // resurrect on PostgreSQL with a unique violation, so a DLQ holding such a pair could not be resurrected at all.
    it('of several dead letters sharing one key, brings back only the newest; the others stay in the DLQ', async () => {
      const q = freshQueue('res-twice');
      const key = `twice-${q}`;
      const older = await startedJob(q, { idempotencyKey: key });
      await store.fail(ref(older), 'fatal', 'bad');
      const newer = await startedJob(q, { idempotencyKey: key });
      await store.fail(ref(newer), 'fatal', 'bad');
      expect(await store.resurrect([older.id, newer.id])).toEqual([newer.id]);
      expect(await where(newer.id)).toEqual(['hot']);
      expect(await where(older.id)).toEqual(['dlq']);
      await store.cancel(newer.id);
      const third = await startedJob(q, { idempotencyKey: key });
      await store.fail(ref(third), 'fatal', 'bad');
      const byFilter = await store.resurrectByFilter({ queue: q, reason: 'fatal', limit: 10, dryRun: false });
      expect(byFilter.ids).toEqual([third.id]);
      expect(await where(third.id)).toEqual(['hot']);
      expect(await where(older.id)).toEqual(['dlq']);
      expect((await h.statsRow(q)).resurrected).toBe(2);
      expect((await store.stats()).find((s) => s.queue === q)).toMatchObject({ pending: 1, dlq: 2 });
    });

    it('resurrects by filter with a dry-run preview and a limit', async () => {
      const q = freshQueue('resf');
      for (let i = 0; i < 4; i++) {
        const j = await startedJob(q);
        await store.fail(ref(j), i < 3 ? 'timeout' : 'fatal', 'x');
      }
      const preview = await store.resurrectByFilter({ queue: q, reason: 'timeout', limit: 2, dryRun: true });
      expect(preview.dryRun).toBe(true);
      expect(preview.ids).toHaveLength(2);
      expect(await h.countRows('dlq', q)).toBe(4);
      const done = await store.resurrectByFilter({ queue: q, reason: 'timeout', limit: 2, dryRun: false });
      expect(done.ids.sort()).toEqual(preview.ids.sort());
      expect(await h.countRows('dlq', q)).toBe(2);
      expect(await h.countRows('hot', q)).toBe(2);
    });

    it('counts matches exactly up to a cap and "at least" past it; groups dead letters by reason, type and queue', async () => {
      const q = freshQueue('cnt');
      for (let i = 0; i < 5; i++) {
        // The fatal ones fail strictly later than the timeouts (a clock of milliseconds may tie): the bounded groups
        // below count the newest.
        if (i === 3) await new Promise((r) => setTimeout(r, 5));
        const j = await startedJob(q);
        await store.fail(ref(j), i < 3 ? 'timeout' : 'fatal', 'x');
      }
      await store.enqueue({ queue: q, type: 'u', runAt: new Date(Date.now() + 3_600_000) });
      expect(await store.countJobs({ location: 'dlq', queue: q, cap: 10 })).toMatchObject({ matched: 5, exact: true });
      expect(await store.countJobs({ location: 'dlq', queue: q, reason: 'timeout', cap: 10 })).toMatchObject({
        matched: 3,
        exact: true,
      });
      expect(await store.countJobs({ location: 'dlq', queue: q, cap: 4 })).toMatchObject({ matched: 4, exact: false });
      expect(await store.countJobs({ location: 'dlq', queue: q, cap: 5 })).toMatchObject({ matched: 5, exact: true });
      expect(await store.countJobs({ location: 'hot', queue: q, state: 'pending', cap: 10 })).toMatchObject({
        matched: 1,
        exact: true,
      });
      const past = await store.countJobs({ location: 'dlq', queue: q, to: new Date(Date.now() - 3_600_000), cap: 10 });
      expect(past).toMatchObject({ matched: 0, exact: true });
      expect(Math.abs(past.asOf.getTime() - Date.now())).toBeLessThan(60_000);

      const page = await store.dlqGroups(q, 0, 10, 5);
      expect(page).toMatchObject({ totalGroups: 2, totalJobs: 5, more: false });
      expect(page.groups.map((g) => [g.reason, g.type, g.queue, g.jobs])).toEqual([
        ['timeout', 't', q, 3],
        ['fatal', 't', q, 2],
      ]);
      const second = await store.dlqGroups(q, 1, 1, 10);
      expect(second.groups.map((g) => g.reason)).toEqual(['fatal']);
      expect(second.totalGroups).toBe(2);
      expect(await store.dlqGroups(`${q}-none`, 0, 10, 10)).toEqual({
        groups: [],
        totalGroups: 0,
        totalJobs: 0,
        more: false,
      });
      // Bounded: only the newest scanRows dead letters are counted (the last two failed are the fatal ones), and
      // more says older ones were left out; the group that only older rows would form is not listed.
      const newest = await store.dlqGroups(q, 0, 10, 2);
      expect(newest).toMatchObject({ totalGroups: 1, totalJobs: 2, more: true });
      expect(newest.groups.map((g) => [g.reason, g.jobs])).toEqual([['fatal', 2]]);
      const three = await store.dlqGroups(q, 0, 10, 3);
      expect(three).toMatchObject({ totalGroups: 2, totalJobs: 3, more: true });
      expect(three.groups.map((g) => [g.reason, g.jobs])).toEqual([
        ['fatal', 2],
        ['timeout', 1],
      ]);
      await expect(store.dlqGroups(q, 0, 10, 0)).rejects.toMatchObject({ field: 'scanRows' });
    });

    it('lists the workers holding leases, with jobs held and their oldest sign of life', async () => {
      const q = freshQueue('wrk');
      const worker = `w-${q}`;
      await store.enqueueMany([0, 1, 2].map(() => ({ queue: q, type: 't' })));
      const claimed = await store.claimNext({ workerId: worker, queues: [q], limit: 3 });
      expect(claimed).toHaveLength(3);
      await store.start(ref(claimed[0]!));
      const mine = (await store.listWorkers()).find((w) => w.workerId === worker)!;
      // Not in the registry: listed from its leases alone.
      expect(mine).toMatchObject({ jobsHeld: 3, processing: 1, queues: [q], registration: null });
      expect(mine.oldestHeartbeatAt).toBeInstanceOf(Date);
      expect(mine.oldestHeartbeatAt!.getTime()).toBeLessThanOrEqual(mine.newestHeartbeatAt!.getTime());
      expect(mine.earliestLeaseExpiresAt!.getTime()).toBeGreaterThan(mine.asOf.getTime());
      for (const j of claimed) await store.cancel(j.id);
    });

    it('keeps a registry of workers: registered idle, refreshed, joined with the jobs they hold, removed, pruned', async () => {
      const q = freshQueue('reg');
      const id = `reg-${q}`;
      const started = new Date(Date.now() - 120_000);
      const seen1 = await store.registerWorker(
        workerRow(id, { instanceId: 'inst-1', buildId: 'b42', queues: [q, `${q}-b`], startedAt: started }),
      );
      expect(seen1).toBeInstanceOf(Date);
      expect(Math.abs(seen1.getTime() - Date.now())).toBeLessThan(60_000);
      // Idle: registered, holding nothing, listed with what it reported.
      let mine = (await store.listWorkers()).find((w) => w.workerId === id)!;
      expect(mine).toMatchObject({ jobsHeld: 0, processing: 0, queues: [], oldestHeartbeatAt: null });
      expect(mine.registration).toEqual({
        host: 'host-a',
        instanceId: 'inst-1',
        pid: 4242,
        appVersion: '1.2.3',
        buildId: 'b42',
        queues: [q, `${q}-b`],
        concurrency: 32,
        jobsDone: 0,
        startedAt: started,
        lastSeenAt: seen1,
      });
      // A refresh replaces what it reports and moves last seen forward; "every queue" is null.
      const seen2 = await store.registerWorker(workerRow(id, { jobsDone: 7, queues: null, appVersion: '1.2.4' }));
      expect(seen2.getTime()).toBeGreaterThanOrEqual(seen1.getTime());
      // Holding jobs under its id: the same row, with the leases' figures.
      await store.enqueueMany([0, 1].map(() => ({ queue: q, type: 't' })));
      const claimed = await store.claimNext({ workerId: id, queues: [q], limit: 2 });
      expect(claimed).toHaveLength(2);
      const rows = (await store.listWorkers()).filter((w) => w.workerId === id);
      expect(rows).toHaveLength(1);
      mine = rows[0]!;
      expect(mine).toMatchObject({ jobsHeld: 2, processing: 0, queues: [q] });
      expect(mine.registration).toMatchObject({ jobsDone: 7, queues: null, appVersion: '1.2.4', lastSeenAt: seen2 });
      // Lease holders come before idle workers.
      const order = (await store.listWorkers()).map((w) => w.jobsHeld > 0);
      expect(order.indexOf(false) === -1 || order.lastIndexOf(true) < order.indexOf(false)).toBe(true);
      for (const j of claimed) await store.cancel(j.id);
      // A graceful stop removes the row once; an id no worker can have is answered without a call.
      expect(await store.deregisterWorker(id)).toBe(true);
      expect(await store.deregisterWorker(id)).toBe(false);
      expect(await store.deregisterWorker('')).toBe(false);
      expect((await store.listWorkers()).some((w) => w.workerId === id)).toBe(false);
      // Pruning deletes exactly the rows not seen since the cutoff.
      const old = `old-${q}`;
      const young = `young-${q}`;
      const seenOld = await store.registerWorker(workerRow(old));
      await new Promise((r) => setTimeout(r, 20));
      const seenYoung = await store.registerWorker(workerRow(young));
      expect(seenYoung.getTime()).toBeGreaterThan(seenOld.getTime());
      expect(await store.pruneWorkers(seenOld)).toBe(0); // strictly older than the cutoff
      expect(await store.pruneWorkers(seenYoung)).toBeGreaterThanOrEqual(1);
      const ids = (await store.listWorkers()).map((w) => w.workerId);
      expect(ids).not.toContain(old);
      expect(ids).toContain(young);
      expect(await store.deregisterWorker(young)).toBe(true);
    });

    it('two concurrent resurrects of one job produce exactly one hot job', async () => {
      const q = freshQueue('res-race');
      for (let round = 0; round < 10; round++) {
        const job = await startedJob(q);
        await store.fail(ref(job), 'fatal', 'x');
        const [a, b] = await Promise.all([store.resurrect([job.id]), store.resurrect([job.id])]);
        expect(a.length + b.length).toBe(1);
        expect(await where(job.id)).toEqual(['hot']);
        await store.cancel(job.id);
      }
      expect((await h.statsRow(q)).resurrected).toBe(10);
    });

    it('purges archive, DLQ and metric buckets older than a cutoff, in batches', async () => {
      const q = freshQueue('purge');
      for (let i = 0; i < 5; i++) {
        const j = await startedJob(q);
        if (i < 3) await store.complete(ref(j));
        else await store.fail(ref(j), 'fatal', 'x');
      }
      const cutoff = new Date(Date.now() - 3600_000);
      expect(await store.purge('archive', q, cutoff, 100)).toBe(0);
      await h.backdateFinished('archive', 7200);
      await h.backdateFinished('dlq', 7200);
      await h.backdateFinished('metrics', 7200);
      expect(await store.purge('archive', q, cutoff, 2)).toBe(2);
      expect(await store.purge('archive', q, cutoff, 2)).toBe(1);
      expect(await store.purge('archive', q, cutoff, 2)).toBe(0);
      expect(await store.purge('dlq', q, cutoff, 100)).toBe(2);
      expect(await store.purge('metrics', q, cutoff, 100)).toBeGreaterThanOrEqual(2);
      expect(await h.countRows('archive', q)).toBe(0);
      expect(await h.countRows('dlq', q)).toBe(0);
      expect((await store.metrics(60 * 24, q)).length).toBe(0);
    });

    it("maintenance's retention purges go by the store's clock: a host whose clock runs ahead purges nothing early", async () => {
      const q = freshQueue('clock');
      await store.updateQueue(q, {
        archiveRetentionSeconds: 600,
        dlqRetentionSeconds: 600,
        metricsRetentionSeconds: 600,
      });
      const done = await startedJob(q);
      await store.complete(ref(done));
      const dead = await startedJob(q);
      await store.fail(ref(dead), 'fatal', 'x');
      const worker = `clock-${q}`;
      await store.registerWorker(workerRow(worker));
      // The pass on a host 15 minutes ahead of the server: by its clock every row above is past its 10 minutes.
      const skewedPass = async () => {
        vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 900_000 });
        try {
          return await runMaintenance(store, { workerRetentionMs: 600_000 });
        } finally {
          vi.useRealTimers();
        }
      };
      await skewedPass();
      expect(await h.countRows('archive', q)).toBe(1);
      expect(await h.countRows('dlq', q)).toBe(1);
      expect((await store.metrics(60, q)).length).toBeGreaterThan(0);
      expect((await store.listWorkers()).find((w) => w.workerId === worker)?.registration).toBeTruthy();
      // Rows past their retention by the server's clock still go.
      await h.backdateFinished('archive', 7200);
      await h.backdateFinished('dlq', 7200);
      await skewedPass();
      expect(await h.countRows('archive', q)).toBe(0);
      expect(await h.countRows('dlq', q)).toBe(0);
      await store.deregisterWorker(worker);
    });
  });

  describe('atomicity', () => {
    it('a failing archive insert rolls back the delete, counters and buckets', async () => {
      const q = freshQueue('atom-a');
      const job = await startedJob(q);
      await h.breakInserts('archive');
      try {
        await expect(store.complete(ref(job))).rejects.toThrow();
      } finally {
        await h.restoreInserts('archive');
      }
      expect(await where(job.id)).toEqual(['hot']);
      expect((await store.getJob(job.id))!.state).toBe('processing');
      expect(await h.statsRow(q)).toMatchObject({ succeeded: 0 });
      expect((await h.bucketTotals(q, 'succeeded')).count).toBe(0);
      expect(await store.complete(ref(job))).toBe('ok');
    });

    it('a failing DLQ insert rolls back fail, cancel and zombie moves', async () => {
      const q = freshQueue('atom-d');
      await store.updateQueue(q, { zombiePolicy: 'dlq', zombieTimeoutSeconds: 30 });
      const job = await startedJob(q);
      const pending = await store.enqueue({ queue: q, type: 't' });
      await h.backdate(job.id, 'heartbeat_at', 60);
      await h.breakInserts('dlq');
      try {
        await expect(store.fail(ref(job), 'fatal', 'x')).rejects.toThrow();
        await expect(store.cancel(pending.id)).rejects.toThrow();
        await expect(store.rescueZombies(100)).rejects.toThrow();
      } finally {
        await h.restoreInserts('dlq');
      }
      expect(await where(job.id)).toEqual(['hot']);
      expect(await where(pending.id)).toEqual(['hot']);
      expect(await h.statsRow(q)).toMatchObject({ failed: 0, cancelled: 0, zombie: 0 });
      expect((await h.bucketTotals(q, 'failed')).count).toBe(0);
    });

    it('a failing hot insert rolls back a resurrect', async () => {
      const q = freshQueue('atom-h');
      const job = await startedJob(q);
      await store.fail(ref(job), 'fatal', 'x');
      await h.breakInserts('hot');
      try {
        await expect(store.resurrect([job.id])).rejects.toThrow();
      } finally {
        await h.restoreInserts('hot');
      }
      expect(await where(job.id)).toEqual(['dlq']);
      expect((await h.statsRow(q)).resurrected).toBe(0);
    });
  });

  describe('races', () => {
    const random = seededRandom('job store races');
    it('stale worker vs zombie rescue vs cancel vs complete: the job ends in exactly one place, counted once', async () => {
      const q = freshQueue('race');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'dlq' });
      const rounds = 25;
      for (let i = 0; i < rounds; i++) {
        const job = await startedJob(q);
        await h.backdate(job.id, 'heartbeat_at', 60);
        const ops = [
          () => store.complete(ref(job)),
          () => store.rescueZombies(50),
          () => store.cancel(job.id),
          () => store.fail(ref(job), 'fatal', 'stale'),
          () => store.heartbeat(ref(job)),
        ];
        const shuffled = random.shuffle(ops);
        const results = await Promise.allSettled(shuffled.map((op) => op()));
        expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
        let places = await where(job.id);
        if (places[0] === 'hot') {
          // Only a cancel request can leave it hot (processing, flagged): the next rescue moves it.
          await store.rescueZombies(50);
          places = await where(job.id);
        }
        expect(places).toHaveLength(1);
        expect(places[0]).not.toBe('hot');
      }
      const s = await h.statsRow(q);
      expect(s.succeeded + s.failed).toBe(rounds);
      expect(s.succeeded).toBe(await h.countRows('archive', q));
      expect(s.failed).toBe(await h.countRows('dlq', q));
      expect((await h.bucketTotals(q, 'succeeded')).count + (await h.bucketTotals(q, 'failed')).count).toBe(rounds);
    });

    it('concurrent duplicate idempotent enqueues never error or deadlock and agree on one id per key', async () => {
      const q = freshQueue('idem-race');
      const keys = Array.from({ length: 30 }, (_, i) => `${q}-k${i}`);
      const batches = Array.from({ length: 12 }, () =>
        random.shuffle(keys).map((k) => ({ queue: q, type: 't', idempotencyKey: k })),
      );
      const results = await Promise.all(batches.map((b) => store.enqueueMany(b)));
      const idByKey = new Map<string, string>();
      results.forEach((res, bi) =>
        res.forEach((r, i) => {
          const key = batches[bi]![i]!.idempotencyKey;
          const seen = idByKey.get(key);
          if (seen) expect(r.id).toBe(seen);
          else idByKey.set(key, r.id);
        }),
      );
      expect(results.flat().filter((r) => !r.duplicate)).toHaveLength(keys.length);
      expect(await h.countRows('hot', q)).toBe(keys.length);
      const singles = await Promise.all(
        Array.from({ length: 20 }, () => store.enqueue({ queue: q, type: 't', idempotencyKey: `${q}-solo` })),
      );
      expect(new Set(singles.map((s) => s.id)).size).toBe(1);
      expect(singles.filter((s) => !s.duplicate)).toHaveLength(1);
    });
  });

  describe('flows (after, onFailure)', () => {
    // Runs one job of the queue to completion (claim, start, complete) and returns it.
    async function runOne(queue: string, resultJson?: string): Promise<ClaimedJob> {
      const job = await claimOne(queue);
      expect((await store.start(ref(job))).status).toBe('ok');
      expect(await store.complete(resultJson === undefined ? ref(job) : { ...ref(job), resultJson })).toBe('ok');
      return job;
    }
    const claimable = async (queue: string) =>
      (await store.claimNext({ workerId: 'peek', queues: [queue], limit: 100 })).map((j) => j.id);

    it('a child waits, unclaimable, until its parent is archived; then it is due, and reads the parent result', async () => {
      const q = freshQueue('flow-chain');
      const [parent, child] = await store.enqueueMany([
        { queue: q, type: 'p', payload: { step: 1 } },
        { queue: q, type: 'c', after: [{ index: 0 }] },
      ]);
      expect(await store.getJob(child!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      expect(await store.claimById(child!.id, 'w')).toBeNull();
      const job = await claimOne(q);
      expect(job.id).toBe(parent!.id);
      expect(await claimable(q)).toEqual([]); // the child is not due while its parent runs
      expect((await store.start(ref(job))).status).toBe('ok');
      expect(await store.complete({ ...ref(job), resultJson: '{"rows":42}' })).toBe('ok');
      expect(await store.getJob(child!.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect(await store.jobLinks(child!.id)).toEqual([
        expect.objectContaining({
          relation: 'parent',
          id: parent!.id,
          location: 'archive',
          state: 'succeeded',
          outcome: 'succeeded',
          result: { rows: 42 },
        }),
      ]);
      expect(await store.jobLinks(parent!.id)).toEqual([
        expect.objectContaining({ relation: 'child', id: child!.id, state: 'pending', outcome: 'succeeded' }),
      ]);
      expect(await store.jobLinks(job.id === parent!.id ? '999999999999' : job.id)).toEqual([]);
      await runOne(q);
      expect(await where(child!.id)).toEqual(['archive']);
    });

    it('fan-in: a job after several parents is due only once all of them are archived, whatever their order', async () => {
      const q = freshQueue('flow-fanin');
      const ids = await store.enqueueMany([
        { queue: q, type: 'a' },
        { queue: q, type: 'a' },
        { queue: q, type: 'a' },
        { queue: q, type: 'join', after: [{ index: 2 }, { index: 0 }, { index: 1 }] },
      ]);
      const join = ids[3]!.id;
      const parents = await store.claimNext({ workerId: 'w', queues: [q], limit: 10 });
      expect(parents.map((p) => p.id).sort()).toEqual(
        ids
          .slice(0, 3)
          .map((r) => r.id)
          .sort(),
      );
      for (const p of parents) expect((await store.start(ref(p))).status).toBe('ok');
      const results = await store.completeMany([ref(parents[2]!), ref(parents[0]!)]);
      expect(results.map((r) => r.status)).toEqual(['ok', 'ok']);
      expect(await store.getJob(join)).toMatchObject({ state: 'waiting' });
      expect(await store.complete({ ...ref(parents[1]!), resultJson: '"last"' })).toBe('ok');
      expect(await store.getJob(join)).toMatchObject({ state: 'pending' });
      // Parents in the order of the child's after list.
      expect((await store.jobLinks(join)).map((l) => l.id)).toEqual([ids[2]!.id, ids[0]!.id, ids[1]!.id]);
    });

    it('refuses a missing parent and a reference to a later job by the field, writing nothing', async () => {
      const q = freshQueue('flow-refuse');
      const before = await h.countRows('hot', q);
      await expect(store.enqueue({ queue: q, type: 'c', after: ['987654321987'] })).rejects.toMatchObject({
        name: 'ValidationError',
        field: 'after[0]',
      });
      const real = await store.enqueue({ queue: q, type: 'p' });
      await expect(
        store.enqueueMany([
          { queue: q, type: 'x' },
          { queue: q, type: 'c', after: [real.id, '987654321987'] },
        ]),
      ).rejects.toMatchObject({ field: 'jobs[1].after[1]' });
      await expect(
        store.enqueueMany([
          { queue: q, type: 'c', after: [{ index: 1 }] },
          { queue: q, type: 'p' },
        ]),
      ).rejects.toMatchObject({ field: 'jobs[0].after[0]' });
      await expect(
        store.enqueueMany([
          { queue: q, type: 'p' },
          { queue: q, type: 'c', after: [{ index: 1 }] },
        ]),
      ).rejects.toMatchObject({ field: 'jobs[1].after[0]' }); // itself: a cycle of one
      await expect(store.enqueue({ queue: q, type: 'c', onFailure: 'run' })).rejects.toMatchObject({
        field: 'onFailure',
      });
      expect(await h.countRows('hot', q)).toBe(before + 1);
      expect(await store.getJob(real.id)).toMatchObject({ state: 'pending' });
    });

    it('a parent archived before the enqueue counts as done; one already dead-lettered applies the policy', async () => {
      const q = freshQueue('flow-late');
      const done = await store.enqueue({ queue: q, type: 'p' });
      await runOne(q);
      const dead = await startedJob(q);
      expect(await store.fail(ref(dead), 'fatal', 'boom')).toBe('ok');
      const [afterDone, dl, skip, run, mixed] = await store.enqueueMany([
        { queue: q, type: 'c', after: [done.id] },
        { queue: q, type: 'c', after: [dead.id] },
        { queue: q, type: 'c', after: [dead.id], onFailure: 'skip' },
        { queue: q, type: 'c', after: [done.id, dead.id], onFailure: 'run' },
        { queue: q, type: 'c', after: [{ index: 0 }, dead.id], onFailure: 'run' },
      ]);
      expect(await store.getJob(afterDone!.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect(await store.getJob(dl!.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
      expect(await store.getJob(skip!.id)).toMatchObject({ location: 'dlq', reason: 'skipped' });
      expect(await store.getJob(run!.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect(await store.getJob(mixed!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      expect((await store.jobLinks(run!.id)).map((l) => l.outcome)).toEqual(['succeeded', 'failed']);
      // parent_failed is a failure (counted, bucketed); skipped is not.
      const s = await h.statsRow(q);
      expect(s.failed).toBe(2); // the parent itself and dl
      expect((await h.bucketTotals(q, 'failed', 'parent_failed')).count).toBe(1);
      expect((await h.bucketTotals(q, 'failed', 'skipped')).count).toBe(0);
    });

    it("a parent's failure applies each child's policy in the same move, cascading to grandchildren", async () => {
      const q = freshQueue('flow-fail');
      const [p, o, dl, grand, skip, run] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'o' },
        { queue: q, type: 'c', after: [{ index: 0 }] }, // deadLetter, the default
        { queue: q, type: 'g', after: [{ index: 2 }] },
        { queue: q, type: 'c', after: [{ index: 0 }], onFailure: 'skip' },
        { queue: q, type: 'c', after: [{ index: 0 }, { index: 1 }], onFailure: 'run' },
      ]);
      const jobs = await store.claimNext({ workerId: 'w', queues: [q], limit: 10 });
      expect(jobs.map((j) => j.id).sort()).toEqual([p!.id, o!.id].sort());
      for (const j of jobs) expect((await store.start(ref(j))).status).toBe('ok');
      const parent = jobs.find((j) => j.id === p!.id)!;
      expect(await store.fail(ref(parent), 'fatal', 'boom')).toBe('ok');
      expect(await store.getJob(dl!.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
      expect(await store.getJob(grand!.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
      expect(await store.getJob(skip!.id)).toMatchObject({ location: 'dlq', reason: 'skipped' });
      expect(await store.getJob(run!.id)).toMatchObject({ location: 'hot', state: 'waiting' }); // still waits for o
      expect(await store.complete(ref(jobs.find((j) => j.id === o!.id)!))).toBe('ok');
      expect(await store.getJob(run!.id)).toMatchObject({ state: 'pending' });
      expect((await store.jobLinks(run!.id)).map((l) => [l.id, l.outcome])).toEqual([
        [p!.id, 'failed'],
        [o!.id, 'succeeded'],
      ]);
    });

    it('a retried or zombie-retried parent keeps its children waiting; a resurrected one brings them back', async () => {
      const q = freshQueue('flow-resurrect');
      await store.updateQueue(q, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry' });
      const [p, c, g, s] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }] },
        { queue: q, type: 'g', after: [{ index: 1 }] },
        { queue: q, type: 's', after: [{ index: 0 }], onFailure: 'skip' },
      ]);
      let job = await claimOne(q);
      expect((await store.start(ref(job))).status).toBe('ok');
      expect(await store.retry(ref(job), new Date(), 'again')).toBe('ok');
      expect(await store.getJob(c!.id)).toMatchObject({ state: 'waiting' });
      job = await claimOne(q);
      expect(job.id).toBe(p!.id);
      expect((await store.start(ref(job))).status).toBe('ok');
      await h.backdate(job.id, 'heartbeat_at', 60);
      // At least: a rescue counts every queue's moves (another test's job may have timed out meanwhile).
      expect((await store.rescueZombies(100)).retried).toBeGreaterThanOrEqual(1);
      expect(await store.getJob(p!.id)).toMatchObject({ state: 'pending', attempts: 2 });
      expect(await store.getJob(c!.id)).toMatchObject({ state: 'waiting' });
      expect(await claimable(q)).toEqual([p!.id]); // only the parent: peek released below
      await h.backdate(p!.id, 'lease_expires_at', 1);
      await store.rescueZombies(100);
      job = await claimOne(q);
      expect((await store.start(ref(job))).status).toBe('ok');
      expect(await store.fail(ref(job), 'fatal', 'boom')).toBe('ok');
      expect(await where(c!.id)).toEqual(['dlq']);
      expect(await where(g!.id)).toEqual(['dlq']);
      expect(await store.getJob(s!.id)).toMatchObject({ location: 'dlq', reason: 'skipped' });
      // Resurrecting the parent brings its parent_failed children (and theirs) back, waiting again; not the skipped.
      expect((await store.resurrect([p!.id])).sort()).toEqual([p!.id, c!.id, g!.id].sort());
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      expect(await store.getJob(g!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      expect(await store.getJob(s!.id)).toMatchObject({ location: 'dlq' });
      expect(await claimable(q)).toEqual([p!.id]);
      await h.backdate(p!.id, 'lease_expires_at', 1);
      await store.rescueZombies(100);
      await runOne(q); // the parent
      await runOne(q); // the child
      expect(await store.getJob(g!.id)).toMatchObject({ state: 'pending' });
      await runOne(q);
      expect(await where(g!.id)).toEqual(['archive']);
      expect(await h.countRows('hot', q)).toBe(0);
    });

    it('a child two failed parents dead-lettered comes back only with the last of them, and runs after both', async () => {
      const q = freshQueue('flow-two-dead');
      const [p1, p2, c] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }, { index: 1 }] },
      ]);
      for (const j of await store.claimNext({ workerId: 'w', queues: [q], limit: 10 })) {
        expect((await store.start(ref(j))).status).toBe('ok');
        expect(await store.fail(ref(j), 'fatal', 'boom')).toBe('ok');
      }
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'dlq', reason: 'parent_failed' });
      expect(await store.resurrect([p1!.id])).toEqual([p1!.id]); // p2 is still dead: the child stays
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'dlq' });
      await runOne(q);
      expect((await store.resurrect([p2!.id])).sort()).toEqual([p2!.id, c!.id].sort());
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      expect(await claimable(q)).toEqual([p2!.id]);
      await h.backdate(p2!.id, 'lease_expires_at', 1);
      await store.rescueZombies(100);
      await runOne(q);
      expect(await store.getJob(c!.id)).toMatchObject({ state: 'pending' });
      expect((await store.jobLinks(c!.id)).map((l) => l.outcome)).toEqual(['succeeded', 'succeeded']);
    });

    it('a fan-in brought back by its last failed parent is released by a parent resurrected before it', async () => {
      // Found by the chaos run with operators (test/support/chaosMix.ts): the fan-in's edge from `a` opened again when
      // `b`'s resurrect brought the fan-in back, but `a` (hot again since an earlier resurrect) was not flagged to
      // settle children, so it finished without reading its edges and the fan-in waited for ever.
      const q = freshQueue('flow-rejoin');
      const [p, a, b, join] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }] },
        { queue: q, type: 'c', after: [{ index: 0 }] },
        { queue: q, type: 'join', after: [{ index: 1 }, { index: 2 }] },
      ]);
      expect(await store.cancel(p!.id)).toBe('cancelled');
      for (const c of [a, b, join]) expect(await store.getJob(c!.id)).toMatchObject({ reason: 'parent_failed' });
      // `a` by hand while its parent is still dead: it runs (the operator asked); the fan-in stays (b is dead).
      expect(await store.resurrect([a!.id])).toEqual([a!.id]);
      expect(await store.getJob(a!.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect(await store.getJob(join!.id)).toMatchObject({ location: 'dlq' });
      // `b` too: none of the fan-in's failed parents is left in the DLQ, so it comes back, waiting for a and b.
      expect((await store.resurrect([b!.id])).sort()).toEqual([b!.id, join!.id].sort());
      expect(await store.getJob(join!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      const ran = [(await runOne(q)).id, (await runOne(q)).id].sort();
      expect(ran).toEqual([a!.id, b!.id].sort());
      expect(await store.getJob(join!.id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect((await store.jobLinks(join!.id)).map((l) => l.outcome)).toEqual(['succeeded', 'succeeded']);
      expect((await runOne(q)).id).toBe(join!.id);
      expect(await h.countRows('hot', q)).toBe(0);
    });

    it('a cancelled waiting child goes to the DLQ; resurrected, it waits for its parent again', async () => {
      const q = freshQueue('flow-cancel');
      const [p, c] = await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }] },
      ]);
      expect(await store.cancel(c!.id)).toBe('cancelled');
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      expect(await store.resurrect([c!.id])).toEqual([c!.id]);
      expect(await store.getJob(c!.id)).toMatchObject({ location: 'hot', state: 'waiting' });
      await runOne(q);
      expect(await where(p!.id)).toEqual(['archive']);
      expect(await store.getJob(c!.id)).toMatchObject({ state: 'pending' });
    });

    it('flowJobs enqueues a parent, its children and a fan-in job in one call, all of it or nothing', async () => {
      const q = freshQueue('flow-helper');
      const flow: Flow<EnqueueRequest> & { children: EnqueueRequest[] } = {
        parent: { queue: q, type: 'fetch' },
        children: [1, 2, 3].map((n) => ({ queue: q, type: 'part', payload: { n } })),
        then: { queue: q, type: 'merge', onFailure: 'run' },
      };
      await expect(
        store.enqueueMany(
          flowJobs({ ...flow, children: [...flow.children, { queue: q, type: 'part', priority: 0.5 }] }),
        ),
      ).rejects.toMatchObject({ field: 'jobs[4].priority' });
      expect(await h.countRows('hot', q)).toBe(0); // nothing of a refused flow
      const ids = flowResult(flow, await store.enqueueMany(flowJobs(flow)));
      expect(await store.getJob(ids.parent.id)).toMatchObject({ state: 'pending' });
      for (const c of ids.children) expect(await store.getJob(c.id)).toMatchObject({ state: 'waiting' });
      expect((await store.jobLinks(ids.then!.id)).map((l) => l.id)).toEqual(ids.children.map((c) => c.id));
      await runOne(q, '{"rows":3}');
      for (let i = 0; i < 3; i++) await runOne(q);
      expect(await store.getJob(ids.then!.id)).toMatchObject({ state: 'pending' });
      expect((await store.jobLinks(ids.children[0]!.id))[0]).toMatchObject({ id: ids.parent.id, result: { rows: 3 } });
    });

    it('counts waiting jobs apart from pending ones, through release', async () => {
      const q = freshQueue('flow-count');
      await store.enqueueMany([
        { queue: q, type: 'p' },
        { queue: q, type: 'c', after: [{ index: 0 }] },
        { queue: q, type: 'c', after: [{ index: 0 }] },
      ]);
      const st = (await store.stats()).find((s) => s.queue === q)!;
      expect(st).toMatchObject({ pending: 1, waiting: 2 });
      await runOne(q);
      await runOne(q);
      await runOne(q);
      expect((await store.stats()).find((s) => s.queue === q)).toMatchObject({ pending: 0, waiting: 0 });
    });

    it('a parent completing while children are enqueued against it never strands a child (no deadlock)', async () => {
      const q = freshQueue('flow-race');
      for (let i = 0; i < 15; i++) {
        const parent = await startedJob(q);
        const other = await startedJob(q);
        const [, , enq] = await Promise.all([
          store.completeMany([ref(parent), ref(other)]),
          store.enqueueMany([{ queue: `${q}-x`, type: 'c', after: [other.id, parent.id] }]),
          store.enqueue({ queue: `${q}-x`, type: 'c', after: [parent.id] }),
        ]);
        expect(await store.getJob(enq.id)).toMatchObject({ location: 'hot', state: 'pending' });
      }
      expect(await h.countRows('hot', `${q}-x`)).toBe(30);
      const st = (await store.stats()).find((s) => s.queue === `${q}-x`)!;
      expect(st).toMatchObject({ pending: 30, waiting: 0 });
    });
  });

  describe('reads', () => {
    it('stats keeps pending, due, fetched, processing and dlq exact through every transition', async () => {
      const q = freshQueue('counted');
      const exact = async (step: string) => {
        const s = (await store.stats()).find((x) => x.queue === q);
        const truth = await h.hotTruth(q);
        const read = s
          ? { pending: s.pending, due: s.due, fetched: s.fetched, processing: s.processing, dlq: s.dlq }
          : { pending: 0, due: 0, fetched: 0, processing: 0, dlq: 0 };
        expect({ step, ...read }).toEqual({ step, ...truth });
        if (s) expect(s.dueExact).toBe(true);
      };
      const later = new Date(Date.now() + 3600_000);
      await store.enqueueMany([
        ...Array.from({ length: 8 }, () => ({ queue: q, type: 't' })),
        { queue: q, type: 't', runAt: later },
      ]);
      await exact('enqueue');
      const claimed = await store.claimNext({ workerId: 'w', queues: [q], limit: 6 });
      expect(claimed).toHaveLength(6);
      await exact('claim');
      const [a, b, c, d, e, f] = claimed as [ClaimedJob, ...ClaimedJob[]];
      expect(await store.startMany([a, b!, c!, d!].map(ref))).toHaveLength(4);
      await exact('start');
      expect(await store.heartbeat(ref(a))).toMatchObject({ status: 'ok' });
      await exact('heartbeat');
      expect(await store.completeMany([ref(a)])).toEqual([{ jobId: a.id, status: 'ok' }]);
      await exact('complete');
      expect(await store.retry(ref(b!), later, 'again')).toBe('ok');
      await exact('retry');
      expect(await store.fail(ref(c!), 'fatal', 'boom')).toBe('ok');
      await exact('fail');
      expect(await store.release(ref(e!))).toBe('ok');
      await exact('release');
      const [g] = await store.claimAndStart({ workerId: 'w', queues: [q], limit: 1 });
      await exact('claim and start');
      expect(await store.interrupt(ref(g!), 'interrupted by worker shutdown')).toBe('ok');
      await exact('interrupt');
      expect(await h.statsRow(q)).toMatchObject({ retried: 1 }); // b's retry only
      expect(await store.cancel(f!.id)).toBe('cancelled');
      await exact('cancel (fetched)');
      expect(await store.cancel(d!.id)).toBe('cancel_requested');
      await exact('cancel requested (processing)');
      const pendingOne = (await store.searchJobs({ location: 'hot', queue: q, state: 'pending', limit: 1 })).items[0]!;
      expect(await store.cancel(pendingOne.id)).toBe('cancelled');
      await exact('cancel (pending)');
      const byId = (await store.searchJobs({ location: 'hot', queue: q, state: 'pending', limit: 1 })).items[0]!;
      const claimedById = await store.claimById(byId.id, 'w');
      await exact('claim by id');
      expect((await store.start(ref(claimedById!))).status).toBe('ok');
      const fetchedOne = await claimOne(q);
      await exact('start');
      await h.backdate(d!.id, 'heartbeat_at', 3600); // cancel requested: dead-lettered as cancelled
      await h.backdate(byId.id, 'heartbeat_at', 3600); // zombie: back to pending (retry policy)
      await h.backdate(fetchedOne.id, 'lease_expires_at', 60); // fetched, lease gone: released
      const expiring = await store.enqueue({ queue: q, type: 't', expiresAt: new Date(Date.now() + 60_000) });
      await h.backdate(expiring.id, 'expires_at', 1);
      await exact('before rescue');
      const rescued = await store.rescueZombies(100);
      for (const moved of Object.values(rescued)) expect(moved).toBeGreaterThanOrEqual(1); // other queues' too
      await exact('rescue, release, expire');
      expect(await store.resurrect([c!.id])).toEqual([c!.id]);
      await exact('resurrect');
      await h.backdateFinished('dlq', 10 * 24 * 3600);
      while ((await store.purge('dlq', q, new Date(Date.now() - 24 * 3600_000), 100)) > 0);
      await exact('purge');
    });

    it('stats counts due jobs exactly while either side of now is small, and says "at least" past that', async () => {
      const q = freshQueue('due-cap');
      const later = new Date(Date.now() + 3600_000);
      const enqueue = (n: number, runAt?: Date) =>
        store.enqueueMany(Array.from({ length: n }, () => ({ queue: q, type: 't', ...(runAt ? { runAt } : {}) })));
      const read = async () => (await store.stats()).find((x) => x.queue === q)!;
      await enqueue(STATS_DUE_COUNT_CAP + 5);
      await enqueue(3, later);
      expect(await read()).toMatchObject({
        pending: STATS_DUE_COUNT_CAP + 8,
        due: STATS_DUE_COUNT_CAP + 5,
        dueExact: true,
      });
      await enqueue(STATS_DUE_COUNT_CAP, later);
      expect(await read()).toMatchObject({
        pending: 2 * STATS_DUE_COUNT_CAP + 8,
        due: STATS_DUE_COUNT_CAP,
        dueExact: false,
      });
      const s = await read();
      expect(s.oldestDueAgeMs).not.toBeNull();
      expect(s.oldestDueAgeMs!).toBeGreaterThanOrEqual(0);
    });

    it('stats counts the DLQ exactly through dead-lettering, resurrect and purge', async () => {
      const q = freshQueue('dlq-count');
      const dlqOf = async () => (await store.stats()).find((x) => x.queue === q)?.dlq ?? 0;
      await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue: q, type: 't' })));
      const jobs = await store.claimNext({ workerId: 'w', queues: [q], limit: 3 });
      await store.startMany(jobs.map(ref));
      for (const j of jobs) expect(await store.fail(ref(j), 'fatal', 'boom')).toBe('ok');
      expect(await dlqOf()).toBe(3);
      expect(await store.resurrect([jobs[0]!.id])).toEqual([jobs[0]!.id]);
      expect(await dlqOf()).toBe(2);
      expect(await store.cancel(jobs[0]!.id)).toBe('cancelled');
      expect(await dlqOf()).toBe(3);
      await h.backdateFinished('dlq', 10 * 24 * 3600);
      let purged = 0;
      for (let n = 1; n > 0; purged += n) n = await store.purge('dlq', q, new Date(Date.now() - 24 * 3600_000), 2);
      expect(purged).toBe(3);
      expect(await dlqOf()).toBe(0);
      expect(await h.countRows('dlq', q)).toBe(0);
    });

    it('stats, metrics, queue settings, job detail and search', async () => {
      const q = freshQueue('reads');
      const a = await store.enqueue({ queue: q, type: 'alpha', payload: { note: 'find-me 100%' }, tags: ['blue'] });
      await store.enqueue({ queue: q, type: 'beta', payload: { note: 'other' } });
      await h.backdate(a.id, 'run_at', 5);
      const s = (await store.stats()).find((x) => x.queue === q)!;
      expect(s).toMatchObject({ pending: 2, due: 2, fetched: 0, processing: 0, dlq: 0 });
      expect(s.oldestDueAgeMs).toBeGreaterThanOrEqual(4000);
      const found = await store.searchJobs({ location: 'hot', queue: q, text: 'find-me 100%', limit: 10 });
      expect(found).toEqual({ items: [expect.objectContaining({ id: a.id })], nextAfterId: null, scanBounded: false });
      const ids = async (s: Parameters<JobStore['searchJobs']>[0]) =>
        (await store.searchJobs(s)).items.map((j) => j.id);
      expect(await ids({ location: 'hot', queue: q, text: '%', limit: 10 })).toEqual([a.id]);
      expect(await ids({ location: 'hot', queue: q, tag: 'blue', limit: 10 })).toEqual([a.id]);
      const page1 = await store.searchJobs({ location: 'hot', queue: q, limit: 1 });
      expect(page1.items).toHaveLength(1);
      expect(page1.nextAfterId).toBe(page1.items[0]!.id);
      const page2 = await store.searchJobs({ location: 'hot', queue: q, limit: 1, afterId: page1.nextAfterId! });
      expect(page2.items).toHaveLength(1);
      expect(page2.items[0]!.id).not.toBe(page1.items[0]!.id);
      const qs = await store.getQueue(q);
      expect(qs).toMatchObject({ name: q, paused: false, maxConcurrency: null, zombiePolicy: 'retry', maxAttempts: 5 });
      expect((await store.listQueues()).some((x) => x.name === q)).toBe(true);
      await expect(store.updateQueue(q, { zombiePolicy: 'sometimes' as never })).rejects.toThrow(/zombiePolicy/);
      await expect(store.updateQueue(q, { maxAttempts: 0 })).rejects.toThrow(/maxAttempts/);
      expect(await store.getJob('424242424242')).toBeNull();
      const job = await claimOne(q);
      await store.start(ref(job));
      await store.complete(ref(job));
      const m = await store.metrics(5, q);
      expect(m).toHaveLength(1);
      expect(m[0]).toMatchObject({ queue: q, outcome: 'succeeded', reason: '', count: 1 });
    });

    // A caller whose change applied but whose answer was lost sends it again with the same expected values: the
    // queue holds what it asks for, so that is a success that writes nothing, not a conflict. A real one stays one.
    it('a settings compare-and-set sent again after it applied succeeds unchanged; a real conflict is still refused', async () => {
      const q = freshQueue('cas-retry');
      await store.updateQueue(q, { maxAttempts: 5 });
      const seen = (await store.getQueue(q))!;
      const patch = { maxAttempts: 7, maxConcurrency: null, zombiePolicy: 'dlq' as const, paused: true };
      const expected = { maxAttempts: seen.maxAttempts, maxConcurrency: null, zombiePolicy: seen.zombiePolicy };
      const first = await store.updateQueue(q, patch, expected);
      expect(first).toMatchObject({ ...patch, created: false });
      expect(first.conflict).toBeUndefined();
      expect(first.unchanged).toBeUndefined();
      const again = await store.updateQueue(q, patch, expected);
      expect(again).toEqual({ ...first, unchanged: true }); // the same row, updatedAt included: nothing written
      expect(await store.getQueue(q)).toEqual((({ created: _c, ...row }) => row)(first));

      // Not every value it sets holds (another caller changed one of them meanwhile): the conflict, as before.
      await store.updateQueue(q, { zombiePolicy: 'retry' });
      // (The first setting of expected that differs, in name order, is named.)
      expect(await store.updateQueue(q, patch, expected)).toMatchObject({
        conflict: 'maxAttempts',
        zombiePolicy: 'retry',
      });
      // A subset of the values holding is not enough: maxAttempts holds, archiveRetentionSeconds differs.
      expect(
        await store.updateQueue(q, { maxAttempts: 7, archiveRetentionSeconds: 61 }, { maxAttempts: 5 }),
      ).toMatchObject({ conflict: 'maxAttempts', maxAttempts: 7 });
      // Clearing the limit holds only where there is none.
      await store.updateQueue(q, { maxConcurrency: 3 });
      expect(await store.updateQueue(q, { maxConcurrency: null }, { maxConcurrency: 2 })).toMatchObject({
        conflict: 'maxConcurrency',
        maxConcurrency: 3,
      });
      expect(await store.updateQueue(q, { maxConcurrency: 3 }, { maxConcurrency: 2 })).toMatchObject({
        maxConcurrency: 3,
        unchanged: true,
      });
      expect((await store.getQueue(q))!.zombiePolicy).toBe('retry');

      // A queue without settings holds the defaults: asking for them is unchanged and creates nothing.
      const fresh = freshQueue('cas-retry-new');
      const none = await store.updateQueue(fresh, { maxAttempts: 5 }, { maxAttempts: 4 });
      expect(none).toMatchObject({ name: fresh, maxAttempts: 5, created: false, unchanged: true });
      expect(none.conflict).toBeUndefined();
      expect(await store.getQueue(fresh)).toBeNull();
    });
  });

  describe('bounded text search', () => {
    it('archive and DLQ text searches examine at most scanRows rows per call and say where to continue', async () => {
      const q = freshQueue('scan');
      const enqueued = await store.enqueueMany(
        Array.from({ length: 30 }, (_, i) => ({
          queue: q,
          type: 't',
          payload: { note: i === 3 || i === 25 ? 'Needle' : 'hay' },
        })),
      );
      const claimed = await store.claimNext({ workerId: 'w', queues: [q], limit: 30 });
      await store.startMany(claimed.map(ref));
      await store.completeMany(claimed.map(ref));
      const needles = [enqueued[25]!.id, enqueued[3]!.id];
      const top = String(BigInt(enqueued[29]!.id) + 1n);
      const archived = (await h.ids('archive')).map(BigInt);

      const first = await store.searchJobs({
        location: 'archive',
        text: 'needle',
        scanRows: 10,
        afterId: top,
        limit: 5,
      });
      expect(first.scanBounded).toBe(true);
      const floor = BigInt(first.nextAfterId!);
      // Exactly scanRows archive rows lie in [nextAfterId, afterId): that is all this call examined.
      expect(archived.filter((id) => id >= floor && id < BigInt(top))).toHaveLength(10);
      expect(first.items.map((j) => j.id)).toEqual(needles.filter((id) => BigInt(id) >= floor));

      const found: string[] = [...first.items.map((j) => j.id)];
      let page = first;
      for (let calls = 0; page.nextAfterId !== null && calls < 1000; calls++) {
        page = await store.searchJobs({
          location: 'archive',
          queue: q,
          text: 'needle',
          scanRows: 10,
          afterId: page.nextAfterId,
          limit: 5,
        });
        expect(page.items.length).toBeLessThanOrEqual(5);
        found.push(...page.items.map((j) => j.id));
      }
      expect(page).toMatchObject({ nextAfterId: null, scanBounded: false });
      expect(found).toEqual(needles);

      // Without text the archive search is bounded too (a filter matching nothing does not walk the table).
      const plain = await store.searchJobs({
        location: 'archive',
        queue: q,
        type: 'nope',
        scanRows: 10,
        afterId: top,
        limit: 5,
      });
      expect(plain).toMatchObject({ items: [], scanBounded: true });
      expect(archived.filter((id) => id >= BigInt(plain.nextAfterId!) && id < BigInt(top))).toHaveLength(10);

      // A full page continues from its last item, bounded or not.
      const full = await store.searchJobs({ location: 'archive', queue: q, text: 'hay', afterId: top, limit: 3 });
      expect(full).toMatchObject({ scanBounded: false, nextAfterId: full.items[2]!.id });
      expect(full.items).toHaveLength(3);
    });

    it("searches by exact priority and idempotency key (a job's siblings), newest or oldest first, paged and bounded either way", async () => {
      const q = freshQueue('search-order');
      const ids: string[] = [];
      for (let n = 0; n < 5; n++)
        ids.push((await store.enqueue({ queue: q, type: 't', payload: { n }, priority: n % 2 })).id);
      const kq = freshQueue('search-key');
      const a = await store.enqueue({ queue: kq, type: 'a', idempotencyKey: 'order-7' });
      const b = await store.enqueue({ queue: kq, type: 'b', idempotencyKey: 'order-7' }); // another type: a sibling
      await store.enqueue({ queue: kq, type: 'a', idempotencyKey: 'order-8' });
      const idsOf = (p: { items: { id: string }[] }) => p.items.map((j) => j.id);

      expect(idsOf(await store.searchJobs({ location: 'hot', queue: q, priority: 1, limit: 10 }))).toEqual([
        ids[3],
        ids[1],
      ]);
      expect(
        idsOf(await store.searchJobs({ location: 'hot', queue: q, priority: 0, order: 'oldest', limit: 10 })),
      ).toEqual([ids[0], ids[2], ids[4]]);
      expect(idsOf(await store.searchJobs({ location: 'hot', idempotencyKey: 'order-7', limit: 10 }))).toEqual([
        b.id,
        a.id,
      ]);
      // Oldest first, paged: afterId is the last id of the page, the next page continues above it.
      const first = await store.searchJobs({ location: 'hot', queue: q, order: 'oldest', limit: 2 });
      expect(idsOf(first)).toEqual([ids[0], ids[1]]);
      expect(first.nextAfterId).toBe(ids[1]);
      const second = await store.searchJobs({
        location: 'hot',
        queue: q,
        order: 'oldest',
        afterId: first.nextAfterId!,
        limit: 2,
      });
      expect(idsOf(second)).toEqual([ids[2], ids[3]]);
      const newest = await store.searchJobs({ location: 'hot', queue: q, limit: 2 });
      expect(idsOf(newest)).toEqual([ids[4], ids[3]]);
      // The cursor at either end of the id range, either order, every location: nothing above the largest id (an
      // "afterId + 1" overflowed bigint there: a 500 from GET /jobs?order=oldest&afterId=9223372036854775807).
      for (const location of ['hot', 'archive', 'dlq'] as const) {
        const bounded = location === 'hot' ? {} : { scanRows: 10 };
        const top = { location, queue: q, afterId: '9223372036854775807', limit: 2, ...bounded };
        expect(await store.searchJobs({ ...top, order: 'oldest' })).toEqual({
          items: [],
          nextAfterId: null,
          scanBounded: false,
        });
        expect(idsOf(await store.searchJobs({ ...top, order: 'newest' }))).toEqual(
          location === 'hot' ? [ids[4], ids[3]] : [],
        );
        expect(idsOf(await store.searchJobs({ ...top, afterId: '1', order: 'newest' }))).toEqual([]);
      }

      // Archive, oldest first with a scan bound: the marker is the highest id examined, and the walk goes on above it.
      for (const id of [...ids, a.id, b.id]) {
        const job = await store.claimById(id, 'w');
        expect((await store.start(ref(job!))).status).toBe('ok');
        expect(await store.complete(ref(job!))).toBe('ok');
      }
      const seen: string[] = [];
      // From just below this test's first job: the archive rows of earlier tests are not walked through.
      let after: string | undefined = String(BigInt(ids[0]!) - 1n);
      for (let guard = 0; guard < 50; guard++) {
        const page = await store.searchJobs({
          location: 'archive',
          queue: q,
          order: 'oldest',
          scanRows: 2,
          limit: 10,
          ...(after ? { afterId: after } : {}),
        });
        seen.push(...idsOf(page));
        if (!page.nextAfterId) break;
        after = page.nextAfterId;
      }
      // Every archived job of the queue, oldest first, each once (other tests' rows may lie between).
      expect(seen).toEqual(ids);
      expect(
        idsOf(await store.searchJobs({ location: 'archive', idempotencyKey: 'order-7', order: 'oldest', limit: 10 })),
      ).toEqual([a.id, b.id]);
      await expect(store.searchJobs({ location: 'hot', priority: 1.5, limit: 5 })).rejects.toMatchObject({
        field: 'priority',
      });
      await expect(store.searchJobs({ location: 'hot', order: 'sideways' as never, limit: 5 })).rejects.toMatchObject({
        field: 'order',
      });
      await expect(store.searchJobs({ location: 'hot', idempotencyKey: '', limit: 5 })).rejects.toMatchObject({
        field: 'idempotencyKey',
      });
    });

    it('DLQ text search matches the error too; scanRows out of bounds or on a hot search is refused, naming it', async () => {
      const q = freshQueue('scan-dlq');
      const job = await startedJob(q);
      expect(await store.fail(ref(job), 'fatal', 'Upstream said NO-SUCH-ACCOUNT')).toBe('ok');
      const page = await store.searchJobs({ location: 'dlq', queue: q, text: 'no-such-account', limit: 10 });
      expect(page.items.map((j) => j.id)).toEqual([job.id]);
      expect(page.scanBounded).toBe(false);
      for (const bad of [
        { location: 'hot' as const, text: 'x', scanRows: 10 },
        { location: 'hot' as const, scanRows: 10 },
        { location: 'dlq' as const, text: 'x', scanRows: 0 },
        { location: 'dlq' as const, text: 'x', scanRows: TEXT_SEARCH_SCAN_ROWS_MAX + 1 },
      ]) {
        await expect(store.searchJobs({ ...bad, limit: 10 })).rejects.toThrow(ValidationError);
        await expect(store.searchJobs({ ...bad, limit: 10 })).rejects.toThrow(/scanRows/);
      }
    });
  });

  describe('schedules', () => {
    it('fire is a compare-and-set on the last tick, enqueuing in the same transaction; pause holds; resume records when', async () => {
      const name = `sched-${freshQueue('s')}`.slice(0, 100);
      const q = freshQueue('sched');
      const t1 = new Date('2031-01-01T00:00:01.000Z');
      const t2 = new Date('2031-01-01T00:00:02.000Z');
      const job = (tick: Date) => ({
        queue: q,
        type: 'tick',
        payload: { tick: tick.toISOString() },
        idempotencyKey: `schedule:${name}:${tick.toISOString()}`,
      });
      expect(await store.listSchedules(name)).toEqual([]);
      const first = await store.fireSchedule(name, null, t1, [job(t1)]);
      expect(first.status).toBe('fired');
      expect(first.jobs).toHaveLength(1);
      // A second instance that read the same (empty) state loses, and enqueues nothing.
      expect(await store.fireSchedule(name, null, t1, [job(t1)])).toEqual({ status: 'lost', jobs: [] });
      expect(await h.countRows('hot', q)).toBe(1);
      // Concurrent fires from the same state: exactly one wins.
      const racers = await Promise.all([1, 2, 3, 4].map(() => store.fireSchedule(name, t1, t2, [job(t2)])));
      expect(racers.filter((r) => r.status === 'fired')).toHaveLength(1);
      expect(await h.countRows('hot', q)).toBe(2);
      const [state] = await store.listSchedules(name);
      expect(state).toMatchObject({
        name,
        paused: false,
        lastTick: t2,
        resumedAt: null,
        lastJobId: racers.find((r) => r.status === 'fired')!.jobs[0]!.id,
      });
      // Advancing without jobs (missed ticks skipped) is allowed.
      const t5 = new Date('2031-01-01T00:00:05.000Z');
      expect(await store.fireSchedule(name, t2, t5, [])).toEqual({ status: 'fired', jobs: [] });
      const paused = await store.setSchedulePaused(name, true);
      expect(paused).toMatchObject({ paused: true, resumedAt: null });
      const t6 = new Date('2031-01-01T00:00:06.000Z');
      expect((await store.fireSchedule(name, t5, t6, [job(t6)])).status).toBe('paused');
      expect(await h.countRows('hot', q)).toBe(2);
      const resumed = await store.setSchedulePaused(name, false);
      expect(resumed.paused).toBe(false);
      expect(resumed.resumedAt).toBeInstanceOf(Date);
      expect((await store.setSchedulePaused(name, false)).resumedAt).toEqual(resumed.resumedAt); // resuming twice: once
      expect((await store.listSchedules()).some((x) => x.name === name)).toBe(true);
      await expect(store.fireSchedule(name, t6, t5, [])).rejects.toThrow();
      await expect(store.listSchedules('bad name!')).rejects.toThrow(/name/);
    });

    it("never counts a job it did not enqueue as a tick's job: the tick is refused and stays unfired", async () => {
      const name = `squat-${freshQueue('s')}`.slice(0, 100);
      const q = freshQueue('sched-squat');
      const t1 = new Date('2031-02-01T00:00:01.000Z');
      const t2 = new Date('2031-02-01T00:00:02.000Z');
      const t3 = new Date('2031-02-01T00:00:03.000Z');
      const key = (tick: Date) => `schedule:${name}:${tick.toISOString()}`;
      const job = (tick: Date) => ({ queue: q, type: 'tick', payload: { n: 1 }, idempotencyKey: key(tick) });
      // A job holding the next tick's key, delayed a year and never run (the attack of issue 25, as a row planted
      // before keys were reserved), and one holding the tick after with another payload.
      const planted = await store.fireSchedule(name, null, t1, [
        { ...job(t2), delayMs: 365 * 24 * 3600 * 1000 },
        { ...job(t3), payload: { n: 2 } },
      ]);
      expect(planted.status).toBe('fired');
      const refused = await store.fireSchedule(name, t1, t2, [job(t2)]).then(
        () => null,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(IdempotencyConflictError);
      expect(refused).toMatchObject({ index: 0, idempotencyKey: key(t2) });
      const [afterDelayed] = await store.listSchedules(name);
      expect(afterDelayed!.lastTick).toEqual(t1); // not recorded as fired
      await expect(store.fireSchedule(name, t1, t3, [job(t2), job(t3)])).rejects.toMatchObject({
        name: 'IdempotencyConflictError',
      });
      expect((await store.listSchedules(name))[0]!.lastTick).toEqual(t1);
      expect(await h.countRows('hot', q)).toBe(2);
      // Once the planted jobs are gone, the ticks fire.
      await store.cancel(planted.jobs[0]!.id);
      await store.cancel(planted.jobs[1]!.id);
      const fired = await store.fireSchedule(name, t1, t3, [job(t2), job(t3)]);
      expect(fired.status).toBe('fired');
      expect(fired.jobs.map((j) => j.duplicate)).toEqual([false, false]);
    });
  });
  describe('ops audit trail', () => {
    const entry = (over: Partial<AuditEntry> = {}): AuditEntry => ({
      principalId: '00000000-0000-0000-0000-0000000000a1',
      principalName: 'ada@example.com',
      tenantId: 'tenant-1',
      appId: null,
      authMethod: 'principal',
      channel: 'console',
      role: 'operator',
      requiredRole: 'operator',
      httpMethod: 'POST',
      action: 'cancelJob',
      target: 'job:42',
      summary: '{"id":"42"}',
      outcome: 'started',
      status: null,
      reason: null,
      affected: null,
      requestId: 'req-1',
      clientIp: '203.0.113.9',
      ...over,
    });

    it('records a started row, finishes it once; a refusal is finished at once; the server stamps the time', async () => {
      const action = `act-${freshQueue('a')}`.slice(0, 64);
      const before = Date.now();
      const id = await store.recordAudit(entry({ action }));
      expect(id).toMatch(/^\d+$/);
      expect(await store.finishAudit(id, 'ok', 200, null, 1)).toBe(true);
      // A finished row never changes again: the outcome a caller saw stays the recorded one.
      expect(await store.finishAudit(id, 'failed', 500, 'later', 0)).toBe(false);
      const refused = await store.recordAudit(
        entry({ action, outcome: 'refused', status: 403, reason: 'needs "Keel.Operator"', role: 'reader' }),
      );
      expect(await store.finishAudit(refused, 'ok', 200, null, null)).toBe(false);
      const page = await store.searchAudit({ action, limit: 10 });
      expect(page.items.map((r) => r.id)).toEqual([refused, id]); // newest first
      expect(page.items[1]).toMatchObject({
        outcome: 'ok',
        status: 200,
        affected: 1,
        principalId: '00000000-0000-0000-0000-0000000000a1',
        principalName: 'ada@example.com',
        authMethod: 'principal',
        channel: 'console',
        role: 'operator',
        target: 'job:42',
        requestId: 'req-1',
        clientIp: '203.0.113.9',
      });
      expect(page.items[0]).toMatchObject({ outcome: 'refused', status: 403, role: 'reader', affected: null });
      expect(page.items[0]!.finishedAt).toBeInstanceOf(Date);
      // Within a minute of this process's clock (the database server's own time is what is stored).
      expect(Math.abs(page.items[1]!.at.getTime() - before)).toBeLessThan(60_000);
      expect(page.nextBeforeId).toBeNull();
    });

    it('finds a call over several queues (queue:a,b, an enqueue of a batch) under each queue it names, only those', async () => {
      const action = `multi-${freshQueue('a')}`.slice(0, 64);
      const one = await store.recordAudit(entry({ action, target: 'queue:q1', outcome: 'started' }));
      const multi = await store.recordAudit(entry({ action, target: 'queue:q0,q1_x,q2', outcome: 'started' }));
      const found = async (target: string) =>
        (await store.searchAudit({ action, target, limit: 50 })).items.map((r) => r.id);
      expect(await found('queue:q1_x')).toEqual([multi]);
      expect(await found('queue:q0')).toEqual([multi]);
      expect(await found('queue:q2')).toEqual([multi]);
      expect(await found('queue:q1')).toEqual([one]); // q1_x is another queue, and _ no wildcard
      expect(await found('queue:q0,q1_x,q2')).toEqual([multi]);
      expect(await found('queue:q')).toEqual([]);
      expect(await found('job:q2')).toEqual([]);
    });

    it('searches by principal (id or name), action, target, outcome and time; pages newest first; the scan is bounded', async () => {
      const action = `find-${freshQueue('a')}`.slice(0, 64);
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) {
        ids.push(
          await store.recordAudit(
            entry({
              action,
              principalId: i % 2 ? 'oid-odd' : 'oid-even',
              principalName: i % 2 ? 'odd@example.com' : 'even@example.com',
              target: `queue:q${i % 3}`,
              outcome: i === 5 ? 'refused' : 'started',
              status: i === 5 ? 401 : null,
            }),
          ),
        );
      }
      const found = async (s: Omit<AuditSearch, 'limit'>) =>
        (await store.searchAudit({ action, limit: 50, ...s })).items.map((r) => r.id);
      expect(await found({})).toEqual([...ids].reverse());
      expect(await found({ principal: 'oid-odd' })).toEqual([ids[5], ids[3], ids[1]]);
      expect(await found({ principal: 'even@example.com' })).toEqual([ids[4], ids[2], ids[0]]);
      expect(await found({ target: 'queue:q0' })).toEqual([ids[3], ids[0]]);
      expect(await found({ outcome: 'refused' })).toEqual([ids[5]]);
      expect(await found({ from: new Date(Date.now() + 3_600_000) })).toEqual([]);
      expect(await found({ to: new Date(Date.now() - 3_600_000) })).toEqual([]);
      // Keyset pages.
      const p1 = await store.searchAudit({ action, limit: 4 });
      expect(p1.items.map((r) => r.id)).toEqual([ids[5], ids[4], ids[3], ids[2]]);
      const p2 = await store.searchAudit({ action, limit: 4, beforeId: p1.nextBeforeId! });
      expect(p2.items.map((r) => r.id)).toEqual([ids[1], ids[0]]);
      // A bounded scan: 2 rows examined below ids[5], none matching, and where to continue.
      const bounded = await store.searchAudit({
        action,
        principal: 'nobody',
        beforeId: ids[5],
        scanRows: 2,
        limit: 10,
      });
      expect(bounded).toEqual({ items: [], nextBeforeId: ids[3], scanBounded: true });
      const next = await store.searchAudit({ action, principal: 'oid-odd', beforeId: ids[5], scanRows: 2, limit: 10 });
      expect(next.items.map((r) => r.id)).toEqual([ids[3]]);
      expect(next.scanBounded).toBe(true);
      await expect(store.searchAudit({ limit: 501 })).rejects.toThrow(/limit/);
      await expect(store.searchAudit({ limit: 1, outcome: 'maybe' as never })).rejects.toThrow(/outcome/);
      await expect(store.searchAudit({ limit: 1, scanRows: TEXT_SEARCH_SCAN_ROWS_MAX + 1 })).rejects.toThrow(
        /scanRows/,
      );
    });

    it('purges rows older than the cutoff in batches, oldest first, and nothing newer', async () => {
      const action = `purge-${freshQueue('a')}`.slice(0, 64);
      const old1 = await store.recordAudit(entry({ action }));
      const old2 = await store.recordAudit(entry({ action }));
      const fresh = await store.recordAudit(entry({ action }));
      await h.backdateAudit([old1, old2], 400 * 86_400);
      const cutoff = new Date(Date.now() - 365 * 86_400_000);
      expect(await store.purgeAudit(cutoff, 1)).toBe(1);
      expect(await store.purgeAudit(cutoff, 10)).toBe(1);
      expect(await store.purgeAudit(cutoff, 10)).toBe(0);
      expect((await store.searchAudit({ action, limit: 10 })).items.map((r) => r.id)).toEqual([fresh]);
      await expect(store.purgeAudit(cutoff, 0)).rejects.toThrow(/batchSize/);
    });

    it('refuses an entry with a value outside its column, naming the field', async () => {
      await expect(store.recordAudit(entry({ authMethod: 'cookie' as never }))).rejects.toThrow(/authMethod/);
      await expect(store.recordAudit(entry({ outcome: 'ok' as never }))).rejects.toThrow(/outcome/);
      await expect(store.recordAudit(entry({ target: 'x'.repeat(401) }))).rejects.toThrow(/target/);
      await expect(store.finishAudit('not-an-id', 'ok', 200, null, null)).rejects.toThrow(/id/);
    });
  });
}

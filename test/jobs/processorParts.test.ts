// The processor's parts without a database: the claim loop's slot accounting (producer.ts) over a fake runner, and
// the completer's one finalization path (completer.ts) over a fake store. test/jobs/processor.test.ts runs the whole
// processor on PostgreSQL.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob, JobOutcome, JobStore, LeaseRef, StartedJob } from '../../shared/jobs/contract.js';
import { BatchAnswers, Completer } from '../../shared/jobs/completer.js';
import {
  AttemptTimeouts,
  RunningJobs,
  leaseTimes,
  type RunningJob,
  type TimedAttempt,
} from '../../shared/jobs/executor.js';
import { Inflight, runClaimLoop, type ClaimLoopRunner } from '../../shared/jobs/producer.js';
import { silentLogger } from '../../shared/jobs/registry.js';
import { LIMITS } from '../../shared/jobs/validate.js';

const job = (id: number): StartedJob => ({
  id: String(id),
  leaseId: `lease-${id}`,
  queue: 'q',
  type: 't',
  payload: null,
  priority: 0,
  attempts: 0,
  maxAttempts: null,
  queueMaxAttempts: 5,
  idempotencyKey: null,
  tags: [],
  runAt: new Date(0),
  createdAt: new Date(0),
  leaseExpiresAt: new Date(0),
  queueZombieTimeoutSeconds: 300,
  attempt: 1,
});

// A runner whose jobs finish when the test says: `finishHandler` ends a handler, `finalize` writes its outcome.
function fakeRunner(due: number) {
  let next = 1;
  const claims: number[] = [];
  const handlers: (() => void)[] = [];
  const finals: (() => void)[] = [];
  let failNextBatch = false;
  const runner: ClaimLoopRunner = {
    async claimAndStart(_queues, limit) {
      claims.push(limit);
      const n = Math.min(limit, due - (next - 1));
      return Array.from({ length: n }, () => job(next++));
    },
    runStarted(jobs, onJobDone, onHandlerDone) {
      if (failNextBatch) {
        failNextBatch = false;
        return Promise.reject(new Error('batch failed as a whole'));
      }
      return Promise.all(
        jobs.map(
          (j) =>
            new Promise<JobOutcome>((resolve) => {
              handlers.push(() => onHandlerDone?.());
              finals.push(() => {
                onJobDone?.('succeeded', j.id);
                resolve('succeeded');
              });
            }),
        ),
      );
    },
  };
  return {
    runner,
    claims,
    finishHandlers: () => handlers.splice(0).forEach((f) => f()),
    finalizeAll: () => finals.splice(0).forEach((f) => f()),
    failNextBatch: () => (failNextBatch = true),
  };
}

describe('claim loop (producer.ts)', () => {
  it('counts jobs, not batches: claims only the free slots, holds at most 2 x concurrency, and claims again once a batch of slots is free', async () => {
    const fake = fakeRunner(100);
    let stop = false;
    const waits: ('idle' | 'slots')[] = [];
    const loop = runClaimLoop(fake.runner, silentLogger, {
      queues: ['q'],
      concurrency: 4,
      shouldStop: () => stop,
      idleWait: async (mode, jobFinished) => {
        waits.push(mode);
        await jobFinished;
        return 'continue';
      },
    });
    await new Promise((r) => setImmediate(r));
    expect(fake.claims).toEqual([4]); // four running: no free slot
    fake.finishHandlers(); // handlers done, outcomes not yet written: 4 held, 0 running
    await new Promise((r) => setImmediate(r));
    expect(fake.claims).toEqual([4, 4]); // the next claim overlaps the previous batch's completion
    fake.finishHandlers(); // 8 held: the cap of 2 x concurrency, so no claim
    await new Promise((r) => setImmediate(r));
    expect(fake.claims).toEqual([4, 4]);
    fake.finalizeAll();
    await new Promise((r) => setImmediate(r));
    expect(fake.claims).toEqual([4, 4, 4]);
    expect(waits.every((w) => w === 'slots')).toBe(true);
    stop = true;
    fake.finishHandlers();
    fake.finalizeAll();
    await loop;
  });

  it('a batch that fails as a whole gives its slots back, and stopWhenIdle ends the loop once nothing is held', async () => {
    const fake = fakeRunner(3);
    fake.failNextBatch();
    const outcomes: JobOutcome[] = [];
    const loop = runClaimLoop(fake.runner, silentLogger, {
      queues: ['q'],
      concurrency: 2,
      shouldStop: () => false,
      stopWhenIdle: true,
      onOutcome: (o) => outcomes.push(o),
      idleWait: async (_mode, jobFinished) => {
        await jobFinished;
        return 'continue';
      },
    });
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(fake.claims.slice(0, 2)).toEqual([2, 2]); // the failed batch's two slots came back
    fake.finishHandlers();
    fake.finalizeAll();
    await loop;
    expect(outcomes).toEqual(['succeeded']); // job 3; jobs 1 and 2 went with the failed batch
  });

  it('Inflight: allFinalized resolves once every claimed job is finalized', async () => {
    const inflight = new Inflight();
    await inflight.allFinalized(); // none held: at once
    const batch = inflight.claimed(2);
    expect(inflight.free(2)).toBe(0);
    let settled = false;
    void inflight.allFinalized().then(() => (settled = true));
    batch.handlerDone();
    batch.finalized();
    await Promise.resolve();
    expect(settled).toBe(false);
    batch.giveBack(); // the rest of the batch (one job, its handler still counted as running)
    await Promise.resolve();
    expect(settled).toBe(true);
    expect(inflight.free(2)).toBe(2);
  });

  it("Inflight: with the loop's concurrency and claim batch, changed settles only once a claim batch of slots is free or nothing is held", async () => {
    const inflight = new Inflight(4, 2);
    const batch = inflight.claimed(4);
    let woken = 0;
    void inflight.changed.then(() => woken++);
    batch.handlerDone(); // one slot free: under the claim batch
    await Promise.resolve();
    expect(woken).toBe(0);
    batch.handlerDone(); // two free
    await Promise.resolve();
    expect(woken).toBe(1);
    const second = inflight.claimed(1); // three running: one slot free
    void inflight.changed.then(() => woken++);
    second.giveBack(); // the batch failed as a whole: nothing of it held, two free again
    await Promise.resolve();
    expect(woken).toBe(2);
    void inflight.changed.then(() => woken++);
    batch.giveBack(); // nothing held
    await Promise.resolve();
    expect(woken).toBe(3);
  });
});

describe('BatchAnswers (completer.ts): each ref its own answer', () => {
  const lost = (r: LeaseRef) => ({ jobId: r.jobId, status: 'lease_lost' as const });
  const ref = (id: string): LeaseRef => ({ jobId: id, leaseId: `lease-${id}` });
  it("answers in the refs' order, in another order, and a ref left unanswered as lost", () => {
    const [a, b, c] = [ref('1'), ref('2'), ref('3')];
    const inOrder = new BatchAnswers(
      [
        { jobId: '1', status: 'ok' },
        { jobId: '2', status: 'cancelled' },
        { jobId: '3', status: 'ok' },
      ],
      lost,
    );
    expect([a, b, c].map((r) => inOrder.get(r).status)).toEqual(['ok', 'cancelled', 'ok']);
    const shuffled = new BatchAnswers(
      [
        { jobId: '3', status: 'cancelled' },
        { jobId: '1', status: 'ok' },
      ],
      lost,
    );
    expect(shuffled.get(a).status).toBe('ok');
    expect(shuffled.get(b).status).toBe('lease_lost');
    expect(shuffled.get(c).status).toBe('cancelled');
    expect(shuffled.get(a).status).toBe('ok'); // asked twice
    const askedOutOfOrder = new BatchAnswers(
      [
        { jobId: '1', status: 'ok' },
        { jobId: '2', status: 'cancelled' },
      ],
      lost,
    );
    expect(askedOutOfOrder.get(b).status).toBe('cancelled');
    expect(askedOutOfOrder.get(a).status).toBe('ok');
    expect(askedOutOfOrder.get(c).status).toBe('lease_lost');
  });
});

describe('completer (completer.ts): one path for every finalization', () => {
  const ref = (j: ClaimedJob): LeaseRef => ({ jobId: j.id, leaseId: j.leaseId });
  function fakeStore(status: 'ok' | 'lease_lost' | 'cancelled') {
    const calls: unknown[][] = [];
    const owner = status === 'cancelled' ? 'ok' : status;
    const store = {
      async completeMany(refs: LeaseRef[]) {
        calls.push(['completeMany', refs]);
        return refs.map((r) => ({ jobId: r.jobId, status }));
      },
      async fail(...a: unknown[]) {
        calls.push(['fail', ...a]);
        return owner;
      },
      async retry(...a: unknown[]) {
        calls.push(['retry', ...a]);
        return owner;
      },
      async interrupt(...a: unknown[]) {
        calls.push(['interrupt', ...a]);
        return owner;
      },
      async release(...a: unknown[]) {
        calls.push(['release', ...a]);
        return owner;
      },
    } as unknown as JobStore;
    return { store, calls };
  }

  it('maps each move to its outcome, cuts the error to LIMITS.lastErrorChars, and batches completions made in one turn', async () => {
    const { store, calls } = fakeStore('ok');
    const lost: string[] = [];
    const c = new Completer(store, 200, (_j, op) => lost.push(op));
    const long = 'x'.repeat(LIMITS.lastErrorChars + 10);
    const runAt = new Date(1000);
    const [j1, j2] = [job(1), job(2)];
    expect(await Promise.all([c.finalize(j1, { op: 'complete' }), c.finalize(j2, { op: 'complete' })])).toEqual([
      { outcome: 'succeeded' },
      { outcome: 'succeeded' },
    ]);
    expect(await c.finalize(j1, { op: 'fail', reason: 'fatal', error: long })).toEqual({
      outcome: 'dead_lettered',
      reason: 'fatal',
    });
    expect(await c.finalize(j1, { op: 'retry', runAt, error: long })).toEqual({ outcome: 'retried' });
    expect(await c.finalize(j1, { op: 'interrupt', error: 'stopping' })).toEqual({ outcome: 'released' });
    expect(await c.finalize(j1, { op: 'release' })).toEqual({ outcome: 'released' });
    const cut = long.slice(0, LIMITS.lastErrorChars);
    expect(calls).toEqual([
      ['completeMany', [ref(j1), ref(j2)]],
      ['fail', ref(j1), 'fatal', cut],
      ['retry', ref(j1), runAt, cut],
      ['interrupt', ref(j1), 'stopping'],
      ['release', ref(j1)],
    ]);
    expect(lost).toEqual([]);
  });

  it("a lost lease is reported with the move's name; a fail keeps its reason; a cancelled completion is dead-lettered", async () => {
    const { store } = fakeStore('lease_lost');
    const lost: string[] = [];
    const c = new Completer(store, 200, (_j, op) => lost.push(op));
    expect(await c.finalize(job(1), { op: 'complete' })).toEqual({ outcome: 'lease_lost' });
    expect(await c.finalize(job(1), { op: 'fail', reason: 'exhausted', error: 'e' })).toEqual({
      outcome: 'lease_lost',
      reason: 'exhausted',
    });
    expect(await c.finalize(job(1), { op: 'retry', runAt: new Date(), error: 'e' })).toEqual({
      outcome: 'lease_lost',
    });
    expect(lost).toEqual(['complete', 'fail', 'retry']);
    const cancelled = new Completer(fakeStore('cancelled').store, 200, () => undefined);
    expect(await cancelled.finalize(job(1), { op: 'complete' })).toEqual({
      outcome: 'dead_lettered',
      reason: 'cancelled',
    });
  });
});

describe('handler timeouts (executor.ts AttemptTimeouts): one timer per timeout value, not per attempt', () => {
  const attempt = (fired: string[], name: string): TimedAttempt => ({
    fire: (reason) => fired.push(`${name}:${reason}`),
    timeoutAt: 0,
    timeoutPrev: undefined,
    timeoutNext: undefined,
    timeoutList: undefined,
  });
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('fires each attempt at its own deadline, in order, and never one that ended', () => {
    const t = new AttemptTimeouts();
    const fired: string[] = [];
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((n) => attempt(fired, n)) as [TimedAttempt, ...TimedAttempt[]];
    t.start(a, 100);
    vi.advanceTimersByTime(30);
    t.start(b!, 100);
    t.start(c!, 100);
    t.start(d!, 50); // another value, another list: due at 80
    expect(vi.getTimerCount()).toBe(2);
    t.stop(c!); // ended in time: never fires
    vi.advanceTimersByTime(49);
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(fired).toEqual(['d:timeout']);
    vi.advanceTimersByTime(19);
    expect(fired).toEqual(['d:timeout']);
    vi.advanceTimersByTime(1);
    expect(fired).toEqual(['d:timeout', 'a:timeout']);
    vi.advanceTimersByTime(29);
    expect(fired).toEqual(['d:timeout', 'a:timeout']);
    vi.advanceTimersByTime(1);
    expect(fired).toEqual(['d:timeout', 'a:timeout', 'b:timeout']);
    expect(vi.getTimerCount()).toBe(0);
    t.stop(b!); // the processor stops every attempt it started, timed out or not
    expect(vi.getTimerCount()).toBe(0);
  });

  it('an attempt after the first ended still fires on time; no timer is left once every attempt has ended', () => {
    const t = new AttemptTimeouts();
    const fired: string[] = [];
    const [a, b] = [attempt(fired, 'a'), attempt(fired, 'b')];
    t.start(a, 100);
    vi.advanceTimersByTime(60);
    t.start(b, 100);
    t.stop(a); // the first timer (due at 100) stays, finds b not due, and is armed for b's 160
    vi.advanceTimersByTime(99);
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(fired).toEqual(['b:timeout']);
    t.start(a, 100);
    t.stop(a);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('the beat timer (executor.ts RunningJobs): heartbeats and lease deadlines', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('leaseTimes: beats at least 4 times a lease, and gives it up a tenth early (at least 2 ticks, at most half)', () => {
    expect(leaseTimes(10_000, 300_000)).toEqual({ beatEveryMs: 10_000, marginMs: 30_000 }); // the defaults
    expect(leaseTimes(200, 4_000)).toEqual({ beatEveryMs: 200, marginMs: 400 });
    expect(leaseTimes(10_000, 4_000)).toEqual({ beatEveryMs: 1_000, marginMs: 500 }); // a short lease beats faster
    expect(leaseTimes(10_000, 0)).toEqual({ beatEveryMs: 10_000, marginMs: 0 }); // no lease known: no deadline
  });

  // A job whose beats are confirmed (each moves its deadline to its send time + lease - margin), or never answered.
  type TestJob = RunningJob & { beat(): Promise<void> };
  function job(id: string, confirmed: boolean, events: string[]): TestJob {
    const { beatEveryMs, marginMs } = leaseTimes(200, 4_000);
    const j: TestJob = {
      jobId: id,
      abort: () => undefined,
      beatEveryMs,
      nextBeatAt: Date.now() + beatEveryMs,
      leaseDeadline: performance.now() + 4_000 - marginMs,
      beat: () => {
        const sentAt = performance.now();
        events.push(`${id}:beat`);
        if (confirmed) j.leaseDeadline = sentAt + 4_000 - marginMs;
        return confirmed ? Promise.resolve() : new Promise<void>(() => undefined);
      },
      expire: () => events.push(`${id}:expired@${Math.round(performance.now())}`),
    };
    return j;
  }

  it('gives up, once, a lease whose beats go unconfirmed, before it runs out; confirmed beats keep theirs', () => {
    const events: string[] = [];
    // The jobs due at a tick come in one call (the processor's one heartbeatMany), not one call a job.
    const running = new RunningJobs<TestJob>(silentLogger, (due) => {
      events.push(`tick:${due.map((j) => j.jobId).join('+')}`);
      for (const j of due) void j.beat();
      return Promise.resolve();
    });
    const start = performance.now();
    const ok = running.add(job('ok', true, events));
    const cut = running.add(job('cut', false, events));
    vi.advanceTimersByTime(10_000);
    const expired = events.filter((e) => e.includes('expired'));
    expect(expired).toHaveLength(1);
    const at = Number(expired[0]!.split('@')[1]) - start;
    expect(at).toBeGreaterThanOrEqual(3_600); // lease 4 s less the 0.4 s margin
    expect(at).toBeLessThan(4_000); // within a tick of that, before the rescue could move it
    expect(events.filter((e) => e === 'ok:beat').length).toBeGreaterThanOrEqual(40); // every 200 ms (+ a tick)
    // Until the cut lease is given up, every tick beat both jobs with one call.
    const beforeExpiry = events.slice(
      0,
      events.findIndex((e) => e.includes('expired')),
    );
    const ticks = beforeExpiry.filter((e) => e.startsWith('tick:'));
    expect(ticks.length).toBeGreaterThanOrEqual(15);
    expect(new Set(ticks)).toEqual(new Set(['tick:ok+cut']));
    running.delete(ok);
    running.delete(cut);
    expect(vi.getTimerCount()).toBe(0);
  });
});

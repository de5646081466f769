// Clock skew between a host and the job store. First the delay of a job's queue message. A job is due when the store's
// clock (its database server's, which every claim's due test reads) passes its run_at; the message that wakes the
// queue runner for it was delayed by run_at minus the HOST's clock. A host an hour ahead posted it at once (a wasted
// claim, the job then left to the dispatcher's next tick); an hour behind, an hour late. Now the delay is counted
// from the store's clock (storeClock): the enqueue of a job with its own runAt, the queue runner's post of a retried
// job's next attempt, and the dispatcher's post of the jobs its drain retried. Then the ops API's purge, which
// refused an olderThan "in the future" of the host's clock; and the scheduler, which compared a resume (stamped by
// the store's clock) with its ticks (the host's). The host's clock is shifted with a spy on Date.now around
// each step (the database's is the real one).
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { skewed } from '../support/skewedClock.js';
import { jobRunner } from '../../functions/jobRunner.js';
import { dispatchDueJobs } from '../../shared/app/timerPasses.js';
import { enqueueJobs } from '../../shared/app/enqueue.js';
import { ops } from '../../functions/ops.js';
import { runSchedules } from '../../shared/jobs/scheduler.js';
import { defineSchedule } from '../../shared/jobs/define.js';
import { context, createTestRuntime, jsonOf, request, type TestRuntime } from './support.js';

const HOUR = 3_600_000;
// Retried after 60-120 s (equal jitter on a 120 s ceiling): far from both 0 and an hour.
const BACKOFF = { baseMs: 120_000, maxMs: 120_000 };

let t: TestRuntime;

beforeAll(async () => {
  t = await createTestRuntime('fn_post_skew', {
    env: { KEEL_DISPATCH_QUEUES: '' },
    register: (r) => {
      r.register(
        'test.failsOnce',
        () => {
          throw new Error('fails (test)');
        },
        { backoff: BACKOFF, maxAttempts: 3 },
      );
      r.register('test.noop', async () => undefined);
    },
  });
});

afterAll(async () => {
  await t?.close();
});

afterEach(() => vi.restoreAllMocks());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const dbNow = async () => (await t.pool.query<{ now: Date }>('select now() as now')).rows[0]!.now;

// The delay of the one message posted for id, and how far its job's run_at is from the store's clock now (read
// after the post: the delay is at least this, and at most this plus the time since the post).
async function postedFor(id: string): Promise<{ delay: number; dueIn: number }> {
  const posted = t.queues.sent.filter((m) => (m.message as { jobId: string }).jobId === id);
  expect(posted).toHaveLength(1);
  const job = await t.rt.store.getJob(id);
  expect(job).toMatchObject({ location: 'hot', state: 'pending' });
  return { delay: posted[0]!.delaySeconds, dueIn: (job!.runAt!.getTime() - (await dbNow()).getTime()) / 1000 };
}

// Slack for the time between the post and the read of the store's clock after it, on a loaded machine.
const SLACK_S = 20;

describe.each([
  ['an hour ahead of', HOUR],
  ['an hour behind', -HOUR],
])('a host %s the job store', (_what, offset) => {
  it('posts a job enqueued with its own runAt delayed until then by the store clock', async () => {
    t.queues.clear();
    const runAt = new Date((await dbNow()).getTime() + 90_000);
    const [r] = await skewed(offset, () => enqueueJobs(t.rt, { type: 'test.noop', queue: 'skew-at', runAt }));
    expect(r).toMatchObject({ duplicate: false, posted: true });
    const { delay, dueIn } = await postedFor(r!.id);
    expect(dueIn).toBeGreaterThan(60);
    expect(delay).toBeGreaterThanOrEqual(dueIn);
    expect(delay).toBeLessThanOrEqual(dueIn + SLACK_S);
    await t.rt.store.cancel(r!.id);
  });

  it("the queue runner posts a retried job's next attempt delayed to its run_at by the store clock", async () => {
    const id = (await t.rt.store.enqueue({ queue: 'skew-run', type: 'test.failsOnce' })).id;
    t.queues.clear();
    await skewed(offset, () => jobRunner({ jobId: id }, context('jobRunner')));
    expect(await t.rt.store.getJob(id)).toMatchObject({ attempts: 1 });
    const { delay, dueIn } = await postedFor(id);
    expect(dueIn).toBeGreaterThan(30); // retried 60-120 s after its failure
    expect(delay).toBeGreaterThanOrEqual(dueIn);
    expect(delay).toBeLessThanOrEqual(dueIn + SLACK_S);
    await t.rt.store.cancel(id);
  });

  it('the dispatcher posts the jobs its drain retried delayed to their run_at by the store clock', async () => {
    const id = (await t.rt.store.enqueue({ queue: 'skew-disp', type: 'test.failsOnce' })).id;
    t.queues.clear();
    const r = await skewed(offset, () => dispatchDueJobs(t.rt, context('dispatcher')));
    expect(r).toMatchObject({ processed: 1, outcomes: { retried: 1 }, posted: 1 });
    const { delay, dueIn } = await postedFor(id);
    expect(dueIn).toBeGreaterThan(30);
    expect(delay).toBeGreaterThanOrEqual(dueIn);
    expect(delay).toBeLessThanOrEqual(dueIn + SLACK_S);
    await t.rt.store.cancel(id);
  });
  it("a resumed schedule runs the ticks after its resume by the store's clock: none of the pause, none skipped", async () => {
    const def = defineSchedule(`skew-resume-${offset > 0 ? 'ahead' : 'behind'}`, {
      cron: '* * * * * *',
      type: 'test.noop',
      payload: {},
    });
    await t.rt.store.setSchedulePaused(def.name, true);
    const resumedAt = (await t.rt.store.setSchedulePaused(def.name, false)).resumedAt!; // by the store's clock
    await sleep(1_500); // a tick or more after the resume
    const [r] = await skewed(offset, () => runSchedules(t.rt.store, t.rt.registry, [def], new Date(Date.now())));
    // An hour ahead, the hour before the resume was read as paused ticks due since (all missed); an hour behind,
    // the resume lay an hour ahead, and no tick was due.
    expect(r).toMatchObject({ status: 'fired', missed: 0, skipped: 0 });
    expect(r!.ticks.length).toBeGreaterThanOrEqual(1);
    expect(r!.ticks.length).toBeLessThanOrEqual(1 + SLACK_S);
    // The ticks are this host's times: each after the resume, read in this host's time.
    for (const tick of r!.ticks) expect(Date.parse(tick)).toBeGreaterThan(resumedAt.getTime() + offset - 2_000);
    await t.rt.store.setSchedulePaused(def.name, true);
    for (const id of r!.enqueued) await t.rt.store.cancel(id); // not the next tests' dispatcher's
  });

  it("the purge refuses an olderThan in the future of the store's clock, and only that", async () => {
    const purge = (olderThan: Date) =>
      skewed(offset, async () => {
        const res = await ops(
          request('POST', 'purge', { operator: true, body: { target: 'archive', olderThan, dryRun: true } }),
          context('ops'),
        );
        return { status: res.status, body: jsonOf(res) as Record<string, unknown> };
      });
    const now = (await dbNow()).getTime();
    expect(await purge(new Date(now - 60_000))).toMatchObject({ status: 200, body: { dryRun: true } });
    expect(await purge(new Date(now + 30 * 60_000))).toMatchObject({
      status: 400,
      body: { error: 'invalid_request', field: 'olderThan' },
    });
  });
});

it("an enqueue whose read of the store's clock fails still enqueues: its runAt job is left to the dispatcher", async () => {
  t.queues.clear();
  const store = new Proxy(t.rt.store, {
    get(target, prop, receiver) {
      if (prop === 'countJobs') return () => Promise.reject(new Error('clock read refused (test)'));
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const runAt = new Date((await dbNow()).getTime() + 90_000);
  const [later, now] = await enqueueJobs({ ...t.rt, store }, [
    { type: 'test.noop', queue: 'skew-clockless', runAt },
    { type: 'test.noop', queue: 'skew-clockless' },
  ]);
  expect(later).toMatchObject({ duplicate: false, posted: false });
  expect(now).toMatchObject({ duplicate: false, posted: true });
  expect(await t.rt.store.getJob(later!.id)).toMatchObject({ location: 'hot', state: 'pending' });
  expect(t.queues.sent.map((m) => (m.message as { jobId: string }).jobId)).toEqual([now!.id]);
  await t.rt.store.cancel(later!.id);
});

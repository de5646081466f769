// The queue-triggered job runner and the timers (dispatcher, maintenance), invoked directly.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobRunner } from '../../functions/jobRunner.js';
import { dispatcher } from '../../functions/dispatcher.js';
import { maintenance } from '../../functions/maintenance.js';
import { transferTimer } from '../../functions/transferTimer.js';
import {
  context,
  createTestRuntime,
  jsonOf,
  request,
  snapshot,
  RecordingQueues,
  timer,
  type TestRuntime,
} from './support.js';
import { ops } from '../../functions/ops.js';
import { appUrl } from '../support/pg.js';
import { dispatchDueJobs, maintenanceDidNothing, runMaintenancePass } from '../../shared/app/timerPasses.js';
import { createRuntime, setRuntime } from '../../shared/app/runtime.js';
import { registerDemoHandlers } from '../../dev/demoHandlers.js';
import { parseSettings } from '../../shared/config/settings.js';
import { forgetQueueLimits } from '../../shared/app/slots.js';

let t: TestRuntime;
// test.gate jobs wait until the gate opens (a job that holds its queue's only slot while other messages arrive).
let openGate: () => void = () => undefined;
let gate: Promise<void> = Promise.resolve();
function closeGate(): void {
  gate = new Promise<void>((r) => (openGate = r));
}

// `obj` with each method call's name pushed to `calls` before it runs.
function recordingCalls<T extends object>(obj: T, calls: string[]): T {
  return new Proxy(obj, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

beforeAll(async () => {
  t = await createTestRuntime('fn_queue', {
    // Purges every pass here (the default is at most hourly: tested below with a runtime of its own).
    env: { KEEL_DISPATCH_QUEUES: '', KEEL_MAINT_PURGE_INTERVAL_MS: '0' },
    register: (r) => {
      r.register('test.once', async () => undefined, { maxAttempts: 1 });
      r.register('test.gate', () => gate);
    },
  });
});

afterAll(async () => {
  await t?.close();
});

async function enqueue(queue: string, type: string, extra: Record<string, unknown> = {}) {
  const r = await t.rt.store.enqueue({ queue, type, ...extra });
  return r.id;
}

describe('jobRunner (queue trigger)', () => {
  it('claims the job by id, runs it and archives it (message as parsed JSON or as text)', async () => {
    const a = await enqueue('run-a', 'demo.echo');
    const b = await enqueue('run-a', 'demo.echo');
    await jobRunner({ jobId: a }, context('jobRunner'));
    await jobRunner(JSON.stringify({ jobId: Number(b) }), context('jobRunner'));
    expect((await t.rt.store.getJob(a))?.location).toBe('archive');
    expect((await t.rt.store.getJob(b))?.location).toBe('archive');
    expect(t.queues.poisoned).toHaveLength(0);
  });

  it('after a retry, posts the next attempt for when it is due', async () => {
    const id = await enqueue('run-b', 'demo.flaky', { payload: { failTimes: 1 } });
    t.queues.clear();
    await jobRunner({ jobId: id }, context('jobRunner'));
    const job = await t.rt.store.getJob(id);
    expect(job).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
    const posted = t.queues.sent.filter((m) => m.queue === 'keel-jobs');
    expect(posted).toHaveLength(1);
    expect(posted[0]!.message).toEqual({ jobId: id });
    expect(posted[0]!.delaySeconds).toBeGreaterThanOrEqual(0);
    t.queues.clear();
  });

  it('a job interrupted by the host shutting down is handed back, attempt given back, and posted again', async () => {
    // Its own runtime: the shutdown stops that runtime's processor for good.
    const own = await createTestRuntime('fn_queue_stop', { env: { KEEL_DISPATCH_QUEUES: '' } });
    try {
      const id = (await own.rt.store.enqueue({ queue: 'run-stop', type: 'demo.slow', payload: { ms: 60_000 } })).id;
      const running = jobRunner({ jobId: id }, context('jobRunner'));
      for (let i = 0; i < 200 && (await own.rt.store.getJob(id))?.state !== 'processing'; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      await own.rt.processor.shutdown(10);
      await running;
      expect(await own.rt.store.getJob(id)).toMatchObject({
        location: 'hot',
        state: 'pending',
        attempts: 0,
        lastError: 'interrupted by worker shutdown',
      });
      expect(own.queues.sent.filter((m) => m.queue === 'keel-jobs').map((m) => m.message)).toEqual([{ jobId: id }]);
    } finally {
      await own.close();
      setRuntime(t.rt);
    }
  });

  it('acknowledges a duplicate message for a finished job without poisoning it', async () => {
    const id = await enqueue('run-c', 'demo.echo');
    await jobRunner({ jobId: id }, context('jobRunner'));
    const before = await snapshot(t.pool);
    const ctx = context('jobRunner');
    await jobRunner({ jobId: id }, ctx);
    expect(await snapshot(t.pool)).toEqual(before);
    expect(t.queues.poisoned).toHaveLength(0);
    // Acknowledged quietly: a debug line, nothing that reads like an error at information level or above.
    expect(ctx.logs).toEqual([{ level: 'debug', text: `job ${id} already finished (archive); message acknowledged` }]);
  });

  it('a message for a job that is pending but not due is acknowledged with an information line saying why', async () => {
    const id = await enqueue('run-later', 'demo.echo', { delayMs: 60_000 });
    const ctx = context('jobRunner');
    await jobRunner({ jobId: id }, ctx);
    expect(ctx.logs).toEqual([
      {
        level: 'information',
        text: `job ${id} is pending but cannot run now (not due yet, or its queue is paused or at its limit); it is posted again when a slot frees, else the dispatcher runs it when it can`,
      },
    ]);
    expect(t.queues.poisoned).toHaveLength(0);
  });

  const malformed: [string, unknown, string][] = [
    ['not JSON', 'jobId=5', 'malformed'],
    ['JSON array', '[1]', 'malformed'],
    ['missing jobId', { id: '5' }, 'malformed'],
    ['jobId not numeric', { jobId: 'abc' }, 'malformed'],
    ['jobId negative', { jobId: -4 }, 'malformed'],
    ['jobId fractional', { jobId: 1.5 }, 'malformed'],
    ['extra fields', { jobId: '1', extra: true }, 'malformed'],
    ['null', null, 'malformed'],
    ['unknown job', { jobId: '987654321' }, 'unknown_job'],
  ];

  it.each(malformed)(
    '%s -> poison queue with a reason, database unchanged, no throw',
    async (_name, message, reason) => {
      t.queues.clear();
      const before = await snapshot(t.pool);
      const ctx = context('jobRunner', { dequeueCount: 1 });
      await expect(jobRunner(message, ctx)).resolves.toBeUndefined();
      expect(await snapshot(t.pool)).toEqual(before);
      expect(t.queues.poisoned).toHaveLength(1);
      expect(t.queues.poisoned[0]).toMatchObject({
        queue: 'keel-jobs',
        entry: { reason, functionName: 'jobRunner', dequeueCount: 1 },
      });
      expect(ctx.logs.some((l) => l.level === 'warning' && l.text.includes(reason))).toBe(true);
    },
  );

  it('throws (so the host retries, then poisons) when even the poison queue is unreachable', async () => {
    t.queues.failSends = true;
    try {
      await expect(jobRunner('garbage', context('jobRunner'))).rejects.toThrow(/storage unavailable/);
    } finally {
      t.queues.failSends = false;
    }
  });
});

// Delivers every message posted to keel-jobs to the runner, as the host would, until none is left (bounded).
async function deliverPosted(rounds = 20): Promise<number> {
  let delivered = 0;
  for (let i = 0; i < rounds; i++) {
    const msgs = t.queues.take('keel-jobs');
    if (msgs.length === 0) break;
    for (const m of msgs) await jobRunner(m, context('jobRunner'));
    delivered += msgs.length;
  }
  return delivered;
}

async function waitForState(id: string, state: string): Promise<void> {
  for (let i = 0; i < 500 && (await t.rt.store.getJob(id))?.state !== state; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  expect((await t.rt.store.getJob(id))?.state).toBe(state);
}

describe('a queue at its concurrency limit (jobRunner hands the freed slot on)', () => {
  it('limit 1, three jobs through their messages: each finish posts the next, all run without a dispatcher tick', async () => {
    const queue = 'lim-chain';
    await t.rt.store.updateQueue(queue, { maxConcurrency: 1 });
    forgetQueueLimits(t.rt); // the runtime's view of the limits may predate this queue (read at most every 5 s)
    closeGate();
    const ids = [
      await enqueue(queue, 'test.gate'),
      await enqueue(queue, 'test.gate'),
      await enqueue(queue, 'test.gate'),
    ];
    t.queues.clear();
    const first = jobRunner({ jobId: ids[0] }, context('jobRunner'));
    await waitForState(ids[0]!, 'processing');
    // The other two messages arrive while the only slot is taken: acknowledged, not run.
    for (const id of ids.slice(1)) {
      const ctx = context('jobRunner');
      await jobRunner({ jobId: id }, ctx);
      expect(ctx.logs[0]?.text).toMatch(/at its limit\); it is posted again when a slot frees/);
      expect((await t.rt.store.getJob(id))?.state).toBe('pending');
    }
    expect(t.queues.take('keel-jobs')).toEqual([]);
    openGate();
    await first;
    // The finish of each job posted the next one's id (no dispatcher runs in this test).
    expect(t.queues.sent.filter((m) => m.queue === 'keel-jobs').map((m) => m.message)).toEqual([{ jobId: ids[1] }]);
    expect(await deliverPosted()).toBe(2);
    for (const id of ids) expect((await t.rt.store.getJob(id))?.location).toBe('archive');
    expect(t.queues.sent).toEqual([]); // the last finish found nothing due: nothing posted
  });

  it('limit 2: a finish hands on one slot, never more than the limit lets run', async () => {
    const queue = 'lim-two';
    await t.rt.store.updateQueue(queue, { maxConcurrency: 2 });
    forgetQueueLimits(t.rt);
    closeGate();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await enqueue(queue, 'test.gate'));
    t.queues.clear();
    const running = [
      jobRunner({ jobId: ids[0] }, context('jobRunner')),
      jobRunner({ jobId: ids[1] }, context('jobRunner')),
    ];
    await waitForState(ids[0]!, 'processing');
    await waitForState(ids[1]!, 'processing');
    openGate();
    await Promise.all(running);
    // Two finishes, two slots handed on: the next two due jobs, not all three left.
    const posted = t.queues.take('keel-jobs') as { jobId: string }[];
    expect(posted.map((m) => m.jobId).sort()).toEqual([ids[2], ids[3]].sort());
    // Each of those finishes hands on again (a job posted twice finds itself finished: acknowledged).
    for (const m of posted) await jobRunner(m, context('jobRunner'));
    await deliverPosted();
    for (const id of ids) expect((await t.rt.store.getJob(id))?.location).toBe('archive');
  });

  it('a queue without a limit posts nothing when a job finishes (its jobs have their own messages)', async () => {
    const queue = 'lim-none';
    const ids = [await enqueue(queue, 'demo.echo'), await enqueue(queue, 'demo.echo')];
    forgetQueueLimits(t.rt);
    t.queues.clear();
    await jobRunner({ jobId: ids[0] }, context('jobRunner'));
    expect((await t.rt.store.getJob(ids[0]!))?.location).toBe('archive');
    expect(t.queues.sent).toEqual([]);
    expect((await t.rt.store.getJob(ids[1]!))?.state).toBe('pending');
    await jobRunner({ jobId: ids[1] }, context('jobRunner'));
  });

  it('the dispatcher, its budget spent with a limited queue left due, posts the next job for the free slot', async () => {
    const queue = 'lim-drain';
    await t.rt.store.updateQueue(queue, { maxConcurrency: 1 });
    const queues = new RecordingQueues();
    const settings = parseSettings({
      KEEL_PG_URL: appUrl(t.url),
      KEEL_PG_MIGRATE_URL: t.url,
      KEEL_DEMO_HANDLERS: 'true',
      KEEL_DISPATCH_QUEUES: queue,
      KEEL_DISPATCH_BUDGET_MS: '100',
    });
    const rt = await createRuntime(settings, {
      queues,
      store: t.rt.store,
      transfers: null,
      register: registerDemoHandlers,
    });
    try {
      const ids = [
        await enqueue(queue, 'demo.slow', { payload: { ms: 300 } }),
        await enqueue(queue, 'demo.echo'),
        await enqueue(queue, 'demo.echo'),
      ];
      const r = await dispatchDueJobs(rt, context('dispatcher'));
      expect(r.processed).toBe(1); // its budget ran out while the first job ran
      const posted = queues.take('keel-jobs') as { jobId: string }[];
      expect(posted).toEqual([{ jobId: ids[1] }]); // one slot, one job, handed to the queue runner
      expect((await t.rt.store.getJob(ids[2]!))?.state).toBe('pending');
    } finally {
      await rt.close();
    }
  });
});

describe('dispatcher (timer)', () => {
  it('runs due jobs whose messages were lost, within its budget', async () => {
    const ids = [
      await enqueue('disp-a', 'demo.echo'),
      await enqueue('disp-a', 'demo.echo'),
      await enqueue('disp-b', 'demo.slow', { payload: { ms: 50 } }),
    ];
    const ctx = context('dispatcher');
    await dispatcher(timer, ctx);
    for (const id of ids) expect((await t.rt.store.getJob(id))?.location).toBe('archive');
    expect(ctx.logs.some((l) => l.text.includes('"processed"'))).toBe(true);
  });

  it('posts the message of a job it retried, delayed to its next attempt, so the queue runner starts it on time', async () => {
    const id = await enqueue('disp-r', 'demo.flaky', { payload: { failTimes: 1 } });
    t.queues.clear();
    await dispatcher(timer, context('dispatcher'));
    const job = await t.rt.store.getJob(id);
    expect(job).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
    const posted = t.queues.sent.filter((m) => m.queue === 'keel-jobs');
    expect(posted.map((m) => m.message)).toEqual([{ jobId: id }]);
    const dueIn = (job!.runAt!.getTime() - Date.now()) / 1000;
    expect(posted[0]!.delaySeconds).toBeGreaterThan(0);
    expect(Math.abs(posted[0]!.delaySeconds - dueIn)).toBeLessThan(2);
    t.queues.clear();
    // Its retry would fall due during a later test of this block, which counts on nothing becoming due.
    expect(await t.rt.store.cancel(id)).toBe('cancelled');
  });

  it('an idle tick makes one database call: the due-work probe, no claim', async () => {
    await dispatcher(timer, context('dispatcher')); // whatever earlier tests left due is run first
    const calls: string[] = [];
    const store = t.rt.store;
    const counting = recordingCalls(store, calls);
    const later = await enqueue('disp-idle', 'demo.echo', { delayMs: 60_000 });
    const r = await dispatchDueJobs({ ...t.rt, store: counting }, context('dispatcher'));
    expect(r).toMatchObject({ queues: 0, processed: 0, posted: 0 });
    expect(calls).toEqual(['stats']);
    expect((await store.getJob(later))?.state).toBe('pending');
  });

  it('leaves jobs that are not due yet, and a second firing finds nothing to do', async () => {
    const later = await enqueue('disp-c', 'demo.echo', { delayMs: 60_000 });
    await dispatcher(timer, context('dispatcher'));
    expect((await t.rt.store.getJob(later))?.state).toBe('pending');
    const before = await snapshot(t.pool);
    await dispatcher(timer, context('dispatcher'));
    expect(await snapshot(t.pool)).toEqual(before);
  });
});

describe('dispatcher in post mode', () => {
  // The pause's answer counts the jobs claimed before it, which run to their end. A job the post mode claimed and was
  // about to release was counted and then never ran (released while the queue was paused). Now the post mode claims
  // nothing: the pause, answering at the moment the dispatcher goes on to post (or, before, to release), counts none.
  it('a pause while the dispatcher posts counts none of its jobs in flight, and none of them runs', async () => {
    const q = 'post-pause';
    let answer: unknown;
    const pauseNow = async () => {
      if (answer !== undefined) return;
      answer = 'pending';
      const res = await ops(request('POST', `queues/${q}/pause`, { operator: true, body: {} }), context());
      answer = jsonOf(res);
    };
    // The first step after the dispatcher chose its jobs: a release (claimed jobs handed back) or a post.
    const store = new Proxy(t.rt.store, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== 'release' || typeof v !== 'function') return typeof v === 'function' ? v.bind(target) : v;
        return async (...args: unknown[]) => {
          await pauseNow();
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    class PausingQueues extends RecordingQueues {
      override async send(queue: string, message: unknown, opts: { delaySeconds?: number } = {}): Promise<void> {
        await pauseNow();
        return super.send(queue, message, opts);
      }
    }
    const queues = new PausingQueues();
    const settings = parseSettings({
      KEEL_PG_URL: appUrl(t.url),
      KEEL_PG_MIGRATE_URL: t.url,
      KEEL_DEMO_HANDLERS: 'true',
      KEEL_DISPATCH_MODE: 'post',
      KEEL_DISPATCH_QUEUES: q,
    });
    const rt = await createRuntime(settings, { queues, store, transfers: null, register: registerDemoHandlers });
    try {
      const ids = [await enqueue(q, 'demo.echo'), await enqueue(q, 'demo.echo')];
      const r = await dispatchDueJobs(rt, context('dispatcher'));
      expect(r).toMatchObject({ mode: 'post', posted: 2 });
      expect(answer).toMatchObject({ name: q, paused: true, inFlight: 0 });
      for (const id of ids) expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'hot', state: 'pending' });
      // The runner refuses a paused queue's job: none of them starts while the pause lasts.
      const posted = queues.take('keel-jobs') as { jobId: string }[];
      expect(posted.map((m) => m.jobId).sort()).toEqual([...ids].sort());
      for (const m of posted) await jobRunner(m, context('jobRunner'));
      for (const id of ids) expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'hot', state: 'pending' });
    } finally {
      // Left as found for the tests after this one: not paused, and its jobs gone (nothing posted by a resume).
      await t.rt.store.updateQueue(q, { paused: false });
      await t.rt.store.cancelMany(await t.rt.store.pickDue([q], 10));
      await rt.close();
    }
  });

  it('posts the ids of the due jobs for the queue-triggered runner, leaving them pending (nothing claimed)', async () => {
    const queues = new RecordingQueues();
    const settings = parseSettings({
      KEEL_PG_URL: appUrl(t.url),
      KEEL_PG_MIGRATE_URL: t.url,
      KEEL_DEMO_HANDLERS: 'true',
      KEEL_DISPATCH_MODE: 'post',
      KEEL_DISPATCH_QUEUES: 'post-a',
    });
    const rt = await createRuntime(settings, {
      queues,
      store: t.rt.store,
      transfers: null,
      register: registerDemoHandlers,
    });
    try {
      const ids = [await enqueue('post-a', 'demo.echo'), await enqueue('post-a', 'demo.echo')];
      const later = await enqueue('post-a', 'demo.echo', { delayMs: 60_000 });
      const r = await dispatchDueJobs(rt, context('dispatcher'));
      expect(r).toMatchObject({ mode: 'post', posted: 2, outcomes: {} });
      expect(
        queues
          .take('keel-jobs')
          .map((m) => (m as { jobId: string }).jobId)
          .sort(),
      ).toEqual([...ids].sort());
      for (const id of ids) expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'hot', state: 'pending' });
      expect((await t.rt.store.getJob(later))?.state).toBe('pending');
      // The posted ids are claimable by the runner right away.
      await jobRunner({ jobId: ids[0] }, context('jobRunner'));
      expect((await t.rt.store.getJob(ids[0]!))?.location).toBe('archive');
    } finally {
      await rt.close();
    }
  });
});

describe('maintenance (timer)', () => {
  it('rescues a zombie (worker died mid-job); firing twice at once is harmless', async () => {
    const id = await enqueue('maint-a', 'demo.echo');
    await t.rt.store.updateQueue('maint-a', { zombieTimeoutSeconds: 1, zombiePolicy: 'retry' });
    // A worker claims and starts the job, then dies: no heartbeat, no completion.
    const [claimed] = await t.rt.store.claimNext({ workerId: 'dead-worker', queues: ['maint-a'], limit: 1 });
    expect(claimed?.id).toBe(id);
    expect((await t.rt.store.start({ jobId: id, leaseId: claimed!.leaseId })).status).toBe('ok');
    await t.pool.query(`update keel.jobs_hot set heartbeat_at = now() - interval '1 hour' where id = $1`, [id]);
    const ctxs = [context('maintenance'), context('maintenance')];
    await Promise.all(ctxs.map((c) => maintenance(timer, c)));
    const stats = (await t.rt.store.stats()).find((q) => q.queue === 'maint-a');
    expect(stats?.zombie).toBe(1);
    // The rescued job had no queue message: the pass that rescued it dispatched it at once, not the next dispatcher
    // tick (a minute away by default).
    expect((await t.rt.store.getJob(id))?.location).toBe('archive');
    expect(ctxs.flatMap((c) => c.logs).some((l) => l.text.includes('dispatched rescued jobs'))).toBe(true);
    // The dead worker's lease is fenced off: its late completion is refused.
    expect(await t.rt.store.complete({ jobId: id, leaseId: claimed!.leaseId })).toBe('lease_lost');
  });

  it("rescues a zombie under its handler's maxAttempts, not the queue's", async () => {
    const id = await enqueue('maint-c', 'test.once'); // registered with maxAttempts 1; the queue allows 5
    await t.rt.store.updateQueue('maint-c', { zombieTimeoutSeconds: 1, zombiePolicy: 'retry' });
    const [claimed] = await t.rt.store.claimNext({ workerId: 'dead-worker', queues: ['maint-c'], limit: 1 });
    expect((await t.rt.store.start({ jobId: id, leaseId: claimed!.leaseId })).status).toBe('ok');
    await t.pool.query(`update keel.jobs_hot set heartbeat_at = now() - interval '1 hour' where id = $1`, [id]);
    await maintenance(timer, context('maintenance'));
    expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'zombie', attempts: 1 });
  });

  it('purges past retention in bounded batches and reports transfers as not configured', async () => {
    const id = await enqueue('maint-b', 'demo.echo');
    await t.rt.processor.processById(id);
    await t.rt.store.updateQueue('maint-b', { archiveRetentionSeconds: 60 });
    await t.pool.query(`update keel.jobs_archive set finished_at = now() - interval '2 minutes' where id = $1`, [id]);
    const ctx = context('maintenance');
    await maintenance(timer, ctx);
    expect(await t.rt.store.getJob(id)).toBeNull();
    const line = ctx.logs.find((l) => l.text.startsWith('maintenance:'))!.text;
    const report = JSON.parse(line.slice('maintenance: '.length));
    expect(report.jobs.purged.archive).toBeGreaterThanOrEqual(1);
    expect(report.transfers).toBe('not configured');
    // A pass that did something is reported at information; the next one, with nothing left, only at debug.
    expect(ctx.logs.find((l) => l.text.startsWith('maintenance:'))!.level).toBe('information');
    const idle = context('maintenance');
    await maintenance(timer, idle);
    expect(idle.logs.filter((l) => l.text.startsWith('maintenance:')).map((l) => l.level)).toEqual(['debug']);
    expect(idle.logs.filter((l) => l.level !== 'debug' && l.level !== 'trace')).toEqual([]);
  });
});

describe('maintenance at its default purge interval', () => {
  it('purges at its first pass, then only rescues (and reads stats) until the interval has passed', async () => {
    const calls: string[] = [];
    const store = recordingCalls(t.rt.store, calls);
    const settings = parseSettings({ KEEL_PG_URL: appUrl(t.url), KEEL_DEMO_HANDLERS: 'true' });
    expect(settings.KEEL_MAINT_PURGE_INTERVAL_MS).toBe(3_600_000);
    const rt = await createRuntime(settings, {
      queues: new RecordingQueues(),
      store,
      transfers: null,
      register: registerDemoHandlers,
    });
    try {
      const queues = (await t.rt.store.listQueues()).length;
      const first = await runMaintenancePass(rt, context('maintenance'));
      expect(first.jobs.purgeRan).toBe(true);
      expect(calls.filter((c) => c === 'purge')).toHaveLength(3 * queues);
      calls.length = 0;
      const second = await runMaintenancePass(rt, context('maintenance'));
      expect(second.jobs.purgeRan).toBe(false);
      expect(maintenanceDidNothing(second)).toBe(true);
      expect(calls).toEqual(['rescueZombies', 'stats']);
    } finally {
      await rt.close();
    }
  });
});

describe('transferTimer without transfers', () => {
  it('does nothing when no transfer is configured', async () => {
    const before = await snapshot(t.pool);
    await transferTimer(timer, context('transferTimer'));
    expect(await snapshot(t.pool)).toEqual(before);
  });
});

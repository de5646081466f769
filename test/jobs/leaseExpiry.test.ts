// Client-side lease expiry: a worker whose heartbeats fail (the server out of reach: FaultProxy.down() cuts every
// connection and refuses new ones) stops its handler before the zombie rescue can hand the job to another worker,
// and only then; a blip shorter than the lease changes nothing; a handler that ignores its abort never finalizes the
// job after its lease expired (the fence); a queue's timeout lowered while the job runs reaches the worker with its
// next heartbeat, and the rescue dead-letters the expired attempt as a zombie, counted; the attempt's last ctx.log
// lines still reach the job when the store answers before the rescue; a claim answered after its lease ran out
// never calls the handler. The queues here have a zombie timeout of 4 s (the processor gives a lease
// up 0.4 s before it runs out: shared/jobs/executor.ts, leaseTimes), and the rescue runs every 100 ms meanwhile, as
// maintenance would if it ran that often.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresHarness } from '../engines/postgres.harness.js';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import type { ClaimedJob, JobId, JobStore } from '../../shared/jobs/contract.js';
import { HandlerRegistry, type JobLogger } from '../../shared/jobs/registry.js';
import { JobProcessor, type JobOutcome } from '../../shared/jobs/processor.js';
import { FaultProxy } from '../support/faultProxy.js';
import { appUrl } from '../support/pg.js';

const ZOMBIE_TIMEOUT_S = 4;
let h: PostgresHarness;
let direct: JobStore; // the rescue's and the second worker's way to the server: never cut
let proxy: FaultProxy;
let seq = 0;
const q = (label: string) => `lease-${label}-${++seq}`;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
async function until(what: string, probe: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await probe()); await sleep(20))
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  h = new PostgresHarness();
  direct = await h.createStore({ poolSize: 4 });
  const u = new URL(h.url);
  proxy = await FaultProxy.start(u.hostname, Number(u.port || 5432));
});
afterAll(async () => {
  proxy?.up();
  await h?.close();
});

// A store whose every connection goes through the proxy, and the calls made through it that would finalize a job.
async function proxiedStore(): Promise<{ store: JobStore; finalizing: string[]; close: () => Promise<void> }> {
  const inner = await PostgresJobStore.connect(proxy.urlFor(appUrl(h.url)), { poolSize: 2, migrate: false });
  const finalizing: string[] = [];
  const moves = new Set(['complete', 'completeMany', 'retry', 'fail', 'release', 'interrupt']);
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof prop === 'string' && moves.has(prop) && typeof v === 'function')
        return (...args: unknown[]) => {
          finalizing.push(prop);
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { store, finalizing, close: () => inner.close() };
}

// What the processor logged and told its hooks.
function observed() {
  const warnings: string[] = [];
  const leaseLost: string[] = [];
  const log: JobLogger = { info: () => undefined, warn: (m) => warnings.push(m), error: (m) => warnings.push(m) };
  return {
    warnings,
    leaseLost,
    log,
    events: { onLeaseLost: (e: { operation: string }) => leaseLost.push(e.operation) },
  };
}

// The rescue, every 100 ms until stopped or it has moved the job (back to pending, or to the DLQ); movedSentAt: when
// the pass that moved it was sent (performance.now()), so anything before that happened before the move.
function rescueLoop(jobId: JobId) {
  let stopped = false;
  const state = { moved: false, movedSentAt: Infinity, stop: async () => undefined as void };
  const loop = (async () => {
    while (!stopped && !state.moved) {
      const sentAt = performance.now();
      await direct.rescueZombies(100);
      const rec = await direct.getJob(jobId);
      if (rec?.state === 'pending' || rec?.location !== 'hot') {
        state.moved = true;
        state.movedSentAt = sentAt;
      } else await sleep(100);
    }
  })();
  state.stop = async () => {
    stopped = true;
    await loop;
  };
  return state;
}

async function claimOne(p: JobProcessor, queue: string): Promise<{ job: ClaimedJob; outcome: Promise<JobOutcome> }> {
  const jobs = await p.claimAndStart([queue], 1);
  expect(jobs).toHaveLength(1);
  return { job: jobs[0]!, outcome: p.runStarted(jobs).then((o) => o[0]!) };
}

// A handler that waits for its signal's abort and records when and why it came (the cases where the worker must give
// the job up on its own).
function abortWaitingHandler() {
  const seen = { started: false, abortReason: undefined as unknown, abortedAt: Infinity };
  const registry = new HandlerRegistry().register('t', async (_payload, ctx) => {
    seen.started = true;
    await new Promise<void>((resolve) =>
      ctx.signal.addEventListener('abort', () => {
        seen.abortReason = (ctx.signal.reason as { reason?: unknown }).reason;
        seen.abortedAt = performance.now();
        resolve();
      }),
    );
    throw ctx.signal.reason;
  });
  return { seen, registry };
}

describe('lease expiry on the worker', () => {
  it('a heartbeat cut past the lease aborts the handler (lease_expired) before the rescue re-queues the job', async () => {
    const queue = q('cut');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry' });
    const { id } = await direct.enqueue({ queue, type: 't' });
    const { store, finalizing, close } = await proxiedStore();
    const o = observed();
    const handler = abortWaitingHandler();
    let rescue: ReturnType<typeof rescueLoop> | undefined;
    const p = new JobProcessor({
      store,
      registry: handler.registry,
      heartbeatIntervalMs: 200,
      log: o.log,
      events: o.events,
    });
    try {
      const { outcome } = await claimOne(p, queue);
      await until('the handler to start', () => handler.seen.started);
      await sleep(600); // heartbeats confirmed meanwhile
      expect(o.warnings).toEqual([]);
      rescue = rescueLoop(id);
      proxy.down();
      expect(await outcome).toBe('lease_lost'); // the slot is freed without a store call
      expect(handler.seen.abortReason).toBe('lease_expired');
      expect(o.leaseLost).toEqual(['expired']);
      expect(o.warnings).toContain('heartbeat failed');
      expect(o.warnings.some((w) => w.startsWith('lease expired'))).toBe(true);
      expect(finalizing).toEqual([]); // not finalized: not as a success, nor as anything else
      expect(p.inFlight).toBe(0);
      // The rescue does re-queue it once the zombie timeout has passed since its last heartbeat (this attempt counted).
      await until('the rescue', () => rescue!.moved);
      expect(handler.seen.abortedAt).toBeLessThan(rescue.movedSentAt); // aborted before the rescue's moving pass was even sent
      expect(await direct.getJob(id)).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
    } finally {
      proxy.up();
      await rescue?.stop();
      await p.shutdown(0);
      await close();
    }
  });

  it('a blip shorter than the lease does not abort: the heartbeats resume and the job completes', async () => {
    const queue = q('blip');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry' });
    const { id } = await direct.enqueue({ queue, type: 't' });
    const { store, close } = await proxiedStore();
    const o = observed();
    let started = false;
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    let aborted = false;
    const reg = new HandlerRegistry().register('t', async (_payload, ctx) => {
      started = true;
      ctx.signal.addEventListener('abort', () => (aborted = true));
      await finished;
      return { done: true };
    });
    const p = new JobProcessor({ store, registry: reg, heartbeatIntervalMs: 200, log: o.log, events: o.events });
    try {
      const { outcome } = await claimOne(p, queue);
      await until('the handler to start', () => started);
      await sleep(300);
      proxy.down();
      await until('a heartbeat to fail', () => o.warnings.includes('heartbeat failed'));
      await sleep(1_200); // about 1.5 s without a confirmed heartbeat in all: well within the lease
      proxy.up();
      await sleep(ZOMBIE_TIMEOUT_S * 1000); // past the lease counted from before the blip: the heartbeats since keep it
      expect(aborted).toBe(false);
      expect(o.leaseLost).toEqual([]);
      finish();
      expect(await outcome).toBe('succeeded');
      expect(await direct.getJob(id)).toMatchObject({ location: 'archive', result: { done: true } });
    } finally {
      proxy.up();
      finish();
      await p.shutdown(0);
      await close();
    }
  });

  it('a handler that ignores the abort never finalizes the job after its lease expired: the next owner does', async () => {
    const queue = q('ignore');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry' });
    const { id } = await direct.enqueue({ queue, type: 't' });
    const { store, finalizing, close } = await proxiedStore();
    const o = observed();
    let started = false;
    let returned = false;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const reg = new HandlerRegistry().register('t', async () => {
      started = true;
      await released; // deaf to ctx.signal
      returned = true;
      return { by: 'first' };
    });
    const p = new JobProcessor({ store, registry: reg, heartbeatIntervalMs: 200, log: o.log, events: o.events });
    const second = new JobProcessor({
      store: direct,
      registry: new HandlerRegistry().register('t', async () => ({ by: 'second' })),
      heartbeatIntervalMs: 200,
    });
    let rescue: ReturnType<typeof rescueLoop> | undefined;
    try {
      const { job, outcome } = await claimOne(p, queue);
      await until('the handler to start', () => started);
      await sleep(300);
      rescue = rescueLoop(id);
      proxy.down();
      expect(await outcome).toBe('lease_lost'); // the slot is free although the handler still runs
      expect(returned).toBe(false);
      expect(o.leaseLost).toEqual(['expired']);
      await until('the rescue', () => rescue!.moved);
      proxy.up();
      // Another worker runs the job and completes it.
      const [again] = await second.claimAndStart([queue], 1);
      expect(again).toMatchObject({ id, attempt: 2 });
      expect(await second.runStarted([again!])).toEqual(['succeeded']);
      // The first handler returns at last: nothing of it reaches the job.
      release();
      await until('the first handler to return', () => returned);
      await sleep(100);
      expect(finalizing).toEqual([]);
      // And the fence would refuse it anyway: its lease finalizes nothing.
      expect(await store.completeMany([{ jobId: id, leaseId: job.leaseId, resultJson: '{"by":"first"}' }])).toEqual([
        { jobId: id, status: 'lease_lost' },
      ]);
      expect(await store.heartbeat({ jobId: id, leaseId: job.leaseId })).toMatchObject({ status: 'lease_lost' });
      expect(await direct.getJob(id)).toMatchObject({ location: 'archive', attempts: 2, result: { by: 'second' } });
    } finally {
      proxy.up();
      release();
      await rescue?.stop();
      await p.shutdown(0);
      await second.shutdown(0);
      await close();
    }
  });

  it('a zombie timeout lowered while the job runs: the next heartbeat brings it, and a cut then aborts the handler before the rescue, which dead-letters the attempt', async () => {
    const queue = q('lowered');
    // Claimed under 30 s (the worker would keep the job ~27 s without a confirmed heartbeat), then lowered to 4 s.
    await direct.updateQueue(queue, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry', maxAttempts: 1 });
    const { id } = await direct.enqueue({ queue, type: 't' });
    const { store, finalizing, close } = await proxiedStore();
    const o = observed();
    const handler = abortWaitingHandler();
    let rescue: ReturnType<typeof rescueLoop> | undefined;
    const p = new JobProcessor({
      store,
      registry: handler.registry,
      heartbeatIntervalMs: 200,
      log: o.log,
      events: o.events,
    });
    try {
      const { job, outcome } = await claimOne(p, queue);
      expect(job.queueZombieTimeoutSeconds).toBe(30);
      await until('the handler to start', () => handler.seen.started);
      await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S });
      expect(await direct.heartbeat({ jobId: id, leaseId: job.leaseId })).toEqual({
        status: 'ok',
        cancelRequested: false,
        zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S,
      });
      await sleep(600); // the worker's own heartbeats meanwhile bring it the new timeout
      rescue = rescueLoop(id);
      proxy.down();
      expect(await outcome).toBe('lease_lost');
      expect(handler.seen.abortReason).toBe('lease_expired');
      expect(o.leaseLost).toEqual(['expired']);
      expect(finalizing).toEqual([]);
      await until('the rescue', () => rescue!.moved);
      expect(handler.seen.abortedAt).toBeLessThan(rescue.movedSentAt); // under the new timeout's lease, not the old one's
      // The rescue counts the attempt as a zombie, as for a worker that died: its one attempt used, dead-lettered.
      const rec = await direct.getJob(id);
      expect(rec).toMatchObject({ location: 'dlq', reason: 'zombie', attempts: 1 });
      expect(rec!.attemptLog!.map((a) => `${a.attempt}:${a.outcome}`)).toEqual(['1:zombie']);
      expect(await h.statsRow(queue)).toMatchObject({ zombie: 1, failed: 1, retried: 0 });
    } finally {
      proxy.up();
      await rescue?.stop();
      await p.shutdown(0);
      await close();
    }
  }, 30_000);

  it("the attempt's last log lines still reach the job after its lease expired, fenced by the lease", async () => {
    const queue = q('lastwords');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry' });
    const { id } = await direct.enqueue({ queue, type: 't' });
    // Heartbeats fail (a slow or overloaded path to the server) while other calls still get through.
    let beatsFail = false;
    const inner = await PostgresJobStore.connect(appUrl(h.url), { poolSize: 2, migrate: false });
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if ((prop === 'heartbeat' || prop === 'heartbeatMany') && beatsFail)
          return () => Promise.reject(new Error('heartbeat: connection timeout'));
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const o = observed();
    let started = false;
    const reg = new HandlerRegistry().register('t', async (_payload, ctx) => {
      started = true;
      ctx.log.info('first words');
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve()));
      ctx.log.warn('last words', { reason: (ctx.signal.reason as { reason?: unknown }).reason });
      throw ctx.signal.reason;
    });
    const p = new JobProcessor({
      store,
      registry: reg,
      heartbeatIntervalMs: 200,
      progressIntervalMs: 60_000, // no timed log write: only the flush after the attempt
      log: o.log,
      events: o.events,
    });
    let rescue: ReturnType<typeof rescueLoop> | undefined;
    try {
      const { job, outcome } = await claimOne(p, queue);
      await until('the handler to start', () => started);
      beatsFail = true;
      expect(await outcome).toBe('lease_lost');
      expect(o.leaseLost).toEqual(['expired']);
      const messages = async () => ((await direct.getJob(id))?.logs ?? []).map((l) => l.message);
      await until('the last lines', async () => (await messages()).includes('last words'));
      expect(await messages()).toEqual(['first words', 'last words']);
      // The rescue then takes the job, its log kept; a write under the old lease is refused from then on.
      rescue = rescueLoop(id);
      await until('the rescue', () => rescue!.moved);
      expect((await direct.getJob(id))!.logs!.map((l) => l.message)).toContain('last words');
      expect(
        await inner.appendJobLog(
          { jobId: id, leaseId: job.leaseId },
          [{ attempt: 1, at: new Date().toISOString(), level: 'info', message: 'too late' }],
          100,
        ),
      ).toBe('lease_lost');
      expect(o.leaseLost).toEqual(['expired']); // the loss is reported once
    } finally {
      await rescue?.stop();
      await p.shutdown(0);
      await inner.close();
    }
  }, 30_000);
  it('a handler awaiting its own ctx.heartbeat() that the store answers late is stopped when the lease expires, not when the answer comes', async () => {
    const queue = q('ownbeat');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry' });
    await direct.enqueue({ queue, type: 't' });
    // Heartbeats hang (a server answering seconds late) until the test lets them through.
    let hang = false;
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    const inner = await PostgresJobStore.connect(appUrl(h.url), { poolSize: 2, migrate: false });
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        const bound = typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        if ((prop === 'heartbeat' || prop === 'heartbeatMany') && hang)
          return (...args: unknown[]) => answered.then(() => (bound as (...a: unknown[]) => unknown)(...args));
        return bound;
      },
    });
    const o = observed();
    const seen = { error: undefined as unknown, settledAt: Infinity, storeAnswered: false };
    const reg = new HandlerRegistry().register('t', async (_payload, ctx) => {
      hang = true;
      try {
        await ctx.heartbeat();
      } catch (e) {
        seen.error = e;
      }
      seen.settledAt = performance.now();
      throw ctx.signal.reason;
    });
    const p = new JobProcessor({ store, registry: reg, heartbeatIntervalMs: 200, log: o.log, events: o.events });
    try {
      const { outcome } = await claimOne(p, queue);
      expect(await outcome).toBe('lease_lost');
      expect(o.leaseLost).toEqual(['expired']);
      // Its own beat rejected with the signal's error while the store's answer was still outstanding.
      await until('the handler to settle', () => seen.settledAt < Infinity, 5_000);
      expect(seen.storeAnswered).toBe(false);
      expect((seen.error as { reason?: unknown }).reason).toBe('lease_expired');
    } finally {
      seen.storeAnswered = true;
      answer();
      await p.shutdown(0);
      await inner.close();
    }
  });

  it('a claim answered after the lease ran out does not run the handler: the job is given up unrun, and the rescue takes it', async () => {
    const queue = q('lateclaim');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: 2, zombiePolicy: 'retry' });
    const { id } = await direct.enqueue({ queue, type: 't' });
    const { store, finalizing, close } = await proxiedStore();
    const o = observed();
    let calls = 0;
    const reg = new HandlerRegistry().register('t', async () => {
      calls++; // a side effect of a job another worker may be running by now
    });
    const p = new JobProcessor({ store, registry: reg, heartbeatIntervalMs: 200, log: o.log, events: o.events });
    try {
      await store.stats(); // the pool's connection open before the replies slow down
      // The claim runs on the server at once (its lease and heartbeat_at from then); its answer comes back 2.6 s later,
      // past the 2 s lease (a slow or partitioned network, a process descheduled meanwhile).
      proxy.latencyMs = 2600;
      const jobs = await p.claimAndStart([queue], 1);
      proxy.latencyMs = 0;
      expect(jobs.map((j) => j.id)).toEqual([id]);
      expect(await p.runStarted(jobs)).toEqual(['lease_lost']);
      expect(calls).toBe(0);
      expect(o.leaseLost).toEqual(['expired']);
      expect(finalizing).toEqual([]);
      // The rescue takes it back (this attempt counted), and it runs once the next claim takes it.
      const rescue = rescueLoop(id);
      await until('the rescue', () => rescue.moved);
      await rescue.stop();
      expect(await direct.getJob(id)).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
      const again = await p.claimAndStart([queue], 1);
      expect(await p.runStarted(again)).toEqual(['succeeded']);
      expect(calls).toBe(1);
    } finally {
      proxy.latencyMs = 0;
      await p.shutdown(0);
      await close();
    }
  });

  it("a job claimed again by the same worker while its last run's outcome was still being written keeps its lease: the old run ending does not stop the new one's heartbeats", async () => {
    const queue = q('again');
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'retry', maxAttempts: 5 });
    const { id } = await direct.enqueue({ queue, type: 't' });
    // The first run's completion hangs (a slow pool, a network that went quiet) until the test lets it through.
    let hold = true;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const inner = await PostgresJobStore.connect(appUrl(h.url), { poolSize: 2, migrate: false });
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        const bound = typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        if (prop === 'completeMany' && hold)
          return (...args: unknown[]) => released.then(() => (bound as (...a: unknown[]) => unknown)(...args));
        return bound;
      },
    });
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    let secondStarted = false;
    const reg = new HandlerRegistry().register('t', async (_p, ctx) => {
      if (ctx.attempt === 1) return { first: true };
      secondStarted = true;
      // No heartbeat of its own: the processor's keep the lease.
      await new Promise<void>((resolve, reject) => {
        void finished.then(resolve);
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
      });
      return { second: true };
    });
    const o = observed();
    const p = new JobProcessor({ store, registry: reg, heartbeatIntervalMs: 200, log: o.log, events: o.events });
    try {
      const first = p.runStarted(await p.claimAndStart([queue], 1));
      // Its handler is done, its completion hangs, no heartbeat keeps it: the rescue re-queues it (attempt 1 counted).
      const rescue = rescueLoop(id);
      await until('the rescue', () => rescue.moved);
      await rescue.stop();
      hold = false;
      const again = await p.claimAndStart([queue], 1);
      expect(again.map((j) => [j.id, j.attempt])).toEqual([[id, 2]]);
      const second = p.runStarted(again);
      await until('the second run', () => secondStarted);
      // The first run's completion goes through at last: lease_lost (the job is attempt 2's). Its run ends here.
      release();
      expect(await first).toEqual(['lease_lost']);
      expect(p.inFlight).toBe(1); // the second run is still this processor's
      // Past the lease: the second run's heartbeats keep it, so the rescue leaves it alone.
      for (const end = Date.now() + ZOMBIE_TIMEOUT_S * 1000 + 1000; Date.now() < end; await sleep(200))
        await direct.rescueZombies(100);
      expect(await direct.getJob(id)).toMatchObject({ location: 'hot', state: 'processing', attempts: 2 });
      finish();
      expect(await second).toEqual(['succeeded']);
      expect(await direct.getJob(id)).toMatchObject({ location: 'archive', attempts: 2, result: { second: true } });
    } finally {
      release();
      finish();
      await p.shutdown(0);
      await inner.close();
    }
  }, 30_000);
});

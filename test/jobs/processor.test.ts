// The processor over the real PostgreSQL engine: success, retry with backoff, fatal, timeout, cancel, unknown type,
// lost lease and shutdown (interrupted jobs handed back with their attempt given back).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresHarness } from '../engines/postgres.harness.js';
import type { JobStore } from '../../shared/jobs/contract.js';
import { HandlerRegistry, type JobContext } from '../../shared/jobs/registry.js';
import { FatalError, RetryAfterError } from '../../shared/jobs/handlerErrors.js';
import { backoffDelayMs } from '../../shared/jobs/backoff.js';
import { JobAbortedError, JobProcessor, Worker, type JobOutcome } from '../../shared/jobs/processor.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';
import { JOB_LOG_MESSAGE_CHARS } from '../../shared/jobs/jobLog.js';

let h: PostgresHarness;
let store: JobStore;
let seq = 0;
const q = (label: string) => `p-${label}-${++seq}`;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const waitForAbort = (signal: AbortSignal) =>
  new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });

beforeAll(async () => {
  h = new PostgresHarness();
  store = await h.createStore({ poolSize: 8 });
});
afterAll(async () => h?.close());

function processor(registry: HandlerRegistry, extra: Partial<ConstructorParameters<typeof JobProcessor>[0]> = {}) {
  return new JobProcessor({ store, registry, heartbeatIntervalMs: 40, ...extra });
}

async function runOne(p: JobProcessor, queue: string): Promise<JobOutcome> {
  const [job] = await store.claimNext({ workerId: p.workerId, queues: [queue], limit: 1 });
  if (!job) throw new Error('nothing claimed');
  return p.runClaimed(job);
}

describe('processor', () => {
  it('runs a handler with its context and archives the job', async () => {
    const queue = q('ok');
    let seen: Partial<JobContext> & { payload?: unknown } = {};
    const reg = new HandlerRegistry().register('t', async (payload, ctx) => {
      seen = { payload, jobId: ctx.jobId, attempt: ctx.attempt, idempotencyKey: ctx.idempotencyKey, queue: ctx.queue };
      await ctx.heartbeat();
    });
    const { id } = await store.enqueue({ queue, type: 't', payload: { a: 1 }, idempotencyKey: `${queue}-k` });
    expect(await runOne(processor(reg), queue)).toBe('succeeded');
    expect(seen).toEqual({ payload: { a: 1 }, jobId: id, attempt: 1, idempotencyKey: `${queue}-k`, queue });
    expect((await store.getJob(id))!.location).toBe('archive');
  });

  it("stores the handler's result with the archived job; an unstorable result dead-letters it as fatal", async () => {
    const queue = q('result');
    const reg = new HandlerRegistry()
      .register('ok', async (payload: unknown) => ({ echoed: payload, rows: 3 }))
      .register('nothing', async () => undefined)
      .register('big', async () => 'x'.repeat(300))
      .register('cyclic', async () => {
        const o: Record<string, unknown> = {};
        o.o = o;
        return o;
      });
    const p = processor(reg, { maxResultBytes: 200 });
    const ok = await store.enqueue({ queue, type: 'ok', payload: { a: 1 } });
    expect(await runOne(p, queue)).toBe('succeeded');
    expect((await store.getJob(ok.id))!.result).toEqual({ echoed: { a: 1 }, rows: 3 });
    const none = await store.enqueue({ queue, type: 'nothing' });
    expect(await runOne(p, queue)).toBe('succeeded');
    expect((await store.getJob(none.id))!.result).toBeUndefined();
    const big = await store.enqueue({ queue, type: 'big' });
    expect(await runOne(p, queue)).toBe('dead_lettered');
    expect(await store.getJob(big.id)).toMatchObject({
      location: 'dlq',
      reason: 'fatal',
      lastError: expect.stringMatching(
        /result: is 302 bytes of JSON; the limit is 200 bytes \(KEEL_MAX_RESULT_BYTES\)/,
      ),
    });
    const cyclic = await store.enqueue({ queue, type: 'cyclic' });
    expect(await runOne(p, queue)).toBe('dead_lettered');
    expect((await store.getJob(cyclic.id))!.lastError).toMatch(/result: is not JSON/);
  });

  it('writes ctx.progress under the lease at most once per interval, the latest value winning; bad progress throws in the handler', async () => {
    const queue = q('progress');
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let refused: unknown;
    const reg = new HandlerRegistry().register('t', async (_payload, ctx) => {
      ctx.progress(0.1); // written at once
      ctx.progress({ done: 2, total: 10 }); // throttled ...
      ctx.progress({ done: 5, total: 10, note: 'half' }); // ... and replaced: the trailing write carries this one
      try {
        ctx.progress({ done: 11, total: 10 });
      } catch (err) {
        refused = err;
      }
      await gate;
    });
    // Every write the processor sends, in order: what the store holds at a given instant would depend on timing.
    const written: unknown[] = [];
    const recording = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'reportProgress')
          return (ref: Parameters<JobStore['reportProgress']>[0], value: Parameters<JobStore['reportProgress']>[1]) => {
            written.push(value);
            return target.reportProgress(ref, value);
          };
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const p = processor(reg, { store: recording, progressIntervalMs: 150 });
    const { id } = await store.enqueue({ queue, type: 't' });
    const [job] = await store.claimNext({ workerId: p.workerId, queues: [queue], limit: 1 });
    const outcome = p.runClaimed(job!);
    const progressNow = async () => (await store.getJob(id))!.progress;
    // The first value is written at once, the two throttled ones make one trailing write carrying the latest.
    for (let i = 0; i < 500 && (await progressNow())?.fraction !== 0.5; i++) await sleep(10);
    expect(await progressNow()).toEqual({ fraction: 0.5, done: 5, total: 10, note: 'half' });
    expect(written).toEqual([
      { fraction: 0.1, done: null, total: null, note: null },
      { fraction: 0.5, done: 5, total: 10, note: 'half' },
    ]);
    expect(String(refused)).toMatch(/progress.done: must not exceed progress.total/);
    release();
    expect(await outcome).toBe('succeeded');
  });

  it("keeps the job's own ctx.log lines with it through retries and the archive, newest KEEL_JOB_LOG_LINES", async () => {
    const queue = q('joblog');
    const processLines: string[] = [];
    const processLog = {
      info: (m: string) => processLines.push(m),
      warn: (m: string) => processLines.push(m),
      error: (m: string) => processLines.push(m),
    };
    const reg = new HandlerRegistry().register(
      't',
      async (_payload, ctx) => {
        for (let i = 1; i <= 3; i++) ctx.log.info(`attempt ${ctx.attempt} line ${i}`, { i });
        if (ctx.attempt === 1) {
          ctx.log.error('giving up on this attempt');
          throw new Error('first attempt fails');
        }
        ctx.log.warn('done');
      },
      { backoff: { baseMs: 1, maxMs: 1 } },
    );
    const p = processor(reg, { jobLogLines: 6, log: processLog, progressIntervalMs: 20 });
    const { id } = await store.enqueue({ queue, type: 't' });
    expect(await runOne(p, queue)).toBe('retried');
    const afterRetry = (await store.getJob(id))!.logs!;
    expect(afterRetry.map((l) => `${l.attempt} ${l.level} ${l.message}`)).toEqual([
      '1 info attempt 1 line 1',
      '1 info attempt 1 line 2',
      '1 info attempt 1 line 3',
      '1 error giving up on this attempt',
    ]);
    expect(afterRetry[0]!.fields).toEqual({ i: 1 });
    await sleep(5);
    expect(await runOne(p, queue)).toBe('succeeded');
    const archived = (await store.getJob(id))!;
    expect(archived.location).toBe('archive');
    expect(archived.logs!.map((l) => `${l.attempt} ${l.message}`)).toEqual([
      '1 attempt 1 line 3',
      '1 giving up on this attempt',
      '2 attempt 2 line 1',
      '2 attempt 2 line 2',
      '2 attempt 2 line 3',
      '2 done',
    ]);
    // Every line also went to the process log.
    expect(processLines.filter((l) => l.startsWith('attempt'))).toHaveLength(6);
    // Off (0): the process log only.
    const off = processor(reg, { jobLogLines: 0, log: processLog });
    const other = await store.enqueue({ queue, type: 't' });
    expect(await runOne(off, queue)).toBe('retried');
    expect((await store.getJob(other.id))!.logs).toBeUndefined();
  });

  // PostgreSQL's jsonb holds no \u0000 and no lone surrogate: a ctx.log line with one in its message, a field's value
  // or a field's name failed the whole append, and every line of that write was lost; so did a message whose cut at
  // JOB_LOG_MESSAGE_CHARS split a surrogate pair.
  it('keeps ctx.log lines holding a NUL or a lone surrogate (as U+FFFD), with the lines beside them', async () => {
    const queue = q('joblognul');
    const reg = new HandlerRegistry().register('t', async (_payload, ctx) => {
      ctx.log.info('before');
      ctx.log.warn('bad\u0000line', { v: 'x\u0000y', ['k\u0000']: 1, nested: [{ w: '\u0000' }] });
      ctx.log.info('after');
      ctx.log.info('lone \ud800 surrogate', { s: '\udc00' });
      ctx.log.info(`${'x'.repeat(JOB_LOG_MESSAGE_CHARS - 1)}\u{1F600}`); // the cut keeps only the pair's first half
    });
    const p = processor(reg, { jobLogLines: 10 });
    const { id } = await store.enqueue({ queue, type: 't' });
    expect(await runOne(p, queue)).toBe('succeeded');
    const logs = (await store.getJob(id))!.logs!;
    expect(logs.map((l) => l.message)).toEqual([
      'before',
      'bad\ufffdline',
      'after',
      'lone \ufffd surrogate',
      `${'x'.repeat(JOB_LOG_MESSAGE_CHARS - 1)}\ufffd…`,
    ]);
    expect(logs[1]!.fields).toEqual({ v: 'x\ufffdy', ['k\ufffd']: 1, nested: [{ w: '\ufffd' }] });
    expect(logs[3]!.fields).toEqual({ s: '\ufffd' });
  });

  it('retries with capped exponential backoff, then dead-letters as exhausted', async () => {
    const queue = q('retry');
    const reg = new HandlerRegistry().register(
      't',
      async () => {
        throw new Error('nope');
      },
      { maxAttempts: 3, backoff: { baseMs: 10_000, maxMs: 15_000 } },
    );
    const p = processor(reg);
    const { id } = await store.enqueue({ queue, type: 't' });
    for (let attempt = 1; attempt <= 2; attempt++) {
      const before = Date.now();
      expect(await runOne(p, queue)).toBe('retried');
      const rec = (await store.getJob(id))!;
      const delay = rec.runAt!.getTime() - before;
      const ceiling = Math.min(15_000, 10_000 * 2 ** (attempt - 1));
      expect(delay).toBeGreaterThanOrEqual(ceiling / 2 - 1000);
      expect(delay).toBeLessThanOrEqual(ceiling + 1000);
      expect(rec.lastError).toMatch(/nope/);
      await h.backdate(id, 'run_at', 1);
    }
    expect(await runOne(p, queue)).toBe('dead_lettered');
    expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'exhausted', attempts: 3 });
  });

  it('backoff stays within [ceiling/2, ceiling) and is capped', () => {
    const opts = { baseMs: 100, maxMs: 1000 };
    expect(backoffDelayMs(1, opts, () => 0)).toBe(50);
    expect(backoffDelayMs(3, opts, () => 0.999)).toBe(399);
    expect(backoffDelayMs(30, opts, () => 0.5)).toBe(750);
  });

  it('honours a handler-requested retry-after', async () => {
    const queue = q('after');
    const reg = new HandlerRegistry().register('t', async () => {
      throw new RetryAfterError('rate limited', 42_000);
    });
    const { id } = await store.enqueue({ queue, type: 't' });
    const before = Date.now();
    expect(await runOne(processor(reg), queue)).toBe('retried');
    const delay = (await store.getJob(id))!.runAt!.getTime() - before;
    expect(delay).toBeGreaterThan(41_000);
    expect(delay).toBeLessThan(43_500);
  });

  it('dead-letters fatal errors at once', async () => {
    const queue = q('fatal');
    const reg = new HandlerRegistry().register('t', async () => {
      throw new FatalError('bad input');
    });
    const a = await store.enqueue({ queue, type: 't' });
    expect(await runOne(processor(reg), queue)).toBe('dead_lettered');
    expect(await store.getJob(a.id)).toMatchObject({ reason: 'fatal', attempts: 1 });
  });

  // PostgreSQL text holds no NUL: an error message with one failed the move itself ("invalid byte sequence for
  // encoding UTF8: 0x00"), so the job stayed processing until its lease ran out, every attempt the same.
  it('stores an error message holding a NUL (as U+FFFD) and moves the job: retried, then dead-lettered', async () => {
    const queue = q('nul');
    const reg = new HandlerRegistry().register('t', async () => {
      throw new Error('bad\u0000byte');
    });
    const a = await store.enqueue({ queue, type: 't', maxAttempts: 2 });
    expect(await runOne(processor(reg), queue)).toBe('retried');
    expect(await store.getJob(a.id)).toMatchObject({
      location: 'hot',
      state: 'pending',
      lastError: expect.stringContaining('bad\ufffdbyte'),
    });
    const b = await store.enqueue({ queue, type: 't' }); // claimed next: the retry waits for its backoff
    const fatal = new HandlerRegistry().register('t', async () => {
      throw new FatalError('fatal\u0000');
    });
    expect(await runOne(processor(fatal), queue)).toBe('dead_lettered');
    expect(await store.getJob(b.id)).toMatchObject({
      location: 'dlq',
      reason: 'fatal',
      lastError: expect.stringContaining('fatal\ufffd'),
    });
  });

  // A rolling deploy: an older instance claims a type only the new build has. An ordinary failed attempt (River),
  // retried after the backoff, so the instance with the handler runs it; exhausted only when every attempt found none.
  it('retries a job of an unregistered type after the backoff, naming the type, the worker and the registered ones', async () => {
    const queue = q('unknown');
    const old = new HandlerRegistry().register('t', async () => undefined).register('u', async () => undefined);
    const seen: { outcome: JobOutcome; reason?: string; unregisteredType?: boolean }[] = [];
    const events = { onOutcome: (e: (typeof seen)[number]) => seen.push(e) };
    const oldProc = processor(old, { events, workerId: 'old-1' });
    const { id } = await store.enqueue({ queue, type: 'new.type', maxAttempts: 3 });
    const before = Date.now();
    expect(await runOne(oldProc, queue)).toBe('retried');
    const rec = (await store.getJob(id))!;
    expect(rec).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
    // Not due at once (it would spin between the instances without the type), and not within seconds (a rolling
    // deploy's new instance needs minutes): the first delay of the unregistered type's backoff, [30 s, 60 s).
    const delay = rec.runAt!.getTime() - before;
    expect(delay).toBeGreaterThanOrEqual(29_000); // by the database's clock; allow for clock rounding
    expect(delay).toBeLessThan(60_000 + 5_000);
    expect(rec.lastError).toMatch(/no handler is registered for job type "new\.type" on worker old-1, host \S+/);
    expect(rec.lastError).toMatch(/\(registered: t, u\)/);
    expect(rec.attempts).toBe(1);
    expect(seen).toEqual([expect.objectContaining({ outcome: 'retried', unregisteredType: true })]);

    // The new build's instance has the handler: it runs the job at its next attempt.
    await h.backdate(id, 'run_at', 5);
    const ran: number[] = [];
    const next = new HandlerRegistry().register('new.type', async (_p, ctx) => void ran.push(ctx.attempt));
    expect(await runOne(processor(next), queue)).toBe('succeeded');
    expect(ran).toEqual([2]);
    expect((await store.getJob(id))!.location).toBe('archive');
  });

  it('dead-letters an unregistered type as exhausted, with that error, once every attempt found no handler', async () => {
    const queue = q('unknown-all');
    const reg = new HandlerRegistry().register('t', async () => undefined);
    const seen: { outcome: JobOutcome; reason?: string; unregisteredType?: boolean }[] = [];
    const p = processor(reg, { events: { onOutcome: (e) => seen.push(e) } });
    // The queue's limit applies (the handler's own is unknown where none is registered).
    await store.updateQueue(queue, { maxAttempts: 2 });
    const { id } = await store.enqueue({ queue, type: 'nobody-handles-me' });
    expect(await runOne(p, queue)).toBe('retried');
    await h.backdate(id, 'run_at', 5);
    expect(await runOne(p, queue)).toBe('dead_lettered');
    const rec = (await store.getJob(id))!;
    expect(rec).toMatchObject({ location: 'dlq', reason: 'exhausted', attempts: 2 });
    expect(rec.lastError).toMatch(
      /^attempt 2 of 2 failed: UnregisteredTypeError: no handler is registered for job type "nobody-handles-me" on worker /,
    );
    expect(rec.lastError).toMatch(/\(registered: t\)/);
    expect(rec.attemptLog?.[0]).toMatchObject({
      attempt: 1,
      outcome: 'retried',
      error: expect.stringMatching(/nobody-handles-me/),
    });
    expect(seen.map((e) => [e.outcome, e.reason, e.unregisteredType])).toEqual([
      ['retried', undefined, true],
      ['dead_lettered', 'exhausted', true],
    ]);
  });

  it('times out a handler: DLQ timeout by default, retry when configured', async () => {
    const queue = q('timeout');
    let reason: unknown;
    const reg = new HandlerRegistry()
      .register(
        'slow',
        async (_p, ctx) => {
          try {
            await waitForAbort(ctx.signal);
          } catch (e) {
            reason = e;
            throw e;
          }
        },
        { timeoutMs: 100 },
      )
      .register('slow-retry', async () => sleep(10_000), { timeoutMs: 100, retryOnTimeout: true });
    const a = await store.enqueue({ queue, type: 'slow' });
    const b = await store.enqueue({ queue, type: 'slow-retry' });
    const p = processor(reg);
    expect(await runOne(p, queue)).toBe('dead_lettered');
    expect(reason).toBeInstanceOf(JobAbortedError);
    expect((reason as JobAbortedError).reason).toBe('timeout');
    expect(await store.getJob(a.id)).toMatchObject({ reason: 'timeout' });
    expect(await runOne(p, queue)).toBe('retried');
    expect((await store.getJob(b.id))!.state).toBe('pending');
  });

  it('cancels a running job through its signal and dead-letters it as cancelled', async () => {
    const queue = q('cancel');
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const reg = new HandlerRegistry().register('t', async (_p, ctx) => {
      started();
      await waitForAbort(ctx.signal);
    });
    const { id } = await store.enqueue({ queue, type: 't' });
    const outcome = runOne(processor(reg), queue);
    await running;
    expect(await store.cancel(id)).toBe('cancel_requested');
    expect(await outcome).toBe('dead_lettered');
    expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
  });

  it('stops a handler whose lease was lost and never finalizes it', async () => {
    const queue = q('lost');
    await store.updateQueue(queue, { zombieTimeoutSeconds: 30, zombiePolicy: 'retry' });
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    let rescued!: () => void;
    const afterRescue = new Promise<void>((r) => (rescued = r));
    let aborted: unknown;
    const reg = new HandlerRegistry().register('t', async (_p, ctx) => {
      started();
      await afterRescue;
      try {
        await ctx.heartbeat(); // the heartbeat after the rescue (the same path as the timer's)
        await waitForAbort(ctx.signal);
      } catch (e) {
        aborted = e;
      }
      // The handler returns normally after the abort: the processor must still not complete the job.
    });
    const leaseLost: string[] = [];
    // No timer heartbeats: one landing between the backdate and the rescue (a slow machine's) would keep the job.
    const p = processor(reg, {
      heartbeatIntervalMs: 600_000,
      events: { onLeaseLost: (e) => leaseLost.push(e.operation) },
    });
    const { id } = await store.enqueue({ queue, type: 't' });
    const outcome = runOne(p, queue);
    await running;
    await h.backdate(id, 'heartbeat_at', 60);
    expect((await store.rescueZombies(10)).retried).toBeGreaterThanOrEqual(1); // every queue's: others' too
    expect(await store.getJob(id)).toMatchObject({ state: 'pending', attempts: 1 });
    rescued();
    expect(await outcome).toBe('lease_lost');
    expect((aborted as JobAbortedError).reason).toBe('lease_lost');
    expect(leaseLost).toContain('heartbeat');
    expect(await store.getJob(id)).toMatchObject({ location: 'hot', state: 'pending' });
  });

  it('a cancel stops a handler running in this process at once, not at the next heartbeat', async () => {
    const queue = q('cancel-now');
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    let aborted: unknown;
    const reg = new HandlerRegistry().register('t', async (_p, ctx) => {
      started();
      // Bounded: without a prompt cancel this would end by itself after 20 s, and succeed.
      await Promise.race([waitForAbort(ctx.signal), sleep(20_000)]).catch((e) => (aborted = e));
      if (ctx.signal.aborted) throw ctx.signal.reason;
    });
    const p = processor(reg, { heartbeatIntervalMs: 600_000 }); // no heartbeat during this test
    const { id } = await store.enqueue({ queue, type: 't' });
    const outcome = runOne(p, queue);
    await running;
    expect(p.requestCancel('123456789')).toBe(false); // not running here
    expect(await store.cancel(id)).toBe('cancel_requested');
    expect(p.requestCancel(id)).toBe(true);
    expect(await outcome).toBe('dead_lettered');
    expect((aborted as JobAbortedError).reason).toBe('cancelled');
    expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
  });

  it('a handler that finishes after a cancel request ends in the DLQ as cancelled, reported as such', async () => {
    const queue = q('cancel-late');
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const reg = new HandlerRegistry().register('t', async () => {
      started();
      await gate; // ignores its signal: finishes regardless
    });
    const outcomes: { outcome: string; reason?: string }[] = [];
    const p = processor(reg, {
      heartbeatIntervalMs: 600_000,
      events: { onOutcome: (e) => outcomes.push({ outcome: e.outcome, reason: e.reason }) },
    });
    const { id } = await store.enqueue({ queue, type: 't' });
    const outcome = runOne(p, queue);
    await running;
    expect(await store.cancel(id)).toBe('cancel_requested'); // another instance answered: no local abort
    release();
    expect(await outcome).toBe('dead_lettered');
    expect(outcomes).toEqual([{ outcome: 'dead_lettered', reason: 'cancelled' }]);
    expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
    expect((await h.statsRow(queue)).succeeded).toBe(0);
  });

  // The same for a handler that fails (retry) or fails for good (fail) before it sees the request: the move puts the
  // job in the DLQ as 'cancelled', and the outcome reported is that, not 'retried' or the failure's own reason.
  it.each([
    ['throws an ordinary error (retry)', () => new Error('boom')],
    ['throws a FatalError (fail)', () => new FatalError('bad input')],
  ])('a handler that %s after a cancel request ends as cancelled, reported as such', async (_what, error) => {
    const queue = q('cancel-then-fail');
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const reg = new HandlerRegistry().register('t', async () => {
      started();
      await gate;
      throw error();
    });
    const outcomes: { outcome: string; reason?: string }[] = [];
    const p = processor(reg, {
      heartbeatIntervalMs: 600_000,
      events: { onOutcome: (e) => outcomes.push({ outcome: e.outcome, reason: e.reason }) },
    });
    const { id } = await store.enqueue({ queue, type: 't', maxAttempts: 3 });
    const outcome = runOne(p, queue);
    await running;
    expect(await store.cancel(id)).toBe('cancel_requested'); // another instance answered: no local abort
    release();
    expect(await outcome).toBe('dead_lettered');
    expect(outcomes).toEqual([{ outcome: 'dead_lettered', reason: 'cancelled' }]);
    expect(await store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'cancelled' });
  });

  it('on shutdown releases claimed-but-unstarted jobs and interrupts running ones after the grace period', async () => {
    const queue = q('shutdown');
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const reg = new HandlerRegistry().register('t', async (_p, ctx) => {
      started();
      await waitForAbort(ctx.signal);
    });
    const p = processor(reg);
    const a = await store.enqueue({ queue, type: 't' });
    const b = await store.enqueue({ queue, type: 't' });
    const [jobA] = await store.claimNext({ workerId: p.workerId, queues: [queue], limit: 1 });
    const runA = p.runClaimed(jobA!);
    await running;
    const [jobB] = await store.claimNext({ workerId: p.workerId, queues: [queue], limit: 1 });
    const stopping = p.shutdown(100);
    expect(await p.runClaimed(jobB!)).toBe('released');
    await stopping;
    expect(await runA).toBe('released');
    expect(await store.getJob(b.id)).toMatchObject({ state: 'pending', attempts: 0 });
    // Interrupted, not failed: the attempt start counted is given back, and no retry is counted.
    expect(await store.getJob(a.id)).toMatchObject({
      state: 'pending',
      attempts: 0,
      lastError: 'interrupted by worker shutdown',
    });
    expect(await h.statsRow(queue)).toMatchObject({ retried: 0, failed: 0 });
  });

  it('a job interrupted by shutdown on its last attempt runs that attempt again, never a further one', async () => {
    const queue = q('shutdown-last');
    const seen: number[] = [];
    let started: () => void = () => undefined;
    const reg = new HandlerRegistry().register(
      't',
      async (_p, ctx) => {
        seen.push(ctx.attempt);
        if (seen.length <= 2) {
          started();
          await waitForAbort(ctx.signal); // held until the shutdown's grace period ends
        }
      },
      { maxAttempts: 1 },
    );
    const outcomes: { outcome: string; attempt: number }[] = [];
    const events = { onOutcome: (e: { outcome: string; attempt: number }) => outcomes.push(e) };
    const { id } = await store.enqueue({ queue, type: 't' });
    // Two workers in turn are stopped while the job runs; each hands it back.
    for (let stop = 1; stop <= 2; stop++) {
      const running = new Promise<void>((r) => (started = r));
      const p = processor(reg, { events });
      const draining = p.drain({ queues: [queue], budgetMs: 10_000, concurrency: 1 });
      await running;
      await p.shutdown(20);
      expect((await draining).outcomes.released).toBe(1);
      expect(await store.getJob(id)).toMatchObject({
        state: 'pending',
        attempts: 0,
        lastError: 'interrupted by worker shutdown',
      });
    }
    const res = await processor(reg, { events }).drain({ queues: [queue], budgetMs: 10_000, concurrency: 1 });
    expect(res.outcomes.succeeded).toBe(1);
    expect(seen).toEqual([1, 1, 1]);
    expect(outcomes.map((o) => `${o.outcome}@${o.attempt}`)).toEqual(['released@1', 'released@1', 'succeeded@1']);
    expect(await store.getJob(id)).toMatchObject({ location: 'archive', attempts: 1 });
    expect(await h.statsRow(queue)).toMatchObject({ succeeded: 1, retried: 0, failed: 0 });
  });

  it('a job started by a claim still in flight when shutdown began is handed back without running its handler', async () => {
    const queue = q('shutdown-claim');
    let handled = 0;
    const reg = new HandlerRegistry().register('t', async () => void handled++);
    let claimEntered!: () => void;
    const entered = new Promise<void>((r) => (claimEntered = r));
    let letClaimReturn!: () => void;
    const gate = new Promise<void>((r) => (letClaimReturn = r));
    // The claim commits (the job is processing) and its reply is held back until shutdown has begun.
    const slowStore = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'claimAndStart') {
          return async (o: Parameters<JobStore['claimAndStart']>[0]) => {
            const jobs = await target.claimAndStart(o);
            if (jobs.length) claimEntered();
            await gate;
            return jobs;
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const p = processor(reg, { store: slowStore });
    const { id } = await store.enqueue({ queue, type: 't' });
    const draining = p.drain({ queues: [queue], budgetMs: 10_000, concurrency: 4 });
    await entered;
    expect(await store.getJob(id)).toMatchObject({ state: 'processing', attempts: 1 });
    await p.shutdown(20);
    letClaimReturn();
    const res = await draining;
    expect(handled).toBe(0);
    expect(res.outcomes.released).toBe(1);
    expect(res.outcomes.retried).toBe(0);
    // claimAndStart counted the attempt; the hand-back gives it back, so the run that never happened costs nothing.
    expect(await store.getJob(id)).toMatchObject({
      state: 'pending',
      attempts: 0,
      lastError: 'interrupted by worker shutdown',
    });
    const [again] = await store.claimAndStart({ workerId: 'w', queues: [queue], limit: 1 });
    expect(again).toMatchObject({ id, attempt: 1 });
  });

  it('claims again while finished jobs are being completed, holding at most twice its concurrency', async () => {
    const queue = q('overlap');
    let runningNow = 0;
    let maxRunning = 0;
    const reg = new HandlerRegistry().register('t', async () => {
      maxRunning = Math.max(maxRunning, ++runningNow);
      await sleep(5);
      runningNow--;
    });
    let openGate!: () => void;
    const gate = new Promise<void>((r) => (openGate = r));
    let claimed = 0;
    // Completions wait at the gate: slots freed by finished handlers are claimed again, up to 2 x concurrency held.
    const gatedStore = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'completeMany')
          return async (refs: Parameters<JobStore['completeMany']>[0]) => {
            await gate;
            return target.completeMany(refs);
          };
        if (prop === 'claimAndStart')
          return async (o: Parameters<JobStore['claimAndStart']>[0]) => {
            const jobs = await target.claimAndStart(o);
            claimed += jobs.length;
            return jobs;
          };
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    await store.enqueueMany(Array.from({ length: 10 }, () => ({ queue, type: 't' })));
    const draining = processor(reg, { store: gatedStore }).drain({
      queues: [queue],
      budgetMs: 20_000,
      concurrency: 2,
      claimBatch: 1,
    });
    for (let i = 0; i < 200 && claimed < 4; i++) await sleep(10);
    await sleep(100); // room for a (wrong) fifth claim
    expect(claimed).toBe(4);
    expect((await store.stats()).find((s) => s.queue === queue)).toMatchObject({ processing: 4, pending: 6 });
    openGate();
    const res = await draining;
    expect(res.outcomes.succeeded).toBe(10);
    expect(maxRunning).toBeLessThanOrEqual(2);
    expect(await h.countRows('archive', queue)).toBe(10);
  });

  it('drains due jobs within a time budget, with completions batched', async () => {
    const queue = q('drain');
    const reg = new HandlerRegistry().register('t', async () => undefined);
    await store.enqueueMany(Array.from({ length: 300 }, () => ({ queue, type: 't' })));
    const res = await processor(reg).drain({ queues: [queue], budgetMs: 20_000, concurrency: 50 });
    expect(res.processed).toBe(300);
    expect(res.outcomes.succeeded).toBe(300);
    expect(await h.countRows('archive', queue)).toBe(300);
    expect((await h.statsRow(queue)).succeeded).toBe(300);
  });

  // Handlers that finish at different times, so a loop that counted batches would start new batches while the slow
  // jobs of earlier ones still run: the peak number of handlers running at once must never exceed the limit.
  function concurrencyProbe() {
    const seen = { now: 0, peak: 0, done: 0 };
    let n = 0;
    const reg = new HandlerRegistry().register('t', async () => {
      seen.now++;
      seen.peak = Math.max(seen.peak, seen.now);
      await sleep(++n % 3 === 0 ? 30 : 2);
      seen.now--;
      seen.done++;
    });
    return { seen, reg };
  }

  it('drain counts its concurrency in jobs, not batches', async () => {
    const queue = q('drain-conc');
    const { seen, reg } = concurrencyProbe();
    await store.enqueueMany(Array.from({ length: 120 }, () => ({ queue, type: 't' })));
    const res = await processor(reg).drain({ queues: [queue], budgetMs: 20_000, concurrency: 4 });
    expect(res.processed).toBe(120);
    expect(seen.done).toBe(120);
    expect(seen.peak).toBeLessThanOrEqual(4);
    expect(seen.peak).toBeGreaterThan(1);
  });

  it('a worker counts its concurrency in jobs, not batches, and wakes at once on a wake-up', async () => {
    const queue = q('worker-conc');
    const { seen, reg } = concurrencyProbe();
    let wake: (() => void) | undefined;
    let unsubscribed = false;
    const wakeups = {
      async subscribe(_queues: string[], onWake: () => void) {
        wake = onWake;
        return async () => {
          unsubscribed = true;
        };
      },
    };
    // A poll interval far longer than the test: only the wake-up can make the worker see the jobs in time.
    const worker = new Worker(processor(reg), { queues: [queue], concurrency: 5, pollIntervalMs: 60_000, wakeups });
    worker.start();
    // Subscribed (not a guessed time): a wake-up before it would reach no one, and the poll is a minute away.
    for (let i = 0; i < 500 && !wake; i++) await sleep(10);
    await store.enqueueMany(Array.from({ length: 60 }, () => ({ queue, type: 't' })));
    wake!();
    const deadline = Date.now() + 15_000;
    while (seen.done < 60 && Date.now() < deadline) await sleep(20);
    await worker.stop(1000);
    expect(seen.done).toBe(60);
    expect(seen.peak).toBeLessThanOrEqual(5);
    expect(unsubscribed).toBe(true);
  });

  it('a worker on a queue at its concurrency limit claims the next job as its own finishes, not at its next poll', async () => {
    const queue = q('worker-limit');
    await store.updateQueue(queue, { maxConcurrency: 1 });
    const { seen, reg } = concurrencyProbe();
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 't' })));
    // A poll interval far longer than the test and no wake-ups: the limit lets one job run at a time, each claim
    // comes back short, and only the finish of the job it holds can make the worker claim the next in time.
    const worker = new Worker(processor(reg), { queues: [queue], concurrency: 4, pollIntervalMs: 60_000 });
    worker.start();
    const deadline = Date.now() + 15_000;
    while (seen.done < 3 && Date.now() < deadline) await sleep(20);
    await worker.stop(1000);
    expect(seen.done).toBe(3);
    expect(seen.peak).toBe(1);
  });

  // A store call that fails (the connection dropped) fails its job's batch; the batch's other jobs still run. Their
  // slots are the claim loop's until they end: before, the loop took the whole batch's slots back at the first
  // failure and counted them off again as the other jobs ended, so it ran more handlers than its concurrency from
  // then on (the drift grew with every failed batch; after a chaos run a worker held far more than it should).
  it('a batch with a failed store call keeps the slots of its jobs still running: never more than concurrency at once', async () => {
    const queue = q('worker-failed-batch');
    let running = 0;
    let peak = 0;
    const gates: (() => void)[] = [];
    const reg = new HandlerRegistry()
      .register('boom', async () => {
        throw new FatalError('boom');
      })
      .register('gate', async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => gates.push(r));
        running--;
      });
    // Its one fail() call loses the connection; everything else is the real store.
    let failed = false;
    const flaky: JobStore = Object.create(store, {
      fail: {
        value: async () => {
          failed = true;
          throw new Error('Connection terminated unexpectedly');
        },
      },
    });
    await store.enqueueMany([
      { queue, type: 'boom', priority: 2 },
      { queue, type: 'gate', priority: 1 },
    ]);
    const worker = new Worker(new JobProcessor({ store: flaky, registry: reg, heartbeatIntervalMs: 40 }), {
      queues: [queue],
      concurrency: 2,
      pollIntervalMs: 20,
    });
    worker.start();
    const until = async (what: string, probe: () => boolean) => {
      for (const deadline = Date.now() + 15_000; !probe(); await sleep(10))
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    };
    await until('the failed batch', () => failed && gates.length === 1);
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 'gate' })));
    await until('a second gate job', () => gates.length >= 2);
    await sleep(300); // 15 polls: room for a claim the slots would not allow
    const peakWhileHeld = peak;
    // Open every gate as it comes, until the four gate jobs are archived.
    for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(30)) {
      gates.splice(0).forEach((open) => open());
      if ((await h.countRows('archive', queue)) === 4) break;
    }
    await worker.stop(1000);
    expect(peakWhileHeld).toBe(2);
    expect(peak).toBeLessThanOrEqual(2);
    expect(await h.countRows('archive', queue)).toBe(4);
  });

  // The same while the worker also holds a long job of another queue: it never empties, so waiting for that held
  // the limited queue to one job per poll interval.
  it('a worker on a queue at its concurrency limit claims the next job as its own finishes while it holds a long job of another queue', async () => {
    const queue = q('worker-limit-busy');
    const other = q('worker-limit-other');
    await store.updateQueue(queue, { maxConcurrency: 1 });
    let quick = 0;
    let openLong!: () => void;
    const long = new Promise<void>((r) => (openLong = r));
    const reg = new HandlerRegistry()
      .register('quick', async () => {
        quick++;
      })
      .register('long', async () => long);
    await store.enqueue({ queue: other, type: 'long', priority: 1 });
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 'quick' })));
    // A poll interval far longer than the test and no wake-ups: only the finish of its limited job can make the
    // worker claim the next one in time.
    const worker = new Worker(processor(reg), { queues: [queue, other], concurrency: 4, pollIntervalMs: 60_000 });
    worker.start();
    const deadline = Date.now() + 15_000;
    while (quick < 3 && Date.now() < deadline) await sleep(20);
    const quickWhileLongHeld = quick;
    openLong();
    await worker.stop(1000);
    expect(quickWhileLongHeld).toBe(3);
  });

  // Long jobs holding more slots than concurrency - claimBatch: the few left free are claimed into at the next poll,
  // not left idle for as long as the long jobs run.
  it('a worker whose long jobs hold all but fewer than a claim batch of its slots still runs due jobs in the rest', async () => {
    const queue = q('worker-long-convoy');
    let quick = 0;
    let longStarted = 0;
    let openLong!: () => void;
    const long = new Promise<void>((r) => (openLong = r));
    const reg = new HandlerRegistry()
      .register('quick', async () => {
        quick++;
      })
      .register('long', async () => {
        longStarted++;
        await long;
      });
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 'long' })));
    // Concurrency 4 claims in batches of 2 once jobs run; the three long jobs leave one slot. No wake-ups.
    const worker = new Worker(processor(reg), { queues: [queue], concurrency: 4, pollIntervalMs: 50 });
    worker.start();
    for (const deadline = Date.now() + 15_000; longStarted < 3 && Date.now() < deadline;) await sleep(20);
    expect(longStarted).toBe(3);
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 'quick' })));
    for (const deadline = Date.now() + 15_000; quick < 3 && Date.now() < deadline;) await sleep(20);
    const quickWhileLongHeld = quick;
    openLong();
    await worker.stop(1000);
    expect(quickWhileLongHeld).toBe(3);
    expect(await h.countRows('archive', queue)).toBe(6);
  });

  it('a polling worker processes jobs until stopped; maintenance leaves nothing behind', async () => {
    const queue = q('worker');
    const reg = new HandlerRegistry().register('t', async () => sleep(5));
    const p = processor(reg);
    const worker = new Worker(p, { queues: [queue], concurrency: 4, pollIntervalMs: 20 });
    worker.start();
    await store.enqueueMany(Array.from({ length: 40 }, () => ({ queue, type: 't' })));
    const deadline = Date.now() + 20_000;
    while ((await h.countRows('archive', queue)) < 40 && Date.now() < deadline) await sleep(50);
    await worker.stop(1000);
    expect(await h.countRows('archive', queue)).toBe(40);
    const report = await runMaintenance(store);
    expect(report.complete).toBe(true);
    expect(await h.countRows('hot', queue)).toBe(0);
  });

  it('maintenance deletes ops audit rows past KEEL_OPS_AUDIT_RETENTION_DAYS, and only those', async () => {
    const action = `maint-${q('audit')}`.slice(0, 64);
    const row = () =>
      store.recordAudit({
        principalId: null,
        principalName: null,
        tenantId: null,
        appId: null,
        authMethod: 'key',
        channel: 'key',
        role: 'producer',
        requiredRole: 'producer',
        httpMethod: 'POST',
        action,
        target: null,
        summary: null,
        outcome: 'refused',
        status: 403,
        reason: null,
        affected: null,
        requestId: null,
        clientIp: null,
      });
    const [old, recent, fresh] = [await row(), await row(), await row()];
    await h.backdateAudit([old], 31 * 86_400);
    await h.backdateAudit([recent], 29 * 86_400);
    const report = await runMaintenance(store, { auditRetentionDays: 30, purgeBatch: 1 });
    expect(report.auditPurged).toBe(1);
    expect((await store.searchAudit({ action, limit: 10 })).items.map((r) => r.id)).toEqual([fresh, recent]);
  });
});

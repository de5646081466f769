// Recurring jobs: exactly one job per tick across three instances sharing one database; missed-tick policies after an
// outage (fake clock); pause and resume kept in the database and served by the ops API (operator role).
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ops } from '../../functions/ops.js';
import { parseSettings } from '../../shared/config/settings.js';
import { createRuntime, type Runtime, type RuntimeOverrides } from '../../shared/app/runtime.js';
import { runSchedulerPass, schedulesFinerThanTimer } from '../../shared/app/timerPasses.js';
import { defineHandler, defineSchedule, z } from '../../shared/jobs/define.js';
import { registerHandlers } from '../../shared/jobs/handlerFolder.js';
import { planTicks } from '../../shared/jobs/scheduler.js';
import { telemetry } from '../../shared/telemetry/index.js';
import {
  context,
  createTestRuntime,
  jsonOf,
  RecordingQueues,
  request,
  type TestRuntime,
} from '../functions/support.js';

const tick = defineHandler('test.tick', { payload: z.object({ n: z.number() }), queue: 'ticks', async handle() {} });
// A schema that reads the environment at enqueue, as the example webhook's host allowlist does: a schedule's payload
// that passed at start can be refused on a later pass.
let refuseFragile = false;
const fragileTick = defineHandler('test.fragile', {
  payload: z.object({ n: z.number().refine(() => !refuseFragile, 'refused by the handler now') }),
  queue: 'ticks',
  async handle() {},
});
const register = (r: Parameters<typeof registerHandlers>[0]) =>
  registerHandlers(r, [
    { ...tick, source: 'test' },
    { ...fragileTick, source: 'test' },
  ]);
const quiet = { info() {}, warn() {}, error() {} };

const everySecond = defineSchedule('every-second', { cron: '* * * * * *', type: 'test.tick', payload: { n: 1 } });
const minute = (name: string, missed: 'skip' | 'once' | 'catchUp') =>
  defineSchedule(name, {
    cron: '0 * * * * *',
    type: 'test.tick',
    payload: { n: 2 },
    missed,
    maxCatchUp: 3,
    graceMs: 5_000,
  });
const skip = minute('m-skip', 'skip');
const once = minute('m-once', 'once');
const catchUp = minute('m-catchup', 'catchUp');
const pausable = defineSchedule('pausable', { cron: '* * * * * *', type: 'test.tick', payload: { n: 3 } });

let t: TestRuntime;
const others: Runtime[] = [];

beforeAll(async () => {
  t = await createTestRuntime('schedules', { register, env: { KEEL_WORKER_ID: 'host-a' } });
});
afterAll(async () => {
  for (const o of others) await o.close();
  await t?.close();
});

async function instance(schedules: RuntimeOverrides['schedules'], worker: string): Promise<Runtime> {
  const env = { KEEL_PG_URL: t.url, KEEL_WORKER_ID: worker, KEEL_PG_POOL_SIZE: '3' };
  const rt = await createRuntime(parseSettings(env), {
    queues: new RecordingQueues(),
    transfers: null,
    env,
    register,
    schedules,
  });
  others.push(rt);
  return rt;
}

async function jobsOf(rt: Runtime, name: string) {
  const { items: jobs } = await rt.store.searchJobs({ location: 'hot', tag: `schedule:${name}`, limit: 500 });
  return jobs
    .map((j) => ({ id: j.id, key: j.idempotencyKey!, tick: j.idempotencyKey!.slice(`schedule:${name}:`.length) }))
    .sort((a, b) => a.tick.localeCompare(b.tick));
}

describe('recurring schedules', () => {
  it('three instances sharing one database, a 1-second schedule for ~10 s: exactly one job per tick, no gaps', async () => {
    const hosts = [
      await instance([everySecond], 'host-1'),
      await instance([everySecond], 'host-2'),
      await instance([everySecond], 'host-3'),
    ];
    const until = Date.now() + 10_500;
    let enqueuedByPasses = 0;
    const statuses: string[] = [];
    // Each host runs its scheduler about every 200 ms, out of step with the others, as timers on separate instances do.
    await Promise.all(
      hosts.map(async (rt, i) => {
        await new Promise((r) => setTimeout(r, i * 67));
        while (Date.now() < until) {
          const report = await runSchedulerPass(rt, quiet);
          enqueuedByPasses += report.enqueued;
          statuses.push(...report.schedules.map((s) => s.status));
          await new Promise((r) => setTimeout(r, 150 + Math.random() * 100));
        }
      }),
    );
    const jobs = await jobsOf(hosts[0]!, 'every-second');
    expect(jobs.length).toBeGreaterThanOrEqual(8);
    expect(new Set(jobs.map((j) => j.key)).size).toBe(jobs.length);
    expect(enqueuedByPasses).toBe(jobs.length); // the compare-and-set kept duplicates out, not the idempotency key
    const ms = jobs.map((j) => Date.parse(j.tick));
    for (let i = 1; i < ms.length; i++) expect(ms[i]! - ms[i - 1]!).toBe(1000); // every tick, once
    const [state] = await hosts[0]!.store.listSchedules('every-second');
    expect(state!.lastTick!.toISOString()).toBe(jobs.at(-1)!.tick);
    // Whether the timers above happened to collide depends on scheduling; this race is forced: all three instances
    // read the same last tick and fire the next one at once. The compare-and-set lets exactly one through.
    const next = new Date(state!.lastTick!.getTime() + 1000);
    const key = `schedule:every-second:${next.toISOString()}`;
    const raced = await Promise.all(
      hosts.map((rt) =>
        rt.store.fireSchedule('every-second', state!.lastTick!, next, [
          {
            queue: 'ticks',
            type: 'test.tick',
            payload: { n: 1 },
            idempotencyKey: key,
            tags: ['schedule:every-second'],
          },
        ]),
      ),
    );
    expect(raced.map((r) => r.status).sort()).toEqual(['fired', 'lost', 'lost']);
    expect((await jobsOf(hosts[0]!, 'every-second')).filter((j) => j.key === key)).toHaveLength(1);
  }, 60_000);

  it('minute timers on three instances over a minute schedule: one job per tick, and no database call between ticks', async () => {
    const def = defineSchedule('every-minute', { cron: '0 * * * * *', type: 'test.tick', payload: { n: 5 } });
    const calls: string[][] = [[], [], []];
    // Each instance's store counts its calls; the wrapped runtime is kept, as the scheduler's memory is per runtime.
    const hosts = await Promise.all(
      ['m-1', 'm-2', 'm-3'].map(async (w, i) => {
        const rt = await instance([def], w);
        const store = new Proxy(rt.store, {
          get(target, prop, receiver) {
            const v = Reflect.get(target, prop, receiver) as unknown;
            if (typeof v !== 'function') return v;
            return (...args: unknown[]) => {
              calls[i]!.push(String(prop));
              return (v as (...a: unknown[]) => unknown).apply(target, args);
            };
          },
        });
        return { ...rt, store };
      }),
    );
    const base = Date.parse('2032-05-01T08:00:00Z');
    let enqueued = 0;
    // Twelve minutes. At each minute all three timers fire within 300 ms of each other (Azure runs one at a time; they
    // meet here on purpose, as during a lock hand-over), then each fires again at :30 with nothing due.
    for (let m = 0; m < 12; m++) {
      const passes = await Promise.all(
        hosts.map((rt, i) => runSchedulerPass(rt, quiet, new Date(base + m * 60_000 + 100 * i + 50))),
      );
      enqueued += passes.reduce((n, p) => n + p.enqueued, 0);
      // :30: the pass that fired remembers the tick it wrote and asks nothing; one that lost the race does not know
      // how far the winner moved, so it reads the state once. :45: nobody asks anything.
      for (const second of [30, 45]) {
        const before = calls.map((c) => c.length);
        for (const [i, rt] of hosts.entries()) {
          const r = await runSchedulerPass(rt, quiet, new Date(base + m * 60_000 + second * 1000 + i));
          expect(r.schedules.map((x) => x.status)).toEqual(['idle']);
        }
        const made = calls.flatMap((c, i) => c.slice(before[i]));
        if (second === 30) expect(made.every((c) => c === 'listSchedules')).toBe(true);
        else expect(made).toEqual([]);
        if (second === 30) expect(made.length).toBeLessThanOrEqual(2);
      }
    }
    const jobs = await jobsOf(hosts[0]!, 'every-minute');
    // The first minute is the baseline (a new schedule starts with its next tick): ticks 08:01 .. 08:11, once each.
    expect(jobs.map((j) => j.tick)).toEqual(
      Array.from({ length: 11 }, (_, k) => new Date(base + (k + 1) * 60_000).toISOString()),
    );
    expect(enqueued).toBe(11);
    // Passes that meet at a tick read the state (listSchedules) and race the compare-and-set; nothing else is called.
    expect(new Set(calls.flat())).toEqual(new Set(['listSchedules', 'fireSchedule', 'searchJobs']));
  }, 60_000);

  it('the scheduler names schedules finer than its timer (KEEL_SCHEDULER_SCHEDULE, a minute by default)', async () => {
    const hourly = defineSchedule('hourly-fine-check', { cron: '0 0 * * * *', type: 'test.tick', payload: { n: 6 } });
    const fast = defineSchedule('fast-fine-check', { cron: '*/10 * * * * *', type: 'test.tick', payload: { n: 7 } });
    const rt = await instance([fast, hourly], 'host-fine');
    expect(schedulesFinerThanTimer(rt).map((d) => d.name)).toEqual(['fast-fine-check']);
    const warned: string[] = [];
    const log = { ...quiet, warn: (m: unknown) => void warned.push(String(m)) };
    await runSchedulerPass(rt, log, new Date('2033-01-01T00:00:00Z'));
    await runSchedulerPass(rt, log, new Date('2033-01-01T00:01:00Z'));
    expect(warned).toHaveLength(1); // once per runtime
    expect(warned[0]).toMatch(/fast-fine-check .*KEEL_SCHEDULER_SCHEDULE=0 \* \* \* \* \*/);
    const fine = await createRuntime(
      parseSettings({ KEEL_PG_URL: t.url, KEEL_PG_POOL_SIZE: '2', KEEL_SCHEDULER_SCHEDULE: '* * * * * *' }),
      { queues: new RecordingQueues(), transfers: null, register, schedules: [fast, hourly] },
    );
    others.push(fine);
    expect(schedulesFinerThanTimer(fine)).toEqual([]);
  });

  it('missed ticks after an outage: skip runs none, once runs the latest, catchUp runs the latest maxCatchUp', async () => {
    const rt = await instance([skip, once, catchUp], 'host-fake-clock');
    const at = (iso: string) => runSchedulerPass(rt, quiet, new Date(iso));
    const byName = (r: Awaited<ReturnType<typeof at>>) => Object.fromEntries(r.schedules.map((s) => [s.name, s]));
    // First sight at :30: 12:00 is already 30 s old (grace 5 s): nothing runs, it becomes the baseline.
    let r = byName(await at('2031-01-01T12:00:30Z'));
    for (const n of ['m-skip', 'm-once', 'm-catchup']) expect(r[n]).toMatchObject({ status: 'fired', ticks: [] });
    r = byName(await at('2031-01-01T12:01:01Z')); // on time
    for (const n of ['m-skip', 'm-once', 'm-catchup']) expect(r[n]!.ticks).toEqual(['2031-01-01T12:01:00.000Z']);
    // Outage: nothing runs from 12:01:01 to 12:10:30. Ticks 12:02 .. 12:10 were missed (12:10 is 30 s old).
    r = byName(await at('2031-01-01T12:10:30Z'));
    expect(r['m-skip']).toMatchObject({ ticks: [], missed: 9, skipped: 9 });
    expect(r['m-once']).toMatchObject({ ticks: ['2031-01-01T12:10:00.000Z'], missed: 9, skipped: 8 });
    expect(r['m-catchup']).toMatchObject({
      ticks: ['2031-01-01T12:08:00.000Z', '2031-01-01T12:09:00.000Z', '2031-01-01T12:10:00.000Z'],
      missed: 9,
      skipped: 6,
    });
    r = byName(await at('2031-01-01T12:10:45Z')); // a second pass finds nothing new
    for (const n of ['m-skip', 'm-once', 'm-catchup']) expect(r[n]!.status).toBe('idle');
    r = byName(await at('2031-01-01T12:11:02Z')); // back on schedule
    for (const n of ['m-skip', 'm-once', 'm-catchup']) expect(r[n]!.ticks).toEqual(['2031-01-01T12:11:00.000Z']);
    expect((await jobsOf(rt, 'm-skip')).map((j) => j.tick)).toEqual([
      '2031-01-01T12:01:00.000Z',
      '2031-01-01T12:11:00.000Z',
    ]);
    expect((await jobsOf(rt, 'm-once')).length).toBe(3);
    expect((await jobsOf(rt, 'm-catchup')).length).toBe(5);
    const job = await rt.store.getJob((await jobsOf(rt, 'm-once'))[0]!.id);
    expect(job).toMatchObject({ queue: 'ticks', type: 'test.tick', payload: { n: 2 } });
    // Catch-up after a very long outage stays bounded.
    const plan = planTicks(
      catchUp,
      { lastTick: new Date('2031-01-01T12:11:00Z'), resumedAt: null },
      new Date('2031-03-01T00:00:30Z'),
    );
    expect(plan.enqueue.map((d) => d.toISOString())).toEqual([
      '2031-02-28T23:58:00.000Z',
      '2031-02-28T23:59:00.000Z',
      '2031-03-01T00:00:00.000Z',
    ]);
    expect(plan.advanceTo).toEqual(new Date('2031-03-01T00:00:00Z'));
  });

  it('a new schedule starts with its next tick: a tick from before it existed never runs, even within the grace period', async () => {
    const def = minute('m-new', 'catchUp'); // grace 5 s; the policy does not matter on first sight
    // Pure rule: first sight 2 s after 12:00 (within the grace period) records 12:00 as the baseline, runs nothing.
    const plan = planTicks(def, null, new Date('2031-01-01T12:00:02Z'));
    expect(plan).toMatchObject({ enqueue: [], advanceTo: new Date('2031-01-01T12:00:00Z') });
    const everySecondNew = defineSchedule('every-second-new', {
      cron: '* * * * * *',
      type: 'test.tick',
      payload: { n: 4 },
    });
    expect(planTicks(everySecondNew, null, new Date('2031-01-01T12:00:00.500Z')).enqueue).toEqual([]);
    // Through the scheduler and the store: the first pass enqueues nothing, the next tick is the first job.
    const rt = await instance([def], 'host-new-schedule');
    const first = await runSchedulerPass(rt, quiet, new Date('2031-01-01T12:00:02Z'));
    expect(first.schedules[0]).toMatchObject({ name: 'm-new', status: 'fired', ticks: [] });
    expect(await jobsOf(rt, 'm-new')).toEqual([]);
    const next = await runSchedulerPass(rt, quiet, new Date('2031-01-01T12:01:01Z'));
    expect(next.schedules[0]!.ticks).toEqual(['2031-01-01T12:01:00.000Z']);
    expect((await jobsOf(rt, 'm-new')).map((j) => j.tick)).toEqual(['2031-01-01T12:01:00.000Z']);
  });

  it('one failing schedule does not stop the others of the pass: logged and counted with its name, retried next pass', async () => {
    const fragile = defineSchedule('m-fragile', { cron: '0 * * * * *', type: 'test.fragile', payload: { n: 5 } });
    const steady = defineSchedule('m-steady', { cron: '0 * * * * *', type: 'test.tick', payload: { n: 6 } });
    const rt = await instance([fragile, steady], 'host-failing');
    const errors: string[] = [];
    const log = { ...quiet, error: (...args: unknown[]) => errors.push(args.map(String).join(' ')) };
    const counted = vi.spyOn(telemetry, 'scheduleFailed');
    try {
      await runSchedulerPass(rt, log, new Date('2031-01-01T12:00:30Z')); // baselines
      refuseFragile = true;
      const r = await runSchedulerPass(rt, log, new Date('2031-01-01T12:01:01Z'));
      const byName = Object.fromEntries(r.schedules.map((s) => [s.name, s]));
      // The failing schedule comes first in the pass; the one after it still fired.
      expect(byName['m-fragile']).toMatchObject({ status: 'failed', enqueued: [] });
      expect(byName['m-fragile']!.error).toMatch(/payload\.n.*refused by the handler now/);
      expect(byName['m-steady']).toMatchObject({ status: 'fired', ticks: ['2031-01-01T12:01:00.000Z'] });
      expect(r.enqueued).toBe(1);
      expect((await jobsOf(rt, 'm-steady')).map((j) => j.tick)).toEqual(['2031-01-01T12:01:00.000Z']);
      expect(await jobsOf(rt, 'm-fragile')).toEqual([]);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/^schedule m-fragile failed in this pass .*refused by the handler now/);
      expect(counted).toHaveBeenCalledExactlyOnceWith({ schedule: 'm-fragile' });
      // Its last tick did not move: once the handler accepts it again, the next pass fires the tick it missed.
      const [state] = await rt.store.listSchedules('m-fragile');
      expect(state!.lastTick!.toISOString()).toBe('2031-01-01T12:00:00.000Z');
      refuseFragile = false;
      const again = await runSchedulerPass(rt, log, new Date('2031-01-01T12:01:02Z'));
      expect(again.schedules.find((s) => s.name === 'm-fragile')).toMatchObject({
        status: 'fired',
        ticks: ['2031-01-01T12:01:00.000Z'],
      });
      expect(errors).toHaveLength(1);
    } finally {
      refuseFragile = false;
      counted.mockRestore();
    }
  });

  it('pause and resume over the ops API (operator role), kept in the database; paused ticks never run', async () => {
    const rt = await instance([pausable], 'host-pause');
    const { setRuntime } = await import('../../shared/app/runtime.js');
    setRuntime(rt);
    const call = async (method: string, path: string, operator = true) => {
      const res = await ops(request(method, path, { operator }), context('ops'));
      return { status: res.status ?? 200, body: jsonOf(res) };
    };
    await runSchedulerPass(rt, quiet); // baseline
    expect((await call('POST', 'schedules/pausable/pause', false)).status).toBe(403);
    expect((await call('POST', 'schedules/nope/pause')).status).toBe(404);
    const paused = await call('POST', 'schedules/pausable/pause');
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ name: 'pausable', state: 'paused', nextTick: null });
    const before = (await jobsOf(rt, 'pausable')).length;
    await new Promise((r) => setTimeout(r, 2_100));
    // Another instance sees the pause too: it lives in the database.
    const other = await instance([pausable], 'host-pause-2');
    expect((await runSchedulerPass(other, quiet)).schedules[0]!.status).toBe('paused');
    expect((await jobsOf(rt, 'pausable')).length).toBe(before);
    const listed = await call('GET', 'schedules');
    expect(listed.body.items.find((i: { name: string }) => i.name === 'pausable')).toMatchObject({
      state: 'paused',
      cron: '* * * * * *',
      type: 'test.tick',
      queue: 'ticks', // the schedule names none: its handler's queue, where its jobs go (before: null)
    });
    const resumed = await call('POST', 'schedules/pausable/resume');
    expect(resumed.body).toMatchObject({ state: 'active' });
    const resumedAt = Date.parse(resumed.body.resumedAt);
    await new Promise((r) => setTimeout(r, 1_200));
    await runSchedulerPass(other, quiet);
    const after = await jobsOf(rt, 'pausable');
    expect(after.length).toBeGreaterThan(before);
    for (const j of after.slice(before)) expect(Date.parse(j.tick)).toBeGreaterThan(resumedAt); // nothing from the pause
    const listedAgain = await call('GET', 'schedules');
    const item = listedAgain.body.items.find((i: { name: string }) => i.name === 'pausable');
    expect(item.state).toBe('active');
    expect(Date.parse(item.nextTick)).toBeGreaterThan(Date.parse(item.lastTick));
    setRuntime(t.rt);
  });
});

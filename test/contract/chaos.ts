// Chaos: concurrent workers over thousands of jobs, with workers crashing mid-job, database connections killed and
// handlers failing at random; then maintenance until quiet. It fails when the backlog is not drained within the settle
// window (liveness) and, on engines that count them (EngineHarness.deadlocks), on any deadlock. Written once, run per
// engine through its EngineHarness.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { JobStore } from '../../shared/jobs/contract.js';
import { HandlerRegistry } from '../../shared/jobs/registry.js';
import { FatalError } from '../../shared/jobs/handlerErrors.js';
import { JobProcessor, Worker } from '../../shared/jobs/processor.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';
import type { EngineHarness } from './harness.js';
import { seededRandom } from '../support/seededRandom.js';

export interface ChaosOptions {
  jobs: number;
  workers: number;
  crashes: number; // worker crashes (store dies under the worker mid-job)
  connectionKills: number; // server-side kills of every store connection
  chaosMs: number; // how long crashes keep coming
  settleMs: number; // upper bound for maintenance to bring the system to quiet
  // Flows among the jobs (issue 29): each two parents, a fan-in job after both (onFailure deadLetter) and a
  // continuation after the fan-in (onFailure run), enqueued in one call. Counted in `jobs`.
  flows?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// A store that dies with its "process": after crash() every call throws, as if the worker vanished.
function crashable(store: JobStore): { store: JobStore; crash(): void } {
  let crashed = false;
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (crashed) return Promise.reject(new Error('worker crashed'));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, crash: () => (crashed = true) };
}

export function defineChaosSuite(makeHarness: () => EngineHarness, opts: ChaosOptions): void {
  let h: EngineHarness;
  let control: JobStore;

  beforeAll(async () => {
    h = makeHarness();
    control = await h.createStore({ poolSize: 4 });
  });
  afterAll(async () => h?.close());

  it(`${opts.workers} workers, ${opts.jobs} jobs, ${opts.crashes} crashes and ${opts.connectionKills} connection kills: drained within the window, no deadlock, every job in exactly one place, none finalized twice, counters exact`, async () => {
    const random = seededRandom('chaos');
    const queue = `chaos-${Date.now()}`;
    await control.updateQueue(queue, { zombieTimeoutSeconds: 2, zombiePolicy: 'retry', maxAttempts: 8 });
    const ids: string[] = [];
    const flows = opts.flows ?? 0;
    for (let f = 0; f < flows; f++) {
      const flow = await control.enqueueMany([
        { queue, type: 'chaos', payload: { flow: f, part: 'a' } },
        { queue, type: 'chaos', payload: { flow: f, part: 'b' } },
        { queue, type: 'chaos-join', payload: { flow: f }, after: [{ index: 0 }, { index: 1 }] },
        { queue, type: 'chaos-join', payload: { flow: f, then: true }, after: [{ index: 2 }], onFailure: 'run' },
      ]);
      ids.push(...flow.map((r) => r.id));
    }
    const plain = opts.jobs - 4 * flows;
    for (let i = 0; i < plain; i += 500) {
      const batch = Array.from({ length: Math.min(500, plain - i) }, (_, k) => ({
        queue,
        type: 'chaos',
        payload: { n: i + k },
      }));
      ids.push(...(await control.enqueueMany(batch)).map((r) => r.id));
    }

    const finalized = new Map<string, number>();
    // A flow's job that ran before its parents had finished, or (onFailure deadLetter) with a parent not archived.
    const early: string[] = [];
    let joinsRun = 0;
    const registry = new HandlerRegistry()
      .register('chaos-join', async (payload, ctx) => {
        const parents = await ctx.parents();
        const then = (payload as { then?: boolean }).then === true;
        joinsRun++;
        if (parents.length === 0 || parents.some((p) => p.location === 'hot' || (!then && p.location !== 'archive')))
          early.push(`${ctx.jobId}: ${JSON.stringify(parents.map((p) => [p.id, p.location, p.state]))}`);
        await sleep(random.next() * 3);
        if (random.next() < 0.05) throw new Error('chaos: transient');
      })
      .register(
        'chaos',
        async () => {
          await sleep(random.next() * 3);
          const roll = random.next();
          if (roll < 0.01) throw new FatalError('chaos: fatal');
          if (roll < 0.09) throw new Error('chaos: transient');
        },
        { backoff: { baseMs: 20, maxMs: 200 } },
      );

    interface Live {
      worker: Worker;
      crash(): void;
    }
    const live: Live[] = [];
    const stores: JobStore[] = []; // every worker's store, crashed ones too
    const startWorker = async () => {
      const base = await h.createStore({ poolSize: 3 });
      stores.push(base);
      const c = crashable(base);
      const processor = new JobProcessor({
        store: c.store,
        registry,
        leaseSeconds: 3,
        heartbeatIntervalMs: 250,
        events: {
          onOutcome: (e) => {
            if (e.outcome === 'succeeded' || e.outcome === 'dead_lettered') {
              finalized.set(e.job.id, (finalized.get(e.job.id) ?? 0) + 1);
            }
          },
        },
      });
      const worker = new Worker(processor, { queues: [queue], concurrency: 16, pollIntervalMs: 25 });
      worker.start();
      live.push({ worker, crash: c.crash });
    };
    for (let i = 0; i < opts.workers; i++) await startWorker();

    // Chaos phase: crash random workers (replacing them) and kill every store connection now and then.
    // Bounded by count, not by the clock: on a loaded machine the sleeps stretch, and a time bound would end the
    // phase before every planned crash and kill happened (each iteration does exactly one of them). Each event also
    // comes as soon as the backlog has shrunk past its share of the jobs: on a fast, quiet machine the jobs drained
    // before the first gap had passed, every crash hit an idle worker, and nothing was left to rescue.
    let crashes = 0;
    let kills = 0;
    const events = opts.crashes + opts.connectionKills;
    const gap = opts.chaosMs / (events + 1);
    const nextEvent = async (done: number) => {
      const until = Date.now() + gap * (0.5 + random.next());
      const hotAtMost = Math.floor((opts.jobs * (events - done)) / (events + 1));
      while (Date.now() < until && (await h.countRows('hot', queue).catch(() => opts.jobs)) > hotAtMost)
        await sleep(Math.min(25, Math.max(0, until - Date.now())));
    };
    while (crashes < opts.crashes || kills < opts.connectionKills) {
      await nextEvent(crashes + kills);
      if (crashes < opts.crashes && (kills >= opts.connectionKills || random.next() < 0.6)) {
        const victim = live.splice(random.int(0, live.length - 1), 1)[0]!;
        victim.crash();
        void victim.worker.stop(0).catch(() => undefined);
        crashes++;
        await startWorker();
      } else {
        await h.killStoreConnections();
        kills++;
      }
    }

    // Settle: maintenance until every job has left the hot table, within the window (liveness, checked below).
    const settleEnd = Date.now() + opts.settleMs;
    while (Date.now() < settleEnd) {
      await runMaintenance(control, { rescueBatch: 200 }).catch(() => undefined);
      if ((await h.countRows('hot', queue)) === 0) break;
      await sleep(300);
    }
    await Promise.all(live.map((l) => l.worker.stop(2000)));

    const hot = await h.countRows('hot', queue);
    const left = await h.hotTruth(queue);
    const archive = await h.countRows('archive', queue);
    const dlq = await h.countRows('dlq', queue);
    const stats = await h.statsRow(queue);
    const succeededBuckets = (await h.bucketTotals(queue, 'succeeded')).count;
    const failedBuckets = (await h.bucketTotals(queue, 'failed')).count;
    const read = (await control.stats()).find((s) => s.queue === queue);
    // Every store closed, so the engine's deadlock counters are final (h.close() closes them again, harmlessly).
    await Promise.allSettled([...stores, control].map((s) => s.close()));
    const deadlocks = (await h.deadlocks?.()) ?? [];

    // No deadlock between any two moves (reported even when the liveness check below fails too).
    expect.soft(deadlocks, `${h.engine}: deadlocks during the chaos run`).toEqual([]);
    // Liveness, not only safety: the backlog drained within its window.
    expect(
      hot,
      `liveness: ${hot} of ${opts.jobs} jobs still in the hot table when the ${opts.settleMs / 1000} s settle window ended ` +
        `(pending ${left.pending}, of them due ${left.due}; fetched ${left.fetched}; processing ${left.processing}; ` +
        `archived ${archive}, dead-lettered ${dlq})`,
    ).toBe(0);
    expect(archive + dlq).toBe(opts.jobs);
    const archived = new Set(await h.ids('archive'));
    const dead = new Set(await h.ids('dlq'));
    for (const id of ids) expect(Number(archived.has(id)) + Number(dead.has(id))).toBe(1);
    const twice = [...finalized.entries()].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);
    // Flows: no child ran before its parents had finished, and (above) none was lost: each ended archived or
    // dead-lettered ('parent_failed' when a parent failed), exactly once.
    expect(early).toEqual([]);
    if (flows > 0) expect(joinsRun).toBeGreaterThan(0);
    expect(stats.succeeded).toBe(archive);
    expect(stats.failed).toBe(dlq);
    expect(succeededBuckets).toBe(archive);
    expect(failedBuckets).toBe(dlq);
    expect(dlq).toBeGreaterThan(0); // fatal handler errors guarantee some
    expect(stats.retried).toBeGreaterThan(0);
    expect(stats.zombie).toBeGreaterThan(0); // crashed workers' jobs were rescued
    // The maintained read counters survived killed sessions and rolled-back moves too.
    expect(read).toMatchObject({
      pending: 0,
      due: 0,
      dueExact: true,
      fetched: 0,
      processing: 0,
      waiting: 0,
      dlq,
      succeeded: archive,
    });
  });
}

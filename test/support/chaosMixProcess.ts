// One process of the mixed chaos run (test/support/chaosMix.ts): MIX_ROLE says what it does against MIX_URL.
//   worker: a long-running Worker over every queue (LISTEN/NOTIFY wake-ups and polling);
//   drain:  the Functions path: the timer dispatcher's drain() with a budget, again and again, and the queue trigger's
//           processById of pending jobs it finds by search;
//   maint:  the maintenance pass (rescue, purges, counter folding) in a loop;
//   ops:    an operator: cancels (one, many), resurrects (by id, by filter), purges, pauses and resumes a queue,
//           enqueues with idempotency keys;
//   sched:  a scheduler pass over a few every-second schedules in a loop (several such processes race for each
//           tick), and keyed enqueues and keyed flows of keys every sched process shares (concurrent duplicates
//           across processes).
// It prints one line per event on stdout (the parent parses them):
//   READY                                   running
//   S <job> <attempt> <ms>                  a handler began (wall clock ms)
//   E <job> <attempt> <ms> <how>            it ended: ok | threw | aborted:<reason>
//   O <job> <outcome> <reason|->            the processor wrote (or lost) its outcome
//   P <queue> <n>                           ops purged n archived jobs of queue
//   PU <queue> <max>                        a purge failed with its outcome unknown (it may have committed before
//                                           its connection was cut): it purged between 0 and max jobs
//   X <what> <error>                        an operation failed (counted, not fatal)
//   K <error>                               a keyed enqueue of a shared key failed (a problem unless a cut connection)
//   L <ms> <max>                            the event loop's longest delay (ms) in the second before (only >= 100)
//   W <worker id>                           the processor's id (its leases carry it: jobs_hot.worker_id)
// SIGTERM stops it gracefully (MIX_GRACE_MS) and it prints "BYE <ms it took>" before it exits.
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { PostgresWakeups } from '../../shared/engines/postgres/wakeups.js';
import { HandlerRegistry } from '../../shared/jobs/registry.js';
import { FatalError } from '../../shared/jobs/handlerErrors.js';
import { JobProcessor, Worker } from '../../shared/jobs/processor.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';
import type { JobContext } from '../../shared/jobs/registry.js';
import { seededRandom } from './seededRandom.js';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const url = process.env.MIX_URL!;
const role = process.env.MIX_ROLE ?? 'worker';
const queues = (process.env.MIX_QUEUES ?? '').split(',').filter(Boolean);
const purgeQueue = process.env.MIX_PURGE_QUEUE ?? '';
const graceMs = Number(process.env.MIX_GRACE_MS ?? 3000);
const tiny = process.env.MIX_TINY === '1'; // the limits at their least: the limited queue at 1-2, 'narrow' at 1
const big = process.env.MIX_BIG === '1'; // resurrects of up to 500 dead letters at once
const random = seededRandom(`chaos mix ${role} ${process.pid}`, Number(process.env.MIX_SEED ?? 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const out = (line: string) => {
  process.stdout.write(`${line}\n`);
  if (trace) trace.write(`${Date.now()} ${line}\n`);
};
// MIX_TRACE_DIR: every line and the processor's warnings, timed, in a file per process (for a run's post-mortem).
const trace = process.env.MIX_TRACE_DIR
  ? (await import('node:fs')).createWriteStream(`${process.env.MIX_TRACE_DIR}/${role}-${process.pid}.log`)
  : undefined;
const traceWarn = (m: string, f?: unknown) => trace?.write(`${Date.now()} WARN ${m} ${JSON.stringify(f ?? {})}\n`);
// Clock skew (MIX_SKEW_MS): this process's Date (Date.now(), new Date()) runs that far off the machine's clock, as
// a host whose clock drifted; the lines for the parent use the true time (wall()), which the parent compares across
// processes.
const trueNow = Date.now.bind(Date);
const wall = (): number => trueNow();
const skewMs = Number(process.env.MIX_SKEW_MS || 0);
if (skewMs) {
  const RealDate = Date;
  const Skewed = class extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(trueNow() + skewMs);
      else super(...(args as [string | number | Date]));
    }
    static override now(): number {
      return trueNow() + skewMs;
    }
  };
  globalThis.Date = Skewed as DateConstructor;
}
let stopping = false;

// Sleeps ms, or ends early with the signal's reason when the attempt is aborted.
function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason as Error);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

type Payload = { n?: number; okAt?: number; ms?: number; probe?: boolean; blob?: string };

// Every handler reports its start and end; what it does is its type's.
function traced(body: (p: Payload, ctx: JobContext) => Promise<unknown>) {
  return async (p: Payload, ctx: JobContext) => {
    out(`S ${ctx.jobId} ${ctx.attempt} ${wall()}`);
    let how = 'ok';
    try {
      return await body(p, ctx);
    } catch (err) {
      how = ctx.signal.aborted ? `aborted:${String((ctx.signal.reason as { reason?: string })?.reason)}` : 'threw';
      throw err;
    } finally {
      out(`E ${ctx.jobId} ${ctx.attempt} ${wall()} ${how}`);
    }
  };
}

const backoff = { baseMs: 20, maxMs: 300 };
// Every job type of the run (the opsapi role registers them too: the ops API enqueues only registered types).
const registerMix = (r: HandlerRegistry) =>
  r
    .register(
      'ok',
      traced(async (p, ctx) => {
        await abortableSleep(random.int(0, 8), ctx.signal);
        return { n: p.n ?? null };
      }),
      { backoff },
    )
    .register(
      'flaky',
      traced(async (p, ctx) => {
        await abortableSleep(random.int(0, 5), ctx.signal);
        if (ctx.attempt < (p.okAt ?? 2)) throw new Error(`flaky: attempt ${ctx.attempt}`);
      }),
      { backoff },
    )
    .register(
      'doomed',
      traced(async (_p, ctx) => {
        await abortableSleep(random.int(0, 5), ctx.signal);
        throw new Error('doomed: always fails');
      }),
      { backoff, maxAttempts: 3 },
    )
    .register(
      'fatal',
      traced(async () => {
        throw new FatalError('fatal: never retried');
      }),
    )
    // A slow handler under a short timeout: about half its attempts time out (DLQ 'timeout').
    .register(
      'late',
      traced(async (_p, ctx) => {
        await abortableSleep(random.int(50, 600), ctx.signal);
      }),
      { backoff, timeoutMs: 300 },
    )
    // Runs longer than the queues' zombie timeout: alive only through the heartbeats; reports progress and logs.
    .register(
      'beat',
      traced(async (p, ctx) => {
        const total = p.ms ?? 2500;
        const began = Date.now();
        for (let i = 0; Date.now() - began < total; i++) {
          ctx.progress({ done: Date.now() - began, total });
          ctx.log.info('beat', { i });
          if (i % 4 === 0) await ctx.heartbeat();
          await abortableSleep(150, ctx.signal);
        }
        return { beats: true };
      }),
      { backoff },
    )
    // Limited per type (concurrency 2 per process): a job over the limit waits in its process, heartbeating.
    .register(
      'narrow',
      traced(async (_p, ctx) => {
        await abortableSleep(random.int(20, 250), ctx.signal);
      }),
      { backoff, concurrency: tiny ? 1 : 2 },
    )
    // A large payload in, a large result out (claims and completions of a few MB a batch).
    .register(
      'bulky',
      traced(async (p, ctx) => {
        await abortableSleep(random.int(0, 20), ctx.signal);
        return { size: p.blob?.length ?? 0, blob: 'r'.repeat(random.int(30_000, 60_000)) };
      }),
      { backoff },
    )
    // Blocks its event loop past the zombie timeout: no heartbeat can go out, so rescue hands the job to someone else
    // while it runs (the one case where two runs of a job may overlap: the first one's lease is already gone).
    .register(
      'hog',
      traced(async (p) => {
        const until = Date.now() + (p.ms ?? 2600);
        while (Date.now() < until) {
          /* busy */
        }
      }),
      { backoff },
    );
const registry = registerMix(new HandlerRegistry());

// A connection terminated while the store checks the server at startup fails connect(); a host would start the
// process again, so it tries again (the chaos terminates backends of processes still starting), for up to a minute: a
// crash restart's WAL recovery refused connections for longer than 5 s at load 30 (57P03, chaos hunt 6).
async function connectStore(): Promise<PostgresJobStore> {
  for (let i = 0; ; i++) {
    try {
      return await PostgresJobStore.connect(url, {
        poolSize: role === 'worker' ? Number(process.env.MIX_POOL || 4) : 4,
        migrate: false,
      });
    } catch (err) {
      if (i >= 240) throw err;
      await sleep(250);
    }
  }
}
const store = await connectStore();
const maxAttemptsByType = registry.maxAttemptsByType();

function failed(what: string, err: unknown) {
  out(
    `X ${what} ${String((err as Error)?.message ?? err)
      .replace(/\s+/g, ' ')
      .slice(0, 200)}`,
  );
}

function processor() {
  return new JobProcessor({
    store,
    registry,
    leaseSeconds: 5,
    heartbeatIntervalMs: 300,
    progressIntervalMs: 200,
    log: { info: () => undefined, warn: traceWarn, error: (m, f) => failed(`log:${m}`, JSON.stringify(f)) },
    events: { onOutcome: (e) => out(`O ${e.job.id} ${e.outcome} ${e.reason ?? '-'}`) },
  });
}

let stop: () => Promise<void> = async () => undefined;
// Jobs an operator resurrected (a flow's child resurrected by hand runs even with a parent dead: the parent checks
// its flows against these).
const resurrected = (ids: readonly string[]) => {
  if (ids.length) out(`R ${ids.join(' ')}`);
};

if (role === 'worker') {
  const wakeups = new PostgresWakeups(url);
  const wp = processor();
  out(`W ${wp.workerId}`);
  const worker = new Worker(wp, {
    queues,
    concurrency: Number(process.env.MIX_CONCURRENCY || 12),
    pollIntervalMs: 400,
    wakeups,
  });
  worker.start();
  stop = async () => {
    await worker.stop(graceMs);
    await wakeups.close();
  };
} else if (role === 'drain') {
  const p = processor();
  out(`W ${p.workerId}`);
  const loop = (async () => {
    while (!stopping) {
      try {
        await p.drain({ queues, budgetMs: 1500, concurrency: 8 });
        // The queue trigger's path: a few pending jobs by id, as their messages would name them.
        const page = await store.searchJobs({ location: 'hot', state: 'pending', limit: 5, order: 'oldest' });
        await Promise.all(page.items.map((j) => p.processById(j.id)));
      } catch (err) {
        failed('drain', err);
        await sleep(200);
      }
      await sleep(random.int(20, 120));
    }
  })();
  stop = async () => {
    await p.shutdown(graceMs);
    await loop;
  };
} else if (role === 'maint') {
  const loop = (async () => {
    while (!stopping) {
      try {
        await runMaintenance(store, { rescueBatch: 25, purgeBatch: 50, maxAttemptsByType });
        await store.stats();
        await store.metrics(60);
      } catch (err) {
        failed('maint', err);
      }
      await sleep(random.int(50, 250));
    }
  })();
  stop = () => loop;
} else if (role === 'ops') {
  const pick = <T>(xs: T[]): T | undefined => (xs.length ? xs[random.int(0, xs.length - 1)] : undefined);
  const loop = (async () => {
    let k = 0;
    while (!stopping) {
      const action = random.int(0, 9);
      try {
        if (action <= 1) {
          const page = await store.searchJobs({ location: 'hot', limit: 20, queue: pick(queues) });
          const j = pick(page.items);
          if (j) await store.cancel(j.id);
        } else if (action === 2) {
          const page = await store.searchJobs({ location: 'hot', limit: 30 });
          const ids = page.items.filter(() => random.next() < 0.2).map((j) => j.id);
          if (ids.length) await store.cancelMany(ids);
        } else if (action <= 4) {
          const page = await store.searchJobs({ location: 'dlq', limit: 20 });
          const chosen = page.items.filter(() => random.next() < 0.3);
          if (chosen.length) {
            const got = new Set(await store.resurrect(chosen.map((j) => j.id)));
            resurrected([...got]);
            for (const j of chosen) if (j.reason === 'skipped' && got.has(j.id)) out(`RS ${j.queue} 1`);
          }
        } else if (action === 5) {
          const r = await store.resurrectByFilter({
            queue: pick(queues),
            reason: 'exhausted',
            limit: 5,
            dryRun: false,
          });
          resurrected(r.ids);
          if (big && random.next() < 0.5) {
            // A large set at once, while the workers claim: every dead letter of a queue by filter, or a page by id.
            if (random.next() < 0.5) {
              // Not 'skipped' (the harness counts those by id: a skipped job's revival is no failure undone).
              const reason = pick(['exhausted', 'fatal', 'parent_failed', 'cancelled', 'timeout', 'zombie'] as const)!;
              const all = await store.resurrectByFilter({ queue: pick(queues), reason, limit: 500, dryRun: false });
              resurrected(all.ids);
            } else {
              const page = await store.searchJobs({ location: 'dlq', limit: 500 });
              const got = new Set(await store.resurrect(page.items.map((j) => j.id)));
              resurrected([...got]);
              for (const j of page.items) if (j.reason === 'skipped' && got.has(j.id)) out(`RS ${j.queue} 1`);
            }
          }
        } else if (action === 6 && purgeQueue) {
          const n = await store.purge('archive', purgeQueue, new Date(Date.now() - 200), 20).catch((err: unknown) => {
            out(`PU ${purgeQueue} 20`);
            throw err;
          });
          if (n > 0) out(`P ${purgeQueue} ${n}`);
        } else if (action === 7) {
          // Dedup: the same key twice in one call, and again later; each answers the one hot job.
          const key = `dup-${process.pid}-${k++ % 7}`;
          const q = pick(queues)!;
          const r = await store.enqueueMany([
            { queue: q, type: 'ok', idempotencyKey: key, payload: { n: -1 } },
            { queue: q, type: 'ok', idempotencyKey: key, payload: { n: -1 } },
          ]);
          out(`Q ${r.map((x) => `${x.id}:${x.duplicate ? 1 : 0}`).join(' ')}`);
        } else if (action === 8) {
          const q = pick(queues)!;
          await store.updateQueue(q, { paused: true });
          await sleep(random.int(20, 200));
          await store.updateQueue(q, { paused: false });
        } else {
          await store.stats();
          await store.dlqGroups(null, 0, 10, 500);
        }
      } catch (err) {
        failed(`ops${action}`, err);
      }
      await sleep(random.int(30, 120));
    }
    for (const q of queues) await store.updateQueue(q, { paused: false }).catch((e: unknown) => failed('unpause', e));
  })();
  stop = () => loop;
}

if (role === 'dispatch') {
  // The Functions app's timers and queue trigger on a runtime of this process: the dispatcher's pass (run mode, its
  // drain and the slot hand-on after it; post mode: claim, release, post), the maintenance pass, and a queue runner
  // taking each posted id as functions/jobRunner.ts does (processByIdOf; the freed slot handed on; a retried or
  // released job's message posted for when it is due). Messages are kept in this process: a kill loses them, as a
  // lost message (the dispatcher's next pass covers it).
  const { parseSettings } = await import('../../shared/config/settings.js');
  const { createRuntime } = await import('../../shared/app/runtime.js');
  const { dispatchDueJobs, runMaintenancePass } = await import('../../shared/app/timerPasses.js');
  const { freesSlot, handOnSlots } = await import('../../shared/app/slots.js');
  const { postJob } = await import('../../shared/app/enqueue.js');
  const inbox: { id: string; at: number }[] = [];
  const gateway = {
    send: async (_queue: string, message: unknown, opts?: { delaySeconds?: number }) => {
      const id = (message as { jobId?: string }).jobId;
      if (id) inbox.push({ id, at: Date.now() + (opts?.delaySeconds ?? 0) * 1000 });
    },
    sendPoison: async () => undefined,
    ping: async () => true,
  };
  const env: Record<string, string> = {
    KEEL_PG_URL: url,
    KEEL_MIGRATE_ON_START: 'false',
    KEEL_DISPATCH_BUDGET_MS: '1500',
    KEEL_DISPATCH_CONCURRENCY: '8',
    KEEL_DISPATCH_POST_LIMIT: '32',
    KEEL_LEASE_SECONDS: '5',
    KEEL_HEARTBEAT_MS: '300',
    KEEL_MAINT_RESCUE_BATCH: '25',
    KEEL_MAINT_PURGE_BATCH: '50',
  };
  let base: Awaited<ReturnType<typeof createRuntime>> | undefined;
  for (let i = 0; !base; i++) {
    try {
      base = await createRuntime(parseSettings(env), {
        queues: gateway,
        env,
        store,
        transfers: null,
        register: (r) => void registerMix(r),
      });
    } catch (err) {
      if (i >= 20) throw err;
      await sleep(250);
    }
  }
  // The runtime's processor, with this run's outcome lines.
  const p = new JobProcessor({
    store,
    registry: base.registry,
    workerId: base.workerId,
    leaseSeconds: 5,
    heartbeatIntervalMs: 300,
    progressIntervalMs: 200,
    log: { info: () => undefined, warn: traceWarn, error: (m, f) => failed(`log:${m}`, JSON.stringify(f)) },
    events: { onOutcome: (e) => out(`O ${e.job.id} ${e.outcome} ${e.reason ?? '-'}`) },
  });
  out(`W ${p.workerId}`);
  const rt = { ...base, processor: p };
  const post = { ...rt, settings: { ...rt.settings, KEEL_DISPATCH_MODE: 'post' as const } };
  const log = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };
  const runner = (async () => {
    while (!stopping) {
      const now = Date.now();
      const due = inbox.filter((m) => m.at <= now).slice(0, 8);
      for (const m of due) inbox.splice(inbox.indexOf(m), 1);
      await Promise.all(
        due.map(async ({ id }) => {
          try {
            const { outcome, queue } = await p.processByIdOf(id);
            if (outcome === 'not_claimed') return;
            if (queue !== undefined && freesSlot(outcome)) await handOnSlots(rt, [queue], log);
            if (outcome === 'retried' || outcome === 'released') {
              const job = await store.getJob(id);
              if (job?.location === 'hot' && job.state === 'pending' && job.runAt)
                await postJob(rt, id, log, Math.max(0, (job.runAt.getTime() - Date.now()) / 1000));
            }
          } catch (err) {
            failed('runner', err);
          }
        }),
      );
      await sleep(due.length ? 0 : 30);
    }
  })();
  const timers = (async () => {
    let k = 0;
    while (!stopping) {
      try {
        if (k % 3 === 2) await runMaintenancePass(rt, log);
        else await dispatchDueJobs(k % 3 === 0 ? rt : post, log);
      } catch (err) {
        failed(`dispatch${k % 3}`, err);
      }
      k++;
      await sleep(random.int(100, 600));
    }
  })();
  stop = async () => {
    await p.shutdown(graceMs);
    await Promise.all([runner, timers]);
  };
}

if (role === 'sched') {
  const { defineSchedule } = await import('../../shared/jobs/define.js');
  const { runSchedules } = await import('../../shared/jobs/scheduler.js');
  const schedQueues = queues.filter((q) => q !== purgeQueue);
  const defs = schedQueues.map((q, i) =>
    defineSchedule(`mx-sched-${i}`, { cron: '* * * * * *', type: 'ok', queue: q, payload: { n: -4 }, graceMs: 5000 }),
  );
  const loop = (async () => {
    let k = 0;
    while (!stopping) {
      try {
        const roll = random.next();
        if (roll < 0.3) {
          // Keyed flows every sched process submits too: the same parent and child keys, again and again (duplicates
          // of the hot ones, or fresh once they finished), racing the completions, cancels and resurrects of them.
          const q = schedQueues[k % schedQueues.length]!;
          const n = k++ % 4;
          try {
            const r = await store.enqueueMany([
              { queue: q, type: 'ok', idempotencyKey: `fp-${n}`, payload: { n: -7 } },
              { queue: q, type: 'narrow', idempotencyKey: `fc-${n}`, payload: { n: -8 }, after: [{ index: 0 }] },
              { queue: q, type: 'ok', idempotencyKey: `fg-${n}`, payload: { n: -9 }, after: [{ index: 1 }] },
            ]);
            out(`J ${r.map((x) => x.id).join(' ')}`);
          } catch (err) {
            out(
              `K ${String((err as Error)?.message ?? err)
                .replace(/\s+/g, ' ')
                .slice(0, 200)}`,
            );
          }
        } else if (roll < 0.6) {
          const items = await runSchedules(store, registry, defs, new Date());
          const got = items.flatMap((x) => x.enqueued);
          if (got.length) out(`J ${got.join(' ')}`);
        } else {
          // Keys shared by every sched process: concurrent duplicates across processes never error nor deadlock.
          const q = schedQueues[k % schedQueues.length]!;
          const key = `shared-${k++ % 6}`;
          try {
            const r = await store.enqueueMany([
              { queue: q, type: 'narrow', idempotencyKey: key, payload: { n: -5 } },
              { queue: q, type: 'ok', payload: { n: -6 }, delayMs: random.int(0, 500) },
            ]);
            out(`J ${r.map((x) => x.id).join(' ')}`);
          } catch (err) {
            out(
              `K ${String((err as Error)?.message ?? err)
                .replace(/\s+/g, ' ')
                .slice(0, 200)}`,
            );
          }
        }
      } catch (err) {
        failed('sched', err);
      }
      await sleep(random.int(20, 150));
    }
  })();
  stop = () => loop;
}

if (role === 'opsapi') {
  // An operator through the ops API's HTTP handler (the route table, schemas, previews and audit of functions/ops.ts),
  // on a runtime of its own: pauses and resumes (a resume posts the due jobs: claim and release), queue settings
  // changed while jobs run (zombie timeout, concurrency, a retention raised and lowered), cancels of running and
  // pending jobs one at a time and by preview, DLQ resurrects by preview (parent_failed, skipped, exhausted), purges
  // of the purged queue's archive, and enqueues of keyed, delayed jobs and flows (parent, children, fan-in).
  // Prints `H <status> <route>` for every answer of 500 or more and every refusal (401/403: the operator holds the
  // role, so a refusal means the run tests nothing of the route), `J <ids>` for the jobs it enqueued, and
  // `P`/`R` as the ops role.
  const env: Record<string, string> = {
    KEEL_PG_URL: url,
    KEEL_MIGRATE_ON_START: 'false',
    KEEL_OPS_REFUSAL_WINDOW_MS: '0',
  };
  // The caller's principal is believed only where something vouches for it: vitest sets this for every test
  // (vitest.config.ts), dev/chaosMix.ts did not, and every operator call of its runs was refused 403 (chaos hunt 6).
  process.env.KEEL_TRUST_CLIENT_PRINCIPAL ??= 'local';
  const { parseSettings } = await import('../../shared/config/settings.js');
  const { createRuntime } = await import('../../shared/app/runtime.js');
  const { opsRuntimeOf } = await import('../../shared/app/opsRuntime.js');
  const { createOpsHandler } = await import('../../shared/ops/router.js');
  const { allRoutes } = await import('../../shared/ops/routes.js');
  const { encodeClientPrincipal } = await import('../../shared/ops/auth.js');
  const { HttpRequest, InvocationContext } = await import('../../dev/azureFunctions.js');
  const noQueues = { send: async () => undefined, sendPoison: async () => undefined, ping: async () => true };
  let rt: Awaited<ReturnType<typeof createRuntime>> | undefined;
  for (let i = 0; !rt; i++) {
    try {
      rt = await createRuntime(parseSettings(env), { queues: noQueues, env, register: (r) => void registerMix(r) });
    } catch (err) {
      if (i >= 20) throw err;
      await sleep(250);
    }
  }
  const opsRt = opsRuntimeOf(rt);
  const handle = createOpsHandler(allRoutes(), async () => opsRt);
  const principal = encodeClientPrincipal({ name: 'chaos-operator', roles: ['Keel.Operator'] });
  const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> => {
    const u = new URL(`http://localhost:7071/api/ops/${path}`);
    const query: Record<string, string> = {};
    for (const [k, v] of u.searchParams) query[k] = v;
    const bytes = body !== undefined ? new TextEncoder().encode(JSON.stringify(body)) : undefined;
    const req = new HttpRequest({
      method,
      url: u.toString(),
      headers: {
        ...(method !== 'GET' ? { 'content-type': 'application/json' } : {}),
        ...(bytes ? { 'content-length': String(bytes.length) } : {}),
        'x-ms-client-principal': principal,
      },
      query,
      params: { path: decodeURIComponent(u.pathname.replace(/^\/api\/ops\/?/, '')) },
      ...(bytes ? { body: { bytes } } : {}),
    });
    const logs: string[] = [];
    const ctx = new InvocationContext({
      invocationId: `chaos-${Date.now()}`,
      functionName: 'ops',
      logHandler: (level, ...args) => logs.push(`${level}: ${args.map(String).join(' ')}`),
    });
    const res = await handle(req, ctx, 'key');
    const status = res.status ?? 200;
    if (status >= 500 || status === 401 || status === 403)
      out(
        `H ${status} ${method} ${path.replace(/\d+/g, 'N')} ${JSON.stringify(res.jsonBody).slice(0, 200)} ${
          status === 503 ? '' : logs.join(' | ').replace(/\s+/g, ' ').slice(0, 600)
        }`,
      );
    return { status, json: res.jsonBody };
  };
  const pick = <T>(xs: T[]): T | undefined => (xs.length ? xs[random.int(0, xs.length - 1)] : undefined);
  const flowQueues = queues.filter((q) => q !== purgeQueue);
  const loop = (async () => {
    let k = 0;
    while (!stopping) {
      const action = random.int(0, 11);
      const q = pick(queues)!;
      try {
        if (action === 0) {
          await call('POST', `queues/${q}/pause`, {});
          await sleep(random.int(20, 300));
          await call('POST', `queues/${q}/resume`, {});
        } else if (action === 1) {
          // Limits changed under the running jobs; the zombie timeout stays at or above 2 s (the run's heartbeats
          // every 300 ms keep a lease of that length).
          await call('PATCH', `queues/${q}`, {
            zombieTimeoutSeconds: random.int(2, 4),
            ...(q === 'mx-lim' ? { maxConcurrency: tiny ? random.int(1, 2) : random.int(1, 10) } : {}),
            archiveRetentionSeconds: random.int(3600, 7200),
            dlqRetentionSeconds: random.int(3600, 7200),
            confirmPurge: random.next() < 0.5,
          });
        } else if (action === 2) {
          const page = await call(
            'GET',
            `jobs?location=hot&queue=${q}&limit=30${random.next() < 0.6 ? '&state=processing' : ''}`,
          );
          const j = pick(page.json?.items ?? []) as { id: string } | undefined;
          if (j) await call('POST', `jobs/${j.id}/cancel`, {});
        } else if (action === 3) {
          const state = pick(['pending', 'processing', 'waiting', 'fetched'])!;
          const prev = await call('POST', 'jobs/cancel', { queue: q, state, limit: 5, dryRun: true });
          const ids = (prev.json?.ids ?? []) as string[];
          if (ids.length) await call('POST', 'jobs/cancel', { ids, dryRun: false });
        } else if (action <= 5) {
          const reason = pick(['parent_failed', 'skipped', 'exhausted', 'cancelled', 'fatal'])!;
          const prev = await call('POST', 'dlq/resurrect', { queue: q, reason, limit: 5, dryRun: true });
          const ids = (prev.json?.ids ?? []) as string[];
          if (ids.length) {
            const r = await call('POST', 'dlq/resurrect', { queue: q, reason, ids, limit: 5, dryRun: false });
            const got = (r.json?.ids ?? []) as string[];
            resurrected(got);
            // A skipped job was counted as no failure, and its resurrect is counted as one all the same.
            const skippedBack = got.filter((id) => ids.includes(id)).length;
            if (reason === 'skipped' && skippedBack) out(`RS ${q} ${skippedBack}`);
          }
        } else if (action === 6 && purgeQueue) {
          const r = await call('POST', 'purge', {
            target: 'archive',
            queue: purgeQueue,
            olderThan: new Date(Date.now() - 200).toISOString(),
            batchSize: 20,
            maxBatches: 2,
            dryRun: false,
          }).catch((err: unknown) => {
            out(`PU ${purgeQueue} 40`);
            throw err;
          });
          if (r.status >= 500)
            out(`PU ${purgeQueue} 40`); // the server lost its connection: a batch may have committed
          else if (r.json?.deleted > 0) out(`P ${purgeQueue} ${r.json.deleted}`);
        } else if (action <= 9) {
          // A flow: a parent (maybe doomed), children after it with a policy each, a fan-in after the children;
          // some keyed (the same key again is a duplicate of the hot job), some delayed.
          const fq = pick(flowQueues)!;
          const parentType = pick(['ok', 'ok', 'flaky', 'doomed', 'fatal'])!;
          const n = random.int(1, 4);
          const jobs: Record<string, unknown>[] = [
            {
              queue: fq,
              type: parentType,
              payload: parentType === 'flaky' ? { okAt: 2 } : { n: k },
              ...(random.next() < 0.3 ? { delayMs: random.int(50, 1500) } : {}),
            },
          ];
          for (let c = 0; c < n; c++)
            jobs.push({
              queue: pick(flowQueues)!,
              type: pick(['ok', 'ok', 'flaky', 'doomed'])!,
              payload: { okAt: 2 },
              after: [{ index: 0 }],
              onFailure: pick(['deadLetter', 'deadLetter', 'skip', 'run'])!,
            });
          jobs.push({
            queue: fq,
            type: 'ok',
            payload: { n: -2 },
            after: Array.from({ length: n }, (_, c) => ({ index: c + 1 })),
            ...(random.next() < 0.5 ? { onFailure: pick(['deadLetter', 'skip', 'run'])! } : {}),
          });
          const r = await call('POST', 'jobs', { jobs });
          const got = (r.json?.jobs ?? []) as { id: string }[];
          if (got.length) out(`J ${got.map((x) => x.id).join(' ')}`);
        } else if (action === 10) {
          const key = `api-${process.pid}-${k % 5}`;
          const body = { queue: q, type: 'ok', idempotencyKey: key, payload: { n: -3 }, delayMs: random.int(0, 800) };
          const r1 = await call('POST', 'jobs', body);
          const r2 = await call('POST', 'jobs', body);
          const got = [r1.json?.id, r2.json?.id].filter((x): x is string => typeof x === 'string');
          if (got.length) out(`J ${got.join(' ')}`);
        } else {
          await call('GET', 'stats');
          await call('GET', `queues/${q}`);
          await call('GET', 'dlq/groups');
          await call('GET', 'metrics');
        }
      } catch (err) {
        failed(`opsapi${action}`, err);
      }
      k++;
      await sleep(random.int(20, 100));
    }
    for (const q of queues) await call('POST', `queues/${q}/resume`, {}).catch((e: unknown) => failed('unpause', e));
  })();
  stop = async () => {
    await loop;
    await rt.close();
  };
}

if (role === 'churn') {
  // Queue settings changed all the time, under the claims: each queue's limit (none, or 1-8), pauses and resumes,
  // the zombie timeout (2-4 s: the run's heartbeats keep a lease that long).
  const pick = <T>(xs: T[]): T => xs[random.int(0, xs.length - 1)]!;
  const loop = (async () => {
    while (!stopping) {
      const q = pick(queues);
      try {
        const roll = random.next();
        if (roll < 0.5) await store.updateQueue(q, { maxConcurrency: random.next() < 0.3 ? null : random.int(1, 8) });
        else if (roll < 0.8) {
          await store.updateQueue(q, { paused: true });
          await sleep(random.int(10, 300));
          await store.updateQueue(q, { paused: false });
        } else await store.updateQueue(q, { zombieTimeoutSeconds: random.int(2, 4) });
      } catch (err) {
        failed('churn', err);
      }
      await sleep(random.int(20, 150));
    }
    for (const q of queues) await store.updateQueue(q, { paused: false }).catch((e: unknown) => failed('unpause', e));
  })();
  stop = () => loop;
}

// How late this process's timers ran (a starved or descheduled process gives its leases up late).
const lag = monitorEventLoopDelay({ resolution: 10 });
lag.enable();
setInterval(() => {
  const max = lag.max / 1e6;
  lag.reset();
  if (max >= 100) out(`L ${wall()} ${Math.round(max)}`);
}, 1000).unref();

let exiting = false;
const onStop = () => {
  if (exiting) return;
  exiting = true;
  stopping = true;
  const began = Date.now();
  void stop()
    .catch((err: unknown) => failed('stop', err))
    .then(() => store.close())
    .catch(() => undefined)
    .finally(() => {
      out(`BYE ${Date.now() - began}`);
      process.exit(0);
    });
};
process.on('SIGTERM', onStop);
process.on('SIGINT', onStop);
// Only now: a SIGTERM sent the moment the parent reads READY must find the handler installed (a preempted child
// between the two lines was killed outright by the default action under load).
out('READY');

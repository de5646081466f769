// npm run bench:peers — Keel against graphile-worker and pg-boss on one PostgreSQL (the embedded one, fsync on, as npm
// start runs it; or the server --pg-url / KEEL_BENCH_PG_URL names, bench/server.ts), same N, same no-op handler, interleaved per round (every config once per round, the order rotating),
// medians of the rounds, ratios computed from this one run. See bench/README.md for the method and results.
//
//   npm run bench:peers                          N = 20,000, 3 rounds: enqueue + process, idle latency
//   npm run bench:peers -- --scaling             then again with 200k delayed jobs in each system's queue (and, in the
//                                                same rounds, on a twin queue without them: the slowdown), then with
//                                                1M archive + 200k DLQ rows (stats() timing)
//   --jobs N  --rounds R  --warmup W (unrecorded rounds first, default 1)  --only keel-batched,...  --latency-samples S
//   --scaling-only a,b    the configs the scaling phases run (default keel-batched,graphile-perf: bounded run time)
//   --pg-url URL          an admin URL of a running server to use instead of the embedded one (or KEEL_BENCH_PG_URL)
//   --vacuum              VACUUM the database (every system's tables) before each run, after none of them is running:
//                         no run then starts on the dead rows of earlier runs or shares its CPU with an autovacuum of
//                         them (off by default: the numbers of bench/README.md were taken without it)
//
// The peers are devDependencies used only here; their newest versions need Node >= 22.18 (the project runs on 20):
// run this file with Node 22 (see bench/README.md: `.tools/package/bin/node`).
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor, Worker } from '../shared/jobs/processor.js';
import { parseSettings } from '../shared/config/settings.js';
import { dispatchDueJobs } from '../shared/app/timerPasses.js';
import type { Runtime } from '../shared/app/runtime.js';
import { PostgresWakeups } from '../shared/engines/postgres/wakeups.js';
import { GRAPHILE_OPTIONS, drainKeelBatched } from './shapes.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

const CONFIGS = [
  'keel-batched',
  'keel-functions-default',
  'graphile-perf',
  'graphile-defaults',
  'pgboss-batched',
] as const;
type Config = (typeof CONFIGS)[number];

interface RunResult {
  enqueuePerSec: number;
  processPerSec: number;
  exact?: boolean;
}

const peerVersion = (name: string): string =>
  (
    JSON.parse(readFileSync(path.join(process.cwd(), 'node_modules', name, 'package.json'), 'utf8')) as {
      version: string;
    }
  ).version;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const r1 = (n: number) => Math.round(n * 10) / 10;
const r2 = (n: number) => Math.round(n * 100) / 100;
const silentLog = () => undefined;

async function waitUntil(check: () => Promise<boolean>, intervalMs = 5, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the peer to finish');
    await sleep(intervalMs);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Keel
class KeelSide {
  constructor(
    readonly store: PostgresJobStore,
    readonly url: string,
  ) {}

  static async open(url: string): Promise<KeelSide> {
    return new KeelSide(await PostgresJobStore.connect(url, { poolSize: 12 }), url);
  }

  async enqueue(queue: string, n: number, opts: { delayMs?: number } = {}): Promise<number> {
    const t = performance.now();
    for (let i = 0; i < n; i += 20_000) {
      await this.store.enqueueMany(
        Array.from({ length: Math.min(20_000, n - i) }, () => ({ queue, type: 'noop', ...opts })),
      );
    }
    return performance.now() - t;
  }

  async counts(queue: string) {
    const { rows } = await this.store.pool.query(
      `select (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
              (select count(*) from keel.jobs_hot where queue = $1 and run_at <= now())::int as hot_due,
              (select coalesce(sum(succeeded), 0) from keel.stats_summary where queue = $1)::int as counted,
              (select coalesce(sum(count), 0) from keel.metric_buckets where queue = $1 and outcome = 'succeeded')::int as bucketed`,
      [queue],
    );
    return rows[0] as { archived: number; hot_due: number; counted: number; bucketed: number };
  }

  // 2 processors x 500 jobs in flight (bench/shapes.ts).
  async batched(queue: string, n: number): Promise<RunResult> {
    const before = await this.counts(queue);
    const enqMs = await this.enqueue(queue, n);
    const t = performance.now();
    const processed = await drainKeelBatched(this.store, queue, 'peers');
    const ms = performance.now() - t;
    const after = await this.counts(queue);
    const exact =
      processed === n &&
      after.archived - before.archived === n &&
      after.counted - before.counted === n &&
      after.bucketed - before.bucketed === n &&
      after.hot_due === 0;
    return { enqueuePerSec: (n / enqMs) * 1000, processPerSec: (n / ms) * 1000, exact };
  }

  // The Functions app as deployed by default: the dispatcher timer's drain with the default settings, one host,
  // invoked again (as the timer would) until the backlog is gone.
  async functionsDefault(queue: string, n: number): Promise<RunResult> {
    const before = await this.counts(queue);
    const enqMs = await this.enqueue(queue, n);
    const settings = parseSettings({ KEEL_PG_URL: this.url, KEEL_DISPATCH_QUEUES: queue });
    const registry = new HandlerRegistry().register('noop', async () => undefined);
    const processor = new JobProcessor({
      store: this.store,
      registry,
      leaseSeconds: settings.KEEL_LEASE_SECONDS,
      heartbeatIntervalMs: settings.KEEL_HEARTBEAT_MS,
    });
    const rt = { settings, store: this.store, registry, processor, workerId: processor.workerId } as unknown as Runtime;
    const log = { info: silentLog, warn: silentLog, error: console.error };
    const t = performance.now();
    let processed = 0;
    for (let i = 0; i < 1000 && processed < n; i++) processed += (await dispatchDueJobs(rt, log)).processed;
    const ms = performance.now() - t;
    const after = await this.counts(queue);
    const exact =
      processed === n &&
      after.archived - before.archived === n &&
      after.counted - before.counted === n &&
      after.bucketed - before.bucketed === n;
    return {
      enqueuePerSec: (n / enqMs) * 1000,
      processPerSec: (n / ms) * 1000,
      exact,
    };
  }

  // Idle worker (npm start's shape: Worker + LISTEN/NOTIFY wake-ups): enqueue one job, time until its completion
  // is committed. Sequential samples.
  async latency(queue: string, samples: number): Promise<{ p50: number; p99: number; max: number }> {
    // A woken worker can finish the job before enqueueMany's answer reaches us: completions are kept until claimed.
    const done = new Map<string, () => void>();
    const finishedEarly = new Set<string>();
    const registry = new HandlerRegistry().register('noop', async () => undefined);
    const processor = new JobProcessor({
      store: this.store,
      registry,
      workerId: 'peers-latency',
      events: {
        onOutcome: (e) => {
          const resolve = done.get(e.job.id);
          if (resolve) resolve();
          else finishedEarly.add(e.job.id);
        },
      },
    });
    const wakeups = new PostgresWakeups(this.url);
    const worker = new Worker(processor, { queues: [queue], concurrency: 50, pollIntervalMs: 500, wakeups });
    worker.start();
    await sleep(300);
    const xs: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t = performance.now();
      let resolve!: () => void;
      const finished = new Promise<void>((r) => (resolve = r));
      const [r] = await this.store.enqueueMany([{ queue, type: 'noop' }]);
      if (finishedEarly.delete(r!.id)) resolve();
      else done.set(r!.id, resolve);
      await finished;
      done.delete(r!.id);
      xs.push(performance.now() - t);
      await sleep(20);
    }
    await worker.stop(1000);
    await wakeups.close();
    return { p50: r1(pct(xs, 50)), p99: r1(pct(xs, 99)), max: r1(Math.max(...xs)) };
  }

  async statsTiming(calls: number): Promise<{ p50: number; p95: number }> {
    const xs: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t = performance.now();
      await this.store.stats();
      xs.push(performance.now() - t);
    }
    return { p50: r2(pct(xs, 50)), p95: r2(pct(xs, 95)) };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// graphile-worker
async function graphileRun(url: string, task: string, n: number, preset: 'perf' | 'defaults'): Promise<RunResult> {
  const gw = await import('graphile-worker');
  const logger = new gw.Logger(() => () => undefined);
  const utils = await gw.makeWorkerUtils({ connectionString: url, logger });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  let handled = 0;
  const options = GRAPHILE_OPTIONS[preset];
  try {
    const runner = await gw.run({
      connectionString: url,
      logger,
      noHandleSignals: true,
      taskList: { [task]: async () => void handled++ },
      ...options,
    });
    try {
      await sleep(200);
      const t0 = performance.now();
      await utils.addJobs(Array.from({ length: n }, () => ({ identifier: task, payload: {} })));
      const t1 = performance.now();
      await waitUntil(async () => handled >= n);
      await waitUntil(
        async () =>
          (
            await admin.query(
              `select count(*)::int as n from graphile_worker._private_jobs j join graphile_worker._private_tasks t on t.id = j.task_id
         where t.identifier = $1 and j.run_at <= now()`,
              [task],
            )
          ).rows[0].n === 0,
      );
      const t2 = performance.now();
      return { enqueuePerSec: (n / (t1 - t0)) * 1000, processPerSec: (n / (t2 - t1)) * 1000 };
    } finally {
      await runner.stop();
    }
  } finally {
    await utils.release();
    await admin.end();
  }
}

async function graphileDelayed(url: string, task: string, n: number): Promise<void> {
  const gw = await import('graphile-worker');
  const utils = await gw.makeWorkerUtils({ connectionString: url, logger: new gw.Logger(() => () => undefined) });
  const runAt = new Date(Date.now() + 24 * 3600_000);
  for (let i = 0; i < n; i += 20_000) {
    await utils.addJobs(
      Array.from({ length: Math.min(20_000, n - i) }, () => ({ identifier: task, payload: {}, runAt })),
    );
  }
  await utils.release();
}

// ---------------------------------------------------------------------------------------------------------------
// pg-boss: its best batched shape — one worker fetching 500 at a time, fetching again at once while batches come back
// full, LISTEN/NOTIFY on (queue notify: true), batch insert.
async function pgbossOpen(url: string) {
  const { PgBoss } = await import('pg-boss');
  const boss = new PgBoss({ connectionString: url, useListenNotify: true, max: 10 });
  boss.on('error', (e: unknown) => console.error('pg-boss error', e));
  await boss.start();
  return boss;
}

async function pgbossRun(url: string, queue: string, n: number): Promise<RunResult> {
  const boss = await pgbossOpen(url);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    if (!(await boss.getQueue(queue))) await boss.createQueue(queue, { notify: true });
    let handled = 0;
    await boss.work(queue, { batchSize: 500, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      handled += jobs.length;
    });
    await sleep(200);
    const before = Number(
      (await admin.query(`select count(*) from pgboss.job where name = $1 and state = 'completed'`, [queue])).rows[0]
        .count,
    );
    const t0 = performance.now();
    await boss.insert(
      queue,
      Array.from({ length: n }, () => ({ data: {} })),
    );
    const t1 = performance.now();
    await waitUntil(async () => handled >= n);
    await waitUntil(
      async () =>
        Number(
          (await admin.query(`select count(*) from pgboss.job where name = $1 and state = 'completed'`, [queue]))
            .rows[0].count,
        ) -
          before >=
        n,
    );
    const t2 = performance.now();
    return { enqueuePerSec: (n / (t1 - t0)) * 1000, processPerSec: (n / (t2 - t1)) * 1000 };
  } finally {
    await boss.stop({ graceful: true, timeout: 5000 } as never);
    await admin.end();
  }
}

async function pgbossDelayed(url: string, queue: string, n: number): Promise<void> {
  const boss = await pgbossOpen(url);
  if (!(await boss.getQueue(queue))) await boss.createQueue(queue, { notify: true });
  const startAfter = new Date(Date.now() + 24 * 3600_000);
  for (let i = 0; i < n; i += 20_000) {
    await boss.insert(
      queue,
      Array.from({ length: Math.min(20_000, n - i) }, () => ({ data: {}, startAfter })),
    );
  }
  await boss.stop({ graceful: true, timeout: 5000 } as never);
}

// ---------------------------------------------------------------------------------------------------------------
async function main() {
  const { values } = parseArgs({
    options: {
      jobs: { type: 'string', default: '20000' },
      rounds: { type: 'string', default: '3' },
      warmup: { type: 'string', default: '1' },
      only: { type: 'string' },
      scaling: { type: 'boolean', default: false },
      'scaling-only': { type: 'string', default: 'keel-batched,graphile-perf' },
      'latency-samples': { type: 'string', default: '200' },
      vacuum: { type: 'boolean', default: false },
      delayed: { type: 'string', default: '200000' },
      archive: { type: 'string', default: '1000000' },
      dlq: { type: 'string', default: '200000' },
      ...PG_URL_OPTION,
    },
  });
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 22) {
    console.error(
      `bench:peers needs Node >= 22.18 for graphile-worker 0.18 / pg-boss 12 (this is ${process.version}); see bench/README.md`,
    );
    process.exit(2);
  }
  const N = Number(values.jobs);
  const rounds = Number(values.rounds);
  const configs = (values.only ? values.only.split(',') : [...CONFIGS]) as Config[];
  for (const c of configs)
    if (!CONFIGS.includes(c)) throw new Error(`unknown config ${c} (known: ${CONFIGS.join(', ')})`);

  // Embedded: fsync and synchronous_commit on, as npm start runs it. External: as that server is configured.
  const server = await openBenchServer({ label: 'peers', pgUrl: benchPgUrl(values), fastUnsafe: false });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('peers');
    const keel = await KeelSide.open(url);
    const admin = new pg.Client({ connectionString: url });
    admin.on('error', (err) => console.error(`bench: admin connection: ${err.message}`)); // e.g. the cleanup's drop
    await admin.connect();
    const out: Record<string, unknown> = {
      server: server.info,
      node: process.version,
      postgres: (await admin.query('show server_version')).rows[0].server_version,
      peers: { 'graphile-worker': peerVersion('graphile-worker'), 'pg-boss': peerVersion('pg-boss') },
      jobs: N,
      rounds,
      warmupRounds: Number(values.warmup),
      cpus: os.cpus().length,
      loadavg: os.loadavg().map(r2),
      vacuumBeforeEachRun: values.vacuum,
    };

    const queueOf = (c: Config) => `peers-${c}`;
    // One configuration on one queue, reported under key (the config's name, unless it runs on another queue).
    interface Entry {
      key: string;
      config: Config;
      queue: string;
    }
    const entry = (config: Config, queue = queueOf(config), key: string = config): Entry => ({ key, config, queue });
    // warmupRounds: rounds run first and not recorded (every config once each, same N), so no system's median carries
    // its JIT compilation, its connections' first plans or a first-ever table.
    async function phase(
      label: string,
      entries: Entry[],
      warmupRounds = 0,
    ): Promise<Record<string, { enqueue: number; process: number; exact?: boolean; runs: number[] }>> {
      const runs: Record<string, RunResult[]> = {};
      for (let r = -warmupRounds; r < rounds; r++) {
        const order = entries.map((_, i) => entries[(((i + r) % entries.length) + entries.length) % entries.length]!);
        for (const { key, config: c, queue } of order) {
          if (values.vacuum) await admin.query('vacuum'); // every system's tables alike (--vacuum)
          await admin.query('checkpoint');
          let res: RunResult;
          if (c === 'keel-batched') res = await keel.batched(queue, N);
          else if (c === 'keel-functions-default') res = await keel.functionsDefault(queue, N);
          else if (c === 'graphile-perf') res = await graphileRun(url, queue, N, 'perf');
          else if (c === 'graphile-defaults') res = await graphileRun(url, queue, N, 'defaults');
          else res = await pgbossRun(url, queue, N);
          if (r >= 0) (runs[key] ??= []).push(res);
          console.error(
            `[${label}] ${r < 0 ? 'warm-up' : `round ${r + 1}`} ${key}: process ${Math.round(res.processPerSec)} jobs/s, enqueue ${Math.round(res.enqueuePerSec)} jobs/s${res.exact === undefined ? '' : `, exact ${res.exact}`}`,
          );
        }
      }
      return Object.fromEntries(
        Object.entries(runs).map(([c, rs]) => [
          c,
          {
            process: Math.round(median(rs.map((x) => x.processPerSec))),
            enqueue: Math.round(median(rs.map((x) => x.enqueuePerSec))),
            ...(rs[0]!.exact === undefined ? {} : { exact: rs.every((x) => x.exact) }),
            runs: rs.map((x) => Math.round(x.processPerSec)),
          },
        ]),
      );
    }
    function ratios(m: Record<string, { process: number; enqueue: number }>) {
      const get = (c: Config) => m[c]?.process;
      const q = (a?: number, b?: number) => (a && b ? r2(a / b) : null);
      const bestPeerEnqueue = Math.max(
        m['graphile-perf']?.enqueue ?? 0,
        m['graphile-defaults']?.enqueue ?? 0,
        m['pgboss-batched']?.enqueue ?? 0,
      );
      return {
        'keel-batched / graphile-perf (target >= 1.0)': q(get('keel-batched'), get('graphile-perf')),
        'keel-functions-default / graphile-defaults (target >= 1.0)': q(
          get('keel-functions-default'),
          get('graphile-defaults'),
        ),
        'keel-batched / pgboss-batched': q(get('keel-batched'), get('pgboss-batched')),
        'keel enqueue / best peer enqueue (target >= 1.0)': q(m['keel-batched']?.enqueue, bestPeerEnqueue || undefined),
      };
    }

    const base = await phase(
      'baseline',
      configs.map((c) => entry(c)),
      Number(values.warmup),
    );
    out.baseline = base;
    out.baselineRatios = ratios(base);
    if (configs.includes('keel-batched')) {
      out.idleLatencyMs = await keel.latency('peers-latency', Number(values['latency-samples']));
      out.statsMsEmpty = await keel.statsTiming(50);
    }
    console.error(JSON.stringify(out, null, 2));

    if (values.scaling) {
      const D = Number(values.delayed);
      const scaled = values['scaling-only'].split(',').filter((c) => configs.includes(c as Config)) as Config[];
      console.error(`== scaling (${scaled.join(', ')}): ${D} delayed jobs in each system's queue`);
      for (const c of scaled) {
        if (c.startsWith('keel')) await keel.enqueue(queueOf(c), D, { delayMs: 24 * 3600_000 });
        else if (c.startsWith('graphile')) await graphileDelayed(url, queueOf(c), D);
        else await pgbossDelayed(url, queueOf(c), D);
      }
      await admin.query('vacuum analyze');
      // Each config also runs, interleaved in the same rounds, on a queue of its own with no delayed jobs: the slowdown
      // is measured against that twin, seconds apart, so the machine's drift between phases does not count as one.
      const clean = (c: Config) => `${c}:no-delayed-queue`;
      const delayed = await phase(
        '200k delayed',
        scaled.flatMap((c) => [entry(c), entry(c, `${queueOf(c)}-clean`, clean(c))]),
      );
      out.withDelayed = delayed;
      out.withDelayedRatios = ratios(delayed);
      out.delayedSlowdown = Object.fromEntries(
        scaled.map((c) => [c, r2(delayed[c]!.process / delayed[clean(c)]!.process)]),
      );
      out.delayedSlowdownAcrossPhases = Object.fromEntries(
        scaled.map((c) => [c, r2(delayed[c]!.process / base[c]!.process)]),
      );
      out.statsMsWithDelayed = await keel.statsTiming(50);

      const A = Number(values.archive);
      const L = Number(values.dlq);
      console.error(`== scaling: ${A} archive + ${L} DLQ rows`);
      await admin.query(
        `insert into keel.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, tags, created_at, started_at, finished_at, duration_ms)
       select nextval('keel.job_id_seq'), 'bulk-' || (g % 8), 'noop', jsonb_build_object('n', g, 'note', 'archived job ' || g), 0, 1,
              null, '{}', now() - interval '1 hour', now() - interval '1 hour', now() - (g % 3600) * interval '1 second', 3
       from generate_series(1, $1::int) g`,
        [A],
      );
      await admin.query(
        `insert into keel.jobs_dlq (id, queue, type, payload, priority, attempts, idempotency_key, tags, created_at, failed_at, reason, error)
       select nextval('keel.job_id_seq'), 'bulk-' || (g % 8), 'noop', jsonb_build_object('n', g), 0, 5, null, '{}',
              now() - interval '1 hour', now() - (g % 3600) * interval '1 second', 'exhausted', 'boom ' || g
       from generate_series(1, $1::int) g`,
        [L],
      );
      await admin.query('vacuum analyze');
      out.statsMsWithArchiveDlqAndDelayed = await keel.statsTiming(50);
      const big = await phase(
        '1M archive + 200k DLQ + 200k delayed',
        scaled.map((c) => entry(c)),
      );
      out.withArchiveDlq = big;
      out.withArchiveDlqRatios = ratios(big);
    }
    out.hotUpdates = (
      await admin.query(
        `select relname, n_tup_upd::int as updates, n_tup_hot_upd::int as hot_updates from pg_stat_user_tables where schemaname = 'keel' and relname = 'jobs_hot'`,
      )
    ).rows[0];
    console.log(JSON.stringify(out, null, 2));
    await admin.end();
    await keel.store.close();
  } finally {
    await server.close();
  }
}

await main();
// Everything above is stopped and closed, yet a peer library leaves a handle open and the process would never
// end (seen on every run since the peers were added): exit explicitly once the results are printed.
process.exit(0);

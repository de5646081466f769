// npm run bench:workers — the long-running Worker path (the local host, apps that embed Keel) across processes: N
// child processes (default 6), each a Worker of shared/jobs/processor.ts (concurrency 20) with its own
// PostgresJobStore, on one queue holding a no-op backlog enqueued before they start, against 1 process on the same
// backlog; interleaved rounds (the order alternating), medians of jobs/s from start to drained, and the ratio N/1.
// Each run has its own queue; archive rows, hot rows and counters are checked exact after each.
//
//   npm run bench:workers -- --jobs 20000 --processes 6 --concurrency 20 --rounds 3 --warmup 1
//   --poll-ms 500 (the Worker's idle poll)  --timeout-s 600 (per run)  --pg-url URL (or KEEL_BENCH_PG_URL)
//
// The clock starts when every child has connected and been told to go (process start-up and module loading are not
// counted), and stops when the children have reported every job succeeded (the processor reports an outcome once
// its completion is committed). Children exit by themselves: on the parent's stop, when the parent goes away (IPC
// disconnect), or at their own deadline (the run's timeout plus a minute).
import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor, Worker } from '../shared/jobs/processor.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

interface ChildArgs {
  url: string;
  queue: string;
  index: number;
  concurrency: number;
  pollMs: number;
  deadlineMs: number;
}
const CHILD_ARGS_ENV = 'KEEL_BENCH_WORKER_ARGS';
type ToChild = { type: 'go' } | { type: 'stop' };
type FromChild =
  { type: 'ready' } | { type: 'progress'; succeeded: number; other: number } | { type: 'failed'; message: string };

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const r2 = (n: number) => Math.round(n * 100) / 100;

// ---------------------------------------------------------------------------------------------------------------
// Child: one Worker with its own store (the schema is migrated by the parent).
async function child(a: ChildArgs): Promise<void> {
  const send = (m: FromChild) => process.send?.(m);
  let stopping: Promise<void> | undefined;
  const deadline = setTimeout(() => {
    console.error(`bench worker ${a.index}: deadline of ${a.deadlineMs} ms reached, stopping`);
    stop(3);
  }, a.deadlineMs);
  let store: PostgresJobStore | undefined;
  let worker: Worker | undefined;
  function stop(code: number): void {
    stopping ??= (async () => {
      clearTimeout(deadline);
      await worker?.stop(5_000).catch((e: unknown) => console.error(`bench worker ${a.index}: stop: ${String(e)}`));
      await store?.close().catch(() => undefined);
      process.exit(code);
    })();
  }
  process.on('disconnect', () => stop(4)); // the parent is gone
  process.on('message', (m: ToChild) => {
    if (m.type === 'go') worker?.start();
    else if (m.type === 'stop') stop(0);
  });
  try {
    store = await PostgresJobStore.connect(a.url, { migrate: false, applicationName: `keel-bench-worker-${a.index}` });
    let succeeded = 0;
    let other = 0;
    let flushQueued = false;
    // One progress message per event-loop turn at most, not one per job.
    const flush = () => {
      flushQueued = false;
      send({ type: 'progress', succeeded, other });
    };
    const registry = new HandlerRegistry().register('noop', async () => undefined);
    const processor = new JobProcessor({
      store,
      registry,
      workerId: `bench-worker-${a.index}`,
      events: {
        onOutcome: (e) => {
          if (e.outcome === 'succeeded') succeeded++;
          else other++;
          if (!flushQueued) {
            flushQueued = true;
            setImmediate(flush);
          }
        },
      },
    });
    worker = new Worker(processor, { queues: [a.queue], concurrency: a.concurrency, pollIntervalMs: a.pollMs });
    send({ type: 'ready' });
  } catch (err) {
    send({ type: 'failed', message: (err as Error).message });
    stop(1);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Parent
interface RunResult {
  jobsPerSec: number;
  ms: number;
  exact: boolean;
}

async function runOnce(
  url: string,
  admin: pg.Client,
  store: PostgresJobStore,
  queue: string,
  opts: { processes: number; jobs: number; concurrency: number; pollMs: number; timeoutMs: number },
): Promise<RunResult> {
  for (let i = 0; i < opts.jobs; i += 20_000) {
    await store.enqueueMany(Array.from({ length: Math.min(20_000, opts.jobs - i) }, () => ({ queue, type: 'noop' })));
  }
  await admin.query('checkpoint');

  const self = fileURLToPath(import.meta.url);
  const children: ChildProcess[] = [];
  const succeeded: number[] = Array.from({ length: opts.processes }, () => 0);
  const other: number[] = Array.from({ length: opts.processes }, () => 0);
  let ready = 0;
  let failure: Error | undefined;
  let onChange: () => void = () => undefined;
  const exited: Promise<void>[] = [];
  for (let i = 0; i < opts.processes; i++) {
    const args: ChildArgs = {
      url,
      queue,
      index: i,
      concurrency: opts.concurrency,
      pollMs: opts.pollMs,
      deadlineMs: opts.timeoutMs + 60_000,
    };
    // fork: the same Node and the same loader flags (tsx when run through it), with an IPC channel.
    // The arguments (with the server URL, which may hold a password) go by environment, not on the command line.
    const c = fork(self, ['--child'], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, [CHILD_ARGS_ENV]: JSON.stringify(args) },
    });
    children.push(c);
    exited.push(
      new Promise<void>((resolve) =>
        c.once('exit', (code, signal) => {
          if (code !== 0 && !failure) failure = new Error(`worker process ${i} exited (${signal ?? `code ${code}`})`);
          onChange();
          resolve();
        }),
      ),
    );
    c.on('error', (err) => {
      failure ??= new Error(`worker process ${i}: ${err.message}`);
      onChange();
    });
    c.on('message', (m: FromChild) => {
      if (m.type === 'ready') ready++;
      else if (m.type === 'progress') {
        succeeded[i] = m.succeeded;
        other[i] = m.other;
      } else failure ??= new Error(`worker process ${i}: ${m.message}`);
      onChange();
    });
  }
  const waitFor = (what: string, done: () => boolean, timeoutMs: number) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
        timeoutMs,
      );
      onChange = () => {
        if (failure) {
          clearTimeout(timer);
          reject(failure);
        } else if (done()) {
          clearTimeout(timer);
          resolve();
        }
      };
      onChange();
    });
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const send = (m: ToChild) => {
    for (const c of children) if (c.connected) c.send(m);
  };
  let ms = 0;
  try {
    await waitFor('the worker processes to connect', () => ready === opts.processes, 60_000);
    const t0 = performance.now();
    send({ type: 'go' });
    await waitFor(`${opts.jobs} jobs to be processed`, () => sum(succeeded) + sum(other) >= opts.jobs, opts.timeoutMs);
    ms = performance.now() - t0;
  } finally {
    onChange = () => undefined;
    send({ type: 'stop' });
    // Bounded: a child that has not exited 30 s after stop is killed.
    const killTimer = setTimeout(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }, 30_000);
    await Promise.all(exited);
    clearTimeout(killTimer);
  }
  if (failure) throw failure;
  const { rows } = await admin.query(
    `select (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
            (select count(*) from keel.jobs_hot where queue = $1)::int as hot,
            (select coalesce(sum(succeeded), 0) from keel.stats_summary where queue = $1)::int as counted`,
    [queue],
  );
  const c = rows[0] as { archived: number; hot: number; counted: number };
  const exact =
    sum(succeeded) === opts.jobs &&
    sum(other) === 0 &&
    c.archived === opts.jobs &&
    c.hot === 0 &&
    c.counted === opts.jobs;
  return { jobsPerSec: (opts.jobs / ms) * 1000, ms, exact };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      jobs: { type: 'string', default: '20000' },
      processes: { type: 'string', default: '6' },
      concurrency: { type: 'string', default: '20' },
      rounds: { type: 'string', default: '3' },
      warmup: { type: 'string', default: '1' },
      'poll-ms': { type: 'string', default: '500' },
      'timeout-s': { type: 'string', default: '600' },
      ...PG_URL_OPTION,
    },
  });
  const jobs = Number(values.jobs);
  const processes = Number(values.processes);
  const rounds = Number(values.rounds);
  const warmup = Number(values.warmup);
  for (const [name, v] of Object.entries({ jobs, processes, rounds, concurrency: Number(values.concurrency) }))
    if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer`);
  const runOpts = {
    jobs,
    concurrency: Number(values.concurrency),
    pollMs: Number(values['poll-ms']),
    timeoutMs: Number(values['timeout-s']) * 1000,
  };
  const server = await openBenchServer({ label: 'workers', pgUrl: benchPgUrl(values), fastUnsafe: false });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('workers');
    const store = await PostgresJobStore.connect(url, { poolSize: 2, applicationName: 'keel-bench-workers' });
    const admin = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
    admin.on('error', (err) => console.error(`admin connection: ${err.message}`));
    await admin.connect();
    try {
      const shapes = processes === 1 ? [1] : [1, processes];
      const runs: Record<number, RunResult[]> = {};
      for (let r = -warmup; r < rounds; r++) {
        const order = (r + warmup) % 2 ? [...shapes].reverse() : shapes;
        for (const p of order) {
          const queue = `workers-${p}p-${r < 0 ? `warmup${-r}` : `round${r + 1}`}`;
          const res = await runOnce(url, admin, store, queue, { ...runOpts, processes: p });
          if (r >= 0) (runs[p] ??= []).push(res);
          console.error(
            `${r < 0 ? 'warm-up' : `round ${r + 1}`} ${p} process${p > 1 ? 'es' : ''}: ${Math.round(res.jobsPerSec)} jobs/s (${Math.round(res.ms)} ms), exact ${res.exact}`,
          );
        }
      }
      const medianOf = (p: number) => Math.round(median(runs[p]!.map((x) => x.jobsPerSec)));
      const out = {
        server: server.info,
        node: process.version,
        cpus: os.cpus().length,
        loadavg: os.loadavg().map(r2),
        jobs,
        processes,
        concurrencyPerProcess: runOpts.concurrency,
        pollMs: runOpts.pollMs,
        rounds,
        warmupRounds: warmup,
        runs: Object.fromEntries(shapes.map((p) => [`${p}p`, runs[p]!.map((x) => Math.round(x.jobsPerSec))])),
        median: Object.fromEntries(shapes.map((p) => [`${p}p`, medianOf(p)])),
        [`ratio ${processes}p / 1p`]: processes > 1 ? r2(medianOf(processes) / medianOf(1)) : null,
        exact: shapes.every((p) => runs[p]!.every((x) => x.exact)),
        target: `${processes} processes >= 5,000 jobs/s in all, and never slower than 1 process (issue 22)`,
      };
      console.log(JSON.stringify(out, null, 2));
    } finally {
      await admin.end().catch(() => undefined);
      await store.close();
    }
  } finally {
    await server.close();
  }
}

if (process.argv[2] === '--child') {
  await child(JSON.parse(process.env[CHILD_ARGS_ENV] ?? '') as ChildArgs);
} else {
  await main();
  process.exit(0);
}

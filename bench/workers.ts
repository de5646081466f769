// npm run bench:workers — the long-running Worker path (the local host, apps that embed Keel) across processes: N
// child processes (default 6), each a Worker of shared/jobs/processor.ts (concurrency 20) with its own
// PostgresJobStore, on one queue holding a no-op backlog enqueued before they start, against 1 process on the same
// backlog; interleaved rounds (the order alternating), medians of jobs/s from start to drained, and the ratio N/1.
// Each run has its own queue; archive rows, hot rows and counters are checked exact after each. Per run it also
// reports CPU µs per job of the worker processes and of the server's processes (from /proc, when the server runs on
// this machine), and claims and completion batches per 1,000 jobs (counted around each child's store); of the
// worker processes, V8's scavenges and mark-compacts per 1,000 jobs, each one's young generation at the round's end,
// V8 heap bytes allocated per job, page faults and context switches per 1,000 jobs (runs 430-449: six processes
// allocate what one does per job, but V8 sizes each process's young generation by that process's own allocation
// rate, so six run with a smaller one and scavenge more often).
//   --child-node-flags='--min-semi-space-size=16'  Node/V8 flags for the worker processes only
//   --child-v8-flags='--no-parallel-scavenge'  V8 flags the worker processes set after start-up (v8.setFlagsFromString)
//   --pool-size N  the worker processes' store pool (default: the store's, 10; each uses 2 connections, claim and
//   completion, and keeps them across rounds)
// Each round's line also says the server connections the worker processes opened during it, the jobs per completion
// batch, and the bench parent's CPU a job with its progress messages per 1,000 jobs (not part of the node figure).
//
//   npm run bench:workers -- --jobs 20000 --processes 6 --concurrency 20 --rounds 3 --warmup 1
//   --warmup-jobs-per-process 20000 (jobs each worker process runs in a warm-up round; see below)
//   --poll-ms 500 (the Worker's idle poll)  --timeout-s 600 (per run)  --pg-url URL (or KEEL_BENCH_PG_URL)
//   --cold (fork the processes for each round, as before run 190; see below)
//
// Each shape's processes are forked once and serve every round (a new Worker on each round's queue), so the warm-up
// round warms them as it warms the server: a process's first few thousand jobs cost ~1.6x the Node CPU of later ones
// (V8 compiling the job path; backends filling their caches), and six fresh processes on 20k jobs paid that six
// times in a 3 s window (bench/README.md, runs 190-199). --cold measures that case. A warm-up round gives every
// worker process the same number of jobs whatever the shape (processes x --warmup-jobs-per-process on the shape's
// queue): the warm-up used to be --jobs for each shape, which is 20,000 jobs for one process but ~3,333 for each of
// six, so the six were measured less warm than the one (runs 540-559). The default, 20,000, is what one process
// had before and past where a process's Node CPU a job stops falling (V8's tier-up of the job path, ~10-12k jobs:
// runs 190f and 540-559). The clock starts when every
// child has been told to go (process start-up and module loading are never counted), and stops when the children
// have reported every job succeeded (the processor reports an outcome once its completion is committed). Children
// exit by themselves: on the parent's exit message, when the parent goes away (IPC disconnect), or at their own
// deadline.
import { fork, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { constants, performance as perf } from 'node:perf_hooks';
import v8 from 'node:v8';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor, Worker } from '../shared/jobs/processor.js';
import {
  PG_URL_OPTION,
  benchPgUrl,
  describeServer,
  localPostmaster,
  openBenchServer,
  postgresCpuSeconds,
} from './server.js';

interface ChildArgs {
  url: string;
  index: number;
  concurrency: number;
  pollMs: number;
  deadlineMs: number;
  v8Flags: string; // applied with v8.setFlagsFromString after start-up (--child-v8-flags)
  poolSize: number; // the store's pool (--pool-size; 0: the store's default)
}
const CHILD_ARGS_ENV = 'KEEL_BENCH_WORKER_ARGS';
const PROGRESS_MS = 50; // a worker process's progress messages while its claims come back full (child())
// go: a new Worker (and processor) on `queue` for round `round`; end: report the round's counts and stop that Worker
// (the process, its store and its connections stay for the next round); exit: close the store and exit.
type ToChild = { type: 'go'; queue: string; round: number } | { type: 'end'; round: number } | { type: 'exit' };
// What a child's store was asked during a round (from go): claims (and how many came back empty or short of their
// limit), jobs claimed, completion batches, and the child's CPU.
interface ChildCounts {
  claims: number;
  emptyClaims: number;
  shortClaims: number;
  claimed: number;
  completions: number;
  cpuUs: number;
  systemUs: number; // of cpuUs: in the kernel
  gcUs: number; // V8's garbage collections (their pauses on the main thread)
  gcMinor: number; // scavenges
  gcMajor: number; // mark-compacts (and their incremental steps' finalisations)
  newSpaceKb: number; // the young generation's capacity at the round's end
  eluActiveMs: number; // event-loop active time (performance.eventLoopUtilization)
  minflt: number; // minor page faults (process.resourceUsage)
  vcsw: number; // voluntary context switches (waits)
  ivcsw: number; // involuntary ones (preempted)
  allocatedKb: number; // bytes allocated on V8's heap (used heap growth plus what each GC freed)
  mainThreadUs: number; // on-CPU time of the main (JavaScript) thread, /proc schedstat
  otherThreadsUs: number; // of every other thread: V8's platform workers (parallel scavenge, concurrent marking and
  // compiling), libuv's pool
  connects: number; // server connections the store's pool opened during the round (a new backend each)
  poolSize: number; // connections in the pool at the round's end
  completed: number; // jobs sent in completion batches
}
type FromChild =
  | { type: 'ready' }
  | { type: 'progress'; round: number; succeeded: number; other: number }
  | { type: 'ended'; round: number; counts: ChildCounts }
  | { type: 'failed'; message: string };

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const r2 = (n: number) => Math.round(n * 100) / 100;

// On-CPU µs of this process's main thread and of its other threads (/proc/self/task/*/schedstat, in ns; 0 where
// there is no /proc).
function threadCpuUs(): { main: number; others: number } {
  let main = 0;
  let others = 0;
  try {
    for (const t of readdirSync('/proc/self/task')) {
      let ns = 0;
      try {
        ns = Number(readFileSync(`/proc/self/task/${t}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        continue; // the thread has exited
      }
      if (Number(t) === process.pid) main += ns / 1000;
      else others += ns / 1000;
    }
  } catch {
    // no /proc
  }
  return { main, others };
}

// ---------------------------------------------------------------------------------------------------------------
// Child: one store (the schema is migrated by the parent) and, per round, one Worker on that round's queue.
async function child(a: ChildArgs): Promise<void> {
  const send = (m: FromChild) => process.send?.(m);
  let exiting: Promise<void> | undefined;
  const deadline = setTimeout(() => {
    console.error(`bench worker ${a.index}: deadline of ${a.deadlineMs} ms reached, stopping`);
    exit(3);
  }, a.deadlineMs);
  let store: PostgresJobStore | undefined;
  let worker: Worker | undefined;
  const stopWorker = async () => {
    const w = worker;
    worker = undefined;
    await w?.stop(5_000).catch((e: unknown) => console.error(`bench worker ${a.index}: stop: ${String(e)}`));
  };
  function exit(code: number): void {
    exiting ??= (async () => {
      clearTimeout(deadline);
      await stopWorker();
      await store?.close().catch(() => undefined);
      process.exit(code);
    })();
  }
  process.on('disconnect', () => exit(4)); // the parent is gone
  const zero = (): ChildCounts => ({
    claims: 0,
    emptyClaims: 0,
    shortClaims: 0,
    claimed: 0,
    completions: 0,
    cpuUs: 0,
    systemUs: 0,
    gcUs: 0,
    gcMinor: 0,
    gcMajor: 0,
    newSpaceKb: 0,
    eluActiveMs: 0,
    allocatedKb: 0,
    minflt: 0,
    vcsw: 0,
    ivcsw: 0,
    mainThreadUs: 0,
    otherThreadsUs: 0,
    connects: 0,
    poolSize: 0,
    completed: 0,
  });
  let counts = zero();
  let cpu0: NodeJS.CpuUsage | undefined;
  let elu0: ReturnType<typeof perf.eventLoopUtilization> | undefined;
  let gcProfiler: v8.GCProfiler | undefined;
  let used0 = 0;
  let ru0: NodeJS.ResourceUsage | undefined;
  let threads0 = { main: 0, others: 0 };
  let pool: pg.Pool | undefined;
  let onDraining: () => void = () => undefined;
  const registry = new HandlerRegistry().register('noop', async () => undefined);
  const go = (queue: string, round: number) => {
    let succeeded = 0;
    let other = 0;
    let flushQueued = false;
    let flushTimer: NodeJS.Timeout | undefined;
    // Progress at most every PROGRESS_MS while the backlog lasts, then (once a claim of this process came back short
    // or empty: the backlog is running out) one message per event-loop turn, so the clock still stops at the last
    // job. One message per turn all along was one per completion batch, 40-50 per 1,000 jobs: 2.5-5 µs a job of the
    // parent's CPU plus the children's sends, which six CPU-bound processes on two cores pay in throughput and one
    // round-trip-bound process does not (bench/README.md runs 1390-1409).
    const flush = () => {
      flushQueued = false;
      flushTimer = undefined;
      send({ type: 'progress', round, succeeded, other });
    };
    const draining = () => counts.emptyClaims + counts.shortClaims > 0;
    // A claim came back short or empty: what waits for the timer goes now (its jobs' outcomes may have come first).
    onDraining = () => {
      if (flushTimer) {
        clearTimeout(flushTimer);
        flush();
      }
    };
    const processor = new JobProcessor({
      store: store!,
      registry,
      workerId: `bench-worker-${a.index}-r${round}`,
      events: {
        onOutcome: (e) => {
          if (e.outcome === 'succeeded') succeeded++;
          else other++;
          if (!flushQueued) {
            flushQueued = true;
            if (draining()) setImmediate(flush);
            else flushTimer = setTimeout(flush, PROGRESS_MS);
          } else if (flushTimer && draining()) {
            clearTimeout(flushTimer);
            flushTimer = undefined;
            setImmediate(flush);
          }
        },
      },
    });
    counts = zero();
    worker = new Worker(processor, { queues: [queue], concurrency: a.concurrency, pollIntervalMs: a.pollMs });
    cpu0 = process.cpuUsage();
    elu0 = perf.eventLoopUtilization();
    gcProfiler = new v8.GCProfiler();
    gcProfiler.start();
    used0 = v8.getHeapStatistics().used_heap_size;
    ru0 = process.resourceUsage();
    threads0 = threadCpuUs();
    worker.start();
  };
  process.on('message', (m: ToChild) => {
    if (m.type === 'go') go(m.queue, m.round);
    else if (m.type === 'end') {
      const cpu = process.cpuUsage(cpu0);
      const used1 = v8.getHeapStatistics().used_heap_size;
      const ru1 = process.resourceUsage();
      const threads1 = threadCpuUs();
      const freed = (gcProfiler?.stop()?.statistics ?? []).reduce(
        (a, g) => a + g.beforeGC.heapStatistics.usedHeapSize - g.afterGC.heapStatistics.usedHeapSize,
        0,
      );
      const newSpace = v8.getHeapSpaceStatistics().find((x) => x.space_name === 'new_space');
      const ended = {
        ...counts,
        cpuUs: cpu.user + cpu.system,
        systemUs: cpu.system,
        newSpaceKb: Math.round((newSpace?.space_size ?? 0) / 1024),
        eluActiveMs: Math.round(perf.eventLoopUtilization(elu0).active),
        allocatedKb: Math.round((used1 - used0 + freed) / 1024),
        minflt: ru1.minorPageFault - (ru0?.minorPageFault ?? 0),
        vcsw: ru1.voluntaryContextSwitches - (ru0?.voluntaryContextSwitches ?? 0),
        ivcsw: ru1.involuntaryContextSwitches - (ru0?.involuntaryContextSwitches ?? 0),
        mainThreadUs: Math.round(threads1.main - threads0.main),
        otherThreadsUs: Math.round(threads1.others - threads0.others),
        poolSize: pool?.totalCount ?? 0,
      };
      void stopWorker().then(() => send({ type: 'ended', round: m.round, counts: ended }));
    } else exit(0);
  });
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      counts.gcUs += e.duration * 1000;
      const kind = ((e as { detail?: unknown }).detail as { kind?: number } | undefined)?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) counts.gcMinor++;
      else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) counts.gcMajor++;
    }
  }).observe({ entryTypes: ['gc'] });
  // After start-up, as an app would (Node leaves V8's flags unfrozen): runs 650-679 checked that
  // --no-parallel-scavenge set this way takes effect at the next scavenge.
  if (a.v8Flags !== '') v8.setFlagsFromString(a.v8Flags);
  try {
    store = await PostgresJobStore.connect(a.url, {
      migrate: false,
      applicationName: `keel-bench-worker-${a.index}`,
      ...(a.poolSize > 0 ? { poolSize: a.poolSize } : {}),
    });
    pool = (store as unknown as { pool: pg.Pool }).pool;
    // The processes idle between their rounds while the other shape's round runs: with the pool's 10 s idle timeout
    // the six's connections were closed there under load and every round began on 12 new backends, each ~20 ms of
    // server CPU above a warm one over its first calls (plpgsql compiles, catalog caches, named statements): up to
    // ~12-15 µs a job of a 20k-job round (bench/README.md runs 1390-1409). A Worker under steady load keeps its
    // connections; so do these. pg-pool reads the option at each release.
    pool.options.idleTimeoutMillis = 0;
    pool.on('connect', () => counts.connects++);
    // Counted around the store's calls (one increment each; the Worker sees the same store).
    const s = store;
    const claimAndStart = s.claimAndStart.bind(s);
    s.claimAndStart = async (o) => {
      const jobs = await claimAndStart(o);
      counts.claims++;
      counts.claimed += jobs.length;
      if (jobs.length === 0) counts.emptyClaims++;
      else if (jobs.length < o.limit) counts.shortClaims++;
      if (jobs.length < o.limit) onDraining();
      return jobs;
    };
    const completeMany = s.completeMany.bind(s);
    s.completeMany = (refs) => {
      counts.completions++;
      counts.completed += refs.length;
      return completeMany(refs);
    };
    send({ type: 'ready' });
  } catch (err) {
    send({ type: 'failed', message: (err as Error).message });
    exit(1);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Parent
interface RunResult {
  jobsPerSec: number;
  ms: number;
  exact: boolean;
  // Per job, from go to drained: CPU µs of the worker processes and of the server's processes (null when the server
  // is not on this machine); claims and completion batches per 1,000 jobs; claims that came back empty or short.
  nodeUsPerJob: number;
  nodeSystemUsPerJob: number;
  nodeGcUsPerJob: number;
  mainThreadUsPerJob: number;
  otherThreadsUsPerJob: number;
  pgUsPerJob: number | null;
  pgUsPerJobByKind: Record<string, number> | null;
  claimsPerK: number;
  completionsPerK: number;
  gcMinorPerK: number;
  gcMajorPerK: number;
  newSpaceKb: number[];
  eluActiveUsPerJob: number;
  allocatedBytesPerJob: number;
  perKJobs: string;
  emptyClaims: number;
  shortClaims: number;
  claimedPerProcess: number[]; // jobs each worker process claimed (a warm-up round gives each about the same)
  connects: number; // server connections the worker processes opened during the round
  poolSizes: number[]; // each process's connections at the round's end
  jobsPerCompletion: number;
  parentUsPerJob: number; // the bench's parent process (progress messages), from go to drained
  progressPerK: number; // progress messages per 1,000 jobs
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

// N worker processes, forked once and used for every round of their shape (warm: V8 has compiled the job path and
// the server's backends have their caches), or, with --cold, forked for one round and ended after it.
class Children {
  private readonly children: ChildProcess[] = [];
  private readonly exited: Promise<void>[] = [];
  private failure: Error | undefined;
  private onChange: () => void = () => undefined;
  private ready = 0;
  private round = -1;
  private succeeded: number[];
  private other: number[];
  private ended: ChildCounts[] = [];
  private progressMessages = 0;

  constructor(
    private readonly n: number,
    private readonly args: Omit<ChildArgs, 'index'>,
    private readonly nodeFlags: string[] = [],
  ) {
    this.succeeded = Array.from({ length: n }, () => 0);
    this.other = Array.from({ length: n }, () => 0);
  }

  async start(): Promise<void> {
    const self = fileURLToPath(import.meta.url);
    for (let i = 0; i < this.n; i++) {
      const args: ChildArgs = { ...this.args, index: i };
      // fork: the same Node and the same loader flags (tsx when run through it), with an IPC channel.
      // The arguments (with the server URL, which may hold a password) go by environment, not on the command line.
      const c = fork(self, ['--child'], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        execArgv: [...process.execArgv, ...this.nodeFlags],
        env: { ...process.env, [CHILD_ARGS_ENV]: JSON.stringify(args) },
      });
      this.children.push(c);
      this.exited.push(
        new Promise<void>((resolve) =>
          c.once('exit', (code, signal) => {
            if (code !== 0) this.failure ??= new Error(`worker process ${i} exited (${signal ?? `code ${code}`})`);
            this.onChange();
            resolve();
          }),
        ),
      );
      c.on('error', (err) => {
        this.failure ??= new Error(`worker process ${i}: ${err.message}`);
        this.onChange();
      });
      c.on('message', (m: FromChild) => {
        if (m.type === 'ready') this.ready++;
        else if (m.type === 'progress') {
          if (m.round !== this.round) return;
          this.progressMessages++;
          this.succeeded[i] = m.succeeded;
          this.other[i] = m.other;
        } else if (m.type === 'ended') {
          if (m.round === this.round) this.ended.push(m.counts);
        } else this.failure ??= new Error(`worker process ${i}: ${m.message}`);
        this.onChange();
      });
    }
    await this.waitFor('the worker processes to connect', () => this.ready === this.n, 60_000);
  }

  private waitFor(what: string, done: () => boolean, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
        timeoutMs,
      );
      this.onChange = () => {
        if (this.failure) {
          clearTimeout(timer);
          reject(this.failure);
        } else if (done()) {
          clearTimeout(timer);
          resolve();
        }
      };
      this.onChange();
    }).finally(() => (this.onChange = () => undefined));
  }

  private send(m: ToChild): void {
    for (const c of this.children) if (c.connected) c.send(m);
  }

  // One round on `queue` (its backlog enqueued): the time from go to every job's outcome reported (drained() is
  // called then), then each child's counts once its Worker has stopped.
  async run(
    queue: string,
    jobs: number,
    timeoutMs: number,
    drained: () => void,
  ): Promise<{
    ms: number;
    succeeded: number;
    other: number;
    counts: ChildCounts[];
    parentUs: number; // this (the parent) process's CPU from go to drained: the progress messages' cost
    progressMessages: number;
  }> {
    this.round++;
    this.progressMessages = 0;
    this.succeeded.fill(0);
    this.other.fill(0);
    this.ended = [];
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    this.send({ type: 'go', queue, round: this.round });
    await this.waitFor(`${jobs} jobs to be processed`, () => sum(this.succeeded) + sum(this.other) >= jobs, timeoutMs);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    drained();
    this.send({ type: 'end', round: this.round });
    await this.waitFor('the workers to stop', () => this.ended.length === this.n, 30_000);
    return {
      ms,
      succeeded: sum(this.succeeded),
      other: sum(this.other),
      counts: this.ended,
      parentUs: cpu.user + cpu.system,
      progressMessages: this.progressMessages,
    };
  }

  async close(): Promise<void> {
    this.send({ type: 'exit' });
    // Bounded: a child that has not exited 30 s after exit is killed.
    const killTimer = setTimeout(() => {
      for (const c of this.children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }, 30_000);
    await Promise.all(this.exited);
    clearTimeout(killTimer);
    if (this.failure) throw this.failure;
  }
}

async function runOnce(
  admin: pg.Client,
  store: PostgresJobStore,
  queue: string,
  children: Children,
  opts: { processes: number; jobs: number; timeoutMs: number },
  postmaster: { pid: number; clusterName: string } | null,
): Promise<RunResult> {
  for (let i = 0; i < opts.jobs; i += 20_000) {
    await store.enqueueMany(Array.from({ length: Math.min(20_000, opts.jobs - i) }, () => ({ queue, type: 'noop' })));
  }
  await admin.query('checkpoint');
  const pg0 = postmaster ? postgresCpuSeconds(postmaster) : {};
  let pg1: Record<string, number> | undefined;
  const round = await children.run(queue, opts.jobs, opts.timeoutMs, () => {
    if (postmaster) pg1 = postgresCpuSeconds(postmaster);
  });
  const pgByKind = pg1
    ? Object.fromEntries(
        Object.entries(pg1)
          .map(([k, v]) => [k, r2(((v - (pg0[k] ?? 0)) * 1e6) / opts.jobs)] as const)
          .filter(([, v]) => v > 0),
      )
    : null;
  const pgSeconds = pg1 ? Object.entries(pg1).reduce((a, [k, v]) => a + v - (pg0[k] ?? 0), 0) : null;
  const { rows } = await admin.query(
    `select (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
            (select count(*) from keel.jobs_hot where queue = $1)::int as hot,
            (select coalesce(sum(succeeded), 0) from keel.stats_summary where queue = $1)::int as counted`,
    [queue],
  );
  const c = rows[0] as { archived: number; hot: number; counted: number };
  const exact =
    round.succeeded === opts.jobs &&
    round.other === 0 &&
    c.archived === opts.jobs &&
    c.hot === 0 &&
    c.counted === opts.jobs &&
    round.counts.length === opts.processes;
  const total = (k: keyof ChildCounts) => round.counts.reduce((a, x) => a + x[k], 0);
  return {
    jobsPerSec: (opts.jobs / round.ms) * 1000,
    ms: round.ms,
    exact,
    nodeUsPerJob: r2(total('cpuUs') / opts.jobs),
    nodeSystemUsPerJob: r2(total('systemUs') / opts.jobs),
    nodeGcUsPerJob: r2(total('gcUs') / opts.jobs),
    mainThreadUsPerJob: r2(total('mainThreadUs') / opts.jobs),
    otherThreadsUsPerJob: r2(total('otherThreadsUs') / opts.jobs),
    pgUsPerJob: pgSeconds === null ? null : r2((pgSeconds * 1e6) / opts.jobs),
    pgUsPerJobByKind: pgByKind,
    claimsPerK: r2((total('claims') * 1000) / opts.jobs),
    completionsPerK: r2((total('completions') * 1000) / opts.jobs),
    gcMinorPerK: r2((total('gcMinor') * 1000) / opts.jobs),
    gcMajorPerK: r2((total('gcMajor') * 1000) / opts.jobs),
    newSpaceKb: round.counts.map((x) => x.newSpaceKb),
    eluActiveUsPerJob: r2((total('eluActiveMs') * 1000) / opts.jobs),
    allocatedBytesPerJob: Math.round((total('allocatedKb') * 1024) / opts.jobs),
    perKJobs: `minflt ${r2((total('minflt') * 1000) / opts.jobs)} vcsw ${r2((total('vcsw') * 1000) / opts.jobs)} ivcsw ${r2((total('ivcsw') * 1000) / opts.jobs)}`,
    emptyClaims: total('emptyClaims'),
    shortClaims: total('shortClaims'),
    claimedPerProcess: round.counts.map((x) => x.claimed),
    connects: total('connects'),
    poolSizes: round.counts.map((x) => x.poolSize),
    jobsPerCompletion: r2(total('completed') / Math.max(1, total('completions'))),
    parentUsPerJob: r2(round.parentUs / opts.jobs),
    progressPerK: r2((round.progressMessages * 1000) / opts.jobs),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      jobs: { type: 'string', default: '20000' },
      processes: { type: 'string', default: '6' },
      concurrency: { type: 'string', default: '20' },
      rounds: { type: 'string', default: '3' },
      warmup: { type: 'string', default: '1' },
      // Jobs each worker process runs in a warm-up round, the same for every shape (header comment).
      'warmup-jobs-per-process': { type: 'string', default: '20000' },
      'poll-ms': { type: 'string', default: '500' },
      // Extra Node/V8 flags for the worker processes only, e.g. --child-node-flags=--min-semi-space-size=16
      'child-node-flags': { type: 'string', default: '' },
      // V8 flags the worker processes set after start-up (v8.setFlagsFromString), e.g. --no-parallel-scavenge
      'child-v8-flags': { type: 'string', default: '' },
      'timeout-s': { type: 'string', default: '600' },
      // The worker processes' store pool size (0: the store's default, 10).
      'pool-size': { type: 'string', default: '0' },
      cold: { type: 'boolean', default: false },
      // Only the N-process shape (no 1-process rounds): to read the server's statistics of one shape alone.
      'skip-one': { type: 'boolean', default: false },
      ...PG_URL_OPTION,
    },
  });
  const jobs = Number(values.jobs);
  const processes = Number(values.processes);
  const rounds = Number(values.rounds);
  const warmup = Number(values.warmup);
  const warmupJobsPerProcess = Number(values['warmup-jobs-per-process']);
  const cold = values.cold === true;
  for (const [name, v] of Object.entries({
    jobs,
    processes,
    rounds,
    concurrency: Number(values.concurrency),
    'warmup-jobs-per-process': warmupJobsPerProcess,
  }))
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
    const postmaster = await localPostmaster(url);
    try {
      const shapes = processes === 1 ? [1] : values['skip-one'] === true ? [processes] : [1, processes];
      const runs: Record<number, RunResult[]> = {};
      const childArgs = {
        url,
        concurrency: runOpts.concurrency,
        pollMs: runOpts.pollMs,
        deadlineMs: (rounds + warmup) * 2 * runOpts.timeoutMs + 60_000,
        v8Flags: String(values['child-v8-flags']),
        poolSize: Number(values['pool-size']),
      };
      const childNodeFlags = String(values['child-node-flags'])
        .split(/\s+/)
        .filter((f) => f !== '');
      const warm = new Map<number, Children>(); // the processes of each shape, kept across rounds (not --cold)
      try {
        for (let r = -warmup; r < rounds; r++) {
          // Rounds alternate the shapes' order. The last warm-up runs in round 1's order, so each shape waits one
          // --jobs run of the other before its first measured round (the six's longer warm-up right before one
          // process's round 1 left that process idle for a minute or more under load, past the pool's idle timeout:
          // runs 549-550).
          const order = (r + warmup + (r < 0 ? 1 : 0)) % 2 ? [...shapes].reverse() : shapes;
          for (const p of order) {
            const queue = `workers-${p}p-${r < 0 ? `warmup${-r}` : `round${r + 1}`}`;
            const children = warm.get(p) ?? new Children(p, childArgs, childNodeFlags);
            if (!warm.has(p)) {
              if (!cold) warm.set(p, children);
              await children.start();
            }
            // A warm-up round: the same number of jobs for each process of any shape.
            const roundJobs = r < 0 ? p * warmupJobsPerProcess : jobs;
            const res = await runOnce(
              admin,
              store,
              queue,
              children,
              { ...runOpts, jobs: roundJobs, processes: p },
              postmaster,
            ).finally(() => (cold ? children.close() : undefined));
            if (r >= 0) (runs[p] ??= []).push(res);
            console.error(
              `${r < 0 ? 'warm-up' : `round ${r + 1}`} ${p} process${p > 1 ? 'es' : ''}: ${Math.round(res.jobsPerSec)} jobs/s (${Math.round(res.ms)} ms), exact ${res.exact}; ` +
                `CPU µs/job node ${res.nodeUsPerJob} (system ${res.nodeSystemUsPerJob}, GC ${res.nodeGcUsPerJob}; main thread ${res.mainThreadUsPerJob}, other threads ${res.otherThreadsUsPerJob}), server ${res.pgUsPerJob ?? 'n/a'} ${JSON.stringify(res.pgUsPerJobByKind)}; per 1k jobs ${res.claimsPerK} claims ` +
                `(${res.emptyClaims} empty, ${res.shortClaims} short in all), ${res.completionsPerK} completion batches; ` +
                `GC per 1k jobs ${res.gcMinorPerK} minor, ${res.gcMajorPerK} major, new space KB ${res.newSpaceKb.join('/')}; loop active µs/job ${res.eluActiveUsPerJob}; heap allocated B/job ${res.allocatedBytesPerJob}; per 1k jobs ${res.perKJobs}; ` +
                `jobs per process ${res.claimedPerProcess.join('/')}; jobs per completion batch ${res.jobsPerCompletion}; ` +
                `connections opened ${res.connects}, pool sizes ${res.poolSizes.join('/')}; ` +
                `bench parent µs/job ${res.parentUsPerJob} (${res.progressPerK} progress messages per 1k jobs)`,
            );
          }
        }
      } finally {
        for (const c of warm.values()) await c.close();
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
        warmupJobsPerProcess,
        childNodeFlags,
        childV8Flags: childArgs.v8Flags,
        workerProcesses: cold ? 'forked for each round (--cold)' : 'forked once per shape, kept across rounds',
        runs: Object.fromEntries(shapes.map((p) => [`${p}p`, runs[p]!.map((x) => Math.round(x.jobsPerSec))])),
        median: Object.fromEntries(shapes.map((p) => [`${p}p`, medianOf(p)])),
        // Medians per shape: CPU µs per job (worker processes, server) and claims / completion batches per 1k jobs.
        perJob: Object.fromEntries(
          shapes.map((p) => {
            const m = (f: (x: RunResult) => number | null) => {
              const xs = runs[p]!.map(f).filter((x): x is number => x !== null);
              return xs.length ? r2(median(xs)) : null;
            };
            return [
              `${p}p`,
              {
                nodeUs: m((x) => x.nodeUsPerJob),
                mainThreadUs: m((x) => x.mainThreadUsPerJob),
                otherThreadsUs: m((x) => x.otherThreadsUsPerJob),
                gcPauseUs: m((x) => x.nodeGcUsPerJob),
                serverUs: m((x) => x.pgUsPerJob),
                claimsPerK: m((x) => x.claimsPerK),
                completionsPerK: m((x) => x.completionsPerK),
                gcMinorPerK: m((x) => x.gcMinorPerK),
                heapAllocatedBytes: m((x) => x.allocatedBytesPerJob),
              },
            ];
          }),
        ),
        [`ratio ${processes}p / 1p`]: processes > 1 && runs[1] ? r2(medianOf(processes) / medianOf(1)) : null,
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

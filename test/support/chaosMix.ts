// A mixed chaos run of the job engine, written from the outside (test/engines/postgres.chaosMix.test.ts runs a
// bounded one; dev/chaosMix.ts a long one on a cluster of its own, with a server restart). Unlike the other chaos
// suites it mixes what a real deployment does at once:
//   jobs: successes, retries with backoff, attempts exhausted (DLQ), fatal errors, long jobs alive only through their
//   heartbeats (progress and job log too), handlers that block their event loop past the zombie timeout (rescue),
//   delayed run_at, priorities, expiry, idempotency keys, several queues (one limited, one purged as it runs);
//   processes (test/support/chaosMixProcess.ts): several Worker processes, Functions-style drain()/processById
//   processes, maintenance in several processes, and an operator cancelling, resurrecting, purging, pausing;
//   faults: SIGKILL of workers and drains (replaced), pg_terminate_backend of random Keel backends and of those
//   running a move (complete_many, retry, fail, the rescue, starts), a slow server (latencyMs: every Keel process
//   talks to it through a FaultProxy that delays its replies; latencySpikeMs: now and then, for 1-2 s, replies that
//   late, past the zombie timeout, so leases expire), optionally a server restart (pg_ctl restart -m fast).
// Then: the backlog must drain, and while it does no job may stay processing (fetched) past its queue's zombie
// timeout (its lease) by more than stuckSlackMs (the rescue runs every few hundred ms), probes enqueued afterwards
// must finish within seconds, every job must be in exactly
// one place, counters and metric buckets exactly what the rows say, attempts sensible, no two runs of one job
// overlapping unless the first had lost its lease by blocking its event loop, graceful stops within their grace, and
// no deadlock or unexpected ERROR in the server log.
import { spawn, type ChildProcess } from 'node:child_process';
import { open, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import type { EnqueueRequest } from '../../shared/jobs/contract.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';
import { seededRandom } from './seededRandom.js';
import { FaultProxy } from './faultProxy.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ChaosMixOptions {
  ownerUrl: string; // the database, as its owner (migrations, inspection)
  appUrl: string; // the same database as the application's login
  serverLog?: string; // the server's log file, read from its size at the start
  restart?: () => Promise<void>; // restarts the server (pg_ctl restart -m fast)
  // Freezes the server for ms (SIGSTOP of its postmaster and every backend, then SIGCONT): every statement in flight
  // and every connect hangs, no TCP reset; server-side time runs on, so every lease it holds expires at once.
  stallServer?: (ms: number) => Promise<void>;
  serverStalls?: number; // how many such stalls during the chaos (default 0)
  serverStallMinMs?: number; // default 5000
  serverStallMaxMs?: number; // default 10000
  terminateBackends?: boolean; // pg_terminate_backend of random Keel backends (default true)
  seed?: number;
  jobs: number;
  workers: number;
  drains: number;
  maints: number;
  hogs?: number; // jobs whose handler blocks its process past the zombie timeout (default 2)
  kills: number; // SIGKILLs of a worker or drain process during the chaos
  chaosMs: number; // how long faults go on (the operator acts that long)
  settleMs: number; // the backlog must drain within this after the chaos
  probeMs: number; // probes must finish within this
  latencyMs?: number; // every Keel process's replies from the server this much later (default 0: no proxy)
  latencySpikeMs?: number; // during the chaos, now and then for 1-2 s, replies this late (default 0: none)
  stuckSlackMs?: number; // how long past its lease a job may stay processing or fetched while draining (default 5000)
  flows?: number; // flows in the backlog: a parent, 1-4 children (each its onFailure policy), a fan-in (default 0)
  opsApi?: number; // operator processes acting through the ops API's HTTP handler (default 0)
  schedulers?: number; // processes racing scheduler passes and keyed enqueues of shared keys (default 0)
  stops?: number; // SIGSTOP of a worker or drain for 1-4 s (past the zombie timeout), then SIGCONT (default 0)
  narrow?: number; // the share of the backlog of type 'narrow' (limited to 2 per process; default 0)
  // Processes running the Functions app's timer passes on a runtime of their own: the dispatcher (run mode, and
  // post mode: claim, release, post), the maintenance pass, and a queue runner taking the posted ids as the queue
  // trigger does (processByIdOf, the slot hand-on, the retried job's message); killed and stopped as workers are.
  dispatchers?: number;
  tiny?: boolean; // the limited queue at 1 (the ops API sets 1-2) and the type 'narrow' at 1 per process
  bigResurrects?: boolean; // the operator also resurrects up to 500 dead letters at once, by filter and by id
  lockTimeoutMs?: number; // lock_timeout of the app login in the run's database during the chaos (default none)
  statementTimeoutMs?: number; // statement_timeout of the app login in the run's database during the chaos (default none)
  workerConcurrency?: number; // each Worker process's concurrency (default 12)
  skewMs?: number; // each process's Date clock off by up to this much, either way (default 0); its lines use the true time
  bulky?: number; // the share of the backlog of type 'bulky': a ~200 KB payload, a ~60 KB result (default 0)
  churners?: number; // processes changing every queue's limit (none, 1-8), pausing and resuming, all the time (default 0)
  // Network partitions of one worker, drain or dispatcher process at a time (each talks through a proxy of its own):
  // its connections stay open and nothing moves either way for partitionMinMs-partitionMaxMs, then everything held
  // is delivered (default 0)
  partitions?: number;
  partitionMinMs?: number; // default 2500 (past the 2 s zombie timeout)
  partitionMaxMs?: number; // default 15000
  // Graceful stops during the chaos: SIGTERM of a worker, drain or dispatcher with jobs in flight (replaced); it must
  // say BYE within its grace and a margin and leave no job fetched or processing under its id (default 0)
  terms?: number;
  manyQueues?: number; // this many more queues (2 s zombie timeout, no limit) every process serves and the backlog spreads over (default 0)
  log?: (line: string) => void;
}

export interface ChaosMixReport {
  problems: string[]; // each a violated property; empty when everything held
  logErrors: Map<string, number>; // server log ERROR/FATAL messages (normalized) and how often
  facts: Record<string, number | string>;
}

interface Run {
  job: string;
  attempt: number;
  pid: number;
  start: number;
  end?: number;
  how?: string;
}

interface Child {
  role: string;
  killedByUs?: boolean;
  proc: ChildProcess;
  ready: Promise<void>;
  bye?: number;
  exited: Promise<void>;
  spawnedAt: number;
  readyAt?: number;
  exit?: string; // how it exited
  stderr: () => string;
  workerId?: string; // its processor's (W line)
  proxy?: FaultProxy; // its own, for partitions
}

const BASE_QUEUES = ['mx-a', 'mx-b', 'mx-lim', 'mx-p'];

export async function runChaosMix(o: ChaosMixOptions): Promise<ChaosMixReport> {
  const log = o.log ?? (() => undefined);
  const QUEUE_NAMES = [...BASE_QUEUES, ...Array.from({ length: o.manyQueues ?? 0 }, (_, i) => `mx-q${i}`)];
  const random = seededRandom('chaos mix', o.seed);
  const problems: string[] = [];
  const facts: Record<string, number | string> = {};
  const runs = new Map<string, Run[]>(); // job -> its handler runs
  const openRuns = new Map<string, Run>(); // `${pid} ${job}` -> a run not ended yet
  const outcomes = new Map<string, string[]>();
  const outcomesBy = new Map<string, string>(); // `${pid} ${job}` -> that process's last outcome of the job
  const errors = new Map<string, number>();
  let purged = 0;
  let purgedUnknown = 0; // at most this many more, by purges whose outcome their caller could not know
  const dedup: string[] = [];
  const apiIds: string[] = []; // jobs the ops API enqueued
  const revived = new Set<string>(); // jobs an operator resurrected
  const skippedRevived = new Map<string, number>(); // per queue: 'skipped' dead letters an operator resurrected
  const serverErrors = new Map<string, number>(); // ops API answers of 500 or more
  const keyErrors = new Map<string, number>(); // keyed enqueues of shared keys that failed
  const stopped: { pid: number; from: number; to: number }[] = []; // SIGSTOP windows
  const partitioned: { pid: number; from: number; to: number }[] = []; // partition windows (not exempt from overlaps)
  const children = new Set<Child>();
  const lags: { pid: number; at: number; ms: number }[] = []; // event-loop delays of >= 100 ms, per process
  const logStart = o.serverLog ? await sizeOf(o.serverLog) : 0;

  const owner = new pg.Client({ connectionString: o.ownerUrl, application_name: 'keel-harness' });
  owner.on('error', () => undefined);
  await owner.connect();
  let ownerClient = owner;
  const q = async (sql: string, params: unknown[] = []) => {
    for (let i = 0; ; i++) {
      try {
        return (await ownerClient.query(sql, params)).rows;
      } catch (err) {
        if (i >= 20) throw err;
        // The server restarted (or our backend was terminated): reconnect.
        await ownerClient.end().catch(() => undefined);
        await sleep(500);
        ownerClient = new pg.Client({ connectionString: o.ownerUrl, application_name: 'keel-harness' });
        ownerClient.on('error', () => undefined);
        await ownerClient.connect().catch(() => undefined);
      }
    }
  };

  const control = await PostgresJobStore.connect(o.appUrl, { poolSize: 3, migrateUrl: o.ownerUrl });
  // A slow server: the processes' connections go through a proxy that delays every reply (the harness's and the
  // control store's do not).
  const slow = (o.latencyMs ?? 0) > 0 || (o.latencySpikeMs ?? 0) > 0;
  const au = new URL(o.appUrl);
  const proxy = slow ? await FaultProxy.start(au.hostname, Number(au.port || 5432)) : undefined;
  if (proxy) proxy.latencyMs = o.latencyMs ?? 0;
  // Partitions: each worker, drain and dispatcher process talks through a proxy of its own (its replacement after a
  // kill takes it over), with the shared one's latency.
  const ownProxies: FaultProxy[] = [];
  const ownProxy = async (role: string) => {
    if (!o.partitions || !['worker', 'drain', 'dispatch'].includes(role)) return undefined;
    const p = await FaultProxy.start(au.hostname, Number(au.port || 5432));
    p.latencyMs = o.latencyMs ?? 0;
    ownProxies.push(p);
    return p;
  };
  // A proxy whose previous process is still stopping gracefully (its replacement took the proxy over).
  const sharesProxy = (c: Child) => [...children].some((x) => x !== c && x.proxy === c.proxy);
  const setLatency = (ms: number) => {
    if (proxy) proxy.latencyMs = ms;
    for (const p of ownProxies) p.latencyMs = ms;
  };
  const processUrl = proxy ? proxy.urlFor(o.appUrl) : o.appUrl;
  await control.updateQueue('mx-a', { zombieTimeoutSeconds: 2, zombiePolicy: 'retry', maxAttempts: 4 });
  await control.updateQueue('mx-b', { zombieTimeoutSeconds: 2, zombiePolicy: 'retry', maxAttempts: 4 });
  await control.updateQueue('mx-lim', {
    zombieTimeoutSeconds: 2,
    zombiePolicy: 'retry',
    maxAttempts: 4,
    maxConcurrency: o.tiny ? 1 : 6,
  });
  await control.updateQueue('mx-p', { zombieTimeoutSeconds: 2, zombiePolicy: 'dlq', maxAttempts: 4 });
  for (const qn of QUEUE_NAMES.slice(BASE_QUEUES.length))
    await control.updateQueue(qn, { zombieTimeoutSeconds: 2, zombiePolicy: 'retry', maxAttempts: 4 });

  const spawnChild = (role: string, own?: FaultProxy): Child => {
    const proc = spawn(process.execPath, ['--import', 'tsx', 'test/support/chaosMixProcess.ts'], {
      cwd: ROOT,
      env: {
        ...process.env,
        MIX_URL: own ? own.urlFor(o.appUrl) : processUrl,
        MIX_ROLE: role,
        MIX_QUEUES: QUEUE_NAMES.join(','),
        MIX_PURGE_QUEUE: 'mx-p',
        MIX_SEED: String(random.int(0, 1e9)),
        MIX_TINY: o.tiny ? '1' : '',
        MIX_BIG: o.bigResurrects ? '1' : '',
        MIX_CONCURRENCY: String(o.workerConcurrency ?? 12),
        MIX_SKEW_MS: o.skewMs ? String(random.int(-o.skewMs, o.skewMs)) : '',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const pid = proc.pid!;
    let buf = '';
    let err = '';
    let readyResolve!: () => void;
    let readyReject!: (e: Error) => void;
    const ready = new Promise<void>((res, rej) => ((readyResolve = res), (readyReject = rej)));
    const child: Child = {
      role,
      proc,
      proxy: own,
      ready,
      spawnedAt: Date.now(),
      stderr: () => err,
      exited: new Promise<void>((res) =>
        proc.once('exit', (code, signal) => {
          child.exit = `${code ?? signal}`;
          children.delete(child);
          const now = Date.now();
          // A killed process's running handlers end with it.
          for (const [key, r] of openRuns)
            if (r.pid === pid) {
              r.end = now;
              r.how = `killed:${signal ?? code}`;
              openRuns.delete(key);
            }
          readyReject(new Error(`${role} process exited (${code ?? signal}) before it was ready: ${err}`));
          if (!child.killedByUs)
            problems.push(`process: a ${role} process exited by itself (${code ?? signal}): ${err.slice(-600)}`);
          res();
        }),
      ),
    };
    ready.catch(() => undefined);
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) {
        const f = l.split(' ');
        if (l === 'READY') {
          child.readyAt = Date.now();
          readyResolve();
        } else if (f[0] === 'S') {
          const r: Run = { job: f[1]!, attempt: Number(f[2]), pid, start: Number(f[3]) };
          runs.set(r.job, [...(runs.get(r.job) ?? []), r]);
          openRuns.set(`${pid} ${r.job}`, r);
        } else if (f[0] === 'E') {
          const r = openRuns.get(`${pid} ${f[1]}`);
          if (r) {
            r.end = Number(f[3]);
            r.how = f[4];
            openRuns.delete(`${pid} ${f[1]}`);
          }
        } else if (f[0] === 'O') {
          outcomes.set(f[1]!, [...(outcomes.get(f[1]!) ?? []), `${f[2]!}:${f[3] ?? '-'}`]);
          outcomesBy.set(`${pid} ${f[1]}`, f[2]!);
        } else if (f[0] === 'P') purged += Number(f[2]);
        else if (f[0] === 'PU') purgedUnknown += Number(f[2]);
        else if (f[0] === 'L') lags.push({ pid, at: Number(f[1]), ms: Number(f[2]) });
        else if (f[0] === 'Q') {
          dedup.push(l.slice(2));
          // The operator's keyed jobs are the run's too (a purge of mx-p's archive may take them).
          apiIds.push(...f.slice(1).map((x) => x.split(':')[0]!));
        } else if (f[0] === 'J') apiIds.push(...f.slice(1));
        else if (f[0] === 'RS') skippedRevived.set(f[1]!, (skippedRevived.get(f[1]!) ?? 0) + Number(f[2]));
        else if (f[0] === 'R') for (const id of f.slice(1)) revived.add(id);
        else if (f[0] === 'K') keyErrors.set(l.slice(2), (keyErrors.get(l.slice(2)) ?? 0) + 1);
        else if (f[0] === 'H') serverErrors.set(l.slice(2), (serverErrors.get(l.slice(2)) ?? 0) + 1);
        else if (f[0] === 'X') {
          const key = `${role} ${f.slice(1).join(' ').replace(/\d+/g, 'N').slice(0, 120)}`;
          errors.set(key, (errors.get(key) ?? 0) + 1);
        } else if (f[0] === 'BYE') child.bye = Number(f[1]);
        else if (f[0] === 'W') child.workerId = f[1];
      }
    });
    proc.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    children.add(child);
    return child;
  };

  const pickOrNone = <T>(xs: T[]): T | undefined => (xs.length ? random.pick(xs) : undefined);
  const ids: string[] = [];
  const enqueue = async (jobs: EnqueueRequest[]) => {
    for (let i = 0; i < jobs.length; i += 500)
      ids.push(...(await control.enqueueMany(jobs.slice(i, i + 500))).map((r) => r.id));
  };

  try {
    // The backlog: a mix of types, priorities, delays, expiries and keys over the queues.
    const jobs: EnqueueRequest[] = [];
    for (let n = 0; n < o.jobs; n++) {
      const roll = random.next();
      let type =
        roll < 0.57
          ? 'ok'
          : roll < 0.72
            ? 'flaky'
            : roll < 0.79
              ? 'doomed'
              : roll < 0.83
                ? 'fatal'
                : roll < 0.86
                  ? 'late'
                  : 'beat';
      if (o.narrow && random.next() < o.narrow) type = 'narrow';
      if (o.bulky && random.next() < o.bulky) type = 'bulky';
      const queue = type === 'beat' ? random.pick(['mx-a', 'mx-b']) : random.pick(QUEUE_NAMES);
      const job: EnqueueRequest = {
        queue,
        type,
        priority: random.int(0, 3),
        payload:
          type === 'beat'
            ? { ms: random.int(2200, 3500) }
            : type === 'flaky'
              ? { okAt: random.int(2, 3) }
              : type === 'bulky'
                ? { n, blob: 'b'.repeat(random.int(100_000, 250_000)) }
                : { n },
      };
      if (random.next() < 0.1) job.delayMs = random.int(100, 3000);
      if (random.next() < 0.02) job.expiresAt = new Date(Date.now() + random.int(200, 4000));
      if (random.next() < 0.05) job.idempotencyKey = `k-${n}`;
      jobs.push(job);
    }
    // Two handlers that block their process's event loop past the zombie timeout (rare: each blocks every other job
    // of its process too).
    for (let n = 0; n < (o.hogs ?? 2); n++)
      jobs.push({ queue: 'mx-a', type: 'hog', payload: { ms: 2600 }, maxAttempts: 2 });
    await enqueue(jobs);
    // Flows: a parent (some fail), children after it, each with its policy, and a fan-in after every child.
    for (let f = 0; f < (o.flows ?? 0); f++) {
      const parentType = random.pick(['ok', 'ok', 'flaky', 'doomed', 'fatal']);
      const fq = random.pick(['mx-a', 'mx-b', 'mx-lim']);
      const n = random.int(1, 4);
      const flow: EnqueueRequest[] = [
        {
          queue: fq,
          type: parentType,
          payload: parentType === 'flaky' ? { okAt: 2 } : { n: f },
          ...(random.next() < 0.2 ? { delayMs: random.int(100, 2000) } : {}),
        },
      ];
      for (let c = 0; c < n; c++)
        flow.push({
          queue: random.pick(['mx-a', 'mx-b', 'mx-lim']),
          type: random.pick(['ok', 'ok', 'flaky', 'doomed']),
          payload: { okAt: 2 },
          after: [{ index: 0 }],
          onFailure: random.pick(['deadLetter', 'deadLetter', 'skip', 'run'] as const),
        });
      flow.push({
        queue: fq,
        type: 'ok',
        payload: { n: -2 },
        after: Array.from({ length: n }, (_, c) => ({ index: c + 1 })),
        ...(random.next() < 0.5 ? { onFailure: random.pick(['deadLetter', 'skip', 'run'] as const) } : {}),
      });
      ids.push(...(await control.enqueueMany(flow)).map((r) => r.id));
    }
    facts.enqueued = ids.length;

    const appLogin = decodeURIComponent(new URL(o.appUrl).username);
    const dbName = decodeURIComponent(new URL(o.ownerUrl).pathname.slice(1));
    if (o.lockTimeoutMs)
      await q(`alter role "${appLogin}" in database "${dbName}" set lock_timeout = ${Math.floor(o.lockTimeoutMs)}`);
    if (o.statementTimeoutMs)
      await q(
        `alter role "${appLogin}" in database "${dbName}" set statement_timeout = ${Math.floor(o.statementTimeoutMs)}`,
      );
    const started: Child[] = [];
    for (let i = 0; i < (o.dispatchers ?? 0); i++) started.push(spawnChild('dispatch', await ownProxy('dispatch')));
    for (let i = 0; i < o.workers; i++) started.push(spawnChild('worker', await ownProxy('worker')));
    for (let i = 0; i < o.drains; i++) started.push(spawnChild('drain', await ownProxy('drain')));
    for (let i = 0; i < o.maints; i++) started.push(spawnChild('maint'));
    const ops = spawnChild('ops');
    const apis = Array.from({ length: o.opsApi ?? 0 }, () => spawnChild('opsapi'));
    apis.push(...Array.from({ length: o.schedulers ?? 0 }, () => spawnChild('sched')));
    apis.push(...Array.from({ length: o.churners ?? 0 }, () => spawnChild('churn')));
    await Promise.all([...started, ops, ...apis].map((c) => c.ready));
    log(
      `chaos: ${o.workers} workers, ${o.drains} drains, ${o.maints} maintenance, 1 operator, ${apis.length} ops API operators`,
    );

    // Faults.
    const chaosEnd = Date.now() + o.chaosMs;
    let kills = 0;
    let terminated = 0;
    let spikes = 0;
    let spikeEnd = 0;
    let restarted = false;
    let stops = 0;
    let serverStalls = 0;
    let lastStallEnd = 0;
    let partitions = 0;
    let terms = 0;
    const termChecks: Promise<void>[] = [];
    const stranded: string[] = [];
    const conts: Promise<void>[] = [];
    const restartAt = o.restart ? Date.now() + o.chaosMs * random.next() * 0.6 + o.chaosMs * 0.2 : Infinity;
    while (Date.now() < chaosEnd) {
      await sleep(random.int(200, 700));
      if (kills < Math.floor((o.kills * (Date.now() - (chaosEnd - o.chaosMs))) / o.chaosMs) + 1 && kills < o.kills) {
        const victims = [...children].filter((c) => c.role === 'worker' || c.role === 'drain' || c.role === 'dispatch');
        const v = random.pick(victims);
        v.killedByUs = true;
        v.proc.kill('SIGKILL');
        await v.exited;
        kills++;
        v.proxy?.heal(); // its partition ends with it (its replacement takes the proxy over)
        spawnChild(v.role, v.proxy); // not waited for: the faults go on while it starts
      }
      if (partitions < (o.partitions ?? 0) && random.next() < 0.15) {
        // A network partition of one process: its connections hang (no reset), its leases expire and others rescue
        // its jobs; when it heals, what it sent arrives late and must be fenced, and the process must carry on.
        const v = pickOrNone(
          [...children].filter(
            (c) =>
              c.proxy &&
              !c.proxy.isStalled &&
              c.readyAt &&
              !c.killedByUs && // not one stopping gracefully (its replacement shares the proxy)
              !sharesProxy(c) &&
              !stopped.some((w) => w.pid === c.proc.pid && w.to > Date.now()),
          ),
        );
        if (v) {
          const own = v.proxy!;
          const w = { pid: v.proc.pid!, from: Date.now(), to: Infinity };
          partitioned.push(w);
          own.stall();
          partitions++;
          const ms = random.int(o.partitionMinMs ?? 2500, o.partitionMaxMs ?? 15000);
          log(`chaos: ${Date.now()} partition of ${v.role} ${w.pid} for ${ms} ms`);
          conts.push(
            sleep(ms).then(() => {
              w.to = Date.now();
              own.heal();
            }),
          );
        }
      }
      if (terms < (o.terms ?? 0) && random.next() < 0.15) {
        // A graceful stop with jobs in flight (a deploy, a scale-in): it must finish or hand back what it holds within
        // its grace, then exit; replaced at once.
        const v = pickOrNone(
          [...children].filter(
            (c) =>
              ['worker', 'drain', 'dispatch'].includes(c.role) &&
              c.readyAt &&
              c.workerId &&
              !c.killedByUs && // not one already stopping
              !c.proxy?.isStalled &&
              !stopped.some((w) => w.pid === c.proc.pid && w.to > Date.now()),
          ),
        );
        if (v) {
          terms++;
          const [held] = await q(
            `select count(*)::int n from keel.jobs_hot where worker_id = $1 and state in ('fetched', 'processing')`,
            [v.workerId],
          );
          v.killedByUs = true;
          v.proc.kill('SIGTERM');
          const began = Date.now();
          log(`chaos: ${Date.now()} SIGTERM to ${v.role} ${v.proc.pid} holding ${held!.n} jobs`);
          termChecks.push(
            Promise.race([v.exited.then(() => true), sleep(20_000).then(() => false)]).then(async (exited) => {
              if (!exited) {
                problems.push(`graceful stop: a ${v.role} process (${v.proc.pid}) did not exit within 20 s of SIGTERM`);
                v.proc.kill('SIGKILL');
                await v.exited;
              } else if (v.bye === undefined)
                problems.push(
                  `graceful stop: a ${v.role} process exited (${v.exit}) without BYE: ${v.stderr().slice(-400)}`,
                );
              else facts.termWorstMs = Math.max(Number(facts.termWorstMs ?? 0), Date.now() - began);
              log(`chaos: ${Date.now()} ${v.role} ${v.proc.pid} stopped in ${Date.now() - began} ms (BYE ${v.bye})`);
              // What it held when told to stop is finished or handed back: nothing stays under its id (a job whose
              // outcome write was cut by a terminated backend is the rescue's, and is reported below).
              let left = await q(
                `select id::text, state, type, queue from keel.jobs_hot where worker_id = $1 and state in ('fetched', 'processing')`,
                [v.workerId],
              );
              facts.termHeldAtStop = Number(facts.termHeldAtStop ?? 0) + held!.n;
              // A job it gave up as lease_lost (its lease expired: a slow store, a partition) is the rescue's, by design.
              const gaveUp = (id: string) => (outcomesBy.get(`${v.proc.pid} ${id}`) ?? '') === 'lease_lost';
              facts.termLeftGivenUp = Number(facts.termLeftGivenUp ?? 0) + left.filter((r) => gaveUp(r.id)).length;
              left = left.filter((r) => !gaveUp(r.id));
              if (left.length)
                stranded.push(`${v.role} ${v.proc.pid} held ${held!.n}, left ${JSON.stringify(left.slice(0, 3))}`);
            }),
          );
          spawnChild(v.role, v.proxy);
        }
      }
      if (stops < (o.stops ?? 0) && random.next() < 0.25) {
        // A process frozen past its jobs' zombie timeout (a VM paused, a debugger): its leases pass to others, and
        // when it runs again its heartbeats answer lease_lost (or, if they come first, it completes).
        const v = pickOrNone(
          [...children].filter((c) => ['worker', 'drain', 'dispatch'].includes(c.role) && c.readyAt),
        );
        if (v) {
          const pid = v.proc.pid!;
          const w = { pid, from: Date.now(), to: Infinity };
          stopped.push(w);
          v.proc.kill('SIGSTOP');
          stops++;
          conts.push(
            sleep(random.int(1000, 4000)).then(() => {
              w.to = Date.now();
              v.proc.kill('SIGCONT');
            }),
          );
        }
      }
      if (
        o.stallServer &&
        serverStalls < (o.serverStalls ?? 0) &&
        Date.now() > lastStallEnd + 3000 &&
        random.next() < 0.12
      ) {
        // The whole server frozen (a VM paused, a storage hang): every process's statements wait with it, then every
        // lease it held is past (its clock ran on), and the rescue, the claims and the late heartbeats all meet.
        const ms = random.int(o.serverStallMinMs ?? 5000, o.serverStallMaxMs ?? 10000);
        log(`chaos: ${Date.now()} server stalled for ${ms} ms`);
        serverStalls++;
        await o.stallServer(ms);
        lastStallEnd = Date.now();
      }
      if ((o.terminateBackends ?? true) && random.next() < 0.35) {
        // Random Keel backends, and more often those in the middle of a move.
        const rows = await q(
          `select pg_terminate_backend(pid) as t from pg_stat_activity
           where datname = current_database() and application_name in ('keel', 'keel-wakeups')
             and (random() < 0.3
                  or (state = 'active' and random() < 0.6
                      and query ~ '(complete_many|retry|fail|rescue_zombies|start_many|claim_and_start|heartbeat)'))`,
        );
        terminated += rows.filter((r) => r.t).length;
      }
      if (proxy && (o.latencySpikeMs ?? 0) > 0) {
        if (spikeEnd && Date.now() >= spikeEnd) {
          setLatency(o.latencyMs ?? 0);
          spikeEnd = 0;
        } else if (!spikeEnd && random.next() < 0.08) {
          setLatency(o.latencySpikeMs!);
          spikeEnd = Date.now() + random.int(1000, 2000);
          spikes++;
        }
      }
      if (!restarted && Date.now() >= restartAt) {
        restarted = true;
        log('chaos: restarting the server');
        await o.restart!();
      }
    }
    await Promise.all(conts);
    await Promise.all(termChecks);
    facts.partitions = partitions;
    facts.terms = terms;
    facts.strandedAfterTerm = stranded.join('\n');
    // With backends terminated or the server restarted, a graceful stop's last outcome write may be cut (the job is
    // then the rescue's): only a run without those faults makes a stranded lease a problem.
    if (stranded.length && o.terminateBackends === false && !o.restart)
      problems.push(
        `graceful stop: ${stranded.length} processes left jobs under their id: ${stranded.slice(0, 3).join('; ')}`,
      );
    if (o.lockTimeoutMs) await q(`alter role "${appLogin}" in database "${dbName}" reset lock_timeout`);
    if (o.statementTimeoutMs) await q(`alter role "${appLogin}" in database "${dbName}" reset statement_timeout`);
    facts.stops = stops;
    facts.serverStalls = serverStalls;
    facts.kills = kills;
    facts.backendsTerminated = terminated;
    facts.latencySpikes = spikes;
    setLatency(o.latencyMs ?? 0);
    facts.restarted = restarted ? 1 : 0;

    // The operator stops (it unpauses every queue on its way out); maintenance goes on.
    for (const c of [ops, ...apis]) {
      c.killedByUs = true;
      c.proc.kill('SIGTERM');
    }
    await Promise.all([ops, ...apis].map((c) => c.exited));
    ids.push(...new Set(apiIds));
    facts.apiEnqueued = new Set(apiIds).size;
    facts.resurrectedByOperators = revived.size;
    for (const qn of QUEUE_NAMES) await control.updateQueue(qn, { paused: false });
    if (o.churners) {
      // The churn left its last limits: the run's own again.
      for (const qn of QUEUE_NAMES)
        await control.updateQueue(qn, { maxConcurrency: qn === 'mx-lim' ? (o.tiny ? 1 : 6) : null });
    }

    // Draining: no job stays processing past its queue's zombie timeout, nor fetched past its lease, for longer than
    // the slack (maintenance rescues every few hundred ms; a killed process's jobs wait for it, no longer).
    const slackMs = o.stuckSlackMs ?? 5000;
    const settleStart = Date.now();
    let hot = await countHot(q);
    let stuckWorst = 0;
    let stuckSeen = '';
    for (let i = 0; hot > 0 && Date.now() - settleStart < o.settleMs; i++) {
      await sleep(250);
      hot = await countHot(q);
      if (i % 4 !== 0) continue;
      if (i % 20 === 0 && o.log) {
        // What is left, for a run that drains slowly: by queue, state and type, and how many are due.
        const left = await q(
          `select queue, state, type, count(*)::int n, count(*) filter (where run_at <= now())::int due
           from keel.jobs_hot group by 1, 2, 3 order by 1, 2, 3`,
        );
        log(`draining ${Math.round((Date.now() - settleStart) / 1000)} s: ${JSON.stringify(left)}`);
      }
      const [st] = await q(
        `select coalesce(max(greatest(
                  case when h.state = 'processing'
                       then extract(epoch from now() - h.heartbeat_at) - coalesce(s.zombie_timeout_seconds, 300) end,
                  case when h.state = 'fetched' then extract(epoch from now() - h.lease_expires_at) end)), 0)::float8 late,
                count(*) filter (where (h.state = 'processing'
                                        and h.heartbeat_at < now() - make_interval(secs => coalesce(s.zombie_timeout_seconds, 300) + $1::float8))
                                    or (h.state = 'fetched' and h.lease_expires_at < now() - make_interval(secs => $1::float8)))::int stuck
         from keel.jobs_hot h left join keel.queues s on s.name = h.queue
         where h.state in ('processing', 'fetched')`,
        [slackMs / 1000],
      );
      stuckWorst = Math.max(stuckWorst, Number(st.late));
      if (st.stuck > 0 && !stuckSeen) stuckSeen = `${st.stuck} jobs ${Math.round(st.late)} s past their lease`;
    }
    facts.drainMs = Date.now() - settleStart;
    facts.worstPastLeaseS = Math.round(stuckWorst * 10) / 10;
    if (stuckSeen)
      problems.push(`liveness: while draining, ${stuckSeen} (slack ${slackMs / 1000} s): the rescue did not take them`);
    if (hot > 0) {
      const left = await q(
        `select queue, state, count(*)::int n, count(*) filter (where run_at <= now())::int due from keel.jobs_hot group by 1, 2 order by 1, 2`,
      );
      problems.push(`liveness: ${hot} jobs still hot ${o.settleMs / 1000} s after the chaos: ${JSON.stringify(left)}`);
    }

    // Probes, on every queue: the running processes must take them at once.
    const probeStart = Date.now();
    const probeIds = (
      await control.enqueueMany(
        Array.from({ length: 40 }, (_, k) => ({
          queue: QUEUE_NAMES[k % QUEUE_NAMES.length]!,
          type: 'ok',
          payload: { probe: true },
        })),
      )
    ).map((r) => r.id);
    ids.push(...probeIds);
    let probesLeft = probeIds.length;
    while (probesLeft > 0 && Date.now() - probeStart < o.probeMs) {
      await sleep(50);
      probesLeft = (await q(`select count(*)::int n from keel.jobs_hot where id = any($1::bigint[])`, [probeIds]))[0].n;
    }
    facts.probeMs = Date.now() - probeStart;
    if (probesLeft > 0) problems.push(`liveness: ${probesLeft} of 40 probes not done within ${o.probeMs / 1000} s`);

    // Graceful stops: every process says BYE within its grace (3 s) and a margin.
    const living = [...children];
    // A replacement spawned late in the chaos may still be starting (seconds on a loaded machine): SIGTERM before
    // its handler is installed kills it outright, which says nothing about a graceful stop. Let it get ready first.
    await Promise.race([Promise.all(living.map((c) => c.ready.catch(() => undefined))), sleep(30_000)]);
    const stopStart = Date.now();
    for (const c of living) {
      c.killedByUs = true;
      c.proc.kill('SIGTERM');
    }
    await Promise.race([Promise.all(living.map((c) => c.exited)), sleep(15_000)]);
    facts.stopMs = Date.now() - stopStart;
    for (const c of living) {
      if (c.bye === undefined)
        problems.push(
          `shutdown: a ${c.role} process did not stop within 15 s of SIGTERM (${c.proc.pid}, spawned ${
            stopStart - c.spawnedAt
          } ms before the stop, ${c.readyAt ? `ready ${stopStart - c.readyAt} ms before` : 'never ready'}; exit: ${
            c.exit ?? 'none'
          }; stderr: ${c.stderr().slice(-400)})`,
        );
    }
    // Whatever the stops gave back (interrupted jobs) is pending again: one more maintenance-free check that
    // nothing was left processing or fetched by a graceful stop.
    const stuck = await q(
      `select state, count(*)::int n from keel.jobs_hot where state in ('fetched', 'processing') group by 1`,
    );
    if (stuck.length)
      problems.push(`shutdown: jobs left ${JSON.stringify(stuck)} after every process stopped gracefully`);
    // Finish what the stops handed back, in this process.
    await runMaintenance(control, {});
    await control.close();

    // Safety: every job in exactly one place (or purged from mx-p's archive).
    const where = new Map<string, string[]>();
    for (const t of ['jobs_hot', 'jobs_archive', 'jobs_dlq']) {
      for (const r of await q(`select id::text from keel.${t}`)) where.set(r.id, [...(where.get(r.id) ?? []), t]);
    }
    const missing = ids.filter((id) => !where.has(id));
    const twice = [...where].filter(([, t]) => t.length > 1);
    if (twice.length)
      problems.push(`safety: ${twice.length} jobs in two places, e.g. ${JSON.stringify(twice.slice(0, 3))}`);
    // Schedules (the sched role's every-second schedules, never in the purged queue): each tick enqueued at most once
    // across every pass of every process, restarts and stalls included. Gaps (ticks never enqueued) follow an outage
    // of every pass longer than the 5 s grace (missed: 'skip' drops what is older): listed, for the run's reader.
    const fired = await q(
      `select idempotency_key k, count(distinct id)::int n
         from (select id, idempotency_key from keel.jobs_hot union all select id, idempotency_key from keel.jobs_archive
               union all select id, idempotency_key from keel.jobs_dlq) x
        where idempotency_key like 'schedule:%' group by 1`,
    );
    const firedTwice = fired.filter((r) => r.n > 1);
    if (firedTwice.length)
      problems.push(
        `schedules: ${firedTwice.length} ticks enqueued twice, e.g. ${JSON.stringify(firedTwice.slice(0, 3))}`,
      );
    const ticksBy = new Map<string, number[]>();
    for (const r of fired) {
      const m = /^schedule:(.+):(\d{4}-.+)$/.exec(String(r.k));
      if (m) ticksBy.set(m[1]!, [...(ticksBy.get(m[1]!) ?? []), Date.parse(m[2]!)]);
    }
    let gaps = 0;
    let worstGap = 0;
    const gapList: string[] = [];
    for (const [name, ts] of ticksBy) {
      ts.sort((a, b) => a - b);
      for (let i = 1; i < ts.length; i++) {
        const gap = (ts[i]! - ts[i - 1]!) / 1000 - 1; // seconds never enqueued between two fired ticks
        if (gap <= 0) continue;
        gaps++;
        worstGap = Math.max(worstGap, gap);
        gapList.push(`${name} after ${new Date(ts[i - 1]!).toISOString()}: ${gap} s`);
      }
    }
    facts.scheduleTicks = fired.length;
    facts.scheduleGaps = gaps;
    facts.scheduleWorstGapS = worstGap;
    facts.scheduleGapList = gapList.slice(0, 12).join('; ');
    const archivedP = (await q(`select count(*)::int n from keel.jobs_archive where queue = 'mx-p'`))[0].n;
    facts.purged = purged;
    facts.purgedUnknown = purgedUnknown;
    // Missing jobs must be mx-p jobs purged from the archive: their count is what purge reported, plus up to what the
    // purges that failed with an unknown outcome (a connection cut after their commit) may have deleted.
    if (missing.length < purged || missing.length > purged + purgedUnknown) {
      problems.push(
        `safety: ${missing.length} jobs missing from every table, ${purged} purged by the operator` +
          (purgedUnknown ? ` (and up to ${purgedUnknown} by purges of unknown outcome)` : ''),
      );
    }
    const purgedP = Math.min(Math.max(missing.length, purged), purged + purgedUnknown); // what mx-p's counters count

    // Counters: stats_summary against the rows, per queue.
    const rows = await q(
      `select q.queue,
              (select count(*)::int from keel.jobs_archive a where a.queue = q.queue) archived,
              (select count(*)::int from keel.jobs_dlq d where d.queue = q.queue) dead,
              (select count(*)::int from keel.jobs_hot h where h.queue = q.queue) hot,
              s.succeeded::int, s.failed::int, s.retried::int, s.cancelled::int, s.zombie::int, s.resurrected::int,
              (select coalesce(sum(count), 0)::int from keel.metric_buckets b where b.queue = q.queue and b.outcome = 'succeeded') b_ok,
              (select coalesce(sum(count), 0)::int from keel.metric_buckets b where b.queue = q.queue and b.outcome = 'failed') b_failed,
              (select coalesce(sum(count), 0)::int from keel.metric_buckets b where b.queue = q.queue and b.outcome = 'failed' and b.reason = 'cancelled') b_cancelled,
              (select count(*)::int from keel.jobs_dlq d where d.queue = q.queue and d.reason = 'cancelled') dead_cancelled,
              (select count(*)::int from keel.jobs_dlq d where d.queue = q.queue and d.reason = 'skipped') skipped
       from unnest($1::text[]) q(queue)
       left join (select x.queue, sum(x.succeeded) succeeded, sum(x.failed) failed, sum(x.retried) retried,
                         sum(x.cancelled) cancelled, sum(x.zombie) zombie, sum(x.resurrected) resurrected
                  from keel.stats_summary x group by x.queue) s on s.queue = q.queue`, // summed over slots (V014)
      [QUEUE_NAMES],
    );
    const readStore = await PostgresJobStore.connect(o.appUrl, { poolSize: 1, migrate: false });
    const read = await readStore.stats();
    await readStore.close();
    for (const r of rows) {
      const purgedHere = r.queue === 'mx-p' ? purgedP : 0;
      if (r.hot !== 0) problems.push(`${r.queue}: ${r.hot} jobs still hot at the end`);
      if (r.succeeded !== r.archived + purgedHere)
        problems.push(`${r.queue}: stats succeeded ${r.succeeded} but ${r.archived} archived + ${purgedHere} purged`);
      // A flow's 'skipped' dead letters are counted nowhere (docs/jobs.md, "Flows").
      // A flow's 'skipped' dead letters are counted as no failure (docs/jobs.md, "Flows"); resurrected, they are
      // counted as resurrected all the same.
      const sr = skippedRevived.get(r.queue) ?? 0;
      if (r.failed - r.resurrected + sr !== r.dead - r.skipped)
        problems.push(
          `${r.queue}: stats failed ${r.failed} - resurrected ${r.resurrected} + ${sr} skipped resurrected != ${r.dead} dead-lettered rows - ${r.skipped} skipped`,
        );
      if (r.b_ok !== r.succeeded)
        problems.push(`${r.queue}: metric buckets succeeded ${r.b_ok} != stats ${r.succeeded}`);
      if (r.b_failed !== r.failed)
        problems.push(`${r.queue}: metric buckets failed ${r.b_failed} != stats ${r.failed}`);
      if (r.b_cancelled !== r.cancelled)
        problems.push(`${r.queue}: buckets cancelled ${r.b_cancelled} != stats ${r.cancelled}`);
      const s = read.find((x) => x.queue === r.queue);
      const want = { pending: 0, fetched: 0, processing: 0, waiting: 0, dlq: r.dead, succeeded: r.succeeded };
      for (const [k, v] of Object.entries(want)) {
        const got = (s as unknown as Record<string, number> | undefined)?.[k];
        if (got !== v) problems.push(`${r.queue}: stats() ${k} ${got} != ${v}`);
      }
      facts[`${r.queue}`] =
        `archived ${r.archived} dead ${r.dead} retried ${r.retried} zombie ${r.zombie} cancelled ${r.cancelled} resurrected ${r.resurrected}`;
    }
    facts.archivedP = archivedP;

    // Attempts: archived jobs ran at least once; exhausted ones used their attempts (doomed: 3; others the queue's 4);
    // no job beyond its limit.
    const badAttempts = await q(
      `select 'archive' t, id, type, attempts, null reason from keel.jobs_archive where attempts < 1 or attempts > 6
       union all
       select 'dlq', id, type, attempts, reason from keel.jobs_dlq
       where (reason = 'exhausted' and attempts <> case type when 'doomed' then 3 when 'hog' then 2 else 4 end)
          or (reason = 'fatal' and attempts < 1) or attempts > 4
       limit 5`,
    );
    if (badAttempts.length) problems.push(`attempts: ${JSON.stringify(badAttempts)}`);
    const reasons = await q(`select reason, type, count(*)::int n from keel.jobs_dlq group by 1, 2 order by 1, 2`);
    facts.dlqReasons = reasons.map((r) => `${r.reason}/${r.type}:${r.n}`).join(' ');

    // Dedup: both entries of one call answer the same id, the second a duplicate.
    for (const d of dedup) {
      const [a, b] = d.split(' ').map((x) => x.split(':'));
      if (a![0] !== b![0] || b![1] !== '1') problems.push(`dedup: one call answered ${d}`);
    }

    // No two runs of one job overlapping in time, except after a handler that blocked its event loop (hog) or a
    // process killed mid-run (its lease was left to rescue, and the run ended with the process).
    let overlaps = 0;
    const examples: string[] = [];
    const hogJobs = new Set(
      (
        await q(
          `select id::text from keel.jobs_archive where type = 'hog' union all select id::text from keel.jobs_dlq where type = 'hog'`,
        )
      ).map((r) => r.id),
    );
    const typeOf = new Map(
      (await q(`select id::text, type from keel.jobs_archive union all select id::text, type from keel.jobs_dlq`)).map(
        (r) => [r.id, r.type],
      ),
    );
    const hogRuns = [...runs].filter(([job]) => hogJobs.has(job)).flatMap(([, rs]) => rs);
    for (const [job, rs] of runs) {
      const sorted = [...rs].sort((a, b) => a.start - b.start);
      for (let i = 1; i < sorted.length; i++) {
        const prev = sorted[i - 1]!;
        const cur = sorted[i]!;
        const prevEnd = prev.end ?? Infinity;
        // A process blocked by a hog sends no heartbeat and starts nothing: its jobs' leases pass to others while it
        // is stuck, and it may start the handler of a job it claimed before, whose lease is gone, once it runs again
        // (the heartbeat then stops that run at once).
        const blocked = (r: Run) =>
          hogRuns.some((h) => h.pid === r.pid && h.start < (r.end ?? Infinity) && (h.end ?? Infinity) > r.start - 3000);
        // Likewise a process we froze (SIGSTOP): the run it had begun goes on after SIGCONT, its lease gone.
        const frozen = (r: Run) =>
          stopped.some((w) => w.pid === r.pid && w.from < (r.end ?? Infinity) && w.to > r.start - 3000);
        const hogged = blocked(prev) || blocked(cur) || frozen(prev) || frozen(cur);
        if (prevEnd > cur.start && !hogged && !(prev.how ?? '').startsWith('killed')) {
          overlaps++;
          // The first run's process's worst event-loop delay around the overlap (its lease deadline is a timer).
          const lagMs = Math.max(
            0,
            ...lags
              .filter((l) => l.pid === prev.pid && l.at >= cur.start - 3000 && l.at <= prevEnd + 1000)
              .map((l) => l.ms),
          );
          if (examples.length < 3)
            examples.push(
              `${job} (${typeOf.get(job)}): ${JSON.stringify(prev)} / ${JSON.stringify(cur)}; first process's event loop up to ${lagMs} ms late`,
            );
        }
      }
    }
    facts.handlerRuns = [...runs.values()].reduce((n, r) => n + r.length, 0);
    facts.worstEventLoopDelayMs = Math.max(0, ...lags.map((l) => l.ms));
    // Stalls of a process long enough to lose a lease (the 2 s zombie timeout less the worker's 200 ms margin) while
    // a handler of it was running: the overlap check above counts a rescue during one as an overlap.
    const allRuns = [...runs.values()].flat();
    const stalls = lags.filter((l) => l.ms >= 1500);
    facts.stallsOver1500Ms = stalls.length;
    facts.stallsOver1500MsWhileRunning = stalls.filter((l) =>
      allRuns.some((r) => r.pid === l.pid && r.start <= l.at && (r.end ?? Infinity) >= l.at - l.ms),
    ).length;
    if (overlaps) problems.push(`safety: ${overlaps} overlapping runs of one job, e.g. ${examples.join('; ')}`);

    // Flows: a child ran only after each of its parents finished (succeeded, or failed under 'run'); one left in the
    // DLQ as parent_failed has a parent there too; an archived child whose policy is not 'run' had every parent
    // archived, unless an operator resurrected it by hand. (Nothing waits any more: the hot table is empty.)
    const edges = await q(
      `select e.parent_id::text parent, e.child_id::text child, e.parent_outcome,
              coalesce(pa.finished_at, pd.failed_at) parent_done,
              case when pa.id is not null then 'archive' when pd.id is not null then 'dlq:' || pd.reason
                   when ph.id is not null then 'hot' else 'gone' end parent_where,
              case when ca.id is not null then 'archive' when cd.id is not null then 'dlq:' || cd.reason
                   when ch.id is not null then 'hot' else 'gone' end child_where
       from keel.job_deps e
       left join keel.jobs_archive pa on pa.id = e.parent_id left join keel.jobs_dlq pd on pd.id = e.parent_id
       left join keel.jobs_hot ph on ph.id = e.parent_id
       left join keel.jobs_archive ca on ca.id = e.child_id left join keel.jobs_dlq cd on cd.id = e.child_id
       left join keel.jobs_hot ch on ch.id = e.child_id`,
    );
    facts.flowEdges = edges.length;
    // Keyed children (the sched role's keyed flows) left in the DLQ as parent_failed while another job of their queue,
    // type and key exists: when their parents were resurrected, that job held the key, and a resurrect leaves a dead
    // letter whose key a hot job holds where it is (docs/jobs.md), by design.
    const keyHeld = new Set(
      (
        await q(
          `select d.id::text from keel.jobs_dlq d
           where d.reason = 'parent_failed' and d.idempotency_key is not null
             and exists (select 1 from (select o.id, o.queue, o.type, o.idempotency_key from keel.jobs_archive o
                                        union all select o.id, o.queue, o.type, o.idempotency_key from keel.jobs_dlq o
                                        union all select o.id, o.queue, o.type, o.idempotency_key from keel.jobs_hot o) o
                         where o.queue = d.queue and o.type = d.type and o.idempotency_key = d.idempotency_key
                           and o.id <> d.id)`,
        )
      ).map((r) => r.id),
    );
    const byChild = new Map<string, typeof edges>();
    for (const e of edges) byChild.set(e.child, [...(byChild.get(e.child) ?? []), e]);
    const flowProblems: string[] = [];
    for (const [child, es] of byChild) {
      const where = es[0]!.child_where as string;
      const childRuns = runs.get(child) ?? [];
      const firstStart = Math.min(...childRuns.map((r) => r.start));
      for (const e of es) {
        const done = e.parent_done ? new Date(e.parent_done as string).getTime() : Infinity;
        // A run before the parent finished (25 ms: the two clocks are one machine's, read by two processes).
        if (childRuns.length && firstStart < done - 25 && !revived.has(child) && !revived.has(e.parent))
          flowProblems.push(
            `child ${child} ran at ${firstStart} before parent ${e.parent} finished (${e.parent_where})`,
          );
      }
      if (
        where === 'dlq:parent_failed' &&
        !es.some((e) => String(e.parent_where).startsWith('dlq')) &&
        !keyHeld.has(child)
      )
        flowProblems.push(
          `child ${child} dead-lettered parent_failed, but its parents are ${es.map((e) => e.parent_where).join(',')}`,
        );
      if (where === 'gone' || where === 'hot') flowProblems.push(`child ${child} is ${where}`);
    }
    facts.flowChildren = byChild.size;
    facts.flowChildrenArchived = [...byChild.values()].filter((es) => es[0]!.child_where === 'archive').length;
    if (flowProblems.length)
      problems.push(`flows: ${flowProblems.length} problems, e.g. ${flowProblems.slice(0, 4).join('; ')}`);
    // 503 'unavailable' is the API's answer while the server is away or a call's connection was cut (restart,
    // terminated backend): retry later. A 500 'internal_error' whose cause is such a cut (a shape the classifier,
    // shared/engines/connectionLost.ts, does not know) is counted, not a problem. Any other 5xx is.
    const cut =
      /terminating connection due to administrator command|ECONNRESET|ECONNREFUSED|Connection terminated|the database system is (starting up|shutting down|not yet accepting)/;
    // A run with a lock_timeout: a call that waited past it fails (the operator's call, a keyed enqueue), by design.
    const lockTimedOut = (what: string) =>
      (!!o.lockTimeoutMs && /canceling statement due to lock timeout/.test(what)) ||
      (!!o.statementTimeoutMs && /canceling statement due to statement timeout/.test(what));
    for (const [what, n] of serverErrors) {
      if (/^503 .*"error":"unavailable"/.test(what)) facts.opsApi503 = Number(facts.opsApi503 ?? 0) + n;
      else if (/^500 .*"error":"internal_error"/.test(what) && (cut.test(what) || lockTimedOut(what)))
        facts.opsApi500ConnectionCut = Number(facts.opsApi500ConnectionCut ?? 0) + n;
      else problems.push(`ops API: ${n} x ${what}`);
    }

    for (const [what, n] of keyErrors) {
      if (
        cut.test(what) ||
        lockTimedOut(what) ||
        /Connection terminated|timeout exceeded when trying to connect/.test(what)
      )
        facts.keyedCut = Number(facts.keyedCut ?? 0) + n;
      else problems.push(`keyed enqueue of a shared key: ${n} x ${what}`);
    }
    // Outcomes: what the processor said it wrote is where the job is. A job's last final outcome (succeeded,
    // dead_lettered) names its table (and the DLQ reason), unless an operator resurrected or purged it; no job
    // succeeded twice unless resurrected (at-least-once is a rerun after a lost lease, never a second archive).
    const placeOf = new Map<string, string>();
    for (const r of await q(
      `select id::text, 'archive' w from keel.jobs_archive union all select id::text, 'dlq:' || reason from keel.jobs_dlq`,
    ))
      placeOf.set(r.id, r.w);
    const outcomeProblems: string[] = [];
    let twiceOk = 0;
    for (const [job, os] of outcomes) {
      if (revived.has(job)) continue;
      const finals = os.filter((x) => x.startsWith('succeeded') || x.startsWith('dead_lettered'));
      if (finals.filter((x) => x.startsWith('succeeded')).length > 1) twiceOk++;
      const last = finals.at(-1);
      if (!last) continue;
      const at = placeOf.get(job);
      if (at === undefined) continue; // purged
      const want = last.startsWith('succeeded') ? 'archive' : `dlq:${last.split(':')[1]}`;
      if (at !== want) outcomeProblems.push(`${job} (${typeOf.get(job)}): outcomes ${os.join(',')} but ${at}`);
    }
    if (twiceOk) problems.push(`outcomes: ${twiceOk} jobs reported succeeded twice`);
    if (outcomeProblems.length)
      problems.push(
        `outcomes: ${outcomeProblems.length} jobs not where their outcome says, e.g. ${outcomeProblems.slice(0, 5).join('; ')}`,
      );
    // Outcomes: a job's processor outcomes never say 'succeeded' twice (unless an operator resurrected it).
    facts.processErrors = [...errors].map(([k, n]) => `${n} x ${k}`).join('\n');
  } finally {
    for (const c of children) {
      c.killedByUs = true;
      c.proc.kill('SIGKILL');
    }
    await control.close().catch(() => undefined);
    await ownerClient.end().catch(() => undefined);
    await proxy?.close();
    for (const p of ownProxies) await p.close();
  }

  const logErrors = new Map<string, number>();
  if (o.serverLog) {
    const text = await readFrom(o.serverLog, logStart);
    for (const line of text.split('\n')) {
      const m = /(ERROR|FATAL|PANIC):\s+(.*)$/.exec(line);
      if (!m) continue;
      const msg = `${m[1]}: ${m[2]!.replace(/\d+/g, 'N').replace(/"[^"]*"/g, '"…"')}`;
      logErrors.set(msg, (logErrors.get(msg) ?? 0) + 1);
    }
    for (const [msg, n] of logErrors) {
      if (o.lockTimeoutMs && /^ERROR: canceling statement due to lock timeout/.test(msg)) continue;
      if (o.statementTimeoutMs && /^ERROR: canceling statement due to statement timeout/.test(msg)) continue;
      if (!EXPECTED_LOG_ERRORS.some((re) => re.test(msg))) problems.push(`server log: ${n} x ${msg}`);
    }
  }
  return { problems, logErrors, facts };
}

// Server log errors a run like this causes by design: our own terminations and restart, and the statements they
// cut short (a canceled statement, a client gone).
export const EXPECTED_LOG_ERRORS = [
  /^FATAL: terminating connection due to administrator command/,
  /^FATAL: terminating autovacuum process due to administrator command/, // the restart's fast shutdown
  /^FATAL: the database system is (shutting down|starting up|not yet accepting connections)/, // and recovering
  /^ERROR: canceling statement due to user request/,
];

async function countHot(q: (sql: string, p?: unknown[]) => Promise<Record<string, number>[]>): Promise<number> {
  return (await q(`select count(*)::int n from keel.jobs_hot`))[0]!.n!;
}

async function sizeOf(file: string): Promise<number> {
  return (await stat(file).catch(() => null))?.size ?? 0;
}

async function readFrom(file: string, offset: number): Promise<string> {
  const h = await open(file, 'r');
  try {
    const { size } = await h.stat();
    if (size <= offset) return '';
    const b = Buffer.alloc(size - offset);
    await h.read(b, 0, b.length, offset);
    return b.toString('utf8');
  } finally {
    await h.close();
  }
}

// npm run bench:profile — where a batched job's time goes, Keel against graphile-worker's performance preset, on one
// embedded PostgreSQL with pg_stat_statements (track = all, so statements inside the keel functions count too), or on
// the server --pg-url / KEEL_BENCH_PG_URL names (bench/server.ts): there the statements are listed only when that
// server preloads pg_stat_statements (with its own track setting), and the CPU only when it runs on this machine.
// Per configuration and round: jobs/s, CPU µs per job of the Node process and of every PostgreSQL process (from
// /proc, Linux only), and the statements' server execution µs per job, largest first. Same shapes as bench/peers.ts
// (bench/shapes.ts). With --sequential: one connection's claim -> complete loop and that backend's CPU per job.
//
//   npm run bench:profile -- --jobs 20000 --rounds 3 --top 12
//   npm run bench:profile -- --sequential --rounds 5
//   npm run bench:profile -- --pg-url postgres://postgres@127.0.0.1:5432/postgres
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { GRAPHILE_OPTIONS, drainKeelBatched } from './shapes.js';
import {
  PG_URL_OPTION,
  benchPgUrl,
  describeServer,
  localPostmaster,
  openBenchServer,
  postgresCpuSeconds,
  CLOCK_TICKS,
  statementsAvailable,
  type BenchServer,
} from './server.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Sample {
  jobsPerSec: number;
  nodeUsPerJob: number;
  pgUsPerJob: number | null; // null: the server is not on this machine (no /proc to read)
  pgUsPerJobByKind: Record<string, number> | null;
}

// What can be observed of the server: its processes (when local) and pg_stat_statements (when loaded).
interface Probes {
  postmaster: { pid: number; clusterName: string } | null;
  statements: boolean;
}

async function measure(admin: pg.Client, probes: Probes, n: number, run: () => Promise<void>): Promise<Sample> {
  await admin.query('checkpoint');
  if (probes.statements) await admin.query('select pg_stat_statements_reset()');
  const pg0 = probes.postmaster ? postgresCpuSeconds(probes.postmaster) : {};
  const node0 = process.cpuUsage();
  const t = performance.now();
  await run();
  const ms = performance.now() - t;
  const node = process.cpuUsage(node0);
  await sleep(300); // closed connections' backends exit and are reaped (their CPU moves to 'exited')
  const pg1 = probes.postmaster ? postgresCpuSeconds(probes.postmaster) : null;
  const usPerJob = (s: number) => Math.round(((s * 1e6) / n) * 10) / 10;
  const byKind = pg1
    ? Object.fromEntries(
        Object.entries(pg1)
          .map(([k, v]) => [k, usPerJob(v - (pg0[k] ?? 0))] as const)
          .filter(([, v]) => v > 0),
      )
    : null;
  return {
    jobsPerSec: Math.round((n / ms) * 1000),
    nodeUsPerJob: Math.round(((node.user + node.system) / n) * 10) / 10,
    pgUsPerJob: byKind ? Math.round(Object.values(byKind).reduce((a, b) => a + b, 0) * 10) / 10 : null,
    pgUsPerJobByKind: byKind,
  };
}

async function topStatements(admin: pg.Client, probes: Probes, n: number, top: number) {
  if (!probes.statements) return null;
  const { rows } = await admin.query(
    `select left(regexp_replace(query, '\\s+', ' ', 'g'), 90) as query, calls::int, toplevel,
            round((total_exec_time * 1000 / $1)::numeric, 2)::float as us_per_job
     from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
     order by total_exec_time desc limit $2`,
    [n, top],
  );
  return rows;
}

// Sequential mode: claimAndStart(500) -> completeMany on one connection, N jobs; CPU of that one backend per job, for
// the claim and for the completion. Less noisy than the concurrent shapes (no other backend, no scheduling between
// them), so it shows what a change to the SQL costs.
async function sequential(store: PostgresJobStore, admin: pg.Client, n: number, queue: string) {
  const pid = Number((await store.pool.query('select pg_backend_pid() as pid')).rows[0].pid);
  const cpuUs = () => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS) * 1e6;
  };
  await admin.query('vacuum keel.jobs_hot');
  await store.enqueueMany(Array.from({ length: n }, () => ({ queue, type: 'noop' })));
  await admin.query('checkpoint');
  let claim = 0;
  let complete = 0;
  let done = 0;
  const t = performance.now();
  for (;;) {
    const c0 = cpuUs();
    const jobs = await store.claimAndStart({ workerId: 'profile', queues: [queue], limit: 500, leaseSeconds: 60 });
    const c1 = cpuUs();
    claim += c1 - c0;
    if (jobs.length === 0) break;
    await store.completeMany(jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
    complete += cpuUs() - c1;
    done += jobs.length;
  }
  if (done !== n) throw new Error(`sequential: ${done} of ${n} jobs processed`);
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    jobsPerSec: Math.round((n / (performance.now() - t)) * 1000),
    claimUsPerJob: r1(claim / n),
    completeUsPerJob: r1(complete / n),
    backendUsPerJob: r1((claim + complete) / n),
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      jobs: { type: 'string', default: '20000' },
      rounds: { type: 'string', default: '3' },
      top: { type: 'string', default: '12' },
      only: { type: 'string', default: 'keel-batched,graphile-perf' },
      sequential: { type: 'boolean', default: false },
      ...PG_URL_OPTION,
    },
  });
  const N = Number(values.jobs);
  const rounds = Number(values.rounds);
  const configs = values.only.split(',');
  const server = await openBenchServer({
    label: 'profile',
    pgUrl: benchPgUrl(values),
    fastUnsafe: false,
    statements: true,
  });
  console.error(describeServer(server.info));
  try {
    await profile(server, values, N, rounds, configs);
  } finally {
    await server.close();
  }
}

async function profile(
  server: BenchServer,
  values: { top: string; sequential: boolean },
  N: number,
  rounds: number,
  configs: string[],
) {
  const url = await server.createDatabase('profile');
  const probes: Probes = { postmaster: await localPostmaster(url), statements: await statementsAvailable(url) };
  if (values.sequential && !probes.postmaster)
    throw new Error('--sequential reads the backend CPU from /proc: the server must run on this machine');
  if (!probes.statements)
    console.error('== pg_stat_statements is not loaded on this server: no per-statement figures (statements: null)');
  if (!probes.postmaster) console.error('== the server is not on this machine: no PostgreSQL CPU figures');
  const admin = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  admin.on('error', (err) => console.error(`admin connection: ${err.message}`));
  await admin.connect();
  const statementsTrack = probes.statements
    ? (await admin.query(`select current_setting('pg_stat_statements.track') as t`)).rows[0].t
    : null;
  const store = await PostgresJobStore.connect(url, { poolSize: values.sequential ? 1 : 12 });

  if (values.sequential) {
    const runs = [];
    for (let r = -1; r < rounds; r++) {
      const run = await sequential(store, admin, N, `profile-seq-${r + 1}`);
      console.error(`${r < 0 ? 'warm-up' : `round ${r + 1}`} sequential: ${JSON.stringify(run)}`);
      if (r >= 0) runs.push(run);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(
      JSON.stringify(
        {
          server: server.info,
          runs,
          median: {
            claimUsPerJob: median(runs.map((x) => x.claimUsPerJob)),
            completeUsPerJob: median(runs.map((x) => x.completeUsPerJob)),
            backendUsPerJob: median(runs.map((x) => x.backendUsPerJob)),
          },
        },
        null,
        2,
      ),
    );
  } else {
    const keelBatched = async (queue: string) => {
      await store.enqueueMany(Array.from({ length: N }, () => ({ queue, type: 'noop' })));
      return measure(admin, probes, N, async () => {
        await drainKeelBatched(store, queue, 'profile');
      });
    };
    const gw = await import('graphile-worker');
    const logger = new gw.Logger(() => () => undefined);
    const utils = await gw.makeWorkerUtils({ connectionString: url, logger });
    const graphilePerf = async (task: string) => {
      await utils.addJobs(Array.from({ length: N }, () => ({ identifier: task, payload: {} })));
      let handled = 0;
      return measure(admin, probes, N, async () => {
        const runner = await gw.run({
          connectionString: url,
          logger,
          noHandleSignals: true,
          taskList: { [task]: async () => void handled++ },
          ...GRAPHILE_OPTIONS.perf,
        });
        while (handled < N) await sleep(2);
        for (;;) {
          const { rows } = await admin.query(
            `select count(*)::int as n from graphile_worker._private_jobs j join graphile_worker._private_tasks t
             on t.id = j.task_id where t.identifier = $1`,
            [task],
          );
          if (rows[0].n === 0) break;
          await sleep(2);
        }
        await runner.stop();
      });
    };
    const out: Record<string, unknown[]> = {};
    for (let r = -1; r < rounds; r++) {
      for (const c of r % 2 ? configs : [...configs].reverse()) {
        const sample =
          c === 'keel-batched' ? await keelBatched('profile-keel') : await graphilePerf('profile_graphile');
        const statements = await topStatements(admin, probes, N, Number(values.top));
        console.error(`${r < 0 ? 'warm-up' : `round ${r + 1}`} ${c}: ${JSON.stringify(sample)}`);
        if (r >= 0) (out[c] ??= []).push({ ...sample, statements });
      }
    }
    console.log(JSON.stringify({ server: server.info, statementsTrack, ...out }, null, 2));
    await utils.release();
  }
  await admin.end();
  await store.close();
}

await main();
process.exit(0);

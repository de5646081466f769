// npm run bench:pair-cpu — a batched job's server CPU, paired per batch between two databases of one cluster
// (bench/README.md, runs 1230–1259 and 1410–1429). At the machine's usual load (15–40 on 2 cores) jobs/s and /proc
// ticks of whole runs move more between two runs of the same code than a few % of change; this alternates A, B, A, B
// batches of claim_and_start(L) -> complete_many on one backend per database and reads each backend's exact on-CPU
// time (/proc/<pid>/schedstat, the server on this machine) around every call, so load drift lands on both sides
// alike. Same code on both sides differs by ~0.1–0.25 us a job at L = 500.
//
//   npm run bench:pair-cpu -- --migrate URL                 migrate URL with THIS worktree's SQL (run it in A's and in B's worktree)
//   npm run bench:pair-cpu -- --a URL_A --b URL_B [--jobs 30000] [--limit 500]
// Each side enqueues --jobs no-op jobs into queue 'pq' first (analyzed), then the batches alternate until both are
// empty; which side goes first alternates too. Prints claim / completion / total us a job of each backend.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';

const QUEUE = 'pq';

interface Side {
  client: pg.Client;
  pid: number;
  claimNs: number;
  completeNs: number;
  jobs: number;
}

// Nanoseconds the backend has run on a CPU (the first field of schedstat): exact, unlike the 10 ms ticks of stat.
const onCpuNs = (pid: number) => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

async function open(url: string, jobs: number): Promise<Side> {
  const client = new pg.Client({ connectionString: url, application_name: 'keel-bench-pair-cpu' });
  await client.connect();
  const pid = Number((await client.query<{ p: number }>('select pg_backend_pid() as p')).rows[0]!.p);
  for (let i = 0; i < jobs; i += 10_000) {
    const batch = Array.from({ length: Math.min(10_000, jobs - i) }, () => ({ queue: QUEUE, type: 'noop' }));
    await client.query('select keel.enqueue_many($1::jsonb)', [JSON.stringify(batch)]);
  }
  await client.query('analyze keel.jobs_hot');
  return { client, pid, claimNs: 0, completeNs: 0, jobs: 0 };
}

async function batch(s: Side, limit: number): Promise<boolean> {
  let t = onCpuNs(s.pid);
  const claimed = await s.client.query<[string, string]>({
    text: 'select job_id, lease_id from keel.claim_and_start($1, $2, $3, $4)',
    values: ['pair-cpu', [QUEUE], limit, 60],
    rowMode: 'array',
  });
  s.claimNs += onCpuNs(s.pid) - t;
  if (claimed.rows.length === 0) return false;
  const leases = JSON.stringify(claimed.rows.map(([jobId, leaseId]) => ({ jobId: String(jobId), leaseId })));
  t = onCpuNs(s.pid);
  await s.client.query('select * from keel.complete_many($1::jsonb)', [leases]);
  s.completeNs += onCpuNs(s.pid) - t;
  s.jobs += claimed.rows.length;
  return true;
}

const perJob = (ns: number, jobs: number) => Math.round(ns / 10 / jobs) / 100;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      migrate: { type: 'string' },
      a: { type: 'string' },
      b: { type: 'string' },
      jobs: { type: 'string', default: '30000' },
      limit: { type: 'string', default: '500' },
    },
  });
  if (values.migrate) {
    const store = await PostgresJobStore.connect(values.migrate, { poolSize: 1 });
    await store.close();
    return;
  }
  if (!values.a || !values.b) throw new Error('--a URL_A --b URL_B (or --migrate URL)');
  const jobs = Number(values.jobs);
  const limit = Number(values.limit);
  const a = await open(values.a, jobs);
  const b = await open(values.b, jobs);
  try {
    for (let i = 0; ; i++) {
      const [first, second] = i % 2 === 0 ? [a, b] : [b, a];
      const moreFirst = await batch(first, limit);
      const moreSecond = await batch(second, limit);
      if (!moreFirst && !moreSecond) break;
    }
    const report = (s: Side) => ({
      jobs: s.jobs,
      claimUsPerJob: perJob(s.claimNs, s.jobs),
      completionUsPerJob: perJob(s.completeNs, s.jobs),
      totalUsPerJob: perJob(s.claimNs + s.completeNs, s.jobs),
    });
    console.log(JSON.stringify({ limit, a: report(a), b: report(b) }));
  } finally {
    await a.client.end();
    await b.client.end();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});

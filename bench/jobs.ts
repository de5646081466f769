// Job engine benchmark on the embedded PostgreSQL (or the server --pg-url / KEEL_BENCH_PG_URL names): end-to-end jobs/s for a no-op handler through the real processor
// (batch enqueue, batch claimAndStart, completeMany), with claim-to-complete latency, side by side with the
// one-job-at-a-time path in the same run. Exactness is checked: archive rows, counters and buckets equal the job count.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import type { ClaimOptions, JobStore } from '../shared/jobs/contract.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor } from '../shared/jobs/processor.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

export interface JobsBenchOptions {
  jobs: number;
  hosts: number; // concurrent processors, as separate Functions hosts would be
  concurrency: number; // jobs in flight per host
  singleJobs: number; // jobs for the one-at-a-time comparison
  durable: boolean; // embedded: fsync + synchronous_commit on (as npm start runs); false = test-cluster settings
  pgUrl?: string; // an external server (bench/server.ts), run as it is configured; absent: the embedded one
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function exactness(store: PostgresJobStore, queue: string) {
  const { rows } = await store.pool.query(
    `select (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
            (select count(*) from keel.jobs_hot where queue = $1)::int as hot,
            (select coalesce(sum(succeeded), 0) from keel.stats_summary where queue = $1)::int as counted,
            (select coalesce(sum(count), 0) from keel.metric_buckets where queue = $1 and outcome = 'succeeded')::int as bucketed`,
    [queue],
  );
  return rows[0] as { archived: number; hot: number; counted: number; bucketed: number };
}

export async function runJobsBench(opts: JobsBenchOptions): Promise<Record<string, unknown>> {
  const server = await openBenchServer({ label: 'jobs', pgUrl: opts.pgUrl, fastUnsafe: !opts.durable });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('jobs');
    const store = await PostgresJobStore.connect(url, { poolSize: opts.hosts * 3 + 2 });
    const registry = new HandlerRegistry().register('noop', async () => undefined);

    // Batched path through the real processor.
    const queue = 'bench';
    const enqStart = performance.now();
    for (let i = 0; i < opts.jobs; i += 1000) {
      await store.enqueueMany(Array.from({ length: Math.min(1000, opts.jobs - i) }, () => ({ queue, type: 'noop' })));
    }
    const enqueueMs = performance.now() - enqStart;

    const claimedAt = new Map<string, number>();
    const latencies: number[] = [];
    const timedStore: JobStore = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'claimAndStart') {
          return async (o: ClaimOptions) => {
            const jobs = await target.claimAndStart(o);
            const t = performance.now();
            for (const j of jobs) claimedAt.set(j.id, t);
            return jobs;
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const processors = Array.from(
      { length: opts.hosts },
      (_, i) =>
        new JobProcessor({
          store: timedStore,
          registry,
          workerId: `bench-${i}`,
          completionBatchMax: 500,
          events: {
            onOutcome: (e) => {
              const t0 = claimedAt.get(e.job.id);
              if (t0 !== undefined && e.outcome === 'succeeded') latencies.push(performance.now() - t0);
            },
          },
        }),
    );
    const runStart = performance.now();
    const results = await Promise.all(
      processors.map((p) => p.drain({ queues: [queue], budgetMs: 600_000, concurrency: opts.concurrency })),
    );
    const runMs = performance.now() - runStart;
    const processed = results.reduce((n, r) => n + r.processed, 0);
    const exact = await exactness(store, queue);
    latencies.sort((a, b) => a - b);

    // One job at a time: claim and start 1, complete: the path without batching, for the ratio.
    const single = 'bench-single';
    for (let i = 0; i < opts.singleJobs; i += 1000) {
      await store.enqueueMany(
        Array.from({ length: Math.min(1000, opts.singleJobs - i) }, () => ({ queue: single, type: 'noop' })),
      );
    }
    const singleStart = performance.now();
    await Promise.all(
      Array.from({ length: opts.hosts }, async (_, i) => {
        for (;;) {
          const [job] = await store.claimAndStart({ workerId: `single-${i}`, queues: [single], limit: 1 });
          if (!job) return;
          await store.complete({ jobId: job.id, leaseId: job.leaseId });
        }
      }),
    );
    const singleMs = performance.now() - singleStart;
    const singleExact = await exactness(store, single);
    await store.close();

    const jobsPerSec = (processed / runMs) * 1000;
    const singlePerSec = (opts.singleJobs / singleMs) * 1000;
    return {
      server: server.info,
      settings: `fsync ${server.info.fsync}, synchronous_commit ${server.info.synchronousCommit}`,
      jobs: opts.jobs,
      hosts: opts.hosts,
      concurrencyPerHost: opts.concurrency,
      enqueuePerSec: Math.round((opts.jobs / enqueueMs) * 1000),
      endToEndJobsPerSec: Math.round(jobsPerSec),
      claimToCompleteP50Ms: Number(percentile(latencies, 50).toFixed(1)),
      claimToCompleteP99Ms: Number(percentile(latencies, 99).toFixed(1)),
      exact:
        exact.archived === opts.jobs && exact.hot === 0 && exact.counted === opts.jobs && exact.bucketed === opts.jobs,
      archiveRows: exact.archived,
      statsSucceeded: exact.counted,
      bucketCount: exact.bucketed,
      oneAtATimeJobsPerSec: Math.round(singlePerSec),
      oneAtATimeExact:
        singleExact.archived === opts.singleJobs &&
        singleExact.counted === opts.singleJobs &&
        singleExact.bucketed === opts.singleJobs,
      batchedOverOneAtATime: Number((jobsPerSec / singlePerSec).toFixed(2)),
      target: 'at least 5,000 jobs/s',
      meetsTarget: jobsPerSec >= 5000,
    };
  } finally {
    await server.close();
  }
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname);
if (isMain) {
  const { values } = parseArgs({
    options: {
      jobs: { type: 'string', default: '20000' },
      hosts: { type: 'string', default: '2' },
      concurrency: { type: 'string', default: '500' },
      single: { type: 'string', default: '2000' },
      fast: { type: 'boolean', default: false },
      ...PG_URL_OPTION,
    },
  });
  const result = await runJobsBench({
    jobs: Number(values.jobs),
    hosts: Number(values.hosts),
    concurrency: Number(values.concurrency),
    singleJobs: Number(values.single),
    durable: !values.fast,
    pgUrl: benchPgUrl(values),
  });
  console.log(JSON.stringify(result, null, 2));
}

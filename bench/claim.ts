// npm run bench:claim — the latency of keel.claim_and_start(worker, '{q}', 20, 60), measured from the client, sent
// exactly as the store sends it (shared/engines/postgres/procedures.ts): first at a due backlog kept at about 20,000
// jobs, then with 200,000 delayed jobs (run_at a day ahead) in the same queue as well. One connection, sequential
// calls; p50 / p99 / max in ms. Between calls, untimed: every --refill-every calls the claimed jobs are completed
// (complete_many) and as many due jobs enqueued, so the due backlog stays within one refill of its size and the
// running rows do not pile up. A `vacuum analyze` follows each bulk fill (as bench:peers does).
//
//   npm run bench:claim -- --calls 500 --backlog 20000 --delayed 200000 --limit 20 [--pg-url URL]
import os from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { postgresCall } from '../shared/engines/postgres/procedures.js';
import type { LeaseRef } from '../shared/jobs/contract.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

const r2 = (n: number) => Math.round(n * 100) / 100;
const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

interface Latency {
  calls: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
  dueBacklogBefore: number;
  dueBacklogAfter: number;
  claimedPerCall: number; // mean rows a call returned (the limit, when the backlog is there)
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      calls: { type: 'string', default: '500' },
      warmup: { type: 'string', default: '20' },
      backlog: { type: 'string', default: '20000' },
      delayed: { type: 'string', default: '200000' },
      limit: { type: 'string', default: '20' },
      'lease-seconds': { type: 'string', default: '60' },
      'refill-every': { type: 'string', default: '25' },
      ...PG_URL_OPTION,
    },
  });
  const calls = Number(values.calls);
  const warmup = Number(values.warmup);
  const backlog = Number(values.backlog);
  const delayed = Number(values.delayed);
  const limit = Number(values.limit);
  const leaseSeconds = Number(values['lease-seconds']);
  const refillEvery = Number(values['refill-every']);
  const queue = 'claim-bench';

  const server = await openBenchServer({ label: 'claim', pgUrl: benchPgUrl(values), fastUnsafe: false });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('claim');
    const store = await PostgresJobStore.connect(url, { poolSize: 2, applicationName: 'keel-bench-claim' });
    // The measured connection: nothing else runs on it.
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000, application_name: 'keel' });
    client.on('error', (err) => console.error(`claim connection: ${err.message}`));
    await client.connect();
    try {
      const enqueue = async (n: number, delayMs?: number) => {
        for (let i = 0; i < n; i += 20_000) {
          await store.enqueueMany(
            Array.from({ length: Math.min(20_000, n - i) }, () => ({
              queue,
              type: 'noop',
              ...(delayMs ? { delayMs } : {}),
            })),
          );
        }
      };
      const dueBacklog = async () =>
        Number(
          (
            await store.pool.query(
              `select count(*)::int as n from keel.jobs_hot where queue = $1 and state = 'pending' and run_at <= now()`,
              [queue],
            )
          ).rows[0].n,
        );
      const { text, values: args } = postgresCall('claim_and_start', {
        worker_id: 'bench-claim',
        queues: [queue],
        limit,
        lease_seconds: leaseSeconds,
      });

      const measure = async (label: string): Promise<Latency> => {
        const before = await dueBacklog();
        const xs: number[] = [];
        let claimedRows = 0;
        let held: LeaseRef[] = [];
        const settle = async () => {
          if (held.length === 0) return;
          const n = held.length;
          await store.completeMany(held);
          held = [];
          await enqueue(n);
        };
        for (let i = 0; i < warmup + calls; i++) {
          const t = performance.now();
          const res = await client.query<unknown[]>({ text, values: args, rowMode: 'array' });
          const ms = performance.now() - t;
          const id = res.fields.findIndex((f) => f.name === 'job_id');
          const lease = res.fields.findIndex((f) => f.name === 'lease_id');
          for (const row of res.rows) held.push({ jobId: String(row[id]), leaseId: String(row[lease]) });
          if (i >= warmup) {
            xs.push(ms);
            claimedRows += res.rows.length;
          }
          if ((i + 1) % refillEvery === 0) await settle();
        }
        await settle();
        const after = await dueBacklog();
        xs.sort((a, b) => a - b);
        const out: Latency = {
          calls,
          p50: r2(pct(xs, 50)),
          p99: r2(pct(xs, 99)),
          max: r2(xs[xs.length - 1]!),
          mean: r2(xs.reduce((a, b) => a + b, 0) / xs.length),
          dueBacklogBefore: before,
          dueBacklogAfter: after,
          claimedPerCall: r2(claimedRows / calls),
        };
        console.error(`${label}: ${JSON.stringify(out)}`);
        return out;
      };

      await enqueue(backlog);
      await store.pool.query('vacuum analyze');
      const dueOnly = await measure(`${backlog} due`);
      await enqueue(delayed, 24 * 3600_000);
      await store.pool.query('vacuum analyze');
      const withDelayed = await measure(`${backlog} due + ${delayed} delayed`);
      const out = {
        server: server.info,
        sessionJit: (await client.query('show jit')).rows[0].jit as string,
        node: process.version,
        cpus: os.cpus().length,
        loadavg: os.loadavg().map(r2),
        call: `keel.claim_and_start('bench-claim', '{${queue}}', ${limit}, ${leaseSeconds})`,
        warmupCalls: warmup,
        refillEvery,
        dueBacklog: dueOnly,
        [`dueBacklogPlus${delayed}Delayed`]: withDelayed,
        target: 'p50 <= 2 ms, p99 <= 10 ms at a 20k backlog, with and without 200k delayed jobs (issue 22)',
      };
      console.log(JSON.stringify(out, null, 2));
    } finally {
      await client.end().catch(() => undefined);
      await store.close();
    }
  } finally {
    await server.close();
  }
}

await main();
process.exit(0);

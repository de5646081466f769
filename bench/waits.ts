// npm run bench:waits — what Keel's backends wait for in the keel-batched shape (bench/shapes.ts:
// 2 processors x 500 in flight, no-op handler): while the drains run, pg_stat_activity is sampled in a loop, and
// every active backend counts once per sample under its keel function and its wait event (CPU: none). A backend
// waiting for another transaction (Lock:transactionid) is also counted by what it holds a tuple lock on and by the
// function its first blocker runs (pg_blocking_pids): that tells the tally rows (stats_summary, metric_buckets)
// from the job rows, and a completion waiting for a claim from one waiting for another completion. Samples, not
// CPU: a share of samples is a share of wall time. Issue 22, bench/README.md runs 230–239.
//
//   npm run bench:waits -- --pg-url postgres://postgres@127.0.0.1:5432/postgres --rounds 3
//   --jobs N (default 20,000 a round)  --rounds R (default 3)  --pg-url URL (default: an embedded server)
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { drainKeelBatched } from './shapes.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    ...PG_URL_OPTION,
  },
  allowPositionals: true,
});

// The keel function a backend runs; a background process (autovacuum worker, ...) by its type.
const fn = (query: string | null): string =>
  /^select .*?keel\.(\w+)/s.exec(query ?? '')?.[1] ?? (query ? query.slice(0, 40) : 'gone');

async function sampleUntil(client: pg.Client, done: () => boolean, tally: Map<string, number>): Promise<number> {
  let samples = 0;
  const add = (key: string) => tally.set(key, (tally.get(key) ?? 0) + 1);
  while (!done()) {
    const { rows } = await client.query<{ query: string; wait: string; held: string | null; blocker: string | null }>(
      `select case when a.backend_type = 'client backend' then a.query else a.backend_type end as query, coalesce(a.wait_event_type || ':' || a.wait_event, 'CPU') as wait,
              case when a.wait_event = 'transactionid' then
                (select string_agg(distinct l.relation::regclass::text, ',') from pg_locks l
                 where l.pid = a.pid and l.locktype = 'tuple' and l.granted) end as held,
              case when a.wait_event_type = 'Lock' then
                (select b.query from pg_stat_activity b where b.pid = (pg_blocking_pids(a.pid))[1]) end as blocker
       from pg_stat_activity a
       where a.pid <> pg_backend_pid() and a.state = 'active' and a.datname = current_database()`,
    );
    samples++;
    for (const r of rows) {
      add(`${fn(r.query)}  ${r.wait}`);
      if (r.wait === 'Lock:transactionid')
        add(`${fn(r.query)}  waits holding a tuple of ${r.held ?? '-'} for ${fn(r.blocker)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  return samples;
}

async function main(): Promise<void> {
  const n = Number(values.jobs);
  const rounds = Number(values.rounds);
  const server = await openBenchServer({ label: 'waits', pgUrl: benchPgUrl(values), fastUnsafe: false });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('waits');
    const store = await PostgresJobStore.connect(url, { poolSize: 12 });
    const sampler = new pg.Client({ connectionString: url, application_name: 'keel-bench-waits' });
    await sampler.connect();
    const tally = new Map<string, number>();
    let samples = 0;
    try {
      for (let round = 0; round < rounds; round++) {
        await store.enqueueMany(Array.from({ length: n }, () => ({ queue: 'waits', type: 'noop' })));
        let finished = false;
        const sampling = sampleUntil(sampler, () => finished, tally);
        const t = performance.now();
        const processed = await drainKeelBatched(store, 'waits', `waits-${round}`);
        const ms = performance.now() - t;
        finished = true;
        samples += await sampling;
        console.error(`round ${round + 1}: ${processed} jobs, ${Math.round((processed / ms) * 1000)} jobs/s`);
      }
    } finally {
      await sampler.end();
      await store.close();
    }
    console.log(`samples: ${samples} (one row per active backend per sample)`);
    for (const [key, count] of [...tally].sort((a, b) => b[1] - a[1]))
      console.log(`${String(count).padStart(7)}  ${key}`);
  } finally {
    await server.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

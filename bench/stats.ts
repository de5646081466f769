// stats() at scale: 1M archive + 200k DLQ rows (8 queues) and a due backlog of 20k hot jobs, with and without
// 200k delayed jobs; p50/p95 of 50 calls each. Then archive/DLQ text search at that size: the bounded search the
// store runs (scanRows default and maximum) against the unbounded one (keel.search_jobs without a scan bound), for a
// text that matches nothing (the worst case: the whole range is read). `npx tsx bench/stats.ts [--archive N]
// [--dlq N] [--delayed N] [--pg-url URL]` (a running server instead of the embedded one; or KEEL_BENCH_PG_URL).
import { parseArgs } from 'node:util';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { TEXT_SEARCH_SCAN_ROWS_MAX } from '../shared/jobs/contract.js';
import { PG_URL_OPTION, benchPgUrl, describeServer, openBenchServer } from './server.js';

const { values } = parseArgs({
  options: {
    archive: { type: 'string', default: '1000000' },
    dlq: { type: 'string', default: '200000' },
    delayed: { type: 'string', default: '200000' },
    ...PG_URL_OPTION,
  },
});
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const server = await openBenchServer({ label: 'stats', pgUrl: benchPgUrl(values), fastUnsafe: false });
console.error(describeServer(server.info));
try {
  const store = await PostgresJobStore.connect(await server.createDatabase('stats'), { poolSize: 4 });
  const timeOf = async (calls: number, run: () => Promise<unknown>) => {
    const xs: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t = performance.now();
      await run();
      xs.push(performance.now() - t);
    }
    return { p50: Math.round(pct(xs, 50) * 100) / 100, p95: Math.round(pct(xs, 95) * 100) / 100 };
  };
  const time = () => timeOf(50, () => store.stats());
  const out: Record<string, unknown> = { server: server.info, empty: await time() };
  await store.pool.query(
    `insert into keel.jobs_archive (id, queue, type, payload, priority, attempts, tags, created_at, started_at, finished_at, duration_ms)
     select nextval('keel.job_id_seq'), 'bulk-' || (g % 8), 'noop', jsonb_build_object('n', g), 0, 1, '{}', now(), now(), now(), 3
     from generate_series(1, $1::int) g`,
    [Number(values.archive)],
  );
  await store.pool.query(
    `insert into keel.jobs_dlq (id, queue, type, payload, priority, attempts, tags, created_at, failed_at, reason, error)
     select nextval('keel.job_id_seq'), 'bulk-' || (g % 8), 'noop', jsonb_build_object('n', g), 0, 5, '{}', now(), now(), 'exhausted', 'boom'
     from generate_series(1, $1::int) g`,
    [Number(values.dlq)],
  );
  for (let i = 0; i < 20_000; i += 20_000)
    await store.enqueueMany(Array.from({ length: 20_000 }, () => ({ queue: 'bulk-0', type: 'noop' })));
  await store.pool.query('vacuum analyze');
  out.archiveDlqAndDueBacklog = await time();
  const D = Number(values.delayed);
  for (let i = 0; i < D; i += 20_000)
    await store.enqueueMany(
      Array.from({ length: Math.min(20_000, D - i) }, () => ({ queue: 'bulk-1', type: 'noop', delayMs: 86_400_000 })),
    );
  await store.pool.query('vacuum analyze');
  out.plusDelayed = await time();
  out.statsRows = (await store.stats()).filter((r) => r.queue.startsWith('bulk-'));
  const search = async (location: 'archive' | 'dlq', scanRows?: number) =>
    timeOf(10, () =>
      store.searchJobs({ location, text: 'no-such-text', limit: 50, ...(scanRows ? { scanRows } : {}) }),
    );
  const unbounded = (location: 'archive' | 'dlq') =>
    timeOf(3, () =>
      store.pool.query(
        `select * from keel.search_jobs($1, null, null, null, null, null, null, null, 'no-such-text', null, null, 50, null, null, false)`,
        [location],
      ),
    );
  out.searchArchiveBounded = await search('archive');
  out.searchArchiveBoundedMax = await search('archive', TEXT_SEARCH_SCAN_ROWS_MAX);
  out.searchDlqBounded = await search('dlq');
  out.searchArchiveUnbounded = await unbounded('archive');
  out.searchDlqUnbounded = await unbounded('dlq');
  // Continuing deep in the table costs the same as the first page (a primary-key range, not a filter).
  // Half-way into the archive rows (their ids come first from the sequence), whatever --archive is.
  const middle = String(Math.max(1, Math.floor(Number(values.archive) / 2)));
  const deep = await store.searchJobs({ location: 'archive', text: 'no-such-text', limit: 50, afterId: middle });
  out.searchArchiveDeepPage = deep.nextAfterId
    ? await timeOf(10, () =>
        store.searchJobs({ location: 'archive', text: 'no-such-text', limit: 50, afterId: deep.nextAfterId! }),
      )
    : null; // the first page already reached the end
  out.hotCountsMatch = (
    await store.pool.query(
      `select (select coalesce(sum(pending + fetched + processing), 0) from keel.hot_counts)::bigint
              = (select count(*) from keel.jobs_hot) as ok`,
    )
  ).rows[0].ok;
  out.dlqCountsMatch = (
    await store.pool.query(
      `select (select coalesce(sum(n), 0) from keel.dlq_counts)::bigint = (select count(*) from keel.jobs_dlq) as ok`,
    )
  ).rows[0].ok;
  console.log(JSON.stringify(out, null, 2));
  await store.close();
} finally {
  await server.close();
}

// The mixed chaos run (test/support/chaosMix.ts), bounded: several Worker processes, a Functions-style drain process,
// maintenance in two processes and an operator (cancel, resurrect, purge, pause, idempotent enqueues) at once over
// four queues and every kind of job (success, retry, exhausted, fatal, heartbeat-only long jobs with progress and
// logs, delayed, prioritized, expiring, keyed, a limited queue), with SIGKILLs and terminated backends. Checks
// safety (every job in exactly one place, counters and metric buckets equal to the rows, attempts, no two runs of a
// job at once), liveness (drained, probes prompt), graceful stops, and no deadlock. The server restart and the
// server log's ERRORs are checked by the full-size run on a cluster of its own: npx tsx dev/chaosMix.ts (the suite's
// server is shared with other files, so neither can be done or attributed here).
// Sizes: KEEL_CHAOS_MIX_JOBS (default 500).
import { expect, it } from 'vitest';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { databaseOf, watchDeadlocks } from '../support/deadlocks.js';
import { runChaosMix } from '../support/chaosMix.js';

it('mixed chaos: workers, drains, maintenance and an operator at once, with kills', async () => {
  const url = await createTestDatabase('chaosmix');
  const watch = await watchDeadlocks([databaseOf(url)], { ignoreApplicationNames: ['keel-harness'] });
  const report = await runChaosMix({
    ownerUrl: url,
    appUrl: appUrl(url),
    jobs: Number(process.env.KEEL_CHAOS_MIX_JOBS ?? 500),
    workers: 3,
    drains: 1,
    maints: 2,
    hogs: 0, // a blocked event loop loses its leases by design; the full run (dev/chaosMix.ts) has them
    kills: 3,
    chaosMs: 6000,
    settleMs: 60_000,
    probeMs: 10_000,
  });
  console.log('chaos mix:', report.facts);
  expect(report.problems).toEqual([]);
  expect(await watch.findings()).toEqual([]);
}, 150_000);

// The mixed chaos run (test/support/chaosMix.ts) with flows and operators acting through the ops API's HTTP handler
// while Worker processes run the backlog: flows (a parent, children with each onFailure policy, a fan-in) in the
// backlog and enqueued over the API, queue settings changed under running jobs (zombie timeout, concurrency,
// retention), pauses and resumes (a resume posts the due jobs: claim and release), cancels of running, pending and
// waiting jobs by id and by preview, DLQ resurrects by preview (parent_failed, skipped, exhausted, cancelled, fatal),
// purges, keyed and delayed enqueues; with SIGKILLs and terminated backends. Checks what postgres.chaosMix.test.ts
// checks, and: every flow child ran after its parents or is in the DLQ beside a dead parent, none left waiting, and
// no ops API answer of 500 or more but 503 'unavailable' (the server away). It found a fan-in left waiting for ever
// after resurrects in two steps (the contract test "a fan-in brought back by its last failed parent ...").
// Bounded for CI (< 60 s a server on 2 cores); heavier: npx tsx dev/chaosMix.ts --flows 200 --ops-api 2 ...
import { it } from 'vitest';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { databaseOf, expectCleanRun, watchDeadlocks } from '../support/deadlocks.js';
import { runChaosMix } from '../support/chaosMix.js';

it('chaos with flows and operators over the ops API: workers, maintenance, kills', async () => {
  const url = await createTestDatabase('chaosops');
  const watch = await watchDeadlocks([databaseOf(url)], { ignoreApplicationNames: ['keel-harness'] });
  const report = await runChaosMix({
    ownerUrl: url,
    appUrl: appUrl(url),
    jobs: 250,
    flows: 60,
    opsApi: 1,
    workers: 2,
    drains: 0,
    maints: 1,
    hogs: 0,
    kills: 2,
    chaosMs: 5000,
    settleMs: 30_000,
    probeMs: 10_000,
    latencyMs: 0,
    latencySpikeMs: 0,
  });
  console.log('chaos ops:', report.facts);
  await expectCleanRun(report, watch);
}, 150_000);

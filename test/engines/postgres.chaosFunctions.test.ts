// The mixed chaos run (test/support/chaosMix.ts) on the Functions app's path alone: no Worker, no drain() loop of
// its own; processes running the app's timer passes on a runtime each (shared/app/timerPasses.ts: the dispatcher in
// run mode, its drain and the slot hand-on after it, and in post mode, claim, release and post; the maintenance
// pass) and a queue runner taking each posted id as functions/jobRunner.ts does (processByIdOf, the freed slot
// handed on, a retried job's message posted for when it is due). The limits at their least (the limited queue at 1,
// the ops API setting it to 1-2; the type 'narrow' at 1 per process), flows, operators over the ops API, resurrects
// of up to 500 dead letters at once, with SIGKILLs, SIGSTOPs and terminated backends. Checks what
// postgres.chaosOps.test.ts checks: the backlog drains through the dispatchers alone (no slot of the limited queue
// is left held), every job in one place, counters exact, no deadlock.
// Bounded for CI (< 60 s a server on 2 cores); heavier: npx tsx dev/chaosMix.ts --dispatchers 3 --tiny --big ...
import { it } from 'vitest';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { databaseOf, expectCleanRun, watchDeadlocks } from '../support/deadlocks.js';
import { runChaosMix } from '../support/chaosMix.js';

it('chaos on the Functions path: dispatchers and queue runners only, tiny limits, large resurrects, kills', async () => {
  const url = await createTestDatabase('chaosfn');
  const watch = await watchDeadlocks([databaseOf(url)], { ignoreApplicationNames: ['keel-harness'] });
  const report = await runChaosMix({
    ownerUrl: url,
    appUrl: appUrl(url),
    jobs: 120,
    flows: 24,
    opsApi: 1,
    workers: 0,
    drains: 0,
    dispatchers: 2,
    maints: 1,
    hogs: 0,
    // One kill: a dispatcher process starts in 5-20 s under load (it builds the app's runtime), and with two killed at
    // once no dispatcher would run for most of the settle window.
    kills: 1,
    stops: 1,
    narrow: 0.15,
    tiny: true,
    bigResurrects: true,
    chaosMs: 5000,
    settleMs: 60_000, // a bound: the run ends once drained (8-20 s at load 15-20; 36 s at load 31)
    probeMs: 10_000,
    latencyMs: 0,
    latencySpikeMs: 0,
  });
  console.log('chaos functions:', report.facts);
  await expectCleanRun(report, watch);
}, 150_000);

// npm run demo: one command that boots the local host (with the demo transfer's two databases) and drives it over
// the ops API, so a newcomer sees jobs archived, retried, dead-lettered and resurrected, and a transfer batch
// committed. The host keeps running afterwards for exploring (Ctrl+C stops it); `--exit` stops it at the end.
import '../functions/setup.js'; // telemetry first (a no-op without APPLICATIONINSIGHTS_CONNECTION_STRING)
import { bootLocal } from '../dev/boot.js';
import { definitions } from '../functions/definitions.js';
import { encodeClientPrincipal } from '../shared/ops/auth.js';
import { DEMO_TRANSFER } from '../dev/demoTransfer.js';
import { stopWhenOrphaned } from '../dev/parentWatch.js';
import { warnIfOldNode } from '../dev/nodeVersion.js';

warnIfOldNode();
const exitAtEnd = process.argv.includes('--exit');
const quiet = !process.argv.includes('--verbose');

// Fast timers for the demo unless the caller chose otherwise.
process.env.KEEL_DISPATCH_SCHEDULE ??= '*/2 * * * * *';
process.env.KEEL_MAINTENANCE_SCHEDULE ??= '*/3 * * * * *';

stopWhenOrphaned(); // a signal sent to npm alone does not reach this process (dev/parentWatch.ts)

const hostLog: string[] = [];
let live = !quiet;
const keel = await bootLocal({
  definitions,
  demo: true,
  log: (line) => {
    if (live) return console.log(line);
    hostLog.push(line);
    if (hostLog.length > 200) hostLog.shift();
  },
});
// Ctrl+C (or SIGTERM) at any point, during the walk too: the host's graceful stop (running demo jobs get 5 s, then
// are handed back; the embedded server stops last), once. Before, a Ctrl+C during the walk killed the process at
// once, leaving its running jobs 'processing' until zombie rescue. One Ctrl+C may arrive twice (the terminal's
// process group, and npm forwarding it): the second is ignored.
let stopping: Promise<void> | undefined;
const stopOnce = () => (stopping ??= keel.stop());
const onSignal = (signal: NodeJS.Signals) => {
  if (stopping) return;
  live = true; // the stop's own lines are shown
  console.log(`\n${signal}: stopping the demo's local host; running jobs get 5 s to finish, then are released...`);
  void stopOnce().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(`stopping failed: ${(err as Error).message}`);
      process.exit(1);
    },
  );
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
const ops = `${keel.baseUrl}/api/ops`;
const operator = encodeClientPrincipal({ name: 'demo-operator', roles: [keel.settings.KEEL_OPS_OPERATOR_ROLE] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function call(
  method: string,
  path: string,
  body?: unknown,
  asOperator = false,
): Promise<{ status: number; json: any }> {
  const res = await fetch(`${ops}${path}`, {
    method,
    headers: {
      'x-functions-key': keel.opsKey,
      'content-type': 'application/json',
      ...(asOperator ? { 'x-ms-client-principal': operator } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: await res.json() };
}

function step(title: string) {
  console.log(`\n== ${title}`);
}

async function waitFor<T>(what: string, probe: () => Promise<T | null>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; Date.now() < deadline; i++) {
    const v = await probe();
    if (v !== null) return v;
    await sleep(Math.min(1000, 100 * 2 ** i));
  }
  throw new Error(`demo: timed out waiting for ${what}`);
}

async function hotCount(queue: string): Promise<number> {
  const { json } = await call('GET', '/stats');
  const q = (json.queues as any[]).find((x) => x.queue === queue);
  return q ? q.pending + q.fetched + q.processing : 0;
}

function statsLine(q: any): string {
  return `${q.queue}: pending ${q.pending}, processing ${q.processing}, succeeded ${q.succeeded}, retried ${q.retried}, failed ${q.failed}, in DLQ ${q.dlq}, resurrected ${q.resurrected}`;
}

try {
  console.log(`Keel demo: local host at ${keel.baseUrl} (ops key ${keel.opsKey})`);
  console.log(`Console: ${keel.baseUrl}/api/console/ (watch the jobs move while the demo runs)`);
  for (const n of keel.notes) console.log(`  ${n}`);
  const queue = `demo-${Date.now().toString(36)}`;

  step(`Enqueue sample jobs on queue "${queue}" (POST /api/ops/jobs)`);
  const soon = new Date(Date.now() + 1500).toISOString();
  const jobs = [
    { queue, type: 'demo.echo', payload: { message: 'hello' } },
    { queue, type: 'demo.echo', payload: { message: 'world' } },
    { queue, type: 'demo.slow', payload: { ms: 3000 } },
    { queue, type: 'demo.slow', payload: { ms: 2000 } },
    { queue, type: 'demo.flaky', payload: { failTimes: 2 }, tags: ['retries-then-succeeds'] },
    { queue, type: 'demo.fatal', payload: { message: 'bad input, no retry' } },
    { queue, type: 'demo.flaky', payload: { failTimes: 9 }, maxAttempts: 2, tags: ['runs-out-of-attempts'] },
    // Not due before it expires: maintenance moves it to the DLQ as 'expired'; resurrected below, it runs.
    { queue, type: 'demo.echo', payload: { message: 'late' }, delayMs: 4000, expiresAt: soon, tags: ['expires'] },
    // Cancelled while it waits (below): a dead letter left for you to find and resurrect in the console.
    {
      queue,
      type: 'demo.echo',
      payload: { message: 'resurrect me in the console' },
      delayMs: 3_600_000,
      tags: ['for-the-console'],
    },
  ];
  const enq = await call('POST', '/jobs', { jobs });
  if (enq.status !== 201) throw new Error(`enqueue failed: ${JSON.stringify(enq.json)}`);
  const ids = (enq.json.jobs as { id: string }[]).map((j) => j.id);
  jobs.forEach((j, i) =>
    console.log(`  job ${ids[i]}: ${j.type} ${JSON.stringify(j.payload)}${j.tags ? ` [${j.tags.join(',')}]` : ''}`),
  );
  const forConsole = ids[ids.length - 1]!;
  const cancelled = await call('POST', `/jobs/${forConsole}/cancel`, {}, true);
  console.log(
    `  job ${forConsole} cancelled while it waits (${cancelled.json.result}): it stays in the DLQ for the console`,
  );

  step('Wait for the queue to drain: queue messages run most jobs, the dispatcher the retries and delays');
  await waitFor('the demo jobs to finish', async () => ((await hotCount(queue)) === 0 ? true : null), 90_000);
  let stats = (await call('GET', '/stats')).json.queues.find((x: any) => x.queue === queue);
  console.log(`  ${statsLine(stats)}`);

  step('Dead-lettered jobs (GET /api/ops/jobs?location=dlq)');
  const dlq = await call('GET', `/jobs?location=dlq&queue=${queue}`);
  for (const j of dlq.json.items)
    console.log(`  job ${j.id} ${j.type}: ${j.reason} after ${j.attempts} attempt(s): ${j.lastError ?? ''}`);

  step('Resurrect by filter: preview first (dryRun defaults to true), then for real; needs the operator role');
  const denied = await call('POST', '/dlq/resurrect', { queue, reason: 'expired', limit: 10 });
  console.log(`  without the operator role: ${denied.status} ${denied.json.error}`);
  const preview = await call('POST', '/dlq/resurrect', { queue, reason: 'expired', limit: 10 }, true);
  console.log(`  preview: would resurrect ${JSON.stringify(preview.json.ids)}`);
  // The confirm acts on exactly the preview's ids (what matched since is reported, not resurrected).
  const done = await call(
    'POST',
    '/dlq/resurrect',
    { queue, reason: 'expired', limit: 10, dryRun: false, ids: preview.json.ids },
    true,
  );
  if (done.status !== 200) throw new Error(`resurrect answered ${done.status}: ${JSON.stringify(done.json)}`);
  console.log(`  resurrected ${JSON.stringify(done.json.ids)}`);
  await waitFor('the resurrected job to run', async () => ((await hotCount(queue)) === 0 ? true : null), 30_000);
  for (const id of done.json.ids as string[]) {
    const j = (await call('GET', `/jobs/${id}`)).json;
    console.log(`  job ${id} is now in ${j.location} (${j.state})`);
  }
  stats = (await call('GET', '/stats')).json.queues.find((x: any) => x.queue === queue);
  console.log(`  ${statsLine(stats)}`);

  step(
    `Start the sample transfer "${DEMO_TRANSFER}" between two local databases (POST /api/ops/transfers/${DEMO_TRANSFER}/start)`,
  );
  const started = await call('POST', `/transfers/${DEMO_TRANSFER}/start`, {}, true);
  if (started.status === 202) {
    const batchId = started.json.batch.batchId as string;
    console.log(
      `  batch ${batchId}: window (${started.json.batch.boundary.low ?? '-inf'}, ${started.json.batch.boundary.high}], ${started.json.batch.rowCount} rows in the manifest`,
    );
    const batch = await waitFor(
      'the batch to commit',
      async () => {
        const b = (await call('GET', `/transfers/batches/${batchId}`)).json;
        return b.status === 'committed' || b.state === 'failed' ? b : null;
      },
      90_000,
    );
    console.log(`  batch ${batchId}: ${batch.state} (${batch.status}), ${batch.appliedCount ?? 0} rows applied`);
    for (const e of batch.events) console.log(`    ${e.at}  ${e.event}${e.toState ? ` -> ${e.toState}` : ''}`);
    console.log(`  next action: ${batch.nextAction}`);
  } else {
    console.log(`  ${started.status}: ${JSON.stringify(started.json)}`);
  }

  if (exitAtEnd) {
    // The host stops below: its URLs (console, ops API) would answer nothing. Say how to get one that does.
    console.log(`
The demo stops the local host now (--exit). To explore the same data in the console or over the ops API, run
\`npm start -- --demo\` (the transfer "${DEMO_TRANSFER}" is configured only with --demo) and open /api/console/ or see
docs/operations.md; the ops key stays in ${keel.dataDir}/ops-key.`);
  } else
    console.log(`
Open the console: ${keel.baseUrl}/api/console/   (sign in with the ops key ${keel.opsKey})
  Dead letters: job ${forConsole} (cancelled) waits there; select it, "Resurrect selected…", confirm, and find it archived.
  Tick "Act as operator" at sign-in: pause/resume, limits, cancel, purge and resurrect (by id too) need it.
Explore:
  curl -s -H "x-functions-key: ${keel.opsKey}" ${ops}/stats
  curl -s -H "x-functions-key: ${keel.opsKey}" "${ops}/jobs?location=archive&queue=${queue}"
  curl -s -H "x-functions-key: ${keel.opsKey}" ${ops}/transfers/batches
  OpenAPI: ${ops}/openapi.json   (docs/operations.md has every route)`);
} catch (err) {
  // A signal's stop makes the walk's calls fail: that is not the demo failing.
  if (!stopping) {
    console.error(`\ndemo failed: ${(err as Error).message}`);
    if (quiet) console.error(`last host log lines:\n${hostLog.slice(-30).join('\n')}`);
    process.exitCode = 1;
  }
}

if (stopping) {
  // The signal handler exits once the host has stopped.
} else if (exitAtEnd || process.exitCode) {
  await stopOnce();
  process.exit(process.exitCode ?? 0);
} else {
  console.log('\nThe local host keeps running (Ctrl+C to stop).');
  if (quiet) console.log('Host log from here on:');
  live = true;
}

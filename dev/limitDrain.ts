// How fast a backlog on a queue limited to N drains (bench/README.md, runs 1060-1079): W Worker objects (each its own
// pool and wake-ups, one process) over a limited queue and an empty one, every reply from the server `latency-ms`
// late (a FaultProxy), jobs that take `job-ms`. Prints jobs/s beside what one claim and one completion round trip per
// job allow at that limit: N / (job + 2 x latency).
//   npx tsx dev/limitDrain.ts --url postgres://postgres@127.0.0.1:55464/postgres [--jobs 300] [--workers 6]
//     [--concurrency 12] [--limit 1] [--latency-ms 0] [--job-ms 2]
import { randomBytes } from 'node:crypto';
import { ensureExecutorLogin, withClient, withDatabase, withLogin } from './pgAdmin.js';
import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';
import { PostgresWakeups } from '../shared/engines/postgres/wakeups.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor, Worker } from '../shared/jobs/processor.js';
import { FaultProxy } from '../test/support/faultProxy.js';

const args = process.argv.slice(2);
const arg = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const url = arg('url', 'postgres://postgres@127.0.0.1:55464/postgres');
const jobs = Number(arg('jobs', '300'));
const workers = Number(arg('workers', '6'));
const concurrency = Number(arg('concurrency', '12'));
const limit = Number(arg('limit', '1'));
const latencyMs = Number(arg('latency-ms', '0'));
const jobMs = Number(arg('job-ms', '2'));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const db = `keel_limitdrain_${randomBytes(3).toString('hex')}`;
await withClient(url, (c) => c.query(`create database ${db}`));
await ensureExecutorLogin(url, 'keel_app_chaos', 'keel-app-chaos');
const ownerUrl = withDatabase(url, db);
const appUrl = withLogin(ownerUrl, 'keel_app_chaos', 'keel-app-chaos');
const control = await PostgresJobStore.connect(appUrl, { poolSize: 2, migrateUrl: ownerUrl });
await control.updateQueue('lim', { maxConcurrency: limit, zombieTimeoutSeconds: 30 });
const au = new URL(appUrl);
const proxy = await FaultProxy.start(au.hostname, Number(au.port || 5432));
proxy.latencyMs = latencyMs;
const viaProxy = proxy.urlFor(appUrl);

const registry = new HandlerRegistry().register('ok', async () => {
  if (jobMs > 0) await sleep(jobMs);
});
const running: { worker: Worker; store: PostgresJobStore; wakeups: PostgresWakeups }[] = [];
for (let i = 0; i < workers; i++) {
  const store = await PostgresJobStore.connect(viaProxy, { poolSize: 4, migrate: false });
  const wakeups = new PostgresWakeups(viaProxy);
  const processor = new JobProcessor({ store, registry, heartbeatIntervalMs: 1000, log: quiet() });
  const worker = new Worker(processor, { queues: ['lim', 'other'], concurrency, pollIntervalMs: 400, wakeups });
  running.push({ worker, store, wakeups });
}
for (const r of running) r.worker.start();
await sleep(1000);

const started = Date.now();
await control.enqueueMany(Array.from({ length: jobs }, (_, n) => ({ queue: 'lim', type: 'ok', payload: { n } })));
for (;;) {
  const s = (await control.stats()).find((x) => x.queue === 'lim');
  if (s && s.succeeded >= jobs) break;
  await sleep(50);
}
const secs = (Date.now() - started) / 1000;
console.log(
  `limit ${limit}, ${workers} workers x ${concurrency}, latency ${latencyMs} ms, job ${jobMs} ms: ${jobs} jobs in ${secs.toFixed(1)} s = ${(
    jobs / secs
  ).toFixed(
    1,
  )} jobs/s; a claim and a completion round trip per job allow ${((limit * 1000) / (jobMs + 2 * latencyMs)).toFixed(1)} jobs/s`,
);
for (const r of running) {
  await r.worker.stop(1000);
  await r.wakeups.close();
  await r.store.close();
}
await control.close();
await proxy.close();
await withClient(url, (c) => c.query(`drop database ${db} with (force)`));

function quiet() {
  return { info: () => undefined, warn: () => undefined, error: (m: string, f?: unknown) => console.error(m, f) };
}

// One worker process of the multi-process chaos test (test/engines/postgres.chaosProcesses.test.ts): claims from
// CHAOS_QUEUE on CHAOS_URL with LISTEN/NOTIFY wake-ups and polling, prints "READY" once running and "F <id>" for
// every job it finalized (archived or dead-lettered). SIGTERM stops it gracefully; the test also SIGKILLs it.
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { PostgresWakeups } from '../../shared/engines/postgres/wakeups.js';
import { HandlerRegistry } from '../../shared/jobs/registry.js';
import { FatalError } from '../../shared/jobs/handlerErrors.js';
import { JobProcessor, Worker } from '../../shared/jobs/processor.js';
import { seededRandom } from './seededRandom.js';

const url = process.env.CHAOS_URL!;
const queue = process.env.CHAOS_QUEUE!;
const random = seededRandom(`chaos worker ${process.pid}`, Number(process.env.CHAOS_SEED ?? 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const store = await PostgresJobStore.connect(url, { poolSize: 4, migrate: false });
const registry = new HandlerRegistry().register(
  'chaos',
  async (p) => {
    if ((p as { probe?: boolean }).probe) return;
    await sleep(random.next() * 5);
    const roll = random.next();
    if (roll < 0.01) throw new FatalError('chaos: fatal');
    if (roll < 0.09) throw new Error('chaos: transient');
  },
  { backoff: { baseMs: 20, maxMs: 200 } },
);
const processor = new JobProcessor({
  store,
  registry,
  leaseSeconds: 3,
  heartbeatIntervalMs: 250,
  events: {
    onOutcome: (e) => {
      if (e.outcome === 'succeeded' || e.outcome === 'dead_lettered') process.stdout.write(`F ${e.job.id}\n`);
    },
  },
});
const worker = new Worker(processor, {
  queues: [queue],
  concurrency: 16,
  pollIntervalMs: 200,
  wakeups: new PostgresWakeups(url),
});
worker.start();
process.on('SIGTERM', () => {
  void worker
    .stop(2000)
    .then(() => store.close())
    .finally(() => process.exit(0));
});
// After the handler: a SIGTERM sent as soon as READY is read must stop the worker gracefully, not kill it.
process.stdout.write('READY\n');

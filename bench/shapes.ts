// The configurations bench/peers.ts and bench/profile.ts run, defined once.
import type { JobStore } from '../shared/jobs/contract.js';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor } from '../shared/jobs/processor.js';

// graphile-worker's performance preset (https://worker.graphile.org/docs/performance: the configuration behind their
// published numbers) and its defaults with 24 slots (the graphile-perf and graphile-defaults rows of bench/README.md).
export const GRAPHILE_OPTIONS = {
  perf: {
    concurrency: 24,
    maxPoolSize: 25,
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  },
  defaults: { concurrency: 24 },
} as const;

// keel-batched: 2 processors x 500 jobs in flight (bench/jobs.ts settings), as two hosts would run, with a no-op
// handler. Returns the jobs the drains processed.
export async function drainKeelBatched(store: JobStore, queue: string, workerPrefix: string): Promise<number> {
  const registry = new HandlerRegistry().register('noop', async () => undefined);
  const processors = [0, 1].map(
    (i) => new JobProcessor({ store, registry, workerId: `${workerPrefix}-${i}`, completionBatchMax: 500 }),
  );
  const res = await Promise.all(
    processors.map((p) => p.drain({ queues: [queue], budgetMs: 600_000, concurrency: 500 })),
  );
  return res.reduce((a, r) => a + r.processed, 0);
}

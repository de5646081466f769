// node bench/node22.mjs bench/allocProbe.ts [jobs] — V8 heap bytes a no-op job allocates in the processor's own path
// (claim loop, execute, completion batching), against an in-memory store (no driver, no server, so the figure does
// not move with load): a Worker (concurrency 20) drains `jobs` synthetic jobs (default 50,000) five times after a
// warm-up; bytes = used-heap growth plus what each GC freed, as bench/workers.ts counts them. PROBE_PROFILE=1 adds
// one more round under V8's sampling heap profiler (objects collected by scavenges included), bytes a job by
// function (bench/README.md, runs 530-539).
import v8 from 'node:v8';
import { HandlerRegistry } from '../shared/jobs/registry.js';
import { JobProcessor, Worker } from '../shared/jobs/processor.js';
import type { JobStore, StartedJob } from '../shared/jobs/contract.js';

let next = 1;
let left = 0;
let done = 0;
let finish: (() => void) | undefined;
const store = {
  async claimAndStart(o: { limit: number }): Promise<StartedJob[]> {
    await new Promise((r) => setImmediate(r));
    const n = Math.min(o.limit, left);
    left -= n;
    const out: StartedJob[] = [];
    for (let i = 0; i < n; i++) {
      const id = next++;
      out.push({
        id: String(id),
        leaseId: '0b1c2d3e-1111-2222-3333-444455556666',
        queue: 'q',
        type: 'noop',
        payload: { n: id },
        priority: 0,
        attempts: 0,
        maxAttempts: null,
        queueMaxAttempts: 5,
        idempotencyKey: null,
        tags: [],
        runAt: new Date(),
        createdAt: new Date(),
        leaseExpiresAt: new Date(),
        queueZombieTimeoutSeconds: 300,
        attempt: 1,
      });
    }
    return out;
  },
  async completeMany(refs: { jobId: string }[]) {
    await new Promise((r) => setImmediate(r));
    return refs.map((r) => ({ jobId: r.jobId, status: 'succeeded' as const }));
  },
  async heartbeat() {
    return { status: 'ok', cancelRequested: false };
  },
} as unknown as JobStore;

const registry = new HandlerRegistry().register('noop', async () => undefined);
async function round(jobs: number): Promise<{ bytes: number; ms: number; minor: number }> {
  left = jobs;
  done = 0;
  let minor = 0;
  const processor = new JobProcessor({
    store,
    registry,
    workerId: 'probe',
    events: {
      onOutcome: () => {
        if (++done === jobs) finish?.();
      },
    },
  });
  const w = new Worker(processor, { queues: ['q'], concurrency: 20, pollIntervalMs: 5 });
  const allDone = new Promise<void>((r) => (finish = r));
  const prof = new v8.GCProfiler();
  prof.start();
  const used0 = v8.getHeapStatistics().used_heap_size;
  const t0 = performance.now();
  w.start();
  await allDone;
  const ms = performance.now() - t0;
  const used1 = v8.getHeapStatistics().used_heap_size;
  const stats = prof.stop()?.statistics ?? [];
  for (const g of stats) if (g.gcType === 'Scavenge') minor++;
  const freed = stats.reduce(
    (a, g) => a + g.beforeGC.heapStatistics.usedHeapSize - g.afterGC.heapStatistics.usedHeapSize,
    0,
  );
  await w.stop(1000);
  return { bytes: (used1 - used0 + freed) / jobs, ms, minor };
}
const jobs = Number(process.argv[2] ?? 50000);
await round(20000);
const res = [];
for (let i = 0; i < 5; i++) res.push(await round(jobs));
console.log(
  JSON.stringify(
    res.map((r) => ({
      B: Math.round(r.bytes),
      usPerJob: Math.round(((r.ms * 1000) / jobs) * 10) / 10,
      minorPerK: Math.round((r.minor * 1e4) / jobs) / 10,
    })),
  ),
);
const med = res.map((r) => r.bytes).sort((a, b) => a - b)[2]!;
console.log('median B/job', Math.round(med));
if (process.env.PROBE_PROFILE) {
  const { Session } = await import('node:inspector/promises');
  const s = new Session();
  s.connect();
  await s.post('HeapProfiler.enable');
  await s.post('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  } as never);
  const N = 50000;
  await round(N);
  const { profile } = (await s.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: Node } };
  interface Node {
    callFrame: { functionName: string; url: string; lineNumber: number };
    selfSize: number;
    children: Node[];
  }
  const by = new Map<string, number>();
  const walk = (n: Node) => {
    const k = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;
    by.set(k, (by.get(k) ?? 0) + n.selfSize);
    n.children.forEach(walk);
  };
  walk(profile.head);
  for (const [k, v] of [...by].sort((a, b) => b[1] - a[1]).slice(0, 30))
    console.log(String(Math.round(v / N)).padStart(6), k);
}

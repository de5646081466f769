// Heartbeats under overload: a worker running more jobs than its pool has connections, over a slow path to the
// server, with short leases (2 s zombie timeout), keeps every job. The beat timer sends the beats of all the jobs
// due at a tick as one store call (heartbeatMany, shared/jobs/executor.ts RunningJobs), so the beats cost one
// statement a tick whatever the concurrency. When every job sent a statement of its own, 24 jobs' beats every
// 500 ms over a 3-connection pool at 150 ms a statement needed 1.2 s of pool time every 500 ms: the beats queued
// behind each other and the claims, landed after the lease, and the jobs were dead-lettered as zombies (or given up
// by their own worker) although the worker was alive and their handlers running.
// Bounded: 24 jobs of 3 s, one drain of at most 20 s; the rescue runs every 200 ms on a direct connection meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresHarness } from '../engines/postgres.harness.js';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import type { JobStore } from '../../shared/jobs/contract.js';
import { HandlerRegistry, type JobLogger } from '../../shared/jobs/registry.js';
import { JobProcessor } from '../../shared/jobs/processor.js';
import { FaultProxy } from '../support/faultProxy.js';
import { appUrl } from '../support/pg.js';

const JOBS = 24;
const HANDLER_MS = 3_000; // longer than the lease: kept only by heartbeats
const ZOMBIE_TIMEOUT_S = 2;
const POOL = 3;
const LATENCY_MS = 150;

let h: PostgresHarness;
let direct: JobStore;
let proxy: FaultProxy;

beforeAll(async () => {
  h = new PostgresHarness();
  direct = await h.createStore({ poolSize: 2 });
  const u = new URL(h.url);
  proxy = await FaultProxy.start(u.hostname, Number(u.port || 5432));
});
afterAll(async () => {
  await h?.close();
});

describe('heartbeats under overload', () => {
  it(`${JOBS} running jobs over a ${POOL}-connection pool at ${LATENCY_MS} ms a statement keep their 2 s leases: no zombie, no lease lost`, async () => {
    const queue = 'beat-overload';
    await direct.updateQueue(queue, { zombieTimeoutSeconds: ZOMBIE_TIMEOUT_S, zombiePolicy: 'dlq' });
    await direct.enqueueMany(Array.from({ length: JOBS }, () => ({ queue, type: 'slow' })));
    const store = await PostgresJobStore.connect(proxy.urlFor(appUrl(h.url)), { poolSize: POOL, migrate: false });
    // The pool's connections open before the path turns slow: what is measured is the statements, not the logins.
    await Promise.all(Array.from({ length: POOL }, () => store.pool.query('select pg_sleep(0.05)')));
    proxy.latencyMs = LATENCY_MS;
    const warnings: string[] = [];
    const leaseLost: string[] = [];
    const log: JobLogger = { info: () => undefined, warn: (m) => warnings.push(m), error: (m) => warnings.push(m) };
    const registry = new HandlerRegistry().register('slow', async (_payload, ctx) => {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, HANDLER_MS);
        ctx.signal.addEventListener('abort', () => {
          clearTimeout(t);
          resolve();
        });
      });
      ctx.signal.throwIfAborted();
    });
    const p = new JobProcessor({
      store,
      registry,
      log,
      events: { onLeaseLost: (e) => leaseLost.push(e.operation) },
    });
    // The rescue, as maintenance runs it, every 200 ms on its own connection (not through the slow path).
    let rescuing = true;
    let zombies = 0;
    const rescue = (async () => {
      while (rescuing) {
        const r = await direct.rescueZombies(100);
        zombies += r.deadLettered + r.retried;
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    try {
      const drained = await p.drain({ queues: [queue], budgetMs: 20_000, concurrency: JOBS, claimBatch: JOBS });
      // A job whose lease ran out is a zombie the rescue dead-letters once its timeout has passed: let it.
      await new Promise((r) => setTimeout(r, ZOMBIE_TIMEOUT_S * 1000 + 1_000));
      rescuing = false;
      await rescue;
      const dlq = await direct.countJobs({ location: 'dlq', queue, cap: 1000 });
      expect({ zombies, dlq: dlq.matched, leaseLost, outcomes: drained.outcomes }).toMatchObject({
        zombies: 0,
        dlq: 0,
        leaseLost: [],
        outcomes: { succeeded: JOBS },
      });
      expect(warnings.filter((w) => w.includes('heartbeat'))).toEqual([]);
    } finally {
      rescuing = false;
      await rescue;
      proxy.latencyMs = 0;
      await p.shutdown(0);
      await store.close();
    }
  }, 60_000);
});

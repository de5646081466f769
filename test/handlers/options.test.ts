// Per-type options from defineHandler, honoured where jobs run (the processor) and where they are rescued
// (maintenance's zombie rescue, in the database).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineHandler } from '../../shared/jobs/define.js';
import { registerHandlers } from '../../shared/jobs/handlerFolder.js';
import { enqueueJobs } from '../../shared/app/enqueue.js';
import { runMaintenancePass } from '../../shared/app/timerPasses.js';
import { createTestRuntime, type TestRuntime } from '../functions/support.js';

let running = 0;
let peak = 0;
const limited = defineHandler('test.limited', {
  queue: 'limited',
  concurrency: 2,
  timeoutMs: 1_000, // shorter than the time the last jobs wait for a slot: the timeout starts with the slot
  async handle() {
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, 300));
    running--;
  },
});
const fragile = defineHandler('test.fragile', { queue: 'fragile', maxAttempts: 2, async handle() {} });

let t: TestRuntime;
const quiet = { info() {}, warn() {}, error() {} };

beforeAll(async () => {
  t = await createTestRuntime('handler_options', {
    register: (r) =>
      registerHandlers(
        r,
        [limited, fragile].map((d) => ({ ...d, source: 'test' })),
      ),
  });
});
afterAll(async () => t?.close());

describe('per-type options', () => {
  it('concurrency: at most that many jobs of the type run at once in an instance; the rest wait, then run', async () => {
    const jobs = await enqueueJobs(
      t.rt,
      Array.from({ length: 8 }, (_, i) => ({ type: 'test.limited', payload: i })),
      quiet,
    );
    const r = await t.rt.processor.drain({ queues: ['limited'], budgetMs: 20_000, concurrency: 8 });
    expect(r.outcomes.succeeded).toBe(8);
    expect(peak).toBe(2);
    for (const j of jobs) expect((await t.rt.store.getJob(j.id))?.location).toBe('archive');
  });

  it("zombie rescue honours the handler's maxAttempts (2), not the queue's (5)", async () => {
    await t.rt.store.updateQueue('fragile', { zombieTimeoutSeconds: 1, zombiePolicy: 'retry', maxAttempts: 5 });
    const id = (await enqueueJobs(t.rt, { type: 'test.fragile' }, quiet))[0]!.id;
    // A worker that claims and starts the job, then dies without a heartbeat.
    const crash = async () => {
      const claimed = await t.rt.store.claimById(id, 'doomed-worker', 60);
      expect(claimed).not.toBeNull();
      expect((await t.rt.store.start({ jobId: id, leaseId: claimed!.leaseId })).status).toBe('ok');
      await new Promise((r) => setTimeout(r, 2_100));
      return runMaintenancePass(t.rt, quiet);
    };
    const first = await crash(); // attempt 1 of 2: back to pending
    expect(first.jobs.rescued.retried).toBe(1);
    expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'hot', state: 'pending', attempts: 1 });
    const second = await crash(); // attempt 2 of 2: dead-lettered, although the queue would allow 5
    expect(second.jobs.rescued.deadLettered).toBe(1);
    expect(await t.rt.store.getJob(id)).toMatchObject({ location: 'dlq', reason: 'zombie', attempts: 2 });
  });
});

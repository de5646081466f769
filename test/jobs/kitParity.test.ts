// The handler test kit (test/kit.ts) must give the verdict the processor gives: the same handler, attempt by attempt,
// run once through the kit and once through the real processor on PostgreSQL. Before, the kit used 5 attempts
// whatever the handler declared, so the third attempt of a `maxAttempts: 3` handler said 'retried' while the host
// dead-lettered it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSettings } from '../../shared/config/settings.js';
import { createRuntime, type Runtime } from '../../shared/app/runtime.js';
import { enqueueJobs } from '../../shared/app/enqueue.js';
import { defineHandler, FatalError, z, type HandlerDefinition } from '../../shared/jobs/define.js';
import { registerHandlers } from '../../shared/jobs/handlerFolder.js';
import { runHandler } from '../kit.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

const mode = z.object({ mode: z.enum(['fail', 'fatal', 'hang']) });
const act = async (payload: z.output<typeof mode>, signal: AbortSignal) => {
  if (payload.mode === 'fatal') throw new FatalError('never works');
  if (payload.mode === 'fail') throw new Error('try again');
  await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
};
// Zero backoff: a retried job is due at once, so the processor can run its next attempt straight away.
const threeAttempts = defineHandler('parity.three', {
  payload: mode,
  maxAttempts: 3,
  timeoutMs: 150,
  retryOnTimeout: true,
  backoff: { baseMs: 0, maxMs: 0 },
  handle: (p, ctx) => act(p, ctx.signal),
});
const queueLimit = defineHandler('parity.queue', {
  payload: mode,
  backoff: { baseMs: 0, maxMs: 0 },
  handle: (p, ctx) => act(p, ctx.signal),
});

let rt: Runtime;
const quiet = { info() {}, warn() {}, error() {} };

beforeAll(async () => {
  const url = await createTestDatabase('kit_parity');
  const env = { KEEL_PG_URL: appUrl(url), KEEL_PG_MIGRATE_URL: url, KEEL_PG_POOL_SIZE: '3', KEEL_HEARTBEAT_MS: '1000' };
  rt = await createRuntime(parseSettings(env), {
    handlersDir: null,
    queues: { send: async () => undefined, sendPoison: async () => undefined, ping: async () => true },
    transfers: null,
    env,
    register: (r) =>
      registerHandlers(
        r,
        [threeAttempts, queueLimit].map((d) => ({ ...(d as HandlerDefinition), source: 'test' })),
      ),
  });
});
afterAll(async () => rt?.close());

interface Verdict {
  outcome: string;
  reason?: string | undefined;
}

// Every attempt of one job through the processor, until it leaves the hot table.
async function processorVerdicts(def: HandlerDefinition<any>, payload: unknown, maxAttempts?: number) {
  const [job] = await enqueueJobs(
    rt,
    { type: def.type, payload, ...(maxAttempts !== undefined ? { maxAttempts } : {}) },
    quiet,
  );
  const out: Verdict[] = [];
  for (let attempt = 1; attempt <= 12; attempt++) {
    const outcome = await rt.processor.processById(job!.id);
    const record = await rt.store.getJob(job!.id);
    out.push({ outcome, ...(outcome === 'dead_lettered' ? { reason: record!.reason ?? undefined } : {}) });
    if (outcome !== 'retried') break;
  }
  return out;
}

async function kitVerdicts(def: HandlerDefinition<any>, payload: unknown, maxAttempts?: number) {
  const out: Verdict[] = [];
  for (let attempt = 1; attempt <= 12; attempt++) {
    const r = await runHandler(def, payload, { attempt, ...(maxAttempts !== undefined ? { maxAttempts } : {}) });
    out.push({ outcome: r.outcome, ...(r.outcome === 'dead_lettered' ? { reason: r.reason } : {}) });
    if (r.outcome !== 'retried') break;
  }
  return out;
}

describe('test kit verdicts equal the processor verdicts, attempt by attempt', () => {
  const cases: [string, HandlerDefinition<any>, unknown, number | undefined, string[]][] = [
    // The handler's maxAttempts (3), not the queue's 5.
    ['handler maxAttempts 3, retryable error', threeAttempts, { mode: 'fail' }, undefined, ['r', 'r', 'exhausted']],
    // The job's own maxAttempts wins over the handler's.
    ['job maxAttempts 4 over the handler 3', threeAttempts, { mode: 'fail' }, 4, ['r', 'r', 'r', 'exhausted']],
    // The handler's timeout (150 ms) with retryOnTimeout, within its 3 attempts.
    ['handler timeout, retried on timeout', threeAttempts, { mode: 'hang' }, undefined, ['r', 'r', 'timeout']],
    ['FatalError', threeAttempts, { mode: 'fatal' }, undefined, ['fatal']],
    // No handler limit: the queue's (5, the default).
    ['no handler limit: the queue default', queueLimit, { mode: 'fail' }, undefined, ['r', 'r', 'r', 'r', 'exhausted']],
  ];
  for (const [name, def, payload, maxAttempts, expected] of cases) {
    it(name, async () => {
      const want = expected.map((e) => (e === 'r' ? { outcome: 'retried' } : { outcome: 'dead_lettered', reason: e }));
      const fromProcessor = await processorVerdicts(def, payload, maxAttempts);
      expect(fromProcessor).toEqual(want);
      expect(await kitVerdicts(def, payload, maxAttempts)).toEqual(fromProcessor);
    });
  }
});

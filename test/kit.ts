// The handler test kit (see docs/jobs.md, "Testing a handler"; handlers/webhook.test.ts uses all of it).
// - startHandler / runHandler: run one attempt of a handler in a unit test with a realistic context — attempt,
//   idempotency key, an abort signal you can trigger, heartbeats counted, logs captured — and get back what the
//   processor would do next (archive, retry after what delay, or dead-letter for which reason), by the processor's
//   own rule. The payload goes through the same checks as enqueue first.
// - FakeClock: drives the timeout and dates the retry, so backoff can be asserted without waiting.
// - runJobEndToEnd: enqueue through the real checks, claim and run through the real processor on the embedded
//   PostgreSQL of the test run, and return where the job ended up. One call.
import { randomBytes } from 'node:crypto';
import type { DlqReason, JobLink, JobRecord, JobStore } from '../shared/jobs/contract.js';
import type { HandlerDefinition } from '../shared/jobs/define.js';
import { HandlerRegistry, type JobContext, type JobLogger, type RegisteredHandler } from '../shared/jobs/registry.js';
import {
  AttemptAbort,
  JobAbortedError,
  decideAfterFailure,
  effectiveMaxAttempts,
  resultOf,
  type AbortReason,
  type JobOutcome,
} from '../shared/jobs/processor.js';
import { prepareTypedJobs, type JobRequest } from '../shared/jobs/typedEnqueue.js';
import { DEFAULT_MAX_RESULT_BYTES, normalizeProgress, type JobProgress } from '../shared/jobs/progress.js';
import { registerHandlers } from '../shared/jobs/handlerFolder.js';

// A queue's max_attempts when nobody configured it (the queues table's default).
export const DEFAULT_QUEUE_MAX_ATTEMPTS = 5;

export class FakeClock {
  private t: number;
  private timers: { at: number; seq: number; fn: () => void }[] = [];
  private seq = 0;

  constructor(start: Date | string = '2030-01-01T00:00:00.000Z') {
    this.t = new Date(start).getTime();
  }

  now(): number {
    return this.t;
  }

  date(): Date {
    return new Date(this.t);
  }

  setTimeout(fn: () => void, ms: number): () => void {
    const timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((x) => x !== timer);
    };
  }

  // Moves time forward, firing every timer that falls due, in order.
  advance(ms: number): void {
    const until = this.t + ms;
    for (;;) {
      const due = this.timers.filter((x) => x.at <= until).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers = this.timers.filter((x) => x !== due);
      this.t = Math.max(this.t, due.at);
      due.fn();
    }
    this.t = until;
  }
}

export interface RunOptions {
  attempt?: number; // the attempt now running, 1-based (default 1)
  maxAttempts?: number; // the job's own max attempts (enqueue's maxAttempts); default none, so the handler's applies
  queueMaxAttempts?: number; // the queue's max_attempts, used when neither the job nor the handler sets one (default 5)
  idempotencyKey?: string | null; // default a fixed test key
  jobId?: string; // default '1'
  parents?: JobLink[]; // what ctx.parents() answers (a flow's job); default none
  queue?: string; // default: the handler's queue, else 'default'
  clock?: FakeClock; // drives the timeout and dates retryAt; default: real time
  random?: () => number; // backoff jitter (default Math.random)
  maxResultBytes?: number; // KEEL_MAX_RESULT_BYTES (default 64 KiB)
}

export interface HandlerResult {
  outcome: JobOutcome; // 'released': interrupted by shutdown, handed back with its attempt given back
  reason?: DlqReason; // when dead-lettered
  message?: string; // the error recorded on the job
  delayMs?: number; // when retried: the backoff (or Retry-After) delay
  retryAt?: Date; // when retried: clock time + delayMs
  error?: unknown; // what the handler threw
  result?: unknown; // when succeeded: what the handler returned, as the archive stores it (JSON; absent for nothing)
}

export interface LogLine {
  level: 'info' | 'warn' | 'error';
  message: string;
  fields?: Record<string, unknown>;
}

export interface HandlerRun {
  ctx: JobContext;
  payload: unknown; // as the handler got it (parsed by its schema)
  logs: LogLine[];
  readonly heartbeats: number;
  progress: JobProgress[]; // every ctx.progress() value, as stored (the processor writes the latest once a second)
  abort(reason: AbortReason): void; // as the processor would: cancel, timeout, lease_lost, lease_expired, shutdown
  result: Promise<HandlerResult>;
}

function registered(def: HandlerDefinition): { registry: HandlerRegistry; h: RegisteredHandler } {
  const registry = new HandlerRegistry();
  registerHandlers(registry, [{ ...def, source: 'test' }]);
  return { registry, h: registry.get(def.type)! };
}

// Starts one attempt; the payload is checked as enqueue checks it (a ValidationError naming the field is thrown).
export function startHandler<P>(def: HandlerDefinition<P>, payload: unknown, opts: RunOptions = {}): HandlerRun {
  const { registry, h } = registered(def as HandlerDefinition);
  const [prepared] = prepareTypedJobs(registry, [
    {
      type: def.type,
      payload,
      ...(opts.queue ? { queue: opts.queue } : {}),
      ...(opts.maxAttempts !== undefined ? { maxAttempts: opts.maxAttempts } : {}),
    },
  ]);
  const clock = opts.clock;
  const logs: LogLine[] = [];
  const log: JobLogger = {
    info: (message, fields) => logs.push({ level: 'info', message, ...(fields ? { fields } : {}) }),
    warn: (message, fields) => logs.push({ level: 'warn', message, ...(fields ? { fields } : {}) }),
    error: (message, fields) => logs.push({ level: 'error', message, ...(fields ? { fields } : {}) }),
  };
  const attemptAbort = new AttemptAbort();
  const { abort } = attemptAbort;
  let heartbeats = 0;
  const progress: JobProgress[] = [];
  const attempt = opts.attempt ?? 1;
  const ctx: JobContext = {
    jobId: opts.jobId ?? '1',
    attempt,
    idempotencyKey: opts.idempotencyKey === undefined ? 'test-idempotency-key' : opts.idempotencyKey,
    queue: prepared!.queue,
    type: def.type,
    signal: attemptAbort.signal,
    log,
    heartbeat: async () => {
      heartbeats++;
    },
    progress: (input) => {
      progress.push(normalizeProgress(input));
    },
    parents: async () => opts.parents ?? [],
  };
  const cancelTimeout = clock
    ? clock.setTimeout(() => abort('timeout'), h.options.timeoutMs)
    : (() => {
        const t = setTimeout(() => abort('timeout'), h.options.timeoutMs);
        return () => clearTimeout(t);
      })();
  const result = (async (): Promise<HandlerResult> => {
    let error: unknown;
    try {
      const returned = await attemptAbort.race(Promise.resolve().then(() => h.handler(prepared!.payload, ctx)));
      if (!attemptAbort.reason) {
        const text = resultOf(returned, opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES); // fatal when unstorable
        return { outcome: 'succeeded', ...(text === undefined ? {} : { result: JSON.parse(text) as unknown }) };
      }
      error = new JobAbortedError(attemptAbort.reason);
    } catch (err) {
      error = err;
    } finally {
      cancelTimeout();
    }
    const d = decideAfterFailure({
      attempt,
      // The processor's rule, from the same inputs: the job's own limit, else the handler's, else the queue's.
      maxAttempts: effectiveMaxAttempts(
        prepared!.maxAttempts,
        h.options,
        opts.queueMaxAttempts ?? DEFAULT_QUEUE_MAX_ATTEMPTS,
      ),
      options: h.options,
      abortReason: attemptAbort.reason,
      error,
      ...(opts.random ? { random: opts.random } : {}),
    });
    if (d.kind === 'lease_lost') return { outcome: 'lease_lost', error };
    if (d.kind === 'dead_letter') return { outcome: 'dead_lettered', reason: d.reason, message: d.message, error };
    if (d.kind === 'interrupt') return { outcome: 'released', message: d.message, error };
    const now = clock ? clock.now() : Date.now();
    return { outcome: 'retried', delayMs: d.delayMs, retryAt: new Date(now + d.delayMs), message: d.message, error };
  })();
  return {
    ctx,
    payload: prepared!.payload,
    logs,
    get heartbeats() {
      return heartbeats;
    },
    progress,
    abort,
    result,
  };
}

export function runHandler<P>(
  def: HandlerDefinition<P>,
  payload: unknown,
  opts: RunOptions = {},
): Promise<HandlerResult> {
  return startHandler(def, payload, opts).result;
}

export interface EndToEndResult {
  jobId: string;
  outcome: JobOutcome | 'not_claimed';
  job: JobRecord; // where the job is now: hot (retried), archive (succeeded) or dlq (with reason)
}

const noQueues = {
  async send() {},
  async sendPoison() {},
  async ping() {
    return true;
  },
};

// Enqueue (with enqueue's checks), claim, run and finalize one job on a fresh database of the test run's embedded
// PostgreSQL. Pass `defs` for other handlers the job needs registered (none by default).
export async function runJobEndToEnd(
  def: HandlerDefinition<any>,
  job: Omit<JobRequest, 'type'>,
  opts: {
    defs?: HandlerDefinition<any>[];
    env?: Record<string, string>;
    inspect?: (store: JobStore) => Promise<void>;
  } = {},
): Promise<EndToEndResult> {
  const [{ createTestDatabase }, { parseSettings }, { createRuntime }, { enqueueJobs }] = await Promise.all([
    import('./support/pg.js'),
    import('../shared/config/settings.js'),
    import('../shared/app/runtime.js'),
    import('../shared/app/enqueue.js'),
  ]);
  const url = await createTestDatabase(`kit_${randomBytes(2).toString('hex')}`);
  const env = { KEEL_PG_URL: url, KEEL_PG_POOL_SIZE: '3', ...opts.env };
  const rt = await createRuntime(parseSettings(env), {
    handlersDir: null,
    queues: noQueues,
    transfers: null,
    env,
    register: (r) =>
      registerHandlers(
        r,
        [def, ...(opts.defs ?? [])].map((d) => ({ ...d, source: 'test' })),
      ),
  });
  try {
    const quiet = { info() {}, warn() {}, error() {} };
    const [enqueued] = await enqueueJobs(rt, { ...job, type: def.type }, quiet);
    const outcome = await rt.processor.processById(enqueued!.id);
    await opts.inspect?.(rt.store);
    return { jobId: enqueued!.id, outcome, job: (await rt.store.getJob(enqueued!.id))! };
  } finally {
    await rt.close();
  }
}

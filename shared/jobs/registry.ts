// Handlers by job type, with their options. A handler gets (payload, ctx) and runs outside any transaction.
import type { ProgressInput } from './progress.js';
import type { z } from 'zod';
import type { JobId, JobLink } from './contract.js';
import { LIMITS, jobName } from './validate.js';
import { DEFAULT_BACKOFF, type BackoffOptions } from './backoff.js';

export interface JobLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export const consoleLogger: JobLogger = {
  info: (m, f) => console.log(JSON.stringify({ level: 'info', msg: m, ...f })),
  warn: (m, f) => console.warn(JSON.stringify({ level: 'warn', msg: m, ...f })),
  error: (m, f) => console.error(JSON.stringify({ level: 'error', msg: m, ...f })),
};

export const silentLogger: JobLogger = { info: () => undefined, warn: () => undefined, error: () => undefined };

export interface JobContext {
  jobId: JobId;
  attempt: number; // 1-based attempt now running
  idempotencyKey: string | null; // stable across retries and resurrection: use it for side effects
  queue: string;
  type: string;
  signal: AbortSignal; // aborts on cancel, timeout, lost lease or shutdown; signal.reason says which
  log: JobLogger;
  heartbeat(): Promise<void>; // extra heartbeat for long synchronous stretches; the processor also beats on a timer
  // How far this attempt is: 0.4, or {done, total, note}. Checked at once (a ValidationError names the field), stored
  // on the hot job at most once a second (the latest value wins) and shown by GET /jobs/{id} and the console.
  progress(progress: ProgressInput): void;
  // A flow's job (enqueued with after): its parents in the order of its after list, each with where it ended and,
  // for an archived parent, what its handler returned (result). One read, made when called; [] for a job in no flow.
  parents(): Promise<JobLink[]>;
}

// What the handler returns (JSON, at most KEEL_MAX_RESULT_BYTES) is stored with the archived job: GET /jobs/{id}.
export type JobHandler<P = unknown> = (payload: P, ctx: JobContext) => Promise<unknown>;

export interface HandlerOptions {
  timeoutMs?: number; // default 5 minutes
  maxAttempts?: number; // overrides the queue's max_attempts (the job's own max_attempts wins over both)
  backoff?: BackoffOptions; // exponential with equal jitter, capped
  retryOnTimeout?: boolean; // default false: a timeout goes to the DLQ as 'timeout'
  queue?: string; // the queue jobs of this type run on: the default at enqueue, and a different queue is refused
  concurrency?: number; // at most this many jobs of this type run at once in one host instance
  payload?: z.ZodType; // checked at enqueue (400 naming the field) and again before the handler runs
}

export interface RegisteredHandler {
  type: string;
  handler: JobHandler<unknown>;
  options: Required<Pick<HandlerOptions, 'timeoutMs' | 'backoff' | 'retryOnTimeout'>> &
    Pick<HandlerOptions, 'maxAttempts' | 'queue' | 'concurrency' | 'payload'>;
  source?: string; // the file it came from, for handlers loaded from the handlers folder
}

export const DEFAULT_TIMEOUT_MS = 5 * 60_000;

export interface HandlerRegistryOptions {
  // host.json functionTimeout in ms (null: unbounded, as in the local host without one). A handler's timeoutMs
  // must leave TIMEOUT_MARGIN_MS before it: past functionTimeout the Functions host restarts the worker, killing
  // every other execution on the instance and leaving the job to the zombie rescue.
  functionTimeoutMs?: number | null;
}

// Time a timed-out job still needs after its handler is aborted: the move to the DLQ or the retry.
export const TIMEOUT_MARGIN_MS = 30_000;

export class HandlerRegistry {
  private readonly handlers = new Map<string, RegisteredHandler>();

  constructor(private readonly limits: HandlerRegistryOptions = {}) {}

  register<P>(type: string, handler: JobHandler<P>, options: HandlerOptions = {}, source?: string): this {
    if (!type) throw new Error('handler type must be a non-empty string');
    if (!jobName.safeParse(type).success)
      throw new Error(`handler type "${type}": letters, digits and _ . : - only (at most ${LIMITS.nameLength})`);
    if (this.handlers.has(type)) {
      const first = this.handlers.get(type)!.source;
      throw new Error(
        `${source ?? 'a handler'} declares job type "${type}", which is already registered` +
          `${first ? ` by ${first}` : ''}: each job type has one handler (rename the type in ${source ?? 'the new handler'})`,
      );
    }
    checkHandlerOptions(type, options);
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const hostLimit = this.limits.functionTimeoutMs;
    if (hostLimit != null && timeoutMs > hostLimit - TIMEOUT_MARGIN_MS) {
      throw new Error(
        `handler "${type}": timeoutMs ${timeoutMs} does not fit host.json functionTimeout (${hostLimit} ms): ` +
          `the job must time out at least ${TIMEOUT_MARGIN_MS / 1000} s before the host kills the invocation (and every other ` +
          `execution on the instance with it). Use timeoutMs <= ${Math.max(0, hostLimit - TIMEOUT_MARGIN_MS)} or raise functionTimeout.`,
      );
    }
    this.handlers.set(type, {
      type,
      handler: handler as JobHandler<unknown>,
      options: {
        timeoutMs,
        backoff: options.backoff ?? DEFAULT_BACKOFF,
        retryOnTimeout: options.retryOnTimeout ?? false,
        ...(options.maxAttempts !== undefined ? { maxAttempts: options.maxAttempts } : {}),
        ...(options.queue !== undefined ? { queue: options.queue } : {}),
        ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
        ...(options.payload !== undefined ? { payload: options.payload } : {}),
      },
      ...(source ? { source } : {}),
    });
    return this;
  }

  all(): RegisteredHandler[] {
    return this.types().map((t) => this.handlers.get(t)!);
  }

  get(type: string): RegisteredHandler | undefined {
    return this.handlers.get(type);
  }

  types(): string[] {
    return [...this.handlers.keys()].sort();
  }

  // The per-type max attempts declared at registration, for the store's zombie rescue (which runs where no
  // handler runs and must apply the same limit as the processor: the job's own, else the handler's, else the queue's).
  maxAttemptsByType(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [type, h] of this.handlers) if (h.options.maxAttempts !== undefined) out[type] = h.options.maxAttempts;
    return out;
  }
}

const int = (v: unknown, min: number, max: number) =>
  typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;

// Options are checked when a handler is registered, so a bad option fails the app's start naming the type.
function checkHandlerOptions(type: string, o: HandlerOptions): void {
  const bad = (field: string, why: string) => new Error(`handler "${type}": ${field} ${why}`);
  if (o.timeoutMs !== undefined && !int(o.timeoutMs, 1, 24 * 3600_000))
    throw bad('timeoutMs', 'must be an integer number of milliseconds from 1 to 86400000');
  if (o.maxAttempts !== undefined && !int(o.maxAttempts, 1, LIMITS.maxAttempts))
    throw bad('maxAttempts', `must be an integer from 1 to ${LIMITS.maxAttempts}`);
  if (o.concurrency !== undefined && !int(o.concurrency, 1, 10_000))
    throw bad('concurrency', 'must be an integer from 1 to 10000');
  if (o.queue !== undefined && !jobName.safeParse(o.queue).success)
    throw bad('queue', 'must be a queue name (letters, digits and _ . : - only)');
  if (o.backoff !== undefined) {
    if (
      !int(o.backoff.baseMs, 0, 24 * 3600_000) ||
      !int(o.backoff.maxMs, 0, 7 * 24 * 3600_000) ||
      o.backoff.maxMs < o.backoff.baseMs
    ) {
      throw bad('backoff', 'needs integer baseMs <= maxMs (milliseconds)');
    }
  }
  if (o.payload !== undefined && typeof (o.payload as { safeParse?: unknown }).safeParse !== 'function') {
    throw bad('payload', "must be a zod schema (import { z } from '../shared/jobs/define.js')");
  }
}

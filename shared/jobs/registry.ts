// Handlers by job type, with their options. A handler gets (payload, ctx) and runs outside any transaction.
import type { JobId } from './contract.js';

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
}

export type JobHandler<P = unknown> = (payload: P, ctx: JobContext) => Promise<void>;

export interface BackoffOptions {
  baseMs: number; // first retry delay
  maxMs: number; // cap
}

export interface HandlerOptions {
  timeoutMs?: number; // default 5 minutes
  maxAttempts?: number; // overrides the queue's max_attempts (the job's own max_attempts wins over both)
  backoff?: BackoffOptions; // exponential with equal jitter, capped
  retryOnTimeout?: boolean; // default false: a timeout goes to the DLQ as 'timeout'
}

export interface RegisteredHandler {
  type: string;
  handler: JobHandler<unknown>;
  options: Required<Omit<HandlerOptions, 'maxAttempts'>> & { maxAttempts?: number };
}

export const DEFAULT_TIMEOUT_MS = 5 * 60_000;
export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, maxMs: 10 * 60_000 };

// Throw to dead-letter the job at once as 'fatal' (no retries).
export class FatalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'FatalError';
  }
}

// Throw to retry after a specific delay (attempts still count).
export class RetryAfterError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs: number,
  ) {
    super(message);
    this.name = 'RetryAfterError';
  }
}

export class HandlerRegistry {
  private readonly handlers = new Map<string, RegisteredHandler>();

  register<P>(type: string, handler: JobHandler<P>, options: HandlerOptions = {}): this {
    if (!type) throw new Error('handler type must be a non-empty string');
    if (this.handlers.has(type)) throw new Error(`a handler for job type "${type}" is already registered`);
    this.handlers.set(type, {
      type,
      handler: handler as JobHandler<unknown>,
      options: {
        timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        backoff: options.backoff ?? DEFAULT_BACKOFF,
        retryOnTimeout: options.retryOnTimeout ?? false,
        ...(options.maxAttempts !== undefined ? { maxAttempts: options.maxAttempts } : {}),
      },
    });
    return this;
  }

  get(type: string): RegisteredHandler | undefined {
    return this.handlers.get(type);
  }

  types(): string[] {
    return [...this.handlers.keys()].sort();
  }
}

// Exponential backoff with equal jitter, capped: after attempt n the delay is in [c/2, c), c = min(max, base * 2^(n-1)).
// Half fixed keeps a floor under retry storms; half random spreads the herd.
export function backoffDelayMs(attempt: number, opts: BackoffOptions, random: () => number = Math.random): number {
  const ceiling = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(ceiling / 2 + (random() * ceiling) / 2);
}

// Transient-error handling for SQL Server / Azure SQL.
// A transient error is retried (exponential backoff with full jitter) only when re-executing the operation cannot
// do harm:
//  - 'safe' operations may run twice: reads, heartbeats, queue-settings updates (absolute values), idempotent
//    sweeps (rescue, purge) and an enqueue whose every job has an idempotency key. They are retried on every
//    transient error, including a lost reply (timeout, broken connection) whose outcome is unknown.
//  - every other operation (claims, start, the moves, cancel, resurrect) is retried only when the server says the
//    request was rolled back as a whole: deadlock victim (1205). Nothing of it committed, so running it again is
//    the same as running it once. A lost reply is NOT retried: a claim whose reply is lost leaves a fetched job
//    that zombie rescue returns to pending; a move whose reply is lost is resolved by reading where the job is
//    (GetJob), never by repeating the move (see jobStore.ts).

// Server error numbers that mean "try again": deadlock victim, service busy, database unavailable / moving,
// cannot process the request (resource limits), cannot open database, connection terminated by failover.
// 596: "Cannot continue the execution because the session is in the kill state" (KILL, or a failover that ends the
// session) arrives with the reply of the request that was running: the session's open transaction is rolled back,
// but what the request had already committed (RescueZombies commits per part) stays, so the outcome is unknown.
export const TRANSIENT_ERROR_NUMBERS: ReadonlySet<number> = new Set([
  1205, 40501, 40613, 49918, 49919, 49920, 4060, 40197, 10928, 10929, 4221, 10053, 10054, 10060, 233, 64, 596,
]);

// Of those, the ones that guarantee the request's transaction was rolled back and nothing committed.
export const ROLLED_BACK_ERROR_NUMBERS: ReadonlySet<number> = new Set([1205]);

// mssql / tedious error codes for connection loss and timeouts (outcome of an in-flight request unknown).
// ECLOSE is what tedious hands the in-flight request when the connection closes under it ("Connection closed before
// request completed.", e.g. the server KILLed the session); mssql keeps that code on its RequestError.
const TRANSIENT_CODES: ReadonlySet<string> = new Set([
  'ETIMEOUT',
  'ESOCKET',
  'ECONNCLOSED',
  'ECONNRESET',
  'ECONNREFUSED',
  'ENOTOPEN',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EINSTLOOKUP',
  'ECLOSE',
]);

export type RetryPolicy = 'safe' | 'once';

interface ErrorShape {
  number?: unknown;
  code?: unknown;
  name?: unknown;
  originalError?: unknown;
  cause?: unknown;
  precedingErrors?: unknown;
}

// Every server error number a request reported. mssql throws the LAST error of a request and keeps the earlier ones
// in `precedingErrors` (node_modules/mssql/lib/tedious/request.js): a deadlock's 1205 can be followed by 3915
// (ROLLBACK inside INSERT ... EXEC), 266 or 3998, which alone would hide that the server rolled the request back.
function errorNumbers(err: unknown, seen: Set<unknown> = new Set()): number[] {
  const e = err as ErrorShape | null;
  if (!e || typeof e !== 'object' || seen.has(e)) return [];
  seen.add(e);
  const numbers: number[] = [];
  if (typeof e.number === 'number') numbers.push(e.number);
  else numbers.push(...errorNumbers(e.originalError ?? e.cause, seen));
  if (Array.isArray(e.precedingErrors)) {
    for (const preceding of e.precedingErrors) numbers.push(...errorNumbers(preceding, seen));
  }
  return numbers;
}

function errorCode(err: unknown): string | undefined {
  const e = err as ErrorShape | null;
  if (!e || typeof e !== 'object') return undefined;
  if (typeof e.code === 'string' && TRANSIENT_CODES.has(e.code)) return e.code;
  const inner = (e.originalError ?? e.cause) as ErrorShape | undefined;
  return inner && inner !== e ? errorCode(inner) : undefined;
}

export function isTransientSqlError(err: unknown): boolean {
  if (errorNumbers(err).some((n) => TRANSIENT_ERROR_NUMBERS.has(n))) return true;
  return errorCode(err) !== undefined;
}

// The request certainly did not commit anything (the server rolled it back and told us so): a 1205 anywhere in
// the request's errors, the last one or an earlier one.
export function isRolledBackSqlError(err: unknown): boolean {
  return errorNumbers(err).some((n) => ROLLED_BACK_ERROR_NUMBERS.has(n));
}

// A connection-level failure: the reply to an in-flight request may be lost, its outcome is unknown.
export function isOutcomeUnknown(err: unknown): boolean {
  if (isRolledBackSqlError(err)) return false;
  return isTransientSqlError(err);
}

export interface RetryOptions {
  attempts?: number; // total tries including the first (default 4)
  baseDelayMs?: number; // default 100
  maxDelayMs?: number; // default 3000
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown }) => void;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

// Full-jitter exponential backoff: a random delay in [0, min(max, base * 2^(attempt-1))].
export function backoffDelay(attempt: number, baseDelayMs: number, maxDelayMs: number, random: () => number): number {
  const cap = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(random() * cap);
}

export async function withSqlRetry<T>(policy: RetryPolicy, op: () => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const attempts = Math.max(1, opts.attempts ?? 4);
  const base = opts.baseDelayMs ?? 100;
  const max = opts.maxDelayMs ?? 3000;
  const sleep = opts.sleep ?? defaultSleep;
  const random = opts.random ?? Math.random;
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      const retryable = policy === 'safe' ? isTransientSqlError(err) : isRolledBackSqlError(err);
      if (!retryable || attempt >= attempts) throw err;
      const delayMs = backoffDelay(attempt, base, max, random);
      opts.onRetry?.({ attempt, delayMs, error: err });
      await sleep(delayMs);
    }
  }
}

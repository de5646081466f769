// What a failed attempt leads to: retry after a backoff, dead-letter (and why), hand back (shutdown), or nothing (the
// lease is lost). A pure rule, shared by the processor and the handler test kit (test/kit.ts), so a unit test of a
// handler predicts exactly what production does (River: retry_policy.go).
import type { DlqReason } from './contract.js';
import type { AbortReason } from './executor.js';
import type { RegisteredHandler } from './registry.js';
import { backoffDelayMs } from './backoff.js';
import { FatalError, RetryAfterError } from './handlerErrors.js';

// A job's attempt limit: its own, else its handler's, else its queue's. The processor, zombie rescue (in SQL, with
// HandlerRegistry.maxAttemptsByType()) and the handler test kit all apply this rule.
export function effectiveMaxAttempts(
  jobMaxAttempts: number | null | undefined,
  options: Pick<RegisteredHandler['options'], 'maxAttempts'>,
  queueMaxAttempts: number,
): number {
  return jobMaxAttempts ?? options.maxAttempts ?? queueMaxAttempts;
}

export type FailureDecision =
  | { kind: 'lease_lost' }
  | { kind: 'dead_letter'; reason: DlqReason; message: string }
  | { kind: 'retry'; delayMs: number; message: string }
  // Not a failure: the worker is stopping. The job goes back due now and the attempt does not count (store.interrupt).
  | { kind: 'interrupt'; message: string };

// `random` feeds the backoff jitter.
export function decideAfterFailure(f: {
  attempt: number;
  maxAttempts: number;
  options: Pick<RegisteredHandler['options'], 'backoff' | 'retryOnTimeout' | 'timeoutMs'>;
  abortReason: AbortReason | undefined;
  error: unknown;
  random?: () => number;
}): FailureDecision {
  const { attempt, maxAttempts, options } = f;
  const message = f.error instanceof Error ? `${f.error.name}: ${f.error.message}` : String(f.error);
  const attemptsLeft = attempt < maxAttempts;
  switch (f.abortReason) {
    case 'lease_lost':
    case 'lease_expired': // no longer ours once the rescue sees it; it retries or dead-letters the job
      return { kind: 'lease_lost' };
    case 'cancelled':
      return { kind: 'dead_letter', reason: 'cancelled', message: 'cancelled while running' };
    case 'shutdown':
      return { kind: 'interrupt', message: 'interrupted by worker shutdown' };
    case 'timeout':
      if (options.retryOnTimeout && attemptsLeft) {
        return {
          kind: 'retry',
          delayMs: backoffDelayMs(attempt, options.backoff, f.random),
          message: `timed out after ${options.timeoutMs} ms`,
        };
      }
      return { kind: 'dead_letter', reason: 'timeout', message: `timed out after ${options.timeoutMs} ms` };
    default:
      break;
  }
  if (f.error instanceof FatalError) return { kind: 'dead_letter', reason: 'fatal', message };
  if (!attemptsLeft)
    return {
      kind: 'dead_letter',
      reason: 'exhausted',
      message: `attempt ${attempt} of ${maxAttempts} failed: ${message}`,
    };
  const delayMs =
    f.error instanceof RetryAfterError
      ? Math.max(0, f.error.retryAfterMs)
      : backoffDelayMs(attempt, options.backoff, f.random);
  return { kind: 'retry', delayMs, message };
}

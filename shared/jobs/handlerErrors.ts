// The errors a handler throws to steer what happens to its job (shared/jobs/failure.ts decides on them): dead-letter
// at once, or retry after a delay the handler names. Any other error is retried with the handler's backoff.

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

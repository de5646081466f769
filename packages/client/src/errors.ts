// What the client throws besides ValidationError (rules.ts: refused before anything was sent, naming the field).

// The ops API answered with an error: its stable code (invalid_request, forbidden, conflict, ...), the field at
// fault when it names one ("jobs[3].payload.amount"), and the whole JSON body (requiredRole, idempotencyKey, ...).
export class KeelApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | undefined,
    readonly body: Record<string, unknown> | null,
  ) {
    // The API's validation messages already start with the field ("payload.amount: ..."), as ValidationError's do.
    super(field && !message.startsWith(`${field}: `) ? `${field}: ${message}` : message);
    this.name = 'KeelApiError';
  }
}

// An idempotency key is held by a hot job of the same queue and type with another payload: nothing of the batch
// was enqueued. index is the job's place in the call (0 for a single job). From the HTTP API (a 409) or from
// keel.enqueue_many (SQLSTATE 23505 on jobs_hot_idempotency_scope).
export class IdempotencyConflictError extends Error {
  constructor(
    readonly index: number,
    readonly queue: string,
    readonly type: string,
    readonly idempotencyKey: string,
    readonly field: string,
  ) {
    super(
      `${field}: idempotency key "${idempotencyKey}" is already held by a hot job of queue "${queue}" and type "${type}" with another payload`,
    );
    this.name = 'IdempotencyConflictError';
  }
}

// The call did not get an answer after every retry (network errors, timeouts, 429/5xx): `cause` is the last error.
// The jobs may or may not be enqueued; calling again with the same idempotency keys is safe.
export class KeelUnavailableError extends Error {
  constructor(
    message: string,
    readonly attempts: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'KeelUnavailableError';
  }
}

// Typed transfer errors. Every decision in the service is taken on `code` (or on a driver's structured
// SQLSTATE / error number), never on message text.

export type TransferErrorCode =
  | 'config_invalid'
  | 'unknown_transfer'
  | 'unknown_batch'
  | 'nothing_to_transfer'
  | 'open_batch_exists'
  | 'window_taken'
  | 'duplicate_batch_id'
  | 'schema_drift'
  | 'staging_conflict'
  | 'duplicate_keys'
  | 'manifest_mismatch'
  | 'not_staged'
  | 'invalid_state'
  | 'target_incompatible'
  | 'unsupported_type'
  | 'attempt_fenced' // the target refused an apply attempt that reconcile had ruled out (nothing applied)
  | 'stream_stalled' // no staging data moved for KEEL_TRANSFER_STALL_TIMEOUT_MS (retryable)
  | 'invalid_range' // a replay range that is not made of committed windows (detail.field names low or high)
  | 'transfer_paused' // an operator paused the transfer: no new batch until it is resumed
  | 'target_busy' // a bounded lock wait on the target ran out; nothing was changed there (retryable)
  | 'changes_expired' // a change window starts before the source's min valid version: re-baseline the transfer
  | 'changes_not_enabled' // a changes transfer's source table has no change tracking / change capture
  | 'apply_timeout' // the apply ran out of Keel's statement timeout KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT times in a row
  | 'stage_timeout'; // the stage did (the same limit)

// Codes that mean "this batch can never succeed as extracted": the batch is marked failed and its window
// released so that a fresh batch (with a fresh manifest) can cover it.
export const TERMINAL_CODES: ReadonlySet<TransferErrorCode> = new Set<TransferErrorCode>([
  'schema_drift',
  'staging_conflict',
  'duplicate_keys',
  'manifest_mismatch',
  'target_incompatible',
  'unsupported_type',
  'changes_expired',
  'changes_not_enabled',
  'apply_timeout',
  'stage_timeout',
]);

// A PostgreSQL source's or target's server ended a statement (57014 query_canceled): its statement timeout (Keel's
// own KEEL_TRANSFER_STATEMENT_TIMEOUT_MS, which its sessions set at connect and so outrank a role's or database's
// default) or a cancel from outside (pg_cancel_backend), which shares the code. TransferService.ranOutOfTime tells
// them apart by the time the step took; only Keel's timeouts count toward KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT.
export function isStatementTimeout(err: unknown): boolean {
  return err instanceof Error && (err as Error & { code?: unknown }).code === '57014';
}

export class TransferError extends Error {
  readonly code: TransferErrorCode;
  readonly detail: Record<string, unknown> | undefined;
  constructor(code: TransferErrorCode, message: string, detail?: Record<string, unknown>) {
    super(message);
    this.name = 'TransferError';
    this.code = code;
    this.detail = detail;
  }
}

export function isTransferError(err: unknown, code?: TransferErrorCode): err is TransferError {
  return err instanceof TransferError && (code === undefined || err.code === code);
}

// For the journal's last_error: the message is recorded for humans; nothing reads it back to decide.
export function describeError(err: unknown): { code: string; message: string } {
  if (err instanceof TransferError) return { code: err.code, message: err.message };
  if (err instanceof Error) {
    const e = err as Error & { code?: unknown; number?: unknown; errorNum?: unknown };
    const code =
      typeof e.code === 'string'
        ? e.code
        : typeof e.number === 'number'
          ? `E${e.number}`
          : typeof e.errorNum === 'number'
            ? `ORA-${e.errorNum}`
            : 'error';
    return { code, message: err.message.slice(0, 2000) };
  }
  return { code: 'error', message: String(err).slice(0, 2000) };
}

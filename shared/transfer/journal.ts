// The batch journal lives in the control database beside the jobs (PostgreSQL or SQL Server). One interface, one
// implementation over the journal procedures (procedureJournal.ts, calling through JOURNAL_PROCEDURES), and per
// engine only its dialect: shared/engines/postgres/transferJournal.ts and shared/engines/sqlserver/transferJournal.ts.
import type { BatchState, BoundaryKind, SchemaColumn } from './types.js';

export interface BatchRecord {
  batchId: string;
  transferName: string;
  state: BatchState;
  attempts: number;
  boundaryKind: BoundaryKind;
  boundaryLow: string | null;
  boundaryHigh: string;
  schemaHash: string;
  schemaColumns: SchemaColumn[];
  rowCount: number | null;
  checksum: string | null;
  stagedCount: number | null;
  stagedChecksum: string | null;
  appliedCount: number | null;
  lastError: string | null;
  lastErrorCode: string | null;
  targetReconcileToken: string | null;
  createdAt: Date;
  updatedAt: Date;
  extractedAt: Date | null;
  stagedAt: Date | null;
  applyStartedAt: Date | null;
  committedAt: Date | null;
  failedAt: Date | null;
  // Raised by every change of the row (each transition, each note that writes a column): a note can be fenced on
  // the version its writer read (note's ifVersion).
  version: number;
  // The journal's insert order (V033 on PostgreSQL, V020's identity on SQL Server): the order batches were created
  // in, whatever the clocks of the hosts and the database said.
  seq: number;
}

export interface BatchEvent {
  eventId: number;
  batchId: string;
  at: Date;
  fromState: BatchState | null;
  toState: BatchState | null;
  event: string;
  detail: Record<string, unknown> | null;
}

export interface NewBatch {
  batchId: string;
  transferName: string;
  boundaryKind: BoundaryKind;
  boundaryLow: string | null;
  boundaryHigh: string;
  schemaHash: string;
  schemaColumns: SchemaColumn[];
}

// Fields a transition may set. `undefined` leaves a column as it is; `null` clears it. lastError keeps at most
// JOURNAL_TEXT_MAX.last_error (2,000) characters on every engine (journalProcedures.ts).
export interface BatchPatch {
  rowCount?: number | null;
  checksum?: string | null;
  stagedCount?: number | null;
  stagedChecksum?: string | null;
  appliedCount?: number | null;
  lastError?: string | null;
  lastErrorCode?: string | null;
  targetReconcileToken?: string | null;
  incrementAttempts?: boolean;
  stamp?: 'extracted_at' | 'staged_at' | 'apply_started_at' | 'committed_at' | 'failed_at';
}

// An operator's control of one transfer (docs/transfer.md, "Pause and resume").
export interface TransferControl {
  transferName: string;
  paused: boolean;
  reason: string | null;
  changedBy: string | null;
  changedAt: Date;
}

export interface BatchFilter {
  transfer?: string;
  state?: BatchState;
  limit: number;
  afterId?: string; // keyset pagination: batches created before this one
}

export interface TransferJournal {
  // Inserts a batch in state 'extracting'. Refused with TransferError 'transfer_paused' when the transfer (a replay
  // chain: the transfer it replays) is paused, 'open_batch_exists' when the transfer has a batch that is not
  // committed or failed (a replay: when a replay of the same range is open; timestamp and rowversion windows also when
  // a replay of the transfer is open, or, for a replay, the transfer's own batch), 'window_taken' when a non-failed batch
  // covers the window, and 'duplicate_batch_id' when a batch with this id exists (the insert procedure decides under
  // the transfer's lock, and says which from committed rows).
  insertBatch(b: NewBatch): Promise<BatchRecord>;
  // The open batch (not committed/failed) and the latest committed batch of a transfer.
  lastForTransfer(transferName: string): Promise<{ open: BatchRecord | null; lastCommitted: BatchRecord | null }>;
  get(batchId: string): Promise<BatchRecord | null>;
  list(filter: BatchFilter): Promise<BatchRecord[]>;
  events(batchId: string): Promise<BatchEvent[]>;
  // Moves the batch to `to` if its state is one of `from` (compare-and-set), applies the patch and records an
  // event, in one transaction. Returns null when the state did not match (someone else moved it). ifVersion: also
  // only while the batch's version is still the one the caller read (null when not; the event is then recorded on the
  // batch as it is, marked stale).
  transition(
    batchId: string,
    from: readonly BatchState[],
    to: BatchState,
    patch: BatchPatch,
    event: string,
    detail?: Record<string, unknown>,
    ifVersion?: number,
  ): Promise<BatchRecord | null>;
  // Records an event (and optionally last_error) without changing the state. ifVersion: the patch is written only
  // while the batch's version is still the one the caller read (a stale writer never replaces a newer record; the
  // event is recorded either way, marked stale). false: no such batch, or the fence kept the row as it was.
  note(
    batchId: string,
    event: string,
    detail?: Record<string, unknown>,
    patch?: Pick<BatchPatch, 'lastError' | 'lastErrorCode' | 'targetReconcileToken'>,
    ifVersion?: number,
  ): Promise<boolean>;
  // Batches in the given states not updated for olderThanMs, oldest first.
  stale(states: readonly BatchState[], olderThanMs: number, limit: number): Promise<BatchRecord[]>;
  // Pauses or resumes a transfer (persisted; the last call wins) and returns its control.
  setPaused(
    transferName: string,
    paused: boolean,
    reason: string | null,
    changedBy: string | null,
  ): Promise<TransferControl>;
  // The controls of every transfer an operator ever paused or resumed (no entry = running).
  controls(): Promise<TransferControl[]>;
  // The journal server's clock, the clock of every stamp it writes (a host's may be off it by hours): the ages the
  // transfer timer decides on and reports are measured against it.
  now(): Promise<Date>;
  close(): Promise<void>;
}

// The journal procedures' result rows as records, for every engine. An engine hands its rows over keyed by the
// journal's snake_case column names (the keel.transfer_batches columns; SQL Server renames its PascalCase ones), and
// the values whose wire form differs are read here once: ids in any letter case (SQL Server answers uniqueidentifier
// upper-case), JSON as parsed or as text (jsonb or nvarchar(max)), counts as numbers or digit strings (pg returns
// bigint as text), bits as booleans or 1.
import type { BatchEvent, BatchRecord, TransferControl } from './journal.js';
import type { BatchState, BoundaryKind, SchemaColumn } from './types.js';

export type JournalRow = Record<string, unknown>;

const absent = (v: unknown): v is null | undefined => v === null || v === undefined;
const id = (v: unknown): string => String(v).toLowerCase();
const text = (v: unknown): string | null => (absent(v) ? null : String(v));
const count = (v: unknown): number | null => (absent(v) ? null : Number(v));
const when = (v: unknown): Date | null => (absent(v) ? null : (v as Date));
const json = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : (v ?? null));
const state = (v: unknown): BatchState | null => (absent(v) ? null : (v as BatchState));

export function toBatchRecord(r: JournalRow): BatchRecord {
  return {
    batchId: id(r.batch_id),
    transferName: String(r.transfer_name),
    state: r.state as BatchState,
    attempts: Number(r.attempts),
    boundaryKind: r.boundary_kind as BoundaryKind,
    boundaryLow: text(r.boundary_low),
    boundaryHigh: String(r.boundary_high),
    schemaHash: String(r.schema_hash).trim(), // SQL Server: char(64)
    schemaColumns: json(r.schema_columns) as SchemaColumn[],
    rowCount: count(r.row_count),
    checksum: text(r.checksum),
    stagedCount: count(r.staged_count),
    stagedChecksum: text(r.staged_checksum),
    appliedCount: count(r.applied_count),
    lastError: text(r.last_error),
    lastErrorCode: text(r.last_error_code),
    targetReconcileToken: text(r.target_reconcile_token),
    createdAt: r.created_at as Date,
    updatedAt: r.updated_at as Date,
    extractedAt: when(r.extracted_at),
    stagedAt: when(r.staged_at),
    applyStartedAt: when(r.apply_started_at),
    committedAt: when(r.committed_at),
    failedAt: when(r.failed_at),
    version: Number(r.version ?? 0),
    seq: Number(r.seq),
  };
}

export function toBatchEvent(r: JournalRow): BatchEvent {
  return {
    eventId: Number(r.event_id),
    batchId: id(r.batch_id),
    at: r.at as Date,
    fromState: state(r.from_state),
    toState: state(r.to_state),
    event: String(r.event),
    detail: json(r.detail) as Record<string, unknown> | null,
  };
}

export function toTransferControl(r: JournalRow): TransferControl {
  return {
    transferName: String(r.transfer_name),
    paused: r.paused === true || r.paused === 1,
    reason: text(r.reason),
    changedBy: text(r.changed_by),
    changedAt: r.changed_at as Date,
  };
}

// The first result row of the insert procedure.
export function toInsertOutcome(r: JournalRow) {
  return {
    outcome: String(r.outcome),
    conflictId: absent(r.conflict_batch_id) ? null : id(r.conflict_batch_id),
    conflictState: text(r.conflict_state),
  };
}

// The journal procedures' result rows as records, for every engine: the rows have the same columns on each (the
// keel.transfer_batches columns, SQL Server's in PascalCase), and the values whose wire form differs are read
// here once: ids in any letter case (SQL Server answers uniqueidentifier upper-case), JSON as parsed or as text
// (jsonb or nvarchar(max)), counts as numbers or digit strings (pg returns bigint as text), bits as booleans or 1.
import type { BatchEvent, BatchRecord, TransferControl } from './journal.js';
import type { BatchState, BoundaryKind, SchemaColumn } from './types.js';

export type JournalRow = Record<string, unknown>;

// A journal column's name in the engine's result rows, from its snake_case name (PostgreSQL: itself).
export type ColumnName = (snake: string) => string;

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const id = (v: unknown): string => String(v).toLowerCase();
const date = (v: unknown): Date | null => (v === null || v === undefined ? null : (v as Date));
const parsed = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : (v ?? null));

// Reads columns of one row by their snake_case names.
function reader(r: JournalRow, col: ColumnName) {
  return (snake: string): unknown => r[col(snake)];
}

export function toBatchRecord(r: JournalRow, col: ColumnName): BatchRecord {
  const v = reader(r, col);
  return {
    batchId: id(v('batch_id')),
    transferName: String(v('transfer_name')),
    state: v('state') as BatchState,
    attempts: Number(v('attempts')),
    boundaryKind: v('boundary_kind') as BoundaryKind,
    boundaryLow: text(v('boundary_low')),
    boundaryHigh: String(v('boundary_high')),
    schemaHash: String(v('schema_hash')).trim(), // SQL Server: char(64)
    schemaColumns: parsed(v('schema_columns')) as SchemaColumn[],
    rowCount: num(v('row_count')),
    checksum: text(v('checksum')),
    stagedCount: num(v('staged_count')),
    stagedChecksum: text(v('staged_checksum')),
    appliedCount: num(v('applied_count')),
    lastError: text(v('last_error')),
    lastErrorCode: text(v('last_error_code')),
    targetReconcileToken: text(v('target_reconcile_token')),
    createdAt: v('created_at') as Date,
    updatedAt: v('updated_at') as Date,
    extractedAt: date(v('extracted_at')),
    stagedAt: date(v('staged_at')),
    applyStartedAt: date(v('apply_started_at')),
    committedAt: date(v('committed_at')),
    failedAt: date(v('failed_at')),
  };
}

export function toBatchEvent(r: JournalRow, col: ColumnName): BatchEvent {
  const v = reader(r, col);
  return {
    eventId: Number(v('event_id')),
    batchId: id(v('batch_id')),
    at: v('at') as Date,
    fromState: text(v('from_state')) as BatchState | null,
    toState: text(v('to_state')) as BatchState | null,
    event: String(v('event')),
    detail: parsed(v('detail')) as Record<string, unknown> | null,
  };
}

export function toTransferControl(r: JournalRow, col: ColumnName): TransferControl {
  const v = reader(r, col);
  return {
    transferName: String(v('transfer_name')),
    paused: v('paused') === true || v('paused') === 1,
    reason: text(v('reason')),
    changedBy: text(v('changed_by')),
    changedAt: v('changed_at') as Date,
  };
}

// The first result row of keel.transfer_batch_insert: outcome, conflict_batch_id, conflict_state.
export function toInsertOutcome(
  r: JournalRow,
  col: ColumnName,
): { outcome: string; conflictId: string | null; conflictState: string | null } {
  const v = reader(r, col);
  const conflict = v('conflict_batch_id');
  return {
    outcome: String(v('outcome')),
    conflictId: conflict === null || conflict === undefined ? null : id(conflict),
    conflictState: text(v('conflict_state')),
  };
}

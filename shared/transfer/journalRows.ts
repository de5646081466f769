// The journal procedures' result rows as records, for every engine: the rows have the same columns on each (the
// keel.transfer_batches columns, SQL Server's in PascalCase), and the values whose wire form differs are read
// here once: ids in any letter case (SQL Server answers uniqueidentifier upper-case), JSON as parsed or as text
// (jsonb or nvarchar(max)), counts as numbers or digit strings (pg returns bigint as text), bits as booleans or 1.
import type { BatchEvent, BatchRecord, TransferControl } from './journal.js';
import type { BatchState, BoundaryKind, SchemaColumn } from './types.js';

export type JournalRow = Record<string, unknown>;

// A journal column's name in the engine's result rows, from its snake_case name (PostgreSQL: itself).
export type ColumnName = (snake: string) => string;

const absent = (v: unknown): v is null | undefined => v === null || v === undefined;
const id = (v: unknown): string => String(v).toLowerCase();
const str = (v: unknown): string => String(v);
const text = (v: unknown): string | null => (absent(v) ? null : String(v));
const num = (v: unknown): number => Number(v);
const count = (v: unknown): number | null => (absent(v) ? null : Number(v));
const at = (v: unknown): Date => v as Date;
const when = (v: unknown): Date | null => (absent(v) ? null : (v as Date));
const json = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : (v ?? null));
const state = (v: unknown): BatchState => v as BatchState;
const stateOrNull = (v: unknown): BatchState | null => (absent(v) ? null : (v as BatchState));

// Per field of a record: the column it is read from and how its value is read.
type Columns<T> = { [K in keyof T]-?: readonly [column: string, read: (v: unknown) => T[K]] };

const BATCH: Columns<BatchRecord> = {
  batchId: ['batch_id', id],
  transferName: ['transfer_name', str],
  state: ['state', state],
  attempts: ['attempts', num],
  boundaryKind: ['boundary_kind', (v) => v as BoundaryKind],
  boundaryLow: ['boundary_low', text],
  boundaryHigh: ['boundary_high', str],
  schemaHash: ['schema_hash', (v) => String(v).trim()], // SQL Server: char(64)
  schemaColumns: ['schema_columns', (v) => json(v) as SchemaColumn[]],
  rowCount: ['row_count', count],
  checksum: ['checksum', text],
  stagedCount: ['staged_count', count],
  stagedChecksum: ['staged_checksum', text],
  appliedCount: ['applied_count', count],
  lastError: ['last_error', text],
  lastErrorCode: ['last_error_code', text],
  targetReconcileToken: ['target_reconcile_token', text],
  createdAt: ['created_at', at],
  updatedAt: ['updated_at', at],
  extractedAt: ['extracted_at', when],
  stagedAt: ['staged_at', when],
  applyStartedAt: ['apply_started_at', when],
  committedAt: ['committed_at', when],
  failedAt: ['failed_at', when],
};

const EVENT: Columns<BatchEvent> = {
  eventId: ['event_id', num],
  batchId: ['batch_id', id],
  at: ['at', at],
  fromState: ['from_state', stateOrNull],
  toState: ['to_state', stateOrNull],
  event: ['event', str],
  detail: ['detail', (v) => json(v) as Record<string, unknown> | null],
};

const CONTROL: Columns<TransferControl> = {
  transferName: ['transfer_name', str],
  paused: ['paused', (v) => v === true || v === 1],
  reason: ['reason', text],
  changedBy: ['changed_by', text],
  changedAt: ['changed_at', at],
};

// The first result row of the insert procedure.
export interface InsertOutcome {
  outcome: string;
  conflictId: string | null;
  conflictState: string | null;
}
const OUTCOME: Columns<InsertOutcome> = {
  outcome: ['outcome', str],
  conflictId: ['conflict_batch_id', (v) => (absent(v) ? null : id(v))],
  conflictState: ['conflict_state', text],
};

function read<T>(columns: Columns<T>, r: JournalRow, col: ColumnName): T {
  const out: Partial<T> = {};
  for (const key of Object.keys(columns) as (keyof T)[]) {
    const [column, value] = columns[key];
    out[key] = value(r[col(column)]);
  }
  return out as T;
}

export const toBatchRecord = (r: JournalRow, col: ColumnName): BatchRecord => read(BATCH, r, col);
export const toBatchEvent = (r: JournalRow, col: ColumnName): BatchEvent => read(EVENT, r, col);
export const toTransferControl = (r: JournalRow, col: ColumnName): TransferControl => read(CONTROL, r, col);
export const toInsertOutcome = (r: JournalRow, col: ColumnName): InsertOutcome => read(OUTCOME, r, col);

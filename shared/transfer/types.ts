// The contracts between the transfer service and the engines.
import type { Readable } from 'node:stream';
import type { CanonicalRow, ChecksumAlgorithm, LogicalType } from './checksum.js';

export const BATCH_STATES = ['extracting', 'staged', 'applying', 'committed', 'failed', 'unresolved'] as const;
export type BatchState = (typeof BATCH_STATES)[number];
export type BatchStatus = 'incomplete' | 'committed' | 'unresolved';

export type BoundaryKind = 'key' | 'timestamp' | 'rowversion';

// A window is (low, high]: low exclusive (null = from the beginning), high inclusive. Values are text:
// integers (key, rowversion as an unsigned 64-bit number) in decimal, timestamps in ISO 8601.
export interface Window {
  kind: BoundaryKind;
  low: string | null;
  high: string;
}

export interface SchemaColumn {
  name: string;
  type: string; // the engine's type as declared, e.g. "numeric(12,2)", "nvarchar(40)"
  logical: LogicalType;
}

export interface SourceSchema {
  columns: SchemaColumn[]; // the columns the transfer reads: mapped, then boundary if not mapped
  hash: string; // sha256 of the canonical JSON of columns
}

export interface Manifest {
  rowCount: number;
  checksum: string;
}

export interface SourceAdapter {
  readonly engine: 'postgres' | 'sqlserver';
  readSchema(): Promise<SourceSchema>;
  // The next window after `low` holding at most about maxRows rows; null when there is nothing new.
  nextWindow(low: string | null, maxRows: number): Promise<Window | null>;
  // algorithm: see shared/transfer/checksum.ts ('keel-v1' everywhere; 'keel-pg1'/'keel-pg2' only PostgreSQL -> PostgreSQL).
  manifest(w: Window, schema: SourceSchema, algorithm: ChecksumAlgorithm): Promise<Manifest>;
  // PostgreSQL only: server_version_num (picks keel-pg2 when both sides are 14 or later).
  serverVersionNum?(): Promise<number>;
  // Rows of the window as canonical text in mapping order, in chunks of at most chunkSize, with backpressure.
  streamRows(w: Window, schema: SourceSchema, chunkSize: number): AsyncIterable<CanonicalRow[]>;
  // PostgreSQL only: COPY text of the mapped columns (fast path into a PostgreSQL target).
  copyOut?(w: Window, schema: SourceSchema, format: 'text' | 'binary'): Promise<CopyOutStream>;
  close(): Promise<void>;
}

export interface StageRequest {
  batchId: string;
  transfer: string;
  manifest: Manifest;
  schema: SourceSchema;
}

export interface CopyOutStream {
  stream: Readable;
  release: (err?: Error) => Promise<void>;
  // true only when the rows come from a source table that, in the very snapshot the COPY reads, has a valid unique
  // index on exactly the key columns, all NOT NULL: the stream then cannot hold a key twice.
  keysUnique?: boolean;
}

export type RowFeed =
  | { kind: 'rows'; rows: AsyncIterable<CanonicalRow[]> }
  | { kind: 'pgcopy'; open: (format: 'text' | 'binary') => Promise<CopyOutStream> };

export interface StageResult {
  outcome: 'staged' | 'already_staged';
  rowCount: number;
  checksum: string;
}

export interface ApplyResult {
  outcome: 'applied' | 'already_committed';
  rowCount: number; // rows merged (from the completion row)
  checksum: string;
}

export type ReconcileOutcome =
  | { outcome: 'committed'; rowCount: number; checksum: string; via: 'completion_row' | 'transaction_guard' }
  | { outcome: 'not_applied'; staged: boolean; via: 'claim_obtained' | 'transaction_guard' }
  | { outcome: 'blocked'; reason: string };

export interface ApplyContext {
  // The journal's attempt number of this apply (>= 1, incremented durably before the call). The target refuses an
  // attempt that reconcile has fenced (ruled out), so a "not applied" verdict stays true (docs/transfer.md).
  attempt: number;
  // Called with the Oracle logical transaction id just before the apply call, so the journal can keep it.
  onLtxid?: (ltxidHex: string) => Promise<void>;
}

// The fence that rules out every attempt, for good: abandon writes it before it releases a batch's window.
export const FINAL_FENCE = 2147483647;

export interface TargetAdapter {
  readonly engine: 'postgres' | 'oracle';
  // Checks the target table and mapped columns against the source schema, creates the staging table if needed.
  prepare(schema: SourceSchema): Promise<void>;
  stage(req: StageRequest, feed: RowFeed): Promise<StageResult>;
  // Fails with TransferError 'attempt_fenced' when reconcile ruled this attempt out (nothing applied).
  apply(req: StageRequest, ctx: ApplyContext): Promise<ApplyResult>;
  // Reads the durable outcome. ltxid: Oracle Transaction Guard id recorded before the apply (hex), if any.
  // fenceThrough: the highest attempt the journal has started (0: none). A 'not_applied' verdict is final for every
  // attempt <= fenceThrough: the target commits a fence with it, and a late apply of such an attempt fails.
  reconcile(req: StageRequest, waitMs: number, ltxid: string | null, fenceThrough: number): Promise<ReconcileOutcome>;
  purgeStaged(batchId: string): Promise<void>;
  readonly acceptsPgCopy: boolean;
  // PostgreSQL only: server_version_num (picks keel-pg2 when both sides are 14 or later).
  serverVersionNum?(): Promise<number>;
  close(): Promise<void>;
}

export interface Adapters {
  // (source and target of one transfer)
  source: SourceAdapter;
  target: TargetAdapter;
}

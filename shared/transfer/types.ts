// The contracts between the transfer service and the engines.
import type { Readable } from 'node:stream';
import type { CanonicalRow, ChecksumAlgorithm, LogicalType } from './checksum.js';

export const BATCH_STATES = ['extracting', 'staged', 'applying', 'committed', 'failed', 'unresolved'] as const;
export type BatchState = (typeof BATCH_STATES)[number];
export type BatchStatus = 'incomplete' | 'committed' | 'unresolved';

export type BoundaryKind = 'key' | 'timestamp' | 'rowversion' | 'changes';

// A window is (low, high]: low exclusive (null = from the beginning), high inclusive. Values are text:
// integers in decimal (key; rowversion as SQL Server's CONVERT(bigint, rv), a signed 64-bit number, which orders
// rowversions correctly until a database has used 2^63 of them), timestamps in ISO 8601.
// 'changes' windows are version windows of the source's change tracking (shared/transfer/changes.ts): the rows whose
// latest change has a version in (low, high], each with its operation; low null (or a re-baseline mark) = a baseline.
export interface Window {
  kind: BoundaryKind;
  low: string | null;
  high: string;
}

export interface SchemaColumn {
  name: string;
  type: string; // the engine's type as declared, e.g. "numeric(12,2)", "nvarchar(40)"
  logical: LogicalType;
  // What the source declares beyond the type name, for prepare's checks against the target column (absent: not
  // known, not checked). Not part of the schema hash.
  nullable?: boolean;
  facets?: TypeFacets;
  // The column's part in the transfer when the schema was read (buildSourceSchema), kept in the batch's recorded
  // schema: a key column, the boundary column. Not part of the schema hash. A batch's record so says which key
  // columns its stage checked and which column its window's bounds are values of (absent on batches journalled
  // before they were recorded: not known).
  key?: true;
  boundary?: true;
}

// The bounds of a declared source type (null: unbounded), as the source engine reports them.
export interface TypeFacets {
  maxChars?: number | null; // text: characters at most
  maxBytes?: number | null; // text: UTF-8 bytes at most; bytes: bytes at most
  fixed?: boolean; // text: fixed width, blank-padded to maxChars (char(n))
  intBits?: number; // int: two's complement bits (tinyint: 8, unsigned, 0..255)
  precision?: number | null; // decimal: digits in all
  scale?: number | null; // decimal: digits after the point
  fraction?: number; // timestamp, timestamptz: fraction-of-second digits (canonical text keeps at most 6)
}

export interface SourceSchema {
  columns: SchemaColumn[]; // the columns the transfer reads: mapped, then boundary if not mapped
  hash: string; // sha256 of the canonical JSON of columns
}

export interface Manifest {
  rowCount: number;
  checksum: string;
}

// What the service negotiates between a source and a target without knowing their engines (docs/architecture.md):
// - checksum algorithms: each side lists what it can compute (its preference first; 'keel-v1' always); the service
//   takes the source's first choice that the target also lists;
// - a bulk stream format: a source with `bulkFormat` and `bulkOut` hands its native stream to a target whose
//   `bulkFormat` is the same string (e.g. 'postgres-copy'); otherwise rows travel as canonical text.
export interface SourceAdapter {
  readonly engine: string; // the registry's name, for messages
  readSchema(): Promise<SourceSchema>;
  // The next window after `low` holding at most about maxRows rows; null when there is nothing new.
  // baselineWindows ('changes' windows): the target mirrors key ranges, so a baseline may be a chain of key windows
  // (shared/transfer/changes.ts); a source that cannot (or without the option) makes the baseline one window.
  // opts.schema: the source schema the caller has just read (readSchema), so that the window is chosen without reading it again.
  nextWindow(
    low: string | null,
    maxRows: number,
    opts?: { baselineWindows?: boolean; schema?: SourceSchema },
  ): Promise<Window | null>;
  // A 'changes' source that runs a baseline in key windows when asked (baselineWindows) and its first key column is an
  // integer (for the re-baseline's preview).
  readonly windowsBaselines?: boolean;
  // Rows the next windows after `low` would hold now (the same conditions as nextWindow), counted up to cap and no
  // further: a bounded walk of the boundary column's index, for the rows-behind gauge. Optional: a source without
  // it reports no rows-behind figure.
  rowsAfter?(low: string | null, cap: number): Promise<number>;
  // algorithm: one of checksumAlgorithms() (shared/transfer/checksum.ts). opts.ahead: the next window's manifest,
  // read while another batch's rows move (docs/transfer.md, "The next window's manifest, ahead"): a source may read
  // it with less of the server (PostgreSQL: one process, no parallel workers), leaving the moving rows their CPU.
  manifest(
    w: Window,
    schema: SourceSchema,
    algorithm: ChecksumAlgorithm,
    opts?: { ahead?: boolean },
  ): Promise<Manifest>;
  // The checksum algorithms this source can compute for a manifest, preferred first ('keel-v1' always among them).
  checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]>;
  // Rows of the window as canonical text in mapping order, in chunks of at most chunkSize, with backpressure. A chunk
  // may carry its rows' COPY text (checksum.ts, COPY_TEXT): whoever changes rows yields new arrays, never edits one.
  // facts: what the source proved about the rows it read, filled in before the stream ends (optional).
  streamRows(w: Window, schema: SourceSchema, chunkSize: number, facts?: StreamFacts): AsyncIterable<CanonicalRow[]>;
  // true when streamRows(w) reads the window in one consistent snapshot (each row of the window as of one moment,
  // exactly once). The service may then compute the manifest from the very rows it stages (one source read,
  // docs/transfer.md "One source read") instead of reading the window once more before. Absent: false.
  readsSnapshot?(w: Window): Promise<boolean>;
  // The source's native bulk stream of the mapped columns, for a target that reads the same bulkFormat.
  readonly bulkFormat?: string;
  // framed: the caller writes the chunks to a COPY FROM of the same engine as whole wire messages
  // (shared/engines/postgres/copyStreams.ts); the stream says whether it gave them so (BulkStream.framed).
  bulkOut?(w: Window, schema: SourceSchema, encoding: BulkEncoding, framed?: boolean): Promise<BulkStream>;
  // Key-set comparison (keyCompare, docs/transfer.md "Deletes"): the keys of a key window's rows now, as canonical
  // text in keyColumns order.
  windowKeys?(w: Window, schema: SourceSchema): Promise<KeyTuple[]>;
  close(): Promise<void>;
}

export type KeyTuple = (string | null)[];

export interface StageRequest {
  batchId: string;
  transfer: string;
  manifest: Manifest;
  schema: SourceSchema;
  // How the batch carries deletes (shared/transfer/changes.ts). Absent: it carries none, every row is an upsert.
  // 'ops': every row ends with an operation field (OP_COLUMN: 'U' upsert, 'D' delete by key, other columns NULL);
  // 'mirror': 'ops', and every target row whose key is not in the batch is deleted (a baseline: the whole table,
  // or with mirrorRange only the rows whose keyColumns[0] is in (low, high], a null bound open on that side).
  changes?: ChangeMode;
  mirrorRange?: { low: string | null; high: string | null };
}

export type ChangeMode = 'ops' | 'mirror';

export type BulkEncoding = 'text' | 'binary';

export interface BulkStream {
  stream: Readable;
  release: (err?: Error) => Promise<void>;
  // true only when the rows come from a source table that, in the very snapshot the COPY reads, has a valid unique
  // index on exactly the key columns, all NOT NULL: the stream then cannot hold a key twice.
  keysUnique?: boolean;
  // true: each chunk is whole CopyData messages, headers included (asked for with `framed`), to be written as they
  // are; otherwise the chunks are the COPY's own bytes. Carried with the stream, so a wrapper that passes the chunks
  // on unchanged keeps it right, and one that asked for nothing gets plain bytes.
  framed?: boolean;
}

// What a source proved about the rows of one streamRows call, set before its last chunk is delivered.
export interface StreamFacts {
  // Same meaning as BulkStream.keysUnique, proved in the snapshot the rows were read in.
  keysUnique?: boolean;
}

export type RowsFeed = {
  kind: 'rows';
  rows: AsyncIterable<CanonicalRow[]>;
  // What the source proved (StreamFacts), to be read once `rows` ended.
  facts?: StreamFacts;
};

export type RowFeed =
  RowsFeed | { kind: 'bulk'; format: string; open: (encoding: BulkEncoding, framed?: boolean) => Promise<BulkStream> };

export interface StageResult {
  outcome: 'staged' | 'already_staged';
  rowCount: number;
  checksum: string;
}

export interface ApplyResult {
  outcome: 'applied' | 'already_committed';
  rowCount: number; // rows merged (from the completion row); with changes: upserts merged + deletes staged
  checksum: string;
  deleted?: number; // with changes: target rows deleted by this apply (from the completion row)
}

// via: how the target knew ('completion_row', 'claim_obtained', or an engine's own way), for the batch's events.
export type ReconcileOutcome =
  | { outcome: 'committed'; rowCount: number; checksum: string; via: string }
  // final: the completion row holds the final fence (abandon's): no apply of this batch id can ever commit
  | { outcome: 'not_applied'; staged: boolean; via: string; final?: boolean }
  | { outcome: 'blocked'; reason: string };

/**
 * What one reconciliation pass concluded about a batch, as reported (telemetry's keel.transfer.reconcile):
 * committed: the target's completion row says committed (acknowledge).
 * not_applied: reconcile took the claim itself, nothing was applied (the batch may be retried, same id).
 * unresolved: an apply still holds the claim (ReconcileOutcome 'blocked'), or the outcome cannot be read (runbook).
 * failed: reconciliation itself failed (connection, permissions); retried by the next maintenance run.
 */
export const RECONCILE_RESULTS = ['committed', 'not_applied', 'unresolved', 'failed'] as const satisfies readonly (
  Exclude<ReconcileOutcome['outcome'], 'blocked'> | 'unresolved' | 'failed'
)[];
export type ReconcileResult = (typeof RECONCILE_RESULTS)[number];

export interface ApplyContext {
  // The journal's attempt number of this apply (>= 1, incremented durably before the call). The target refuses an
  // attempt that reconcile has fenced (ruled out), so a "not applied" verdict stays true (docs/transfer.md).
  attempt: number;
  // A target may hand the service an opaque reconcile token before the apply call (Oracle with Transaction Guard:
  // the logical transaction id). The service records it in the journal unchanged before it resolves, and passes
  // it back to reconcile.
  onReconcileToken?: (token: string) => Promise<void>;
}

// The fence that rules out every attempt, for good: abandon writes it before it releases a batch's window.
export const FINAL_FENCE = 2147483647;

export interface TargetAdapter {
  readonly engine: string; // the registry's name, for messages
  // Checks the target table and mapped columns against the source schema, creates the staging table if needed.
  prepare(schema: SourceSchema): Promise<void>;
  stage(req: StageRequest, feed: RowFeed): Promise<StageResult>;
  // One source read (docs/transfer.md "One source read"): stage rows whose manifest is not known before they stream.
  // The service computes it from these very rows and records it in the journal when they end; `manifest` resolves
  // to that record after the last row was delivered (rejects if it could not be recorded). The target checks the
  // staged rows against it exactly as stage() does, before its staging commits. Optional: a target without it gets
  // the manifest before the rows (a separate read of the window).
  stageStreamed?(
    req: Omit<StageRequest, 'manifest'>,
    feed: RowsFeed,
    manifest: Promise<Manifest>,
  ): Promise<StageResult>;
  // Fails with TransferError 'attempt_fenced' when reconcile ruled this attempt out (nothing applied).
  apply(req: StageRequest, ctx: ApplyContext): Promise<ApplyResult>;
  // Reads the durable outcome. fenceThrough: the highest attempt the journal has started (0: none). A 'not_applied'
  // verdict is final for every attempt <= fenceThrough: the target commits a fence with it, and a late apply of such
  // an attempt fails. reconcileToken: what this target handed onReconcileToken for the latest attempt, or null.
  reconcile(
    req: StageRequest,
    waitMs: number,
    fenceThrough: number,
    reconcileToken: string | null,
  ): Promise<ReconcileOutcome>;
  purgeStaged(batchId: string): Promise<void>;
  // The ids of this transfer's batches whose staging committed on the target (its staging registry), in id order
  // after `after` (null: from the first), at most maxCount (<= 100): maintenance purges those the journal holds
  // terminal (purgeTerminalStaging), and asks after the last id it read next time.
  stagedBatches?(maxCount: number, after: string | null): Promise<string[]>;
  // Optional direct apply (docs/transfer.md, "Direct apply"): stage and apply in ONE target transaction that claims
  // the batch id (fenced like apply), writes the window's rows into the table, verifies them against the manifest
  // and writes the completion row. 'not_eligible': nothing was written (the claim neither); stage, then apply.
  // canApplyDirect: whether applyDirect can take this batch at all (no side effect; asked before the attempt counts).
  // count: counts the attempt in the journal (start_apply) and answers its number, or null when the batch moved
  // meanwhile; the target may open its transaction beside it but claims nothing before it answered ('not_counted':
  // null was answered, nothing was written).
  canApplyDirect?(req: Omit<StageRequest, 'manifest'>, feed: RowFeed): boolean;
  applyDirect?(
    req: StageRequest,
    w: Window,
    feed: RowFeed,
    count: () => Promise<number | null>,
  ): Promise<ApplyResult | 'not_eligible' | 'not_counted'>;
  // Direct apply with one source read (docs/transfer.md "Direct apply of the row path"): the window is checked
  // empty, the rows are written, and only then does afterRows record the manifest the service computed from them
  // and count the attempt in the journal; the target claims the batch id with that attempt, verifies the rows
  // against that manifest and commits. 'not_eligible': nothing was written (afterRows may have run: reconcile).
  applyDirectStreamed?(
    req: Omit<StageRequest, 'manifest'>,
    w: Window,
    feed: RowsFeed,
    afterRows: () => Promise<{ manifest: Manifest; attempt: number }>,
  ): Promise<ApplyResult | 'not_eligible'>;
  // The apply honours StageRequest.mirrorRange (a baseline may then run in key windows, changes.ts).
  readonly mirrorsKeyRanges?: boolean;
  // Key-set comparison (keyCompare): the target rows' keys in the window (its boundary range), canonical text in
  // keyColumns order; and the deletion of those of `keys` that are in the window, in one target transaction
  // (returns the rows deleted).
  windowKeys?(w: Window, schema: SourceSchema): Promise<KeyTuple[]>;
  deleteKeys?(w: Window, schema: SourceSchema, keys: KeyTuple[]): Promise<number>;
  // The checksum algorithms this target can verify staged rows with, preferred first ('keel-v1' always among them).
  checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]>;
  // The bulk stream format stage() accepts besides canonical rows (a 'bulk' feed of exactly this format), if any.
  readonly bulkFormat?: string;
  close(): Promise<void>;
}

export interface Adapters {
  // (source and target of one transfer)
  source: SourceAdapter;
  target: TargetAdapter;
}

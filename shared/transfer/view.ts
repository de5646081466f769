// What operators see of the transfers (the ops API, the console, the logs): a batch's journal record as a view with
// its status and next action, a transfer's summary and state, and the reports of the operator actions.
import type { TransferConfig } from './config.js';
import type { BatchEvent, BatchRecord } from './journal.js';
import type { BatchState, BatchStatus, SchemaColumn } from './types.js';

// The journal's record as operators see it: counts and checksums as recorded, times as ISO strings.
export interface BatchView extends Pick<
  BatchRecord,
  | 'batchId'
  | 'state'
  | 'attempts'
  | 'schemaHash'
  | 'rowCount'
  | 'checksum'
  | 'stagedCount'
  | 'stagedChecksum'
  | 'appliedCount'
  | 'lastError'
  | 'lastErrorCode'
> {
  transfer: string;
  status: BatchStatus; // operator view
  nextAction: string;
  retryable: boolean; // true when running the batch again (same id) is the right next step
  boundary: { kind: string; low: string | null; high: string };
  createdAt: string;
  updatedAt: string;
  extractedAt: string | null;
  stagedAt: string | null;
  applyStartedAt: string | null;
  committedAt: string | null;
  failedAt: string | null;
}

export interface BatchDetail extends BatchView {
  schemaColumns: SchemaColumn[];
  targetReconcileToken: string | null;
  events: BatchEvent[];
}

export interface TransferSummary {
  name: string;
  source: { engine: string; table: string | null; query: boolean };
  target: { engine: string; table: string; transactionGuard: boolean };
  keyColumns: string[];
  boundary: { column: string | null; kind: string }; // column null: 'changes' windows (change-tracking versions)
  columns: { source: string; target: string }[];
  batchSize: number;
  chunkSize: number;
  schedule: string | null; // own NCRONTAB; null = every tick of KEEL_TRANSFER_SCHEDULE
  keyCompare: TransferConfig['keyCompare']; // key-set comparison: 'off', 'report' or 'apply'
  keyCompareSchedule: string | null; // the timer's key-set comparison (NCRONTAB); null: only on request
}

// A transfer as operators watch it: its pause control, its open batch and how fresh its target is.
export interface TransferState {
  name: string;
  paused: boolean;
  pausedReason: string | null;
  changedBy: string | null;
  changedAt: string | null;
  openBatch: { batchId: string; state: BatchState; status: BatchStatus; retryable: boolean } | null;
  lastCommitted: { batchId: string; high: string; rows: number | null; committedAt: string | null } | null;
  // Seconds since the last committed batch committed (null: never committed). The freshness gauge.
  secondsSinceCommit: number | null;
  // Rows at the source after the last committed window (the open batch's included), counted up to a cap; null when
  // not counted (cap 0, a source that cannot count, or the count failed). See TransferService.rowsBehind.
  rowsBehind: RowsBehind | null;
}

// capped: the count stopped at the cap, so `rows` is a lower bound. countedAt: when the source was asked.
export interface RowsBehind {
  rows: number;
  capped: boolean;
  countedAt: string;
}

export interface BatchListFilter {
  transfer?: string;
  state?: BatchState;
  limit: number;
  afterId?: string;
}

export const iso = (d: Date | null) => (d ? d.toISOString() : null);

// What compareKeys found (and deleted) per committed key window.
export interface KeyCompareReport {
  transfer: string;
  applied: boolean;
  windows: {
    batchId: string;
    low: string | null;
    high: string;
    sourceKeys: number;
    targetKeys: number;
    goneAtSource: number; // target keys in the window that the source no longer has
    sample: string[]; // up to 10 of them (key columns joined by ',')
    deleted: number;
    // Left alone (nothing deleted) because this replay's apply of the window was under way: its staged rows may hold
    // keys the source deleted since; the next comparison deletes them (TransferService.replayUnderWay).
    deferredBy?: string;
  }[];
  goneAtSource: number;
  deleted: number;
}

// What a re-baseline would do (its preview): only the source's schema is read, nothing written.
export interface RebaselinePlan {
  transfer: string;
  possible: boolean; // false: refused as things are (see effect)
  after: string | null; // the last committed window's high (the baseline's low is REBASELINE_MARK + it)
  openBatch: { batchId: string; state: BatchState } | null;
  paused: boolean;
  windowed: boolean; // key windows of batchSize rows (changes.ts); false: one batch
  effect: string;
}

export interface ReplayPlan {
  transfer: string;
  window: { kind: string; low: string | null; high: string };
  batches: { batchId: string; low: string | null; high: string; rows: number | null }[];
  rows: number; // rows the covered batches committed
}

export function statusOf(state: BatchState): BatchStatus {
  if (state === 'committed') return 'committed';
  // An apply that was started and not reconciled has an unknown outcome: that is 'unresolved' to an operator.
  if (state === 'unresolved' || state === 'applying') return 'unresolved';
  return 'incomplete';
}

export function nextActionFor(b: BatchRecord): { text: string; retryable: boolean } {
  switch (b.state) {
    case 'extracting':
      return b.rowCount === null
        ? {
            text: 'The window is reserved but the manifest is not recorded yet. Run the batch again (same batch id); it records the manifest, stages and applies.',
            retryable: true,
          }
        : {
            text: `Manifest recorded (${b.rowCount} rows); not staged yet${b.lastError ? ` (last error: ${b.lastError})` : ''}. Run the batch again with the same batch id.`,
            retryable: true,
          };
    case 'staged':
      return {
        text: `Staged and verified on the target (${b.stagedCount} rows); not applied${b.lastError ? ` (last error: ${b.lastError})` : ''}. Run the batch again with the same batch id; re-applying is safe.`,
        retryable: true,
      };
    case 'applying':
      return {
        text: `An apply was started${b.applyStartedAt ? ` at ${b.applyStartedAt.toISOString()}` : ''} and its outcome is not known to the journal yet. Reconcile it before anything else; never create a new batch for this window.`,
        retryable: false,
      };
    case 'unresolved':
      return {
        text: `The target could not yet say whether the apply committed (${b.lastError ?? 'no detail'}). Reconcile again later (maintenance does this); if it stays unresolved, follow the runbook in docs/transfer.md: find the open transaction holding the claim on batch ${b.batchId} on the target. Do not retry or re-create the batch by hand.`,
        retryable: false,
      };
    case 'committed':
      return {
        text: `Nothing to do: committed${b.committedAt ? ` at ${b.committedAt.toISOString()}` : ''} with ${b.appliedCount ?? b.rowCount} rows.`,
        retryable: false,
      };
    case 'failed':
      return {
        text: `Will not be retried: ${b.lastError ?? 'failed'}. Nothing of it was applied and its window is released. Fix the cause (see last error), then create a new batch for the transfer.`,
        retryable: false,
      };
  }
}

export function toView(b: BatchRecord): BatchView {
  const next = nextActionFor(b);
  return {
    batchId: b.batchId,
    transfer: b.transferName,
    state: b.state,
    status: statusOf(b.state),
    nextAction: next.text,
    retryable: next.retryable,
    attempts: b.attempts,
    boundary: { kind: b.boundaryKind, low: b.boundaryLow, high: b.boundaryHigh },
    schemaHash: b.schemaHash,
    rowCount: b.rowCount,
    checksum: b.checksum,
    stagedCount: b.stagedCount,
    stagedChecksum: b.stagedChecksum,
    appliedCount: b.appliedCount,
    lastError: b.lastError,
    lastErrorCode: b.lastErrorCode,
    createdAt: b.createdAt.toISOString(),
    updatedAt: b.updatedAt.toISOString(),
    extractedAt: iso(b.extractedAt),
    stagedAt: iso(b.stagedAt),
    applyStartedAt: iso(b.applyStartedAt),
    committedAt: iso(b.committedAt),
    failedAt: iso(b.failedAt),
  };
}

// When an open batch last made progress: the stamps only its own steps set (created, manifest recorded, staged,
// apply started). Reconcile and notes refresh updated_at but never these, so a batch that maintenance keeps
// reconciling still shows how long it has been stuck.
export function lastProgressAt(v: BatchView): number {
  return Math.max(
    ...[v.createdAt, v.extractedAt, v.stagedAt, v.applyStartedAt].filter((x): x is string => !!x).map(Date.parse),
  );
}
export function transferSummary(t: TransferConfig): TransferSummary {
  return {
    name: t.name,
    source: { engine: t.source.engine, table: t.source.table ?? null, query: !!t.source.query },
    target: { engine: t.target.engine, table: t.target.table, transactionGuard: t.target.transactionGuard },
    keyColumns: [...t.keyColumns],
    boundary: { column: t.boundary.column ?? null, kind: t.boundary.kind },
    columns: t.columns.map((c) => ({ ...c })),
    batchSize: t.batchSize,
    chunkSize: t.chunkSize,
    schedule: t.schedule ?? null,
    keyCompare: t.keyCompare,
    keyCompareSchedule: t.keyCompareSchedule ?? null,
  };
}

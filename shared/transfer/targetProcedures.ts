// The stored procedures of a transfer target, with their parameters in call order and their result columns, and
// the one place their arguments are built and their results read: the targets' twin of JOURNAL_PROCEDURES
// (journalProcedures.ts). Every engine's target calls them only through its typed table derived from this one
// (TARGET_POSTGRES_FUNCTIONS: keel_transfer.<name>(p_<param>); TARGET_ORACLE_PROCEDURES: KEEL_TRANSFER.<NAME>, its
// declared parameter names), and test/engines/parity.test.ts compares those tables with the functions of a migrated
// PostgreSQL target and with the package declared in sql/oracle.
import type { TransferConfig } from './config.js';
import type { ApplyContext, ApplyResult, ReconcileOutcome, StageRequest } from './types.js';

export const TARGET_PROCEDURES = {
  // Creates (or re-creates while empty) the transfer's staging table with the mapped target columns' types; ops:
  // change windows also stage the operation column.
  ensure_staging: { params: ['transfer', 'target_schema', 'target_table', 'columns', 'ops'], results: [] },
  // 'new' (load rows in this transaction) or 'already_staged' (same content); a conflict raises.
  begin_stage: { params: ['batch_id', 'transfer', 'expected_count', 'expected_checksum'], results: ['opened'] },
  finish_stage: { params: ['batch_id', 'count', 'checksum'], results: [] },
  apply_batch: {
    params: [
      'batch_id',
      'transfer',
      'target_schema',
      'target_table',
      'staging_table',
      'columns',
      'keys',
      'expected_count',
      'expected_checksum',
      'attempt',
      'changes',
      // a windowed baseline's key window (StageRequest.mirrorRange): the mirror deletes only target rows whose first
      // key column is in (mirror_low, mirror_high], a null bound open on that side
      'mirror_low',
      'mirror_high',
    ],
    results: ['outcome', 'row_count', 'checksum', 'deleted_count'],
  },
  try_claim: {
    params: ['batch_id', 'wait_ms', 'fence_through'],
    results: ['outcome', 'row_count', 'checksum', 'staged'],
  },
  purge_staged: { params: ['batch_id', 'staging_table'], results: [] },
  // The ids of the transfer's batches with a committed staging registry row after the id `after` (null: from the
  // first), in id order, at most max_count, comma-separated: maintenance purges those the journal holds terminal
  // (purge_staged left them, or never ran), and asks after the last id it read next time (a cursor that wraps).
  staged_batches: { params: ['transfer', 'max_count', 'after'], results: ['batch_ids'] },
} as const satisfies Record<string, { params: readonly string[]; results: readonly string[] }>;

export type TargetProcedure = keyof typeof TARGET_PROCEDURES;
export type TargetParam<P extends TargetProcedure> = (typeof TARGET_PROCEDURES)[P]['params'][number];
export type TargetResult<P extends TargetProcedure> = (typeof TARGET_PROCEDURES)[P]['results'][number];

// A value as the shared code hands it to an engine: a name list as an array (PostgreSQL text[], Oracle a
// comma-separated VARCHAR2), a flag as a boolean (Oracle NUMBER 1/0); each engine's table says how it binds them.
export type TargetValue = string | number | boolean | null | readonly string[];
export type TargetArgs<P extends TargetProcedure> = { [K in TargetParam<P>]: TargetValue };
// A result row keyed by the contract's result names, values as the engine's driver returns them.
export type TargetRow<P extends TargetProcedure> = { [K in TargetResult<P>]: unknown };

// Where a transfer's rows go on the target: the table and the transfer's staging table.
export interface TargetNames {
  schema: string | null;
  table: string;
  staging: string;
}

// The target column of each key column, in keyColumns order.
export function targetKeys(t: TransferConfig): string[] {
  return t.keyColumns.map((k) => t.columns.find((c) => c.source === k)!.target);
}

export function ensureStagingArgs(
  t: TransferConfig,
  names: TargetNames,
  columns: readonly string[],
  ops: boolean,
): TargetArgs<'ensure_staging'> {
  return { transfer: t.name, target_schema: names.schema, target_table: names.table, columns: [...columns], ops };
}

export function beginStageArgs(req: StageRequest): TargetArgs<'begin_stage'> {
  return {
    batch_id: req.batchId,
    transfer: req.transfer,
    expected_count: req.manifest.rowCount,
    expected_checksum: req.manifest.checksum,
  };
}

export function finishStageArgs(batchId: string, count: number, checksum: string): TargetArgs<'finish_stage'> {
  return { batch_id: batchId, count, checksum };
}

export function applyBatchArgs(
  t: TransferConfig,
  names: TargetNames,
  columns: readonly string[],
  req: StageRequest,
  ctx: ApplyContext,
): TargetArgs<'apply_batch'> {
  return {
    batch_id: req.batchId,
    transfer: req.transfer,
    target_schema: names.schema,
    target_table: names.table,
    staging_table: names.staging,
    columns: [...columns],
    keys: targetKeys(t),
    expected_count: req.manifest.rowCount,
    expected_checksum: req.manifest.checksum,
    attempt: ctx.attempt,
    changes: req.changes ?? null, // 'ops' | 'mirror': deletes in the same transaction
    mirror_low: req.mirrorRange?.low ?? null,
    mirror_high: req.mirrorRange?.high ?? null,
  };
}

export function tryClaimArgs(batchId: string, waitMs: number, fenceThrough: number): TargetArgs<'try_claim'> {
  return { batch_id: batchId, wait_ms: waitMs, fence_through: fenceThrough };
}

export function purgeStagedArgs(batchId: string, staging: string): TargetArgs<'purge_staged'> {
  return { batch_id: batchId, staging_table: staging };
}

export function stagedBatchesArgs(
  transfer: string,
  maxCount: number,
  after: string | null,
): TargetArgs<'staged_batches'> {
  return { transfer, max_count: maxCount, after };
}

export function toBatchIds(r: TargetRow<'staged_batches'>): string[] {
  return absent(r.batch_ids)
    ? []
    : String(r.batch_ids)
        .split(',')
        .filter((id) => id.length > 0);
}

// Throws unless `args` name exactly the procedure's parameters (an engine binds them in TARGET_PROCEDURES order).
export function assertTargetArgs(proc: TargetProcedure, args: Record<string, unknown>): void {
  const want: readonly string[] = TARGET_PROCEDURES[proc].params;
  const got = Object.keys(args);
  if (got.length !== want.length || got.some((n) => !want.includes(n)))
    throw new Error(`target procedure ${proc} takes (${want.join(', ')}), got (${got.join(', ')})`);
}

// Results, read once for every engine: outcomes in either letter case (Oracle answers upper case), counts as numbers
// or digit strings, flags as booleans or 1.
const absent = (v: unknown): v is null | undefined => v === null || v === undefined;
const word = (v: unknown): string => String(v).toLowerCase();

export function toOpened(r: TargetRow<'begin_stage'>): 'new' | 'already_staged' {
  return word(r.opened) === 'already_staged' ? 'already_staged' : 'new';
}

export function toApplyResult(r: TargetRow<'apply_batch'>): ApplyResult {
  return {
    outcome: word(r.outcome) === 'applied' ? 'applied' : 'already_committed',
    rowCount: Number(r.row_count),
    checksum: String(r.checksum),
    ...(absent(r.deleted_count) ? {} : { deleted: Number(r.deleted_count) }),
  };
}

// waited: how long the claim was waited for, in the engine's unit (for the 'blocked' reason).
export function toReconcileOutcome(
  r: TargetRow<'try_claim'>,
  batchId: string,
  waited: string,
  via = 'completion_row',
): ReconcileOutcome {
  const outcome = word(r.outcome);
  if (outcome === 'committed')
    return { outcome: 'committed', rowCount: Number(r.row_count), checksum: String(r.checksum), via };
  if (outcome === 'not_applied' || outcome === 'not_applied_final')
    return {
      outcome: 'not_applied',
      staged: r.staged === true || Number(r.staged) === 1,
      via: 'claim_obtained',
      ...(outcome === 'not_applied_final' ? { final: true } : {}),
    };
  return {
    outcome: 'blocked',
    reason: `the claim on batch ${batchId} is held by an open transaction on the target (waited ${waited})`,
  };
}

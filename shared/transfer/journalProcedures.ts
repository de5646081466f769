// The database procedure behind each TransferJournal operation, with its parameters in call order, and the one
// place their arguments are built: the journal's twin of JOB_PROCEDURES (shared/jobs/procedures.ts). Engines name
// them by the same convention: PostgreSQL keel.<snake_name>(p_<param>), SQL Server keel.<PascalName> @<PascalParam>.
// Each engine's journal calls only through its typed table derived from this one (JOURNAL_POSTGRES_FUNCTIONS,
// JOURNAL_SQLSERVER_PARAMS, beside each journal); test/engines/parity.test.ts compares those tables with the
// functions of a migrated PostgreSQL database and with the procedures declared in sql/sqlserver.
import type { BatchPatch, NewBatch, TransferJournal } from './journal.js';
import { BATCH_STATES } from './types.js';

// The columns a transition may set. Each comes with a set_<column> flag: false leaves the column as it is, true
// sets it to the value beside it (null clears it), so "absent" and "null" stay apart on both engines.
const NOTE_PATCH = [
  'set_last_error',
  'last_error',
  'set_last_error_code',
  'last_error_code',
  'set_target_reconcile_token',
  'target_reconcile_token',
] as const;
const TRANSITION_PATCH = [
  'set_row_count',
  'row_count',
  'set_checksum',
  'checksum',
  'set_staged_count',
  'staged_count',
  'set_staged_checksum',
  'staged_checksum',
  'set_applied_count',
  'applied_count',
  ...NOTE_PATCH,
] as const;

export const JOURNAL_PROCEDURES = {
  transfer_batch_insert: [
    'batch_id',
    'transfer_name',
    'boundary_kind',
    'boundary_low',
    'boundary_high',
    'schema_hash',
    'schema_columns',
    'detail',
  ],
  transfer_batch_transition: [
    'batch_id',
    'from_states',
    'to_state',
    ...TRANSITION_PATCH,
    'increment_attempts',
    'stamp',
    'event',
    'detail',
    'if_version',
  ],
  transfer_batch_note: ['batch_id', 'event', 'detail', ...NOTE_PATCH, 'if_version'],
  transfer_batch_get: ['batch_id'],
  transfer_batch_last: ['transfer_name'],
  transfer_batch_list: ['transfer_name', 'state', 'after_id', 'limit'],
  transfer_batch_event_list: ['batch_id'],
  transfer_batch_stale: ['states', 'older_than_ms', 'limit'],
  transfer_control_set: ['transfer_name', 'paused', 'reason', 'changed_by'],
  transfer_control_list: [],
  transfer_journal_now: [],
} as const satisfies Record<string, readonly string[]>;

export type JournalProcedure = keyof typeof JOURNAL_PROCEDURES;
export type JournalParam<P extends JournalProcedure> = (typeof JOURNAL_PROCEDURES)[P][number];

// A value as the shared code hands it to an engine: JSON travels as text (jsonb / nvarchar(max)); a list of states
// as an array, which each engine binds in its own way (PostgreSQL text[], SQL Server a comma-separated varchar).
export type JournalValue = string | number | boolean | null | readonly string[];
export type JournalArgs<P extends JournalProcedure> = { [K in JournalParam<P>]: JournalValue };

// Bounds both engines keep the same (SQL Server's columns are the narrower: sql/sqlserver/V020, V021; its typed
// table binds these lengths, which the parity test compares with the procedures' declarations). Text is
// counted in UTF-16 code units, JavaScript's string length and SQL Server's nvarchar(n) unit alike; a longer text
// is cut here, before either engine sees it, so both store the same prefix (docs/transfer.md, "Engines", Journal).
export const JOURNAL_TEXT_MAX = {
  last_error: 2000,
  last_error_code: 64,
  reason: 2000,
  changed_by: 256,
} as const;
export const JOURNAL_LIMIT_MAX = 1000; // rows one list or stale read returns at most
export const JOURNAL_OLDER_THAN_MAX_MS = 2_000_000_000_000; // ~63 years: "never updated since" in practice

// The *_at column a transition may stamp with the database's clock (the procedures refuse any other name too).
export const JOURNAL_STAMPS = ['extracted_at', 'staged_at', 'apply_started_at', 'committed_at', 'failed_at'] as const;

// Cuts text to `max` code units without splitting a surrogate pair (half a character would not survive either
// engine's encoding).
export function boundText(v: string | null | undefined, max: number): string | null {
  if (v === null || v === undefined || v.length <= max) return v ?? null;
  const code = v.charCodeAt(max - 1);
  return v.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

// A row count for a list or stale read: a whole number in 1..JOURNAL_LIMIT_MAX (the procedures clamp the same way).
export function boundLimit(limit: number, fallback: number): number {
  if (!Number.isFinite(limit)) return fallback;
  return Math.max(1, Math.min(Math.floor(limit), JOURNAL_LIMIT_MAX));
}

function stateList(field: string, states: readonly string[]): readonly string[] {
  for (const s of states)
    if (!(BATCH_STATES as readonly string[]).includes(s))
      throw new Error(
        `transfer journal: ${field} names an unknown batch state "${s}" (one of ${BATCH_STATES.join(', ')})`,
      );
  return [...states];
}

const json = (v: unknown): string => JSON.stringify(v ?? null);

// One patch field: its flag (set when the caller named the field, even as null) and its value.
function field<F extends string>(column: F, value: string | number | null | undefined) {
  return { [`set_${column}`]: value !== undefined, [column]: value ?? null } as Record<`set_${F}` | F, JournalValue>;
}

type NotePatch = Pick<BatchPatch, 'lastError' | 'lastErrorCode' | 'targetReconcileToken'>;
function notePatch(p: NotePatch) {
  return {
    ...field('last_error', p.lastError === undefined ? undefined : boundText(p.lastError, JOURNAL_TEXT_MAX.last_error)),
    ...field(
      'last_error_code',
      p.lastErrorCode === undefined ? undefined : boundText(p.lastErrorCode, JOURNAL_TEXT_MAX.last_error_code),
    ),
    ...field('target_reconcile_token', p.targetReconcileToken),
  };
}

export function insertArgs(b: NewBatch): JournalArgs<'transfer_batch_insert'> {
  return {
    batch_id: b.batchId,
    transfer_name: b.transferName,
    boundary_kind: b.boundaryKind,
    boundary_low: b.boundaryLow,
    boundary_high: b.boundaryHigh,
    schema_hash: b.schemaHash,
    schema_columns: json(b.schemaColumns),
    // The 'created' event's detail.
    detail: json({ low: b.boundaryLow, high: b.boundaryHigh, schemaHash: b.schemaHash }),
  };
}

// Each builder takes the arguments of its TransferJournal operation.
export function transitionArgs(
  ...[batchId, from, to, patch, event, detail, ifVersion]: Parameters<TransferJournal['transition']>
): JournalArgs<'transfer_batch_transition'> {
  if (patch.stamp !== undefined && !(JOURNAL_STAMPS as readonly string[]).includes(patch.stamp))
    throw new Error(`transfer journal: unknown stamp "${patch.stamp}" (one of ${JOURNAL_STAMPS.join(', ')})`);
  checkVersion(ifVersion);
  return {
    batch_id: batchId,
    from_states: stateList('from', from),
    to_state: stateList('to', [to])[0]!,
    ...field('row_count', patch.rowCount),
    ...field('checksum', patch.checksum),
    ...field('staged_count', patch.stagedCount),
    ...field('staged_checksum', patch.stagedChecksum),
    ...field('applied_count', patch.appliedCount),
    ...notePatch(patch),
    increment_attempts: patch.incrementAttempts === true,
    stamp: patch.stamp ?? null,
    event,
    detail: json(detail),
    if_version: ifVersion ?? null,
  };
}

function checkVersion(ifVersion: number | undefined): void {
  if (ifVersion !== undefined && !(Number.isSafeInteger(ifVersion) && ifVersion >= 0))
    throw new Error(`transfer journal: ifVersion must be a whole number >= 0, not ${ifVersion}`);
}

export function noteArgs(
  ...[batchId, event, detail, patch, ifVersion]: Parameters<TransferJournal['note']>
): JournalArgs<'transfer_batch_note'> {
  checkVersion(ifVersion);
  return {
    batch_id: batchId,
    event,
    detail: json(detail),
    ...notePatch(patch ?? {}),
    if_version: ifVersion ?? null,
  };
}

export function listArgs(...[f]: Parameters<TransferJournal['list']>): JournalArgs<'transfer_batch_list'> {
  return {
    transfer_name: f.transfer ?? null,
    state: f.state === undefined ? null : stateList('state', [f.state])[0]!,
    after_id: f.afterId ?? null,
    limit: boundLimit(f.limit, 100),
  };
}

export function staleArgs(
  ...[states, olderThanMs, limit]: Parameters<TransferJournal['stale']>
): JournalArgs<'transfer_batch_stale'> {
  const ms = Number.isNaN(olderThanMs) ? 0 : Math.floor(olderThanMs);
  return {
    states: stateList('states', states),
    older_than_ms: Math.max(0, Math.min(ms, JOURNAL_OLDER_THAN_MAX_MS)),
    limit: boundLimit(limit, 20),
  };
}

export function controlArgs(
  ...[transferName, paused, reason, changedBy]: Parameters<TransferJournal['setPaused']>
): JournalArgs<'transfer_control_set'> {
  return {
    transfer_name: transferName,
    paused,
    reason: boundText(reason, JOURNAL_TEXT_MAX.reason),
    changed_by: boundText(changedBy, JOURNAL_TEXT_MAX.changed_by),
  };
}

// Throws unless `args` name exactly the procedure's parameters (an engine binds them in JOURNAL_PROCEDURES order).
export function assertJournalArgs(proc: JournalProcedure, args: Record<string, unknown>): void {
  const want: readonly string[] = JOURNAL_PROCEDURES[proc];
  const got = Object.keys(args);
  if (got.length !== want.length || got.some((n) => !want.includes(n)))
    throw new Error(`journal procedure ${proc} takes (${want.join(', ')}), got (${got.join(', ')})`);
}

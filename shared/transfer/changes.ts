// Change windows: how a transfer carries deletes (docs/transfer.md, "Deletes").
//
// A transfer with boundary kind 'changes' reads the source's change tracking instead of a column: SQL Server Change
// Tracking (CHANGETABLE(CHANGES ...)), or on PostgreSQL the change-capture table that sql/postgres/source/ maintains
// with triggers (the twin, with the same rules). Versions are integers that grow with every commit.
//
// - A window (low, high] holds every key whose LATEST change has a version in (low, high], once, with its operation:
//   'D' when that change deleted the row (the key columns set, the others NULL), 'U' otherwise (the row as it is now:
//   an insert or update is an upsert on the target). A key changed again after high belongs to a later window.
// - high is a version the source captured (CHANGE_TRACKING_CURRENT_VERSION()); the window holds at most about
//   batchSize keys (many keys can share a version).
// - A window whose low is older than the source's min valid version (CHANGE_TRACKING_MIN_VALID_VERSION: changes
//   before it were cleaned up) cannot be read: 'changes_expired', terminal for that window; the operator re-baselines.
// - A baseline (the transfer's first window, low null; or a re-baseline, low = REBASELINE_MARK + the last committed
//   high) holds every row of the table as an upsert, applied as a mirror: target rows whose key is not in the batch
//   are deleted in the same transaction. Where the source and the target can (an integer first key column; the
//   target mirrors a key range), the baseline is a chain of KEY WINDOWS of about batchSize rows over keyColumns[0]:
//   the version V is captured once, before the first window is chosen, and travels in every bound
//   (BASELINE_MARK V ':' key) up to the last window, whose high is V itself; each window mirrors only its key range.
//   The window after the last one is the first change window, low = V, reading the changes after V: every change committed during the baseline is read again there (each key's latest state), so
//   none is lost, whichever baseline window saw it. Otherwise the baseline is one window, high = the version.
// - The operation travels as the last field of every canonical row (OP_COLUMN), so the manifest, the staged
//   checksum and the staging table cover it like any column: a delete turned into an upsert, or dropped, changes the
//   checksum.
import type { TransferConfig } from './config.js';
import type { ChangeMode } from './types.js';

// The operation field's name in staging tables and change queries.
export const OP_COLUMN = 'keel_op';
export const OP_UPSERT = 'U';
export const OP_DELETE = 'D';

// A re-baseline window's low bound: "rebaseline@<last committed high>" (unique per transfer, like any low bound,
// and the next window chains from its high as usual).
export const REBASELINE_MARK = 'rebaseline@';

// A windowed baseline's bound between two of its key windows: "baseline@<version>:<key>" (the key window's top,
// canonical integer text). Its last window's high is the version itself, as a one-window baseline's is.
export const BASELINE_MARK = 'baseline@';
const BASELINE_BOUND = /^baseline@(\d{1,19}):(-?\d{1,40})$/;

export function baselineBound(version: string, key: string): string {
  return `${BASELINE_MARK}${version}:${key}`;
}

// null: not a windowed baseline's bound.
export function parseBaselineBound(bound: string | null): { version: string; key: string } | null {
  const m = bound === null ? null : BASELINE_BOUND.exec(bound);
  return m ? { version: m[1]!, key: m[2]! } : null;
}

export function carriesChanges(t: TransferConfig): boolean {
  return t.boundary.kind === 'changes';
}

// A baseline window (the first, a re-baseline's first, or a windowed baseline's next key window): rows of the
// table as they are in one snapshot. The low alone tells: a change window's low is a version.
export function isBaseline(low: string | null): boolean {
  return low === null || low.startsWith(REBASELINE_MARK) || low.startsWith(BASELINE_MARK);
}

// The version a (non-baseline) change window starts after.
export function changeLowVersion(low: string | null): bigint | null {
  if (isBaseline(low)) return null;
  if (!/^\d{1,19}$/.test(low!)) throw new Error(`change window low bound ${low} is not a version`);
  return BigInt(low!);
}

// The key range (low, high] over keyColumns[0] of a windowed baseline's key window (a null bound: open on that side;
// the last window is open above, so its mirror also deletes target keys past the source's last one); null for a
// one-window baseline (the whole table) and for change windows.
export function baselineKeyRange(low: string | null, high: string): { low: string | null; high: string | null } | null {
  if (!isBaseline(low)) return null;
  const range = { low: parseBaselineBound(low)?.key ?? null, high: parseBaselineBound(high)?.key ?? null };
  return range.low === null && range.high === null ? null : range;
}

// The source version a window's high stands at (a windowed baseline's: the version it captured).
export function versionOfHigh(high: string): bigint {
  const b = parseBaselineBound(high);
  return BigInt(b ? b.version : high);
}

export function changeModeOf(t: TransferConfig, low: string | null): ChangeMode | undefined {
  if (!carriesChanges(t)) return undefined;
  return isBaseline(low) ? 'mirror' : 'ops';
}

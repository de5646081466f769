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
// - A baseline window (low null: the transfer's first; or a re-baseline, low = REBASELINE_MARK + the last committed
//   high) holds every row of the table as an upsert, high = the version captured in the same snapshot, and is applied
//   as a mirror: target rows whose key is not in the batch are deleted in the same transaction.
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

export function carriesChanges(t: TransferConfig): boolean {
  return t.boundary.kind === 'changes';
}

// A baseline window: the whole table as it is in one snapshot (first window, or a re-baseline).
export function isBaseline(low: string | null): boolean {
  return low === null || low.startsWith(REBASELINE_MARK);
}

// The version a (non-baseline) change window starts after.
export function changeLowVersion(low: string | null): bigint | null {
  if (isBaseline(low)) return null;
  if (!/^\d{1,19}$/.test(low!)) throw new Error(`change window low bound ${low} is not a version`);
  return BigInt(low!);
}

export function changeModeOf(t: TransferConfig, low: string | null): ChangeMode | undefined {
  if (!carriesChanges(t)) return undefined;
  return isBaseline(low) ? 'mirror' : 'ops';
}

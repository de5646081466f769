// The engine-independent part of a target's prepare (TargetDialect.prepare): what it refuses and how it says so,
// once for every engine. The dialect reads its own catalog; these turn what it found into the refusal.
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import type { TargetFault } from './stagingTarget.js';

// The target table's columns as the dialect read them (by target column name); none: the table does not exist.
// note: what the engine adds to the message (e.g. how it compares names).
export function requireTargetTable<C>(t: TransferConfig, columns: ReadonlyMap<string, C>, note = ''): void {
  if (columns.size === 0)
    throw new TransferError(
      'target_incompatible',
      `transfer ${t.name}: target table ${t.target.table} does not exist${note}`,
    );
}

// A mapped target column as the dialect read it; refused when the table has no such column.
export function requireTargetColumn<C>(t: TransferConfig, columns: ReadonlyMap<string, C>, target: string): C {
  const c = columns.get(target);
  if (c === undefined)
    throw new TransferError(
      'target_incompatible',
      `transfer ${t.name}: target column ${target} does not exist in ${t.target.table}`,
    );
  return c;
}

// The apply merges on the key columns, so they must be a key of the target table. keys: what the engine counts as
// one (e.g. 'a unique index or primary key').
export function requireTargetKey(t: TransferConfig, found: boolean, keys: string, keyColumns: readonly string[]): void {
  if (!found)
    throw new TransferError(
      'target_incompatible',
      `transfer ${t.name}: target table ${t.target.table} needs ${keys} on exactly (${keyColumns.join(', ')})`,
    );
}

// ensure_staging refused the staging table's shape (a staging table of another shape exists): no retry changes that.
export function stagingShapeRefusal(err: unknown, fault: TargetFault | undefined): TransferError | null {
  return fault === 'staging_shape' ? new TransferError('target_incompatible', (err as Error).message) : null;
}

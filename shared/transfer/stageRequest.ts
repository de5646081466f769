// What the target is asked for a batch (stage, apply, reconcile): its id, manifest, recorded schema and change mode.
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import type { BatchRecord } from './journal.js';
import { baselineKeyRange, changeModeOf } from './changes.js';
import type { StageRequest } from './types.js';

export function stageRequest(b: BatchRecord, t: TransferConfig): StageRequest {
  if (b.rowCount === null || b.checksum === null)
    throw new TransferError('invalid_state', `batch ${b.batchId} has no manifest yet`);
  const changes = changeModeOf(t, b.boundaryLow);
  // A windowed baseline's key window mirrors its key range only (changes.ts).
  const mirrorRange = changes === 'mirror' ? baselineKeyRange(b.boundaryLow, b.boundaryHigh) : null;
  return {
    batchId: b.batchId,
    transfer: t.name,
    manifest: { rowCount: b.rowCount, checksum: b.checksum },
    schema: { columns: b.schemaColumns, hash: b.schemaHash },
    ...(changes ? { changes } : {}),
    ...(mirrorRange ? { mirrorRange } : {}),
  };
}

// How a source and a target agree, by capability and never by engine name (docs/architecture.md, "Transfer adapters
// are engine-neutral"): the checksum, the row stream, one source read, baseline key windows.
import { TransferError } from './errors.js';
import type { ChecksumAlgorithm } from './checksum.js';
import type { Adapters, RowFeed, SourceSchema, StreamFacts, Window } from './types.js';

// The source's most preferred checksum that the target can verify too (every engine computes keel-v1).
export async function negotiateChecksum(a: Adapters): Promise<ChecksumAlgorithm> {
  const [s, t] = await Promise.all([a.source.checksumAlgorithms(), a.target.checksumAlgorithms()]);
  const common = s.find((x) => t.includes(x));
  if (!common)
    throw new TransferError(
      'target_incompatible',
      `no checksum both sides compute: the ${a.source.engine} source computes ${s.join(', ')}, the ${a.target.engine} target ${t.join(', ')}`,
    );
  return common;
}

// The source's native bulk stream when the target reads the same format; canonical rows otherwise.
export function negotiateFeed(a: Adapters, w: Window, schema: SourceSchema, chunkSize: number): RowFeed {
  const format = a.source.bulkFormat;
  const bulkOut = a.source.bulkOut?.bind(a.source);
  if (bulkFeed(a) && bulkOut && format !== undefined)
    return { kind: 'bulk', format, open: (encoding, framed) => bulkOut(w, schema, encoding, framed) };
  const facts: StreamFacts = {};
  return { kind: 'rows', rows: a.source.streamRows(w, schema, chunkSize, facts), facts };
}

function bulkFeed(a: Adapters): boolean {
  return a.source.bulkFormat !== undefined && !!a.source.bulkOut && a.source.bulkFormat === a.target.bulkFormat;
}

// One source read (docs/transfer.md "One source read"): the manifest is computed from the rows as they are staged,
// instead of by a read of the window before them, when the rows travel as canonical text (no bulk stream), the
// checksum is keel-v1 (what Node computes from canonical text), the target can take a manifest after the rows, and
// the source reads the window in one consistent snapshot (so the rows staged are the window as of one moment, as a
// separate manifest read would have counted it).
export async function readsOnce(a: Adapters, w: Window): Promise<boolean> {
  if (!a.target.stageStreamed || !a.source.readsSnapshot || bulkFeed(a)) return false;
  if ((await negotiateChecksum(a)) !== 'keel-v1') return false;
  return a.source.readsSnapshot(w);
}

// A baseline runs in key windows only when the target's apply can mirror a key range (changes.ts).
export function baselineOpts(a: Adapters): { baselineWindows: boolean } {
  return { baselineWindows: a.target.mirrorsKeyRanges === true };
}

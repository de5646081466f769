// The SourceAdapter contract, written once and run per engine (test/engines/<engine>.transferSource.test.ts):
// windows that chain over every row exactly once, manifests that equal the streamed rows, bounded chunks, the
// checksum algorithms the source offers, and a change after extraction showing in the manifest.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { algorithmOf, ChecksumAccumulator } from '../../shared/transfer/checksum.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import type { SourceAdapter, Window } from '../../shared/transfer/types.js';
import type { SourceHarness } from './transferHarness.js';

const COLUMNS = ['id', 'customer', 'amount', 'flag'];

export function defineTransferSourceContract(makeHarness: () => SourceHarness): void {
  let h: SourceHarness;
  const opened: SourceAdapter[] = [];

  beforeAll(() => {
    h = makeHarness();
  });
  afterAll(async () => {
    for (const s of opened) await s.close().catch(() => undefined);
    await h?.close();
  });

  // A new table with rows 1..rows and a source over it (the target side is never contacted here).
  async function fresh(rows: number): Promise<{ t: TransferConfig; source: SourceAdapter; table: string }> {
    const { source: cfg, table } = await h.createTable();
    if (rows > 0) await h.insertRows(table, 1, rows);
    const [t] = parseTransfers(
      [
        {
          name: `src_${randomBytes(4).toString('hex')}`,
          source: cfg,
          target: { engine: 'postgres', connectionSetting: 'UNUSED', table: 'public.unused' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: COLUMNS.map((c) => ({ source: c, target: c })),
        },
      ],
      transferEngineRules(),
    );
    const source = await h.openSource(t!);
    opened.push(source);
    return { t: t!, source, table };
  }

  async function streamed(source: SourceAdapter, w: Window, chunkSize: number) {
    const schema = await source.readSchema();
    const acc = new ChecksumAccumulator();
    const ids: number[] = [];
    let largest = 0;
    for await (const chunk of source.streamRows(w, schema, chunkSize)) {
      largest = Math.max(largest, chunk.length);
      for (const row of chunk) {
        acc.add(row);
        ids.push(Number(row[0]));
      }
    }
    return { count: acc.count, checksum: acc.checksum, ids, largest };
  }

  it('reads the mapped columns with their declared types; the schema hash is stable', async () => {
    const { source } = await fresh(3);
    const a = await source.readSchema();
    const b = await source.readSchema();
    expect(a.columns.map((c) => c.name)).toEqual(COLUMNS);
    expect(a.columns.map((c) => c.logical)).toEqual(['int', 'text', 'decimal', 'bool']);
    expect(a.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(b.hash).toBe(a.hash);
  });

  it('windows chain over every row exactly once, at most maxRows each, and null when nothing is new', async () => {
    const { source, table } = await fresh(250);
    const schema = await source.readSchema();
    const seen: number[] = [];
    let low: string | null = null;
    let windows = 0;
    for (;;) {
      const w = await source.nextWindow(low, 100);
      if (!w) break;
      expect(w).toMatchObject({ kind: 'key', low });
      const m = await source.manifest(w, schema, 'keel-v1');
      expect(m.rowCount).toBeGreaterThan(0);
      expect(m.rowCount).toBeLessThanOrEqual(100);
      seen.push(...(await streamed(source, w, 1000)).ids);
      low = w.high;
      windows++;
    }
    expect(windows).toBe(3);
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 250 }, (_, i) => i + 1));
    expect(await source.nextWindow(low, 100)).toBeNull();
    // New rows: the next window starts where the last one ended.
    await h.insertRows(table, 251, 260);
    const next = await source.nextWindow(low, 100);
    expect(next).toMatchObject({ low, high: '260' });
    expect((await source.manifest(next!, schema, 'keel-v1')).rowCount).toBe(10);
  });

  it('rowsAfter counts the rows past a bound, stopping at the cap (the rows-behind gauge)', async () => {
    const { source, table } = await fresh(40);
    expect(source.rowsAfter).toBeTypeOf('function');
    expect(await source.rowsAfter!(null, 1000)).toBe(40);
    expect(await source.rowsAfter!('30', 1000)).toBe(10);
    expect(await source.rowsAfter!(null, 25)).toBe(25); // capped: at least 25
    expect(await source.rowsAfter!('40', 1000)).toBe(0);
    await h.insertRows(table, 41, 43);
    expect(await source.rowsAfter!('40', 1000)).toBe(3);
  });

  it('the manifest equals the streamed rows (count and keel-v1 checksum); chunks are bounded', async () => {
    const { source } = await fresh(120);
    const schema = await source.readSchema();
    const w: Window = { kind: 'key', low: '10', high: '110' };
    const m = await source.manifest(w, schema, 'keel-v1');
    const s = await streamed(source, w, 7);
    expect(m).toEqual({ rowCount: 100, checksum: s.checksum });
    expect(s.count).toBe(100);
    expect(s.largest).toBeLessThanOrEqual(7);
    expect(s.ids.sort((x, y) => x - y)).toEqual(Array.from({ length: 100 }, (_, i) => i + 11));
    // Every algorithm the source offers gives a manifest over the same rows, tagged with that algorithm.
    const algorithms = await source.checksumAlgorithms();
    expect(algorithms).toContain('keel-v1');
    for (const algorithm of algorithms) {
      const other = await source.manifest(w, schema, algorithm);
      expect(other.rowCount).toBe(100);
      expect(algorithmOf(other.checksum)).toBe(algorithm);
    }
    // An empty window has an empty manifest.
    expect(await source.manifest({ kind: 'key', low: '500', high: '600' }, schema, 'keel-v1')).toEqual({
      rowCount: 0,
      checksum: new ChecksumAccumulator().checksum,
    });
  });

  it('a row changed after extraction changes the manifest of its window (what stage then refuses)', async () => {
    const { source, table } = await fresh(30);
    const schema = await source.readSchema();
    const w: Window = { kind: 'key', low: null, high: '30' };
    const before = await source.manifest(w, schema, 'keel-v1');
    await h.updateRow(table, 17);
    const after = await source.manifest(w, schema, 'keel-v1');
    expect(after.rowCount).toBe(before.rowCount);
    expect(after.checksum).not.toBe(before.checksum);
    expect((await streamed(source, w, 50)).checksum).toBe(after.checksum);
  });
}

// A SQL Server nvarchar holds UTF-16 units, any of them: also an unpaired surrogate, which UTF-8 cannot hold. Its
// UTF-8 form -- what keel-v1 hashes (shared/transfer/md5.ts) and what every target's driver sends -- is U+FFFD, so
// before, the target stored another character and both checksums agreed on it (a silent change). The source now
// refuses such a row (unsupported_type, naming the column and the key) before anything is staged: in a table
// window's rows and in a change window's. Well-formed text -- pairs, astral characters, NUL, noncharacters -- passes
// as it is. No server here: mssql's Request streams the rows of a stand-in (as in sqlserver.baselineWindows.test.ts).
import sql from 'mssql';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SqlServerTransferSource } from '../../shared/engines/sqlserver/transferSource.js';
import type { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { ChecksumAccumulator } from '../../shared/transfer/checksum.js';
import type { SourceSchema, Window } from '../../shared/transfer/types.js';

let rows: unknown[][] = [];

beforeEach(() => {
  vi.spyOn(sql.Transaction.prototype, 'begin').mockImplementation(async function (this: sql.Transaction) {
    return this;
  } as never);
  vi.spyOn(sql.Transaction.prototype, 'commit').mockResolvedValue(undefined);
  vi.spyOn(sql.Transaction.prototype, 'rollback').mockResolvedValue(undefined);
  vi.spyOn(sql.Request.prototype, 'cancel').mockImplementation(() => undefined as never);
  vi.spyOn(sql.Request.prototype, 'query').mockImplementation(async function (this: sql.Request, text: unknown) {
    const t = String(text);
    if (this.stream) {
      setImmediate(() => {
        for (const r of rows) this.emit('row', r);
        this.emit('done');
      });
      return undefined as never;
    }
    if (t.includes('sys.databases')) return { recordset: [{ rcsi: true, snapshotState: 1 }] } as never;
    if (t.includes('CHANGE_TRACKING_CURRENT_VERSION'))
      return { recordset: [{ cur: '40', minValid: '1', pk: 'Id' }] } as never;
    throw new Error(`the stand-in does not know: ${t}`);
  } as never);
});
afterEach(() => {
  vi.restoreAllMocks();
});

function source(kind: 'key' | 'changes'): SqlServerTransferSource {
  const [t] = parseTransfers(
    [
      {
        name: 'notes',
        source: { engine: 'sqlserver', connectionSetting: 'S', table: 'dbo.Notes' },
        target: { engine: 'postgres', connectionSetting: 'T', table: 'public.notes' },
        keyColumns: ['Id'],
        boundary: kind === 'key' ? { column: 'Id', kind: 'key' } : { kind: 'changes' },
        columns: [
          { source: 'Id', target: 'id' },
          { source: 'Note', target: 'note' },
        ],
      },
    ],
    transferEngineRules(),
  );
  const pool = {
    request: async () => new sql.Request({} as never),
    get: async () => ({}) as never,
  } as unknown as SqlServerPool;
  return new SqlServerTransferSource(t!, pool);
}

const SCHEMA = {
  columns: [
    { name: 'Id', type: 'bigint', logical: 'int', nullable: false },
    { name: 'Note', type: 'nvarchar(40)', logical: 'text', nullable: true },
  ],
} as unknown as SourceSchema;

async function read(src: SqlServerTransferSource, w: Window): Promise<unknown[][]> {
  const out: unknown[][] = [];
  for await (const chunk of src.streamRows(w, SCHEMA, 100)) out.push(...chunk);
  return out;
}

describe('SQL Server source: text the canonical form cannot carry', () => {
  const keyWindow: Window = { kind: 'key', low: null, high: '10' };
  const changeWindow: Window = { kind: 'changes', low: '5', high: '9' } as Window;

  it('well-formed text passes as it is: pairs, astral characters, NUL, noncharacters', async () => {
    const notes = ['😀 ok', '\u{10FFFF}', 'a\u0000b', '\uFFFE\uFFFF', 'é', null, ''];
    rows = notes.map((n, i) => [String(i + 1), n]);
    const got = await read(source('key'), keyWindow);
    expect(got).toEqual(notes.map((n, i) => [String(i + 1), n]));
    const acc = new ChecksumAccumulator();
    for (const r of got) acc.add(r as string[]);
    expect(acc.count).toBe(notes.length);
  });

  for (const [label, bad] of [
    ['a lone high surrogate', 'x\uD83Dy'],
    ['a lone low surrogate', '\uDE00'],
    ['a reversed pair', '\uDE00\uD83D'],
    ['a high surrogate at the end', 'end\uD800'],
  ] as const) {
    it(`${label} is refused with its column and key, in a key window and a change window`, async () => {
      rows = [
        ['1', 'fine'],
        ['7', bad],
        ['8', 'never read'],
      ];
      for (const [kind, w] of [
        ['key', keyWindow],
        ['changes', changeWindow],
      ] as const) {
        if (kind === 'changes') rows = rows.map((r) => [...r, 'U']);
        const err = await read(source(kind), w).then(
          () => null,
          (e: unknown) => e,
        );
        expect(isTransferError(err, 'unsupported_type')).toBe(true);
        expect((err as Error).message).toMatch(
          /source column Note \(nvarchar\(40\)\).*unpaired UTF-16 surrogate \(row with key 7\)/,
        );
        expect((err as { detail?: unknown }).detail).toEqual({ column: 'Note', key: '7' });
      }
    });
  }
});

// The SQL Server source's windowed baseline of a 'changes' transfer (docs/transfer.md, "Deletes"; the PostgreSQL
// twin is test/transfer/changesBaseline.test.ts). No server here: mssql's Request and Transaction run with their
// network calls replaced by a stand-in that answers by the statement's text from a small table model (rows by key,
// the Change Tracking versions) and records each statement with its bound parameters. What the real server does with
// the T-SQL (OFFSET/FETCH, CHANGETABLE, SNAPSHOT) is for the workflow's suite (test/transfer/sqlserver.test.ts).
import sql from 'mssql';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  mssqlBaselineWindowSelect,
  mssqlChangesSelect,
  mssqlSelectExpr,
  SqlServerTransferSource,
} from '../../shared/engines/sqlserver/transferSource.js';
import type { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import type { SourceSchema } from '../../shared/transfer/types.js';

type Sent = { text: string; params: Record<string, unknown>; inTx: boolean };

class Server {
  keys: number[] = [];
  current = 40;
  minValid = 1;
  keyType = 'bigint';
  sent: Sent[] = [];
  begun: string[] = [];

  answer(text: string, params: Record<string, unknown>): Record<string, unknown>[] {
    if (text.includes('dm_exec_describe_first_result_set'))
      return [
        { name: 'Id', system_type_name: this.keyType, is_nullable: false },
        { name: 'Note', system_type_name: 'nvarchar(40)', is_nullable: true },
      ];
    if (text.includes('sys.databases')) return [{ rcsi: true, snapshotState: 1 }];
    if (text.includes('CHANGE_TRACKING_CURRENT_VERSION'))
      return [{ cur: String(this.current), minValid: String(this.minValid), pk: 'Id' }];
    if (text.includes('OFFSET (@n - 1) ROWS')) {
      const after = params.after === undefined ? null : Number(params.after);
      const rest = [...this.keys].sort((a, b) => a - b).filter((k) => after === null || k > after);
      const n = Number(params.n);
      return rest.slice(n - 1, n + 1).map((k) => ({ k: String(k) }));
    }
    if (text.includes('COUNT_BIG')) {
      const after = Number(params.after);
      return [{ n: String(Math.min(Number(params.cap), this.keys.filter((k) => k > after).length)) }];
    }
    throw new Error(`the stand-in does not know: ${text}`);
  }
}

let server: Server;

beforeEach(() => {
  server = new Server();
  // (mssql's methods are overloaded with callbacks: the promise forms are cast)
  vi.spyOn(sql.Transaction.prototype, 'begin').mockImplementation(async function (
    this: sql.Transaction,
    level?: sql.IIsolationLevel,
  ) {
    server.begun.push(level === sql.ISOLATION_LEVEL.SNAPSHOT ? 'SNAPSHOT' : String(level));
    return this;
  } as never);
  vi.spyOn(sql.Transaction.prototype, 'commit').mockResolvedValue(undefined);
  vi.spyOn(sql.Transaction.prototype, 'rollback').mockResolvedValue(undefined);
  vi.spyOn(sql.Request.prototype, 'query').mockImplementation(async function (this: sql.Request, text: unknown) {
    const params = Object.fromEntries(Object.entries(this.parameters).map(([k, p]) => [k, p.value]));
    const parent = (this as unknown as { parent: unknown }).parent;
    server.sent.push({ text: String(text), params, inTx: parent instanceof sql.Transaction });
    if (this.stream) {
      // a data read streams its rows through events; the model only records it
      setImmediate(() => this.emit('done'));
      return undefined as never;
    }
    return { recordset: server.answer(String(text), params) } as never;
  } as never);
});
afterEach(() => {
  vi.restoreAllMocks();
});

function source(): SqlServerTransferSource {
  const [t] = parseTransfers(
    [
      {
        name: 'ct_orders',
        source: { engine: 'sqlserver', connectionSetting: 'S', table: 'dbo.Orders' },
        target: { engine: 'postgres', connectionSetting: 'T', table: 'public.orders' },
        keyColumns: ['Id'],
        boundary: { kind: 'changes' },
        columns: [
          { source: 'Id', target: 'id' },
          { source: 'Note', target: 'note' },
        ],
        batchSize: 4,
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

async function drain(src: SqlServerTransferSource, w: Parameters<SqlServerTransferSource['streamRows']>[0]) {
  for await (const chunk of src.streamRows(w, SCHEMA, 100)) void chunk;
}

describe('SQL Server source: a windowed baseline (Change Tracking)', () => {
  it('the T-SQL: the key window ordered by the key with OFFSET/FETCH, the baseline read bounded by its key range', () => {
    expect(mssqlBaselineWindowSelect('[dbo].[Orders]', 'Id', false).replace(/\s+/g, ' ')).toBe(
      'SELECT CONVERT(varchar(20), [Id]) AS k FROM [dbo].[Orders] WHERE [Id] IS NOT NULL ORDER BY [Id] OFFSET (@n - 1) ROWS FETCH NEXT 2 ROWS ONLY',
    );
    expect(mssqlBaselineWindowSelect('[dbo].[Orders]', 'Id', true)).toContain(
      'WHERE [Id] IS NOT NULL AND [Id] > @after',
    );
    const mapped = [{ source: 'Id', expr: (r: string) => mssqlSelectExpr(r, 'int') }];
    expect(mssqlChangesSelect('[dbo].[Orders]', ['Id'], mapped, true, { low: true, high: true })).toBe(
      "SELECT CONVERT(varchar(20), b.[Id]), 'U' AS keel_op FROM [dbo].[Orders] AS b WHERE b.[Id] > @klow AND b.[Id] <= @khigh",
    );
    expect(mssqlChangesSelect('[dbo].[Orders]', ['Id'], mapped, true, { low: false, high: true })).toMatch(
      / WHERE b\.\[Id\] <= @khigh$/,
    );
    expect(mssqlChangesSelect('[dbo].[Orders]', ['Id'], mapped, true, { low: true, high: false })).toMatch(
      / WHERE b\.\[Id\] > @klow$/,
    );
    // no range: the whole table, as before
    expect(mssqlChangesSelect('[dbo].[Orders]', ['Id'], mapped, true)).not.toContain('WHERE');
  });

  it('key windows of batchSize at the version captured before the first; the last one open above; then the change window', async () => {
    server.keys = [3, 5, 8, 13, 21, 34, 55, 89, 144, 233];
    const src = source();
    const w1 = await src.nextWindow(null, 4, { baselineWindows: true });
    expect(w1).toEqual({ kind: 'changes', low: null, high: 'baseline@40:13' });
    // the version and the window's choice in one SNAPSHOT transaction
    const choice = server.sent.filter((s) => s.inTx);
    expect(choice.map((s) => s.text.includes('OFFSET'))).toEqual([false, true]);
    expect(choice[1]!.params).toEqual({ n: 4 });
    expect(server.begun).toEqual(['SNAPSHOT']);

    // The version moves on; the next windows keep the one captured before the first.
    server.current = 55;
    const w2 = await src.nextWindow(w1!.high, 4, { baselineWindows: true });
    expect(w2).toEqual({ kind: 'changes', low: 'baseline@40:13', high: 'baseline@40:89' });
    expect(server.sent.at(-1)!.params).toEqual({ n: 4, after: '13' });
    expect(await src.rowsAfter('baseline@40:89', 1000)).toBe(2);
    // two rows left, at most batchSize: the last window, open above, its high the version itself
    const w3 = await src.nextWindow(w2!.high, 4, { baselineWindows: true });
    expect(w3).toEqual({ kind: 'changes', low: 'baseline@40:89', high: '40' });

    // Each key window's read binds its key range (none below for the first, none above for the last).
    server.sent = [];
    await drain(src, w1!);
    await drain(src, w2!);
    await drain(src, w3!);
    const reads = server.sent.filter((s) => s.text.includes("'U' AS keel_op"));
    expect(reads.map((r) => r.params)).toEqual([{ khigh: '13' }, { klow: '13', khigh: '89' }, { klow: '89' }]);
    expect(reads[0]!.text).toMatch(/WHERE b\.\[Id\] <= @khigh$/);
    expect(reads[2]!.text).toMatch(/WHERE b\.\[Id\] > @klow$/);
    // every read checked the versions first, in its transaction
    expect(server.sent.filter((s) => s.text.includes('CHANGE_TRACKING_MIN_VALID_VERSION')).every((s) => s.inTx)).toBe(
      true,
    );

    // Then the first change window starts at the captured version: CHANGETABLE(CHANGES t, 40).
    server.sent = [];
    server.answer = function (text, params) {
      if (text.includes('MAX(v)')) return [{ high: '55' }];
      return Server.prototype.answer.call(this, text, params);
    };
    expect(await src.nextWindow('40', 4, { baselineWindows: true })).toEqual({
      kind: 'changes',
      low: '40',
      high: '55',
    });
    expect(server.sent.at(-1)!.params).toMatchObject({ low: '40', cur: '55' });
  });

  it('CHANGE_TRACKING_MIN_VALID_VERSION checked for every key window after the first and for the first change window', async () => {
    server.keys = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const src = source();
    const w1 = await src.nextWindow(null, 4, { baselineWindows: true });
    expect(w1!.high).toBe('baseline@40:4');
    // Retention (or a truncate) passed the baseline's version while it ran.
    server.minValid = 41;
    const expired = async (p: Promise<unknown>) => {
      const err = await p.then(
        () => null,
        (e: unknown) => e,
      );
      expect(isTransferError(err) && err.code).toBe('changes_expired');
      return (err as Error).message;
    };
    // the choice of the next key window, and the reads (manifest, staging) of a key window whose low carries V
    expect(await expired(src.nextWindow(w1!.high, 4, { baselineWindows: true }))).toMatch(
      /the baseline in progress \(windowed\) reads the changes after version 40 once it ends.*version 41/,
    );
    expect(await expired(drain(src, { kind: 'changes', low: 'baseline@40:4', high: 'baseline@40:8' }))).toMatch(
      /baseline in progress/,
    );
    // the first change window
    expect(await expired(src.nextWindow('40', 4, { baselineWindows: true }))).toMatch(
      /the change window starts after version 40/,
    );
    // the first key window (low null) reads the table as it is: nothing to check
    await drain(src, w1!);
    // every failed transaction rolled back
    expect(vi.mocked(sql.Transaction.prototype.rollback).mock.calls.length).toBeGreaterThanOrEqual(3);
  });

  it('one window when the target cannot mirror a key range, or the first key column is not an integer', async () => {
    server.keys = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    // (the re-baseline's preview asks the source whether it can: shared/transfer/service.ts rebaselinePlan)
    expect(source().windowsBaselines).toBe(true);
    expect(await source().nextWindow(null, 4)).toEqual({ kind: 'changes', low: null, high: '40' });
    server.keyType = 'nvarchar(20)';
    expect(await source().nextWindow(null, 4, { baselineWindows: true })).toEqual({
      kind: 'changes',
      low: null,
      high: '40',
    });
    expect(server.sent.some((s) => s.text.includes('OFFSET'))).toBe(false);
  });
});

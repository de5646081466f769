// The SQL Server transfer source reads a window's rows without blocking behind the source's writers when the source
// database allows it (review F9): READ_COMMITTED_SNAPSHOT ON reads row versions as it is; otherwise, with
// ALLOW_SNAPSHOT_ISOLATION ON, the data read runs as a SNAPSHOT statement inside its own sp_executesql call (so the
// pooled connection keeps its level); otherwise it falls back to locking READ COMMITTED. No server here: a stand-in
// pool answers sys.databases and records the batch the data read sends. Whether a paused SNAPSHOT stream really leaves
// a writer unblocked is for a real server (the workflow's transfer source suite).
import { describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import {
  SqlServerTransferSource,
  readAtIsolation,
  sourceReadIsolation,
  type SourceReadIsolation,
} from '../../shared/engines/sqlserver/transferSource.js';
import type { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import type { TransferConfig } from '../../shared/transfer/config.js';

class StandInRequest extends EventEmitter {
  stream = false;
  arrayRowMode = false;
  inputs: string[] = [];
  constructor(
    private readonly sent: string[],
    private readonly db: { rcsi: boolean; snapshotState: number },
  ) {
    super();
  }
  input(name: string): this {
    this.inputs.push(name);
    return this;
  }
  async query(text: string) {
    this.sent.push(text);
    if (text.includes('sys.databases')) return { recordset: [this.db] };
    // A data read: no rows, then done (stream mode reports through events).
    setImmediate(() => this.emit('done'));
    return { recordset: [] };
  }
  pause() {}
  resume() {}
  cancel() {}
}

function standInSource(db: { rcsi: boolean; snapshotState: number }, boundary = 'key') {
  const sent: string[] = [];
  const pool = { request: async () => new StandInRequest(sent, db) } as unknown as SqlServerPool;
  const t = {
    name: 'orders',
    source: { engine: 'sqlserver', connectionSetting: 'S', table: 'dbo.Orders' },
    target: { engine: 'postgres', connectionSetting: 'T', table: 'public.orders' },
    keyColumns: ['Id'],
    boundary: { column: 'Id', kind: boundary },
    columns: [{ source: 'Id', target: 'id' }],
    chunkSize: 100,
  } as unknown as TransferConfig;
  return new SqlServerTransferSource(t, pool);
}

async function dataReadBatch(db: { rcsi: boolean; snapshotState: number }): Promise<string> {
  const sent: string[] = [];
  const pool = { request: async () => new StandInRequest(sent, db) } as unknown as SqlServerPool;
  const t = {
    name: 'orders',
    source: { engine: 'sqlserver', connectionSetting: 'S', table: 'dbo.Orders' },
    target: { engine: 'postgres', connectionSetting: 'T', table: 'public.orders' },
    keyColumns: ['Id'],
    boundary: { column: 'Id', kind: 'key' },
    columns: [{ source: 'Id', target: 'id' }],
    chunkSize: 100,
  } as unknown as TransferConfig;
  const source = new SqlServerTransferSource(t, pool);
  const schema = { columns: [{ name: 'Id', type: 'bigint', logical: 'int', nullable: false }] };
  const chunks = [];
  for await (const chunk of source.streamRows({ kind: 'key', low: null, high: '10' }, schema as never, 100))
    chunks.push(chunk);
  expect(chunks).toEqual([]);
  const data = sent.filter((s) => s.includes('FROM [dbo].[Orders]'));
  expect(data).toHaveLength(1);
  return data[0]!;
}

describe('sqlserver transfer source: read isolation', () => {
  it('chooses from the database settings: RCSI, else SNAPSHOT when allowed, else locking', () => {
    const cases: Array<[boolean | number, number, SourceReadIsolation]> = [
      [true, 0, 'read-committed-snapshot'],
      [1, 1, 'read-committed-snapshot'],
      [false, 1, 'snapshot'],
      [false, 3, 'locking'], // IN_TRANSITION_TO_ON still refuses SNAPSHOT transactions
      [false, 0, 'locking'],
    ];
    for (const [rcsi, snapshotState, expected] of cases)
      expect(sourceReadIsolation({ rcsi, snapshotState }), `${rcsi}/${snapshotState}`).toBe(expected);
    expect(readAtIsolation('snapshot', 'SELECT 1')).toBe('SET TRANSACTION ISOLATION LEVEL SNAPSHOT;\nSELECT 1');
    expect(readAtIsolation('locking', 'SELECT 1')).toBe('SELECT 1');
    expect(readAtIsolation('read-committed-snapshot', 'SELECT 1')).toBe('SELECT 1');
  });

  it('sends the data read as a SNAPSHOT statement only where the database allows it', async () => {
    const snapshot = await dataReadBatch({ rcsi: false, snapshotState: 1 });
    expect(snapshot).toMatch(/^SET TRANSACTION ISOLATION LEVEL SNAPSHOT;\nSELECT .* FROM \[dbo\]\.\[Orders\] WHERE /s);
    const rcsi = await dataReadBatch({ rcsi: true, snapshotState: 1 });
    expect(rcsi).toMatch(/^SELECT /);
    const locking = await dataReadBatch({ rcsi: false, snapshotState: 0 });
    expect(locking).toMatch(/^SELECT /);
  });

  // One source read (docs/transfer.md): the manifest may come from the staged rows only when the rows' one read is
  // a consistent view of the window; a locking scan can miss or repeat a row that moves while it runs.
  it('reads the window in one snapshot (one source read) only under RCSI or SNAPSHOT, and always for change windows', async () => {
    expect(await standInSource({ rcsi: true, snapshotState: 0 }).readsSnapshot()).toBe(true);
    expect(await standInSource({ rcsi: false, snapshotState: 1 }).readsSnapshot()).toBe(true);
    expect(await standInSource({ rcsi: false, snapshotState: 0 }).readsSnapshot()).toBe(false);
    expect(await standInSource({ rcsi: false, snapshotState: 3 }).readsSnapshot()).toBe(false);
    // a change window's rows are read in a SNAPSHOT transaction (which fails where the database refuses it)
    expect(await standInSource({ rcsi: false, snapshotState: 0 }, 'changes').readsSnapshot()).toBe(true);
  });
});

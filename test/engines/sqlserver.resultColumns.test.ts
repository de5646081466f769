// The rows a SQL Server procedure answers, read by the job store's and the transfer journal's own code: for the
// procedures that never ran on a server here (HeartbeatMany, the claims through PickClaimable, EnqueueMany, the
// journal's batch reads and version-fenced moves), each result SELECT of sql/sqlserver is turned into a row with
// exactly its column names (every value set, none zero, empty or false), handed to SqlServerJobStore's method (or
// SqlServerTransferJournal's) in place of the server's answer, and the object it returns must be complete: a
// column the TypeScript reads that the procedure does not return would come back 0, null, false, 'undefined', an
// empty list or an invalid date (shared/jobs/rows.ts reads a missing column that way, silently). The columns come
// from the text-level parser of sqlserver.lockOrder.ts (comments and strings tokenised away, statements split).
import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { SQLSERVER_SQL_DIR, SqlServerJobStore } from '../../shared/engines/sqlserver/jobStore.js';
import { SqlServerTransferJournal } from '../../shared/engines/sqlserver/transferJournal.js';
import type { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { parseModules, type Module, type Stmt, type Token } from './sqlserver.lockOrder.js';

const modules: Module[] = readdirSync(SQLSERVER_SQL_DIR)
  .filter((f) => /^R__.*\.sql$/.test(f))
  .flatMap((f) => parseModules(f, readFileSync(path.join(SQLSERVER_SQL_DIR, f), 'utf8')));

function* simpleStatements(body: Stmt[]): Generator<Token[]> {
  for (const s of body) {
    if (s.kind === 'simple') yield s.tokens;
    else if (s.kind === 'block') yield* simpleStatements(s.body);
    else if (s.kind === 'if') yield* simpleStatements(s.else ? [s.then, s.else] : [s.then]);
    else if (s.kind === 'while') yield* simpleStatements([s.body]);
    else yield* simpleStatements([...s.body, ...s.handler]);
  }
}

// The column names of each result set a procedure's body selects to its caller (a statement that starts with SELECT
// and assigns no variable), in order.
function resultSets(name: string): string[][] {
  const m = modules.find((x) => x.name === name.toLowerCase());
  if (!m) throw new Error(`${name} is not in sql/sqlserver`);
  const sets: string[][] = [];
  for (const t of simpleStatements(m.body)) {
    if (t[0]?.upper !== 'SELECT') continue;
    let i = 1;
    if (t[i]?.upper === 'TOP') {
      i++;
      if (t[i]?.text === '(') {
        for (let depth = 0; i < t.length; i++) {
          if (t[i]!.text === '(') depth++;
          else if (t[i]!.text === ')' && --depth === 0) break;
        }
      }
      i++;
    }
    if (t[i]?.text.startsWith('@') && t[i + 1]?.text === '=') continue; // SELECT @x = ...: no result set
    const items: Token[][] = [[]];
    for (let depth = 0; i < t.length; i++) {
      const k = t[i]!;
      if (depth === 0 && (['FROM', 'WHERE', 'ORDER', ';'].includes(k.upper) || k.text === ';')) break;
      if (k.text === '(') depth++;
      if (k.text === ')') depth--;
      if (depth === 0 && k.text === ',') items.push([]);
      else items.at(-1)!.push(k);
    }
    sets.push(
      items.map((item) => {
        const as = item.map((k) => k.upper).lastIndexOf('AS');
        return (as >= 0 ? item[as + 1]! : item.at(-1)!).text.split('.').at(-1)!;
      }),
    );
  }
  return sets;
}

const LEASE = '6f1c2a4e-8b7d-4c3e-9a1f-2b3c4d5e6f70';
// A value for a column, by its name: never 0, empty, false or null, so that a column the code reads and the row lacks
// shows in what the code returns.
const JOURNAL_VALUES: Record<string, unknown> = {
  BatchId: LEASE.toUpperCase(),
  TransferName: 'orders',
  State: 'staged',
  BoundaryKind: 'key',
  BoundaryLow: '10',
  BoundaryHigh: '20',
  SchemaHash: 'a'.repeat(64),
  SchemaColumns: '[{"name":"id"}]',
  Checksum: 'c1',
  StagedChecksum: 'c1',
  LastError: 'e',
  LastErrorCode: 'x',
  TargetReconcileToken: 'tok',
};
function valueFor(column: string): unknown {
  if (column in JOURNAL_VALUES) return JOURNAL_VALUES[column];
  if (column === 'JobId' || column === 'Id') return '41';
  if (column === 'LeaseId') return LEASE.toUpperCase(); // uniqueidentifier comes back upper case
  if (column === 'Payload') return '{"n":1}';
  if (column === 'Tags') return '["t"]';
  if (column === 'Status') return 'ok';
  if (column === 'Ord') return 0; // the input's position: the only column that may be 0
  if (/At$|Until$/.test(column)) return new Date('2026-01-02T03:04:05.006Z');
  if (/^(Queue|Type|IdempotencyKey|WorkerId)$/.test(column)) return `${column.toLowerCase()}-x`;
  if (/^(CancelRequested|Duplicate)$/.test(column)) return true;
  return 7; // counts, priorities, attempts, timeouts
}

function rowOf(columns: string[]): Record<string, unknown> {
  return Object.fromEntries(columns.map((c) => [c, valueFor(c)]));
}

// Every field set, none of the shapes a missing column takes (0, null, undefined, false, 'undefined', [], NaN date).
function incomplete(value: unknown, at = '', allowZero: readonly string[] = []): string[] {
  if (value === null || value === undefined || value === false || value === 'undefined' || value === 'null')
    return [`${at}: ${String(value)}`];
  if (typeof value === 'number')
    return Number.isNaN(value) || (value === 0 && !allowZero.includes(at)) ? [`${at}: ${value}`] : [];
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? [`${at}: invalid date`] : [];
  if (Array.isArray(value))
    return value.length === 0 ? [`${at}: []`] : value.flatMap((v, i) => incomplete(v, `${at}[${i}]`, allowZero));
  if (typeof value === 'object')
    return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) =>
      incomplete(v, at ? `${at}.${k}` : k, allowZero),
    );
  return [];
}

// The job store with its one server call replaced by the rows given per procedure (the claims' maxAttempts and
// idempotency key may be null on a server; here every column has a value).
function storeAnswering(rows: Record<string, Record<string, unknown>[]>): {
  store: SqlServerJobStore;
  called: string[];
} {
  const called: string[] = [];
  const store = Object.create(SqlServerJobStore.prototype) as SqlServerJobStore;
  Object.assign(store, {
    maxPayloadBytes: 1 << 20,
    call: async (proc: string) => {
      called.push(proc);
      const r = rows[proc];
      if (!r) throw new Error(`unexpected call of ${proc}`);
      return r;
    },
  });
  return { store, called };
}

describe('SQL Server result columns, read by the job store', () => {
  it('the parser finds the result sets (not vacuous)', () => {
    expect(resultSets('keel.HeartbeatMany')).toEqual([
      ['JobId', 'LeaseId', 'Status', 'CancelRequested', 'ZombieTimeoutSeconds'],
    ]);
    expect(resultSets('keel.EnqueueMany')).toEqual([['StoreNow']]);
    expect(resultSets('keel.PickClaimable')).toEqual([
      ['Id', 'Priority', 'RunAt', 'QueueMaxAttempts', 'QueueZombieTimeoutSeconds'],
    ]);
  });

  it('HeartbeatMany: each job that beat is ok, with its cancel flag and zombie timeout', async () => {
    const [cols] = resultSets('keel.HeartbeatMany');
    const { store, called } = storeAnswering({ heartbeat_many: [rowOf(cols!)] });
    const beats = await store.heartbeatMany([{ jobId: '41', leaseId: LEASE }]);
    expect(called).toEqual(['heartbeat_many']);
    expect(beats).toEqual([{ jobId: '41', status: 'ok', cancelRequested: true, zombieTimeoutSeconds: 7 }]);
  });

  for (const [proc, op, method] of [
    ['keel.ClaimNext', 'claim_next', 'claimNext'],
    ['keel.ClaimAndStart', 'claim_and_start', 'claimAndStart'],
    ['keel.ClaimById', 'claim_by_id', 'claimById'],
  ] as const) {
    it(`${proc}: every field of the claimed job comes from a column it returns`, async () => {
      const sets = resultSets(proc);
      expect(sets.length).toBe(1);
      const { store } = storeAnswering({ [op]: [rowOf(sets[0]!)] });
      const jobs =
        method === 'claimById'
          ? [await store.claimById('41', 'w', 60)]
          : await store[method]({ workerId: 'w', queues: ['q'], limit: 1, leaseSeconds: 60 });
      expect(jobs).toHaveLength(1);
      expect(incomplete(jobs[0])).toEqual([]);
      expect(jobs[0]!.leaseId).toBe(LEASE);
    });
  }

  it('PickDue: the picked ids', async () => {
    const sets = resultSets('keel.PickDue');
    expect(sets.at(-1)).toEqual(['JobId']);
    const { store } = storeAnswering({ pick_due: [rowOf(sets.at(-1)!)] });
    expect(await store.pickDue(['q'], 5)).toEqual(['41']);
  });

  // The transfer journal's batch rows (R__070): every procedure answering batches, through the journal's own reading
  // (snake_case names, toBatchRecord). A missing Version reads as 0, which would fence every reconcile move.
  for (const [proc, call] of [
    ['keel.TransferBatchGet', (j: SqlServerTransferJournal) => j.get(LEASE)],
    [
      'keel.TransferBatchTransition',
      (j: SqlServerTransferJournal) => j.transition(LEASE, ['staged'], 'applying', {}, 'e', {}, 7),
    ],
    ['keel.TransferBatchList', (j: SqlServerTransferJournal) => j.list({ transfer: 'orders', limit: 10 })],
    ['keel.TransferBatchStale', (j: SqlServerTransferJournal) => j.stale(['staged'], 1000, 10)],
    ['keel.TransferBatchLast', async (j: SqlServerTransferJournal) => (await j.lastForTransfer('orders')).open],
  ] as const) {
    it(`${proc}: every field of the batch record comes from a column it returns`, async () => {
      const sets = resultSets(proc);
      expect(sets.length).toBeGreaterThanOrEqual(1);
      const recordsets = sets.map((cols) => [rowOf(cols)]);
      const pool = {
        request: async () => ({ input: () => undefined, execute: async () => ({ recordsets }) }),
      } as unknown as SqlServerPool;
      const got = await call(new SqlServerTransferJournal(pool));
      const record = Array.isArray(got) ? got[0] : got;
      expect(record).toBeTruthy();
      expect(incomplete(record)).toEqual([]);
      expect(record!.version).toBe(7);
    });
  }

  it("EnqueueMany: its first result set is EnqueueJobs' (or EnqueueFlowJobs'), one row per job: id and duplicate", async () => {
    // EnqueueMany runs EnqueueJobs, which answers the batch (a flow batch: EnqueueFlowJobs does), then StoreNow.
    const firsts = [...resultSets('keel.EnqueueJobs'), ...resultSets('keel.EnqueueFlowJobs')];
    expect(firsts.length).toBeGreaterThanOrEqual(3); // the empty batch's, the batch's, the flow batch's
    for (const cols of firsts) {
      expect(cols).toEqual(['Ord', 'JobId', 'Duplicate']);
      const { store } = storeAnswering({ enqueue_many: [rowOf(cols)] });
      const out = await store.enqueueMany([{ queue: 'q', type: 't', payload: { n: 1 } }]);
      expect(incomplete(out)).toEqual([]);
      expect(out).toEqual([{ id: '41', duplicate: true }]);
    }
  });
});

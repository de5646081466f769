// The SQL Server journal's dialect without a server: a stand-in pool records each request (procedure, parameter
// names, types and values in order) and answers result sets shaped like R__070's. What is checked here is what only
// the dialect does: PascalCase names and types from JOURNAL_SQLSERVER_PARAMS, state lists as comma-separated text,
// the insert's two result sets, the last-batch pair, and rows as SQL Server returns them (uniqueidentifier
// upper-case, JSON as text, bits). The procedures themselves run in sqlserver.transferJournal.test.ts (a real server).
import { describe, expect, it } from 'vitest';
import sql from 'mssql';
import { SqlServerTransferJournal } from '../../shared/engines/sqlserver/transferJournal.js';
import type { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { JOURNAL_TEXT_MAX } from '../../shared/transfer/journalProcedures.js';

interface Sent {
  proc: string;
  params: { name: string; type: unknown; value: unknown }[];
}

function standIn(answers: Record<string, unknown>[][][]) {
  const sent: Sent[] = [];
  const pool = {
    async request() {
      const call: Sent = { proc: '', params: [] };
      return {
        input(name: string, type: unknown, value: unknown) {
          call.params.push({ name, type, value });
          return this;
        },
        async execute(proc: string) {
          call.proc = proc;
          sent.push(call);
          return { recordsets: answers.shift() ?? [] };
        },
      };
    },
  } as unknown as SqlServerPool;
  return { journal: new SqlServerTransferJournal(pool), sent };
}

const ID = '0f8fad5b-d9cb-469f-a165-70867728950e';
const row = (over: Record<string, unknown> = {}) => ({
  BatchId: ID.toUpperCase(),
  TransferName: 'orders',
  State: 'staged',
  Attempts: 2,
  BoundaryKind: 'key',
  BoundaryLow: null,
  BoundaryHigh: '50',
  SchemaHash: 'h'.repeat(64),
  SchemaColumns: '[{"name":"id","type":"bigint","logical":"int"}]',
  RowCount: '50',
  Checksum: 'c1',
  StagedCount: 50,
  StagedChecksum: 'c1',
  AppliedCount: null,
  LastError: null,
  LastErrorCode: 'E1',
  TargetReconcileToken: null,
  CreatedAt: new Date(0),
  UpdatedAt: new Date(1),
  ExtractedAt: new Date(2),
  StagedAt: null,
  ApplyStartedAt: null,
  CommittedAt: null,
  FailedAt: null,
  ...over,
});
const values = (s: Sent) => Object.fromEntries(s.params.map((p) => [p.name, p.value]));

describe('SQL Server journal dialect (stand-in pool)', () => {
  it('insert: every parameter by name and type in declaration order; the row from the second result set', async () => {
    const { journal, sent } = standIn([
      [[{ Outcome: 'inserted', ConflictBatchId: null, ConflictState: null }], [row()]],
    ]);
    const b = await journal.insertBatch({
      batchId: ID,
      transferName: 'orders',
      boundaryKind: 'key',
      boundaryLow: null,
      boundaryHigh: '50',
      schemaHash: 'h'.repeat(64),
      schemaColumns: [{ name: 'id', type: 'bigint', logical: 'int' }],
    });
    expect(sent[0]!.proc).toBe('keel.TransferBatchInsert');
    expect(sent[0]!.params.map((p) => p.name)).toEqual([
      'BatchId',
      'TransferName',
      'BoundaryKind',
      'BoundaryLow',
      'BoundaryHigh',
      'SchemaHash',
      'SchemaColumns',
      'Detail',
    ]);
    expect(sent[0]!.params[0]!.type).toBe(sql.UniqueIdentifier);
    expect(JSON.parse(String(values(sent[0]!).Detail))).toEqual({ low: null, high: '50', schemaHash: 'h'.repeat(64) });
    expect(b).toMatchObject({
      batchId: ID,
      state: 'staged',
      rowCount: 50,
      checksum: 'c1',
      stagedCount: 50,
      appliedCount: null,
      lastErrorCode: 'E1',
      schemaColumns: [{ name: 'id', type: 'bigint', logical: 'int' }],
      extractedAt: new Date(2),
      stagedAt: null,
    });
  });

  it('insert refused: the outcome alone, the conflicting id lower-cased', async () => {
    const other = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
    const { journal } = standIn([
      [[{ Outcome: 'open_batch_exists', ConflictBatchId: other.toUpperCase(), ConflictState: 'staged' }]],
    ]);
    const err = await journal
      .insertBatch({
        batchId: ID,
        transferName: 'orders',
        boundaryKind: 'key',
        boundaryLow: '50',
        boundaryHigh: '90',
        schemaHash: 'h'.repeat(64),
        schemaColumns: [],
      })
      .catch((e: unknown) => e);
    expect(isTransferError(err) && [err.code, err.detail]).toEqual(['open_batch_exists', { batchId: other }]);
  });

  it('transition: states as comma-separated text, one flag per column, last_error cut to the bound', async () => {
    const { journal, sent } = standIn([[[row({ State: 'applying', LastError: 'x' })]]]);
    const moved = await journal.transition(
      ID,
      ['staged', 'unresolved'],
      'applying',
      { lastError: 'e'.repeat(JOURNAL_TEXT_MAX.last_error + 10), incrementAttempts: true, stamp: 'apply_started_at' },
      'apply_started',
      { attempt: 3 },
    );
    expect(moved).toMatchObject({ batchId: ID, state: 'applying', lastError: 'x' });
    const v = values(sent[0]!);
    expect(sent[0]!.proc).toBe('keel.TransferBatchTransition');
    expect(v).toMatchObject({
      FromStates: 'staged,unresolved',
      ToState: 'applying',
      SetRowCount: false,
      RowCount: null,
      SetLastError: true,
      LastError: 'e'.repeat(JOURNAL_TEXT_MAX.last_error),
      SetLastErrorCode: false,
      LastErrorCode: null,
      SetTargetReconcileToken: false,
      IncrementAttempts: true,
      Stamp: 'apply_started_at',
      Event: 'apply_started',
      Detail: '{"attempt":3}',
    });
    // No row: the state did not match.
    const none = standIn([[[]]]);
    expect(await none.journal.transition(ID, ['staged'], 'applying', {}, 'x')).toBeNull();
    // A state outside the machine never reaches the server (a comma in it would widen the list).
    await expect(journal.transition(ID, ['staged,committed' as never], 'applying', {}, 'x')).rejects.toThrow(
      /from names an unknown batch state "staged,committed"/,
    );
    expect(sent).toHaveLength(1);
  });

  it('lastForTransfer: two result sets, open then committed; events and controls read from PascalCase rows', async () => {
    const committed = row({ BatchId: 'AAAAAAAA-0000-4000-8000-000000000000', State: 'committed', AppliedCount: '50' });
    const { journal, sent } = standIn([
      [[row()], [committed]],
      [
        [
          {
            EventId: '7',
            BatchId: ID.toUpperCase(),
            At: new Date(5),
            FromState: 'staged',
            ToState: 'applying',
            Event: 'apply_started',
            Detail: '{"attempt":1}',
          },
          { EventId: 8, BatchId: ID, At: new Date(6), FromState: null, ToState: null, Event: 'x', Detail: null },
        ],
      ],
      [[{ TransferName: 'orders', Paused: true, Reason: 'r', ChangedBy: null, ChangedAt: new Date(9) }]],
    ]);
    const last = await journal.lastForTransfer('orders');
    expect(last.open?.batchId).toBe(ID);
    expect(last.lastCommitted).toMatchObject({ batchId: 'aaaaaaaa-0000-4000-8000-000000000000', appliedCount: 50 });
    expect(await journal.events(ID)).toEqual([
      {
        eventId: 7,
        batchId: ID,
        at: new Date(5),
        fromState: 'staged',
        toState: 'applying',
        event: 'apply_started',
        detail: { attempt: 1 },
      },
      { eventId: 8, batchId: ID, at: new Date(6), fromState: null, toState: null, event: 'x', detail: null },
    ]);
    expect(await journal.setPaused('orders', true, 'r', 'o'.repeat(300))).toEqual({
      transferName: 'orders',
      paused: true,
      reason: 'r',
      changedBy: null,
      changedAt: new Date(9),
    });
    expect(sent.map((s) => s.proc)).toEqual([
      'keel.TransferBatchLast',
      'keel.TransferBatchEventList',
      'keel.TransferControlSet',
    ]);
    expect(values(sent[2]!).ChangedBy).toBe('o'.repeat(JOURNAL_TEXT_MAX.changed_by));
  });

  it('list and stale: limits clamped, states comma-separated', async () => {
    const { journal, sent } = standIn([[[]], [[]]]);
    await journal.list({ transfer: 'orders', state: 'failed', limit: 5000 });
    await journal.stale(['applying', 'unresolved'], -5, 0);
    expect(values(sent[0]!)).toEqual({ TransferName: 'orders', State: 'failed', AfterId: null, Limit: 1000 });
    expect(values(sent[1]!)).toEqual({ States: 'applying,unresolved', OlderThanMs: 0, Limit: 1 });
  });
});

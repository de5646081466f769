// The transfer journal over its procedures, for every engine: each operation is one call of a JOURNAL_PROCEDURES
// procedure with arguments built in journalProcedures.ts, its rows read by journalRows.ts. An engine supplies only
// its dialect: how one call runs (binding each parameter with its type, naming the result columns in snake_case).
import { TransferError } from './errors.js';
import type { BatchEvent, BatchRecord, NewBatch, TransferControl, TransferJournal } from './journal.js';
import {
  assertJournalArgs,
  controlArgs,
  insertArgs,
  listArgs,
  noteArgs,
  staleArgs,
  transitionArgs,
  type JournalArgs,
  type JournalProcedure,
} from './journalProcedures.js';
import { toBatchEvent, toBatchRecord, toInsertOutcome, toTransferControl, type JournalRow } from './journalRows.js';
import { OPEN_STATES } from './lifecycle.js';
import { baseTransferName } from './chains.js';

export abstract class ProcedureJournal implements TransferJournal {
  // The engine's name of a procedure, for messages.
  protected abstract procedureName(proc: JournalProcedure): string;
  // Runs the procedure once (one statement, its own transaction; no connection held after it) with every argument
  // bound as a typed parameter, and answers its result sets in order (a PostgreSQL function has one), each row keyed
  // by the journal's snake_case column names.
  protected abstract execute<P extends JournalProcedure>(proc: P, args: JournalArgs<P>): Promise<JournalRow[][]>;
  abstract close(): Promise<void>;

  private call<P extends JournalProcedure>(proc: P, args: JournalArgs<P>): Promise<JournalRow[][]> {
    assertJournalArgs(proc, args);
    return this.execute(proc, args);
  }

  private async batches(sets: Promise<JournalRow[][]>): Promise<BatchRecord[]> {
    return (await sets).flat().map(toBatchRecord);
  }

  async insertBatch(b: NewBatch): Promise<BatchRecord> {
    const sets = await this.call('transfer_batch_insert', insertArgs(b));
    const first = sets[0]?.[0];
    if (!first)
      throw new Error(`${this.procedureName('transfer_batch_insert')} returned no outcome for batch ${b.batchId}`);
    const { outcome, conflictId, conflictState } = toInsertOutcome(first);
    return insertOutcome(b, outcome, conflictId, conflictState, () => {
      // The inserted row: a second result set (SQL Server), or the columns beside the outcome (PostgreSQL).
      const row = sets.length > 1 ? sets[1]?.[0] : first;
      if (row?.batch_id === undefined || row.batch_id === null)
        throw new Error(
          `${this.procedureName('transfer_batch_insert')} inserted batch ${b.batchId} but returned no row`,
        );
      return toBatchRecord(row);
    });
  }

  async lastForTransfer(transferName: string) {
    // At most one open and one committed row, in one result set or two, told apart by state.
    const rows = await this.batches(this.call('transfer_batch_last', { transfer_name: transferName }));
    return {
      open: rows.find((x) => OPEN_STATES.includes(x.state)) ?? null,
      lastCommitted: rows.find((x) => x.state === 'committed') ?? null,
    };
  }

  async get(batchId: string): Promise<BatchRecord | null> {
    return (await this.batches(this.call('transfer_batch_get', { batch_id: batchId })))[0] ?? null;
  }

  list(...a: Parameters<TransferJournal['list']>): Promise<BatchRecord[]> {
    return this.batches(this.call('transfer_batch_list', listArgs(...a)));
  }

  async events(batchId: string): Promise<BatchEvent[]> {
    const [rows = []] = await this.call('transfer_batch_event_list', { batch_id: batchId });
    return rows.map(toBatchEvent);
  }

  async transition(...a: Parameters<TransferJournal['transition']>): Promise<BatchRecord | null> {
    return (await this.batches(this.call('transfer_batch_transition', transitionArgs(...a))))[0] ?? null;
  }

  async note(...a: Parameters<TransferJournal['note']>): Promise<boolean> {
    const [rows = []] = await this.call('transfer_batch_note', noteArgs(...a));
    return noteWritten(rows[0]);
  }

  stale(...a: Parameters<TransferJournal['stale']>): Promise<BatchRecord[]> {
    return this.batches(this.call('transfer_batch_stale', staleArgs(...a)));
  }

  async setPaused(...a: Parameters<TransferJournal['setPaused']>): Promise<TransferControl> {
    const [rows = []] = await this.call('transfer_control_set', controlArgs(...a));
    if (!rows[0]) throw new Error(`${this.procedureName('transfer_control_set')} returned no row for ${a[0]}`);
    return toTransferControl(rows[0]);
  }

  async controls(): Promise<TransferControl[]> {
    const [rows = []] = await this.call('transfer_control_list', {});
    return rows.map(toTransferControl);
  }

  async now(): Promise<Date> {
    const [rows = []] = await this.call('transfer_journal_now', {});
    const v = rows[0]?.journal_now;
    if (!(v instanceof Date) || Number.isNaN(v.getTime()))
      throw new Error(`${this.procedureName('transfer_journal_now')} returned no time`);
    return v;
  }
}

// A note's answer: PostgreSQL's boolean, SQL Server's bit (the row's only column, `result`).
function noteWritten(row: JournalRow | undefined): boolean {
  const v = row?.result;
  return v === true || v === 1;
}

// Windows a row can leave (an update moves its timestamp or rowversion on): a replay and the transfer's own window
// wait for each other's open batch (the insert procedures, "Replaying" in docs/transfer.md).
function replayWaits(b: NewBatch): boolean {
  return b.boundaryKind === 'timestamp' || b.boundaryKind === 'rowversion';
}

// The insert procedure answers with an outcome; this turns it into the record or the typed refusal.
export function insertOutcome(
  b: NewBatch,
  outcome: string,
  conflictId: string | null,
  conflictState: string | null,
  row: () => BatchRecord,
): BatchRecord {
  switch (outcome) {
    case 'inserted':
      return row();
    case 'duplicate_batch_id':
      throw new TransferError(
        'duplicate_batch_id',
        `batch id ${b.batchId} already exists (${conflictState}); a new batch needs a new id`,
        {
          batchId: b.batchId,
          state: conflictState,
        },
      );
    case 'transfer_paused':
      throw new TransferError(
        'transfer_paused',
        `transfer ${baseTransferName(b.transferName)} is paused; resume it first`,
      );
    case 'open_batch_exists':
      throw new TransferError(
        'open_batch_exists',
        b.transferName === baseTransferName(b.transferName)
          ? `transfer ${b.transferName} already has an open batch ${conflictId} (${conflictState})${replayWaits(b) ? ' (its own, or a replay of it)' : ''}; finish, reconcile or fail it first`
          : `transfer ${baseTransferName(b.transferName)}: batch ${conflictId} (${conflictState}) is open: a replay of (${b.boundaryLow ?? ''}, ${b.boundaryHigh}]${replayWaits(b) ? `, or the transfer's own ${b.boundaryKind} window` : ''}; watch it, or abandon it first`,
        {
          batchId: conflictId,
        },
      );
    case 'window_taken':
      throw new TransferError(
        'window_taken',
        `transfer ${b.transferName}: live batch ${conflictId} (${conflictState}) already covers the window (${b.boundaryLow ?? '-inf'}, ${b.boundaryHigh}]`,
        {
          batchId: conflictId,
        },
      );
    default:
      throw new Error(`journal insert of batch ${b.batchId}: unknown outcome ${outcome}`);
  }
}

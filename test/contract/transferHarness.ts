// What the transfer contract suites need from an engine, beside the TransferJournal, SourceAdapter and TargetAdapter
// interfaces themselves: fresh objects to test, and direct access to arrange a scenario or check the engine's
// durable state. Each engine implements the harnesses of the roles it plays in test/engines/<engine>.transfer.harness.ts
// (docs/architecture.md, "Adding an engine").
import type { TransferConfig, TransferInput } from '../../shared/transfer/config.js';
import type { TransferJournal } from '../../shared/transfer/journal.js';
import type { SourceAdapter, TargetAdapter } from '../../shared/transfer/types.js';

export interface JournalHarness {
  readonly engine: string;
  // A journal over a migrated journal schema. poolSize bounds its connections (the concurrency tests use 4).
  // Journals of one harness share one database: the suites keep apart by transfer name.
  openJournal(opts?: { poolSize?: number }): Promise<TransferJournal>;
  close(): Promise<void>;
}

// The contract's source table: key column `id` (a 64-bit integer key), `customer` (text), `amount` (decimal, 2
// places, null on every 7th row), `flag` (boolean). Rows are numbered: row n has id n.
export interface SourceHarness {
  readonly engine: string;
  // A new, empty source table; `source` is its configuration (engine, connection setting, table).
  createTable(): Promise<{ source: TransferInput['source']; table: string }>;
  // Inserts rows from..to (ids) into the table made by createTable.
  insertRows(table: string, from: number, to: number): Promise<void>;
  // Changes the content of one row (not its key).
  updateRow(table: string, id: number): Promise<void>;
  openSource(t: TransferConfig): Promise<SourceAdapter>;
  close(): Promise<void>;
}

// The contract's target table holds the columns of test/transfer/helpers.ts ORDERS_DDL (id bigint key, customer,
// amount numeric(12,2), placed_at timestamptz, flag, note, payload bytes), named as the engine names them. The rows
// come from a PostgreSQL source on the run's embedded server and the journal is PostgreSQL's, so a target harness
// is all an engine adds to run the target contract.
export interface TargetHarness {
  readonly engine: string;
  // A new, empty target table (and the engine's transfer objects, migrated); `target` is its configuration and
  // `column` the target's name of each source column.
  createTable(): Promise<{ target: TransferInput['target']; column: (source: string) => string }>;
  // A target adapter with its own connections: two of them act as two processes.
  openTarget(t: TransferConfig): Promise<TargetAdapter>;
  // Rows in the target table.
  countRows(t: TransferConfig): Promise<number>;
  // The batch's completion row on the target, as the engine records it.
  completion(batchId: string): Promise<{ state: 'claimed' | 'committed' | 'fenced'; fencedThrough: number } | null>;
  // Holds what serializes apply and reconcile for this batch in an open transaction of another session (an apply
  // that is still running), until release() rolls it back.
  holdClaim(batchId: string, transfer: string): Promise<{ release(): Promise<void> }>;
  // Ends every session now running an apply on this target (the connection cut mid-apply), without touching the
  // sessions of holdClaim. The server rolls the apply back.
  cutApplies(): Promise<void>;
  close(): Promise<void>;
}

// What the transfer contract suites need from an engine, beside the TransferJournal, SourceAdapter and TargetAdapter
// interfaces themselves: fresh objects to test, and direct access to arrange a scenario or check the engine's
// durable state. Each engine implements the harnesses of the roles it plays in test/engines/<engine>.transfer.harness.ts
// (docs/architecture.md, "Adding an engine").
import type { LogicalType } from '../../shared/transfer/checksum.js';
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
  // An operator's ALTER TABLE after prepare: the target's amount column from scale 2 to scale 1 (the table is empty).
  narrowAmountScale(t: TransferConfig): Promise<void>;
  // The batch's completion row on the target, as the engine records it.
  completion(batchId: string): Promise<{ state: 'claimed' | 'committed' | 'fenced'; fencedThrough: number } | null>;
  // Holds what serializes apply and reconcile for this batch in an open transaction of another session (an apply
  // that is still running), until release() rolls it back.
  holdClaim(batchId: string, transfer: string): Promise<{ release(): Promise<void> }>;
  // Ends every session now running an apply on this target (the connection cut mid-apply), without touching the
  // sessions of holdClaim. The server rolls the apply back.
  cutApplies(): Promise<void>;
  // Engines that can see it: resolves once an apply on this target waits on the server behind holdClaim (bounded;
  // throws past it). Without it the contract gives the call a moment to get there.
  untilApplyWaits?(): Promise<void>;
  close(): Promise<void>;
}

// The data cases of the canonical-row path (test/contract/canonicalRowsContract.ts): a table of declared columns per
// case, in each engine's own types. The key column is `id`, a 64-bit integer.
export interface CaseColumn {
  name: string; // as the source names it (lower case); a target names it as its harness's column() says
  type: string; // the engine's declared type, e.g. "varchar(20)", "VARCHAR2(20 CHAR)", "datetimeoffset(6)"
  notNull?: boolean;
  key?: boolean;
}

// A source of the data cases. Values are the engine's text input for the column's type, except bytes: hex digits.
export interface DataCaseSourceHarness {
  readonly engine: string;
  createCaseTable(columns: CaseColumn[], rows: (string | null)[][]): Promise<TransferInput['source']>;
  // A source adapter that sends canonical rows under keel-v1, what the Oracle target receives, even where the engine
  // offers a native bulk stream or its own checksum.
  openRowSource(t: TransferConfig): Promise<SourceAdapter>;
  close(): Promise<void>;
}

// A target of the data cases.
export interface DataCaseTargetHarness {
  readonly engine: string;
  createCaseTable(columns: CaseColumn[]): Promise<TransferInput['target']>;
  column(source: string): string;
  openTarget(t: TransferConfig): Promise<TargetAdapter>;
  // The target table's rows as canonical text (shared/transfer/checksum.ts), in key order: what was stored.
  readRows(
    t: TransferConfig,
    columns: { target: string; type: string; logical: LogicalType }[],
  ): Promise<(string | null)[][]>;
  close(): Promise<void>;
}

// The source as the Oracle target sees every source: canonical rows (no bulk stream) under keel-v1 (no engine
// checksum), whatever the engine offers (a PostgreSQL source would otherwise send COPY under keel-pg2 to a
// PostgreSQL target, which bypasses exactly the code that differs).
export function canonicalRowsOnly(source: SourceAdapter): SourceAdapter {
  return {
    engine: source.engine,
    readSchema: () => source.readSchema(),
    nextWindow: (low, maxRows) => source.nextWindow(low, maxRows),
    manifest: (w, schema, algorithm) => source.manifest(w, schema, algorithm),
    checksumAlgorithms: async () => ['keel-v1'],
    streamRows: (w, schema, chunkSize) => source.streamRows(w, schema, chunkSize),
    ...(source.rowsAfter ? { rowsAfter: source.rowsAfter.bind(source) } : {}),
    close: () => source.close(),
  };
}

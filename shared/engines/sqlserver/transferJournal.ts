// SQL Server dialect of the transfer journal (shared/transfer/procedureJournal.ts): every read and write is one
// stored procedure of sql/sqlserver/R__070_transfer_journal.sql through the typed table below (the app role
// keel_executor has EXECUTE only, no table rights), each call one request on the pool (no connection is held
// between calls; XACT_ABORT rolls a cut call back).
// Exercised by test/engines/sqlserver.transferJournal.test.ts against a server (KEEL_TEST_MSSQL_URL; skipped with the
// reason when unset) and, without one, by test/engines/sqlserver.journalDialect.test.ts.
import sql from 'mssql';
import {
  JOURNAL_PROCEDURES,
  JOURNAL_TEXT_MAX,
  type JournalArgs,
  type JournalParam,
  type JournalProcedure,
  type JournalValue,
} from '../../transfer/journalProcedures.js';
import type { JournalRow } from '../../transfer/journalRows.js';
import { ProcedureJournal } from '../../transfer/procedureJournal.js';
import { pascalCase, type Pascal } from '../../jobs/procedures.js';
import type { SqlServerPool } from './pool.js';

type ParamType = Parameters<sql.Request['input']>[1];

// The SQL Server side of JOURNAL_PROCEDURES: keel.<PascalName> and the type of each @<PascalParam>, in declaration
// order (test/engines/parity.test.ts checks it against the parsed T-SQL).
const PATCH_TYPES = {
  SetLastError: sql.Bit,
  LastError: sql.NVarChar(JOURNAL_TEXT_MAX.last_error),
  SetLastErrorCode: sql.Bit,
  LastErrorCode: sql.VarChar(JOURNAL_TEXT_MAX.last_error_code),
  SetTargetReconcileToken: sql.Bit,
  TargetReconcileToken: sql.VarChar(512),
};

export const JOURNAL_SQLSERVER_PARAMS: {
  [P in JournalProcedure]: { [K in Pascal<JournalParam<P>>]: ParamType };
} = {
  transfer_batch_insert: {
    BatchId: sql.UniqueIdentifier,
    TransferName: sql.NVarChar(64),
    BoundaryKind: sql.VarChar(12),
    BoundaryLow: sql.NVarChar(64),
    BoundaryHigh: sql.NVarChar(64),
    SchemaHash: sql.Char(64),
    SchemaColumns: sql.NVarChar(sql.MAX),
    Detail: sql.NVarChar(sql.MAX),
  },
  transfer_batch_transition: {
    BatchId: sql.UniqueIdentifier,
    FromStates: sql.VarChar(100),
    ToState: sql.VarChar(12),
    SetRowCount: sql.Bit,
    RowCount: sql.BigInt,
    SetChecksum: sql.Bit,
    Checksum: sql.VarChar(24),
    SetStagedCount: sql.Bit,
    StagedCount: sql.BigInt,
    SetStagedChecksum: sql.Bit,
    StagedChecksum: sql.VarChar(24),
    SetAppliedCount: sql.Bit,
    AppliedCount: sql.BigInt,
    ...PATCH_TYPES,
    IncrementAttempts: sql.Bit,
    Stamp: sql.VarChar(20),
    Event: sql.VarChar(64),
    Detail: sql.NVarChar(sql.MAX),
    IfVersion: sql.BigInt,
  },
  transfer_batch_note: {
    BatchId: sql.UniqueIdentifier,
    Event: sql.VarChar(64),
    Detail: sql.NVarChar(sql.MAX),
    ...PATCH_TYPES,
    IfVersion: sql.BigInt,
  },
  transfer_batch_get: { BatchId: sql.UniqueIdentifier },
  transfer_batch_last: { TransferName: sql.NVarChar(64) },
  transfer_batch_list: {
    TransferName: sql.NVarChar(64),
    State: sql.VarChar(12),
    AfterId: sql.UniqueIdentifier,
    Limit: sql.Int,
  },
  transfer_batch_event_list: { BatchId: sql.UniqueIdentifier },
  transfer_batch_stale: { States: sql.VarChar(100), OlderThanMs: sql.BigInt, Limit: sql.Int },
  transfer_control_set: {
    TransferName: sql.NVarChar(64),
    Paused: sql.Bit,
    Reason: sql.NVarChar(JOURNAL_TEXT_MAX.reason),
    ChangedBy: sql.NVarChar(JOURNAL_TEXT_MAX.changed_by),
  },
  transfer_control_list: {},
  transfer_journal_now: {},
};

// Result columns are the journal's snake_case names in PascalCase (R__070 aliases the ones it stores under other
// names): BatchId -> batch_id.
const snakeNames = new Map<string, string>();
function snakeKeys(row: JournalRow): JournalRow {
  const out: JournalRow = {};
  for (const key of Object.keys(row)) {
    let name = snakeNames.get(key);
    if (name === undefined) snakeNames.set(key, (name = key.replace(/(?<!^)([A-Z])/g, '_$1').toLowerCase()));
    out[name] = row[key];
  }
  return out;
}

export class SqlServerTransferJournal extends ProcedureJournal {
  constructor(private readonly pool: SqlServerPool) {
    super();
  }

  protected procedureName(proc: JournalProcedure): string {
    return `keel.${pascalCase(proc)}`;
  }

  protected async execute<P extends JournalProcedure>(proc: P, args: JournalArgs<P>): Promise<JournalRow[][]> {
    const types = JOURNAL_SQLSERVER_PARAMS[proc] as Record<string, ParamType>;
    const values = args as Record<string, JournalValue>;
    const req = await this.pool.request();
    for (const param of JOURNAL_PROCEDURES[proc] as readonly string[]) {
      const v = values[param];
      // A list of states travels as one comma-separated varchar (the procedures match ',' + State + ',').
      req.input(pascalCase(param), types[pascalCase(param)]!, Array.isArray(v) ? v.join(',') : v);
    }
    const res = await req.execute(this.procedureName(proc));
    return ((res.recordsets ?? []) as unknown as JournalRow[][]).map((set) => set.map(snakeKeys));
  }

  async close(): Promise<void> {
    // The pool is shared per process and closed by the host.
  }
}

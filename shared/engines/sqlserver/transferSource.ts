// SQL Server transfer source (mssql): schema from sys.dm_exec_describe_first_result_set, rowversion windows bounded
// by MIN_ACTIVE_ROWVERSION() (or key windows), rows streamed with request.pause()/resume() so memory stays
// bounded by one chunk, and the keel-v1 checksum computed in TypeScript over canonical texts (the T-SQL returns
// exact strings for decimals and date/time types; shared/transfer/checksum.ts normalizes them).
// NOT RUN HERE: exercised by test/transfer/sqlserver.test.ts when KEEL_TEST_MSSQL_URL is set.
import sql from 'mssql';
import {
  ChecksumAccumulator,
  canonicalValue,
  type CanonicalRow,
  type ChecksumAlgorithm,
  type LogicalType,
} from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { boundaryColumn, resolvedNames } from '../../transfer/config.js';
import { qualifiedMssql, quoteMssql, type QualifiedName } from '../../transfer/identifiers.js';
import {
  baselineBound,
  baselineKeyRange,
  carriesChanges,
  changeLowVersion,
  isBaseline,
  parseBaselineBound,
  OP_COLUMN,
  OP_DELETE,
  OP_UPSERT,
} from '../../transfer/changes.js';
import { TransferError } from '../../transfer/errors.js';
import { buildSourceSchema, mappedColumns } from '../../transfer/schema.js';
import type { KeyTuple, Manifest, SourceAdapter, SourceSchema, TypeFacets, Window } from '../../transfer/types.js';
import { sharedSqlServerPool, type SqlServerPool } from './pool.js';
import { DEFAULT_TRANSFER_TIMEOUTS, type TransferTimeouts } from '../../transfer/timeouts.js';

// Whether a string's UTF-16 units are Unicode text (no unpaired surrogate).
const LONE_SURROGATE = /\p{Cs}/u;
function wellFormed(v: string): boolean {
  return !LONE_SURROGATE.test(v);
}

// The transfer's own pool (application name keel-transfer): connect timeout, and the request timeout as the
// statement timeout (tedious fails a request that has not completed in time, streaming ones included, and cancels it
// on the server). SQL Server has no idle-in-transaction timeout; the source reads run without an explicit transaction.
export function createMssqlPool(
  connection: string,
  timeouts: TransferTimeouts = DEFAULT_TRANSFER_TIMEOUTS,
): SqlServerPool {
  return sharedSqlServerPool(connection, {
    applicationName: 'keel-transfer',
    role: 'transfer',
    connectTimeoutMs: timeouts.connectMs,
    requestTimeoutMs: timeouts.statementMs,
  });
}

export function mssqlLogicalType(declared: string): LogicalType | null {
  const t = declared.toLowerCase().replace(/\(.*$/, '').trim();
  if (['tinyint', 'smallint', 'int', 'bigint'].includes(t)) return 'int';
  if (['decimal', 'numeric', 'money', 'smallmoney'].includes(t)) return 'decimal';
  if (t === 'float' || t === 'real') return 'float'; // only through a declared float policy
  if (['char', 'varchar', 'nchar', 'nvarchar'].includes(t)) return 'text';
  if (t === 'bit') return 'bool';
  if (t === 'date') return 'date';
  if (['datetime', 'datetime2', 'smalldatetime'].includes(t)) return 'timestamp';
  if (t === 'datetimeoffset') return 'timestamptz';
  if (['binary', 'varbinary'].includes(t)) return 'bytes';
  if (t === 'uniqueidentifier') return 'uuid';
  return null; // rowversion/timestamp: usable as a boundary only
}

// The bounds of a declared SQL Server type (system_type_name), for prepare's checks on the target. UTF-8 bytes at most:
// char/varchar(n) hold n bytes of their code page, each at most 3 bytes in UTF-8 (n with a _UTF8 collation, which
// this does not see); nchar/nvarchar(n) hold n UTF-16 code units, each at most 3 bytes in UTF-8. char(n) and nchar(n)
// arrive blank-padded to n (the driver returns them as stored), and stay padded in canonical text.
export function mssqlFacets(declared: string, logical: LogicalType): TypeFacets {
  const t = declared.toLowerCase().trim();
  const base = t.replace(/\(.*$/, '').trim();
  const n = /\((max|\d+)(?:,\s*(\d+))?\)/.exec(t);
  const len = n && n[1] !== 'max' ? Number(n[1]) : null;
  switch (logical) {
    case 'text':
      return { maxChars: len, maxBytes: len === null ? null : 3 * len, fixed: base === 'char' || base === 'nchar' };
    case 'int':
      return { intBits: base === 'tinyint' ? 8 : base === 'smallint' ? 16 : base === 'int' ? 32 : 64 };
    case 'decimal':
      if (base === 'money') return { precision: 19, scale: 4 };
      if (base === 'smallmoney') return { precision: 10, scale: 4 };
      return { precision: len ?? 18, scale: n?.[2] !== undefined ? Number(n[2]) : 0 };
    case 'timestamp':
      // datetime's 1/300 s ticks read as .xxx3333 (datetime2(7)); smalldatetime has whole minutes
      return { fraction: base === 'smalldatetime' ? 0 : base === 'datetime' ? 7 : (len ?? 7) };
    case 'timestamptz':
      return { fraction: len ?? 7 };
    case 'bytes':
      return { maxBytes: len };
    default:
      return {};
  }
}

// How the data reads of a window see the source (review F9). Under SQL Server's default locking READ COMMITTED a
// scan takes shared locks row by row: it waits behind every writer's uncommitted row, and while the stream is paused
// for backpressure it keeps blocking the writer of its current row. With READ_COMMITTED_SNAPSHOT ON the same reads
// use row versions and never block. Without it, a database with ALLOW_SNAPSHOT_ISOLATION ON lets each data read run
// as its own SNAPSHOT statement (one consistent, non-blocking view of the window). Otherwise the reads fall back to
// locking READ COMMITTED (docs/sqlserver.md, "Transfer source").
export type SourceReadIsolation = 'read-committed-snapshot' | 'snapshot' | 'locking';

export function sourceReadIsolation(db: { rcsi: boolean | number; snapshotState: number }): SourceReadIsolation {
  if (db.rcsi === true || db.rcsi === 1) return 'read-committed-snapshot';
  // sys.databases.snapshot_isolation_state: 0 OFF, 1 ON, 2 turning off, 3 turning on (only 1 accepts SNAPSHOT).
  return db.snapshotState === 1 ? 'snapshot' : 'locking';
}

// The batch text of a data read at that isolation. The request has parameters, so mssql sends it through
// sp_executesql, and a SET TRANSACTION ISOLATION LEVEL inside it lasts only to the end of that call (as in a
// procedure): the pooled connection keeps its own level, also when the read is cancelled half way.
export function readAtIsolation(isolation: SourceReadIsolation, select: string): string {
  return isolation === 'snapshot' ? `SET TRANSACTION ISOLATION LEVEL SNAPSHOT;\n${select}` : select;
}

const isRowversion = (declared: string) => /^(rowversion|timestamp)$/i.test(declared.trim());

// The select expression that returns a value the canonicalizer can read exactly.
export function mssqlSelectExpr(ref: string, type: LogicalType, declared = ''): string {
  switch (type) {
    case 'decimal':
      // Exact digits, not a JavaScript double. money/smallmoney need style 2 (four decimals): the default style 0
      // rounds them to two decimals, and that rounded text would be staged and checksummed on both sides alike.
      return /^(small)?money$/i.test(declared.trim())
        ? `CONVERT(varchar(64), ${ref}, 2)`
        : `CONVERT(varchar(64), ${ref})`;
    case 'date':
      return `CONVERT(char(10), ${ref}, 23)`;
    case 'timestamp':
      return `CONVERT(varchar(27), CONVERT(datetime2(7), ${ref}), 126)`;
    case 'timestamptz':
      return `CONVERT(varchar(34), SWITCHOFFSET(${ref}, '+00:00'), 127)`;
    case 'int':
      return `CONVERT(varchar(20), ${ref})`;
    default:
      return ref;
  }
}

// SQL Server error numbers of the change-tracking reads.
const SNAPSHOT_NOT_ALLOWED = 3952; // ALLOW_SNAPSHOT_ISOLATION is OFF
const CT_NOT_ENABLED = 22105; // change tracking is not enabled on the table (CHANGETABLE)

function mssqlNumber(err: unknown): number | undefined {
  const e = err as { number?: unknown; originalError?: { info?: { number?: unknown } } } | null;
  const n = e?.number ?? e?.originalError?.info?.number;
  return typeof n === 'number' ? n : undefined;
}

// The T-SQL of a change window (shared/transfer/changes.ts) over Change Tracking: every key whose latest change has
// a version in (@low, @high] (CHANGETABLE(CHANGES t, @low) gives each key once, with its latest version), with its
// operation; an insert or update is read from the table as it is in the same snapshot. A baseline reads the table
// (a windowed baseline's key window: the rows whose first key column is in (@klow, @khigh], keyRange saying which
// bound is set). cols: the mapped columns' select expressions (mssqlSelectExpr) applied to a column reference.
export function mssqlChangesSelect(
  table: string,
  keys: readonly string[],
  mapped: readonly { source: string; expr: (ref: string) => string }[],
  baseline: boolean,
  keyRange: { low: boolean; high: boolean } | null = null,
): string {
  if (baseline) {
    const k = `b.${quoteMssql(keys[0]!)}`;
    const parts = [...(keyRange?.low ? [`${k} > @klow`] : []), ...(keyRange?.high ? [`${k} <= @khigh`] : [])];
    return `SELECT ${mapped.map((c) => c.expr(`b.${quoteMssql(c.source)}`)).join(', ')}, '${OP_UPSERT}' AS ${OP_COLUMN} FROM ${table} AS b${parts.length ? ` WHERE ${parts.join(' AND ')}` : ''}`;
  }
  const cols = mapped.map((c) =>
    keys.includes(c.source)
      ? c.expr(`ct.${quoteMssql(c.source)}`)
      : `CASE WHEN ct.SYS_CHANGE_OPERATION <> N'${OP_DELETE}' THEN ${c.expr(`b.${quoteMssql(c.source)}`)} END`,
  );
  const k0 = quoteMssql(keys[0]!);
  return `SELECT ${cols.join(', ')},
       CASE WHEN ct.SYS_CHANGE_OPERATION <> N'${OP_DELETE}' AND b.${k0} IS NOT NULL THEN '${OP_UPSERT}' ELSE '${OP_DELETE}' END AS ${OP_COLUMN}
  FROM CHANGETABLE(CHANGES ${table}, @low) AS ct
  LEFT JOIN ${table} AS b ON ${keys.map((k) => `b.${quoteMssql(k)} = ct.${quoteMssql(k)}`).join(' AND ')}
 WHERE ct.SYS_CHANGE_VERSION <= @high`;
}

// A windowed baseline's next key window (changes.ts): the maxRows-th key after @after (without it: from the first
// key) and the one after it, in one ordered seek of the key's index (the primary key, which Change Tracking needs).
// Two rows: the first is the window's top; fewer: at most maxRows rows are left, the last window.
export function mssqlBaselineWindowSelect(table: string, key: string, after: boolean): string {
  const k = quoteMssql(key);
  return `SELECT CONVERT(varchar(20), ${k}) AS k FROM ${table} WHERE ${k} IS NOT NULL${after ? ` AND ${k} > @after` : ''}
   ORDER BY ${k} OFFSET (@n - 1) ROWS FETCH NEXT 2 ROWS ONLY`;
}

export class SqlServerTransferSource implements SourceAdapter {
  readonly engine = 'sqlserver';
  readonly windowsBaselines = true; // nextChangeWindow: key windows over an integer keyColumns[0] (Change Tracking)
  private readonly from: string;
  private readonly table: QualifiedName | null;
  private boundaryDeclared: string | null = null; // declared type of the boundary column (from readSchema)
  private isolation: SourceReadIsolation | null = null; // how data reads see the source (from readSchema)

  constructor(
    private readonly t: TransferConfig,
    private readonly pool: SqlServerPool,
  ) {
    const names = resolvedNames(t);
    this.table = names.sourceTable;
    this.from = names.sourceTable ? qualifiedMssql(names.sourceTable) : `(${t.source.query}) AS keel_src`;
  }

  async readSchema(): Promise<SourceSchema> {
    const req = await this.pool.request();
    req.input('tsql', sql.NVarChar(sql.MAX), `SELECT * FROM ${this.from}`);
    const res = await req.query<{ name: string; system_type_name: string; is_nullable: boolean | null }>(
      `SELECT name, system_type_name, is_nullable FROM sys.dm_exec_describe_first_result_set(@tsql, NULL, 0) WHERE is_hidden = 0 ORDER BY column_ordinal`,
    );
    const found = new Map<string, string>();
    const nullable = new Map<string, boolean>();
    for (const r of res.recordset) {
      found.set(r.name, r.system_type_name);
      if (r.is_nullable !== null && r.is_nullable !== undefined) nullable.set(r.name, Boolean(r.is_nullable));
    }
    const schema = buildSourceSchema(
      this.t,
      found,
      mssqlLogicalType,
      (declared, logical) =>
        this.t.boundary.kind === 'rowversion'
          ? isRowversion(declared)
          : this.t.boundary.kind === 'key'
            ? logical === 'int'
            : logical === 'timestamp' || logical === 'timestamptz',
      mssqlFacets,
      nullable,
    );
    this.boundaryDeclared = this.t.boundary.column === undefined ? null : (found.get(this.t.boundary.column) ?? null);
    this.isolation = await this.readIsolation();
    return schema;
  }

  // The current database's row-versioning settings (sys.databases is readable by every user for its own database).
  async readIsolation(): Promise<SourceReadIsolation> {
    const res = await (
      await this.pool.request()
    ).query<{ rcsi: boolean; snapshotState: number }>(
      `SELECT is_read_committed_snapshot_on AS rcsi, CONVERT(int, snapshot_isolation_state) AS snapshotState
       FROM sys.databases WHERE database_id = DB_ID()`,
    );
    const row = res.recordset[0];
    return row ? sourceReadIsolation(row) : 'locking';
  }

  // Boundary values travel as bigint (key, rowversion read as a big-endian 8-byte integer) or text (timestamps).
  private boundaryRef(): string {
    const b = quoteMssql(boundaryColumn(this.t));
    return this.t.boundary.kind === 'rowversion' ? `CONVERT(bigint, ${b})` : b;
  }

  private bindBoundary(req: sql.Request, name: string, value: string): void {
    if (this.t.boundary.kind === 'timestamp') req.input(name, sql.NVarChar(40), value);
    else req.input(name, sql.BigInt, value);
  }

  private boundaryParam(name: string): string {
    if (this.t.boundary.kind === 'timestamp') return `CONVERT(datetime2(7), LEFT(@${name}, 26), 126)`;
    return this.t.boundary.kind === 'rowversion' ? `CONVERT(binary(8), @${name})` : `@${name}`;
  }

  private windowPredicate(req: sql.Request, w: Window): string {
    const b = quoteMssql(boundaryColumn(this.t));
    const parts: string[] = [];
    if (w.low !== null) {
      this.bindBoundary(req, 'low', w.low);
      parts.push(`${b} > ${this.boundaryParam('low')}`);
    }
    this.bindBoundary(req, 'high', w.high);
    parts.push(`${b} <= ${this.boundaryParam('high')}`);
    return parts.join(' AND ');
  }

  // ---- change windows: SQL Server Change Tracking (shared/transfer/changes.ts) ----

  // A SNAPSHOT transaction on one connection of the pool: the version reads and the window's rows see one consistent
  // state (Microsoft's pattern for Change Tracking), and a reader that stops early rolls back on the same connection.
  private async snapshot(): Promise<sql.Transaction> {
    const tx = new sql.Transaction(await this.pool.get());
    try {
      await tx.begin(sql.ISOLATION_LEVEL.SNAPSHOT);
    } catch (err) {
      throw this.changesError(err);
    }
    return tx;
  }

  private changesError(err: unknown): unknown {
    const n = mssqlNumber(err);
    if (n === SNAPSHOT_NOT_ALLOWED)
      return new TransferError(
        'changes_not_enabled',
        `transfer ${this.t.name}: changes windows read Change Tracking in a SNAPSHOT transaction, and the source database does not allow it: ALTER DATABASE ... SET ALLOW_SNAPSHOT_ISOLATION ON (docs/transfer.md, "Deletes")`,
      );
    if (n === CT_NOT_ENABLED) return this.notEnabled();
    return err;
  }

  private notEnabled(): TransferError {
    return new TransferError(
      'changes_not_enabled',
      `transfer ${this.t.name}: Change Tracking is not enabled on ${this.t.source.table}: ALTER DATABASE ... SET CHANGE_TRACKING = ON (CHANGE_RETENTION = 7 DAYS, AUTO_CLEANUP = ON); ALTER TABLE ${this.t.source.table} ENABLE CHANGE_TRACKING (docs/transfer.md, "Deletes")`,
    );
  }

  // CHANGE_TRACKING_CURRENT_VERSION() and CHANGE_TRACKING_MIN_VALID_VERSION(OBJECT_ID(table)) in the transaction, and
  // the window's low checked against the min valid version: a window that starts before it fails 'changes_expired'
  // (its deletes may have been cleaned up), terminal for that window.
  private async versions(tx: sql.Transaction, low: string | null): Promise<{ current: string; minValid: string }> {
    const req = new sql.Request(tx);
    req.input('table', sql.NVarChar(300), qualifiedMssql(this.table!));
    const res = await req.query<{ cur: string | null; minValid: string | null; pk: string | null }>(
      `SELECT CONVERT(varchar(20), CHANGE_TRACKING_CURRENT_VERSION()) AS cur,
              CONVERT(varchar(20), CHANGE_TRACKING_MIN_VALID_VERSION(OBJECT_ID(@table))) AS minValid,
              (SELECT STRING_AGG(CONVERT(nvarchar(max), c.name), N',') WITHIN GROUP (ORDER BY c.name)
                 FROM sys.indexes AS i
                 JOIN sys.index_columns AS ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id
                 JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
                WHERE i.object_id = OBJECT_ID(@table) AND i.is_primary_key = 1) AS pk`,
    );
    const row = res.recordset[0];
    if (!row?.cur || !row.minValid) throw this.notEnabled();
    // CHANGETABLE reports the primary key's columns: the transfer's keys must be exactly those.
    // (names compared case-insensitively, as SQL Server's default collations do)
    const keys = this.t.keyColumns
      .map((k) => k.toLowerCase())
      .sort()
      .join(',');
    if (
      (row.pk ?? '')
        .split(',')
        .map((k) => k.toLowerCase())
        .sort()
        .join(',') !== keys
    )
      throw new TransferError(
        'changes_not_enabled',
        `transfer ${this.t.name}: keyColumns (${this.t.keyColumns.join(', ')}) must be the primary key of ${this.t.source.table} (${row.pk ?? 'none'}), which Change Tracking reports`,
      );
    // A windowed baseline's next window: the changes after its version are read once it ends, so they must still be
    // there (an expired baseline fails at its next window instead of finishing for nothing).
    const baseline = parseBaselineBound(low);
    const from = baseline ? BigInt(baseline.version) : changeLowVersion(low);
    if (from !== null && from < BigInt(row.minValid))
      throw new TransferError(
        'changes_expired',
        `transfer ${this.t.name}: ${baseline ? `the baseline in progress (windowed) reads the changes after version ${from} once it ends` : `the change window starts after version ${from}`}, but Change Tracking keeps changes of ${this.t.source.table} only after version ${row.minValid} (CHANGE_TRACKING_MIN_VALID_VERSION; the retention period cleaned up older ones, or the table was truncated), so deletes in between cannot be known. Re-baseline the transfer (POST /api/ops/transfers/${this.t.name}/rebaseline, docs/runbook.md)`,
        { low: String(from), minValidVersion: row.minValid },
      );
    return { current: row.cur, minValid: row.minValid };
  }

  private async nextChangeWindow(low: string | null, maxRows: number, windowed: boolean): Promise<Window | null> {
    // The baseline runs in key windows when the first key column is an integer (the target mirrors key ranges).
    const keyIsInt =
      windowed &&
      low === null &&
      (await this.readSchema()).columns.find((c) => c.name === this.t.keyColumns[0])?.logical === 'int';
    const tx = await this.snapshot();
    try {
      // A windowed baseline's next key window: its version (in the bound) checked against the min valid version.
      const { current } = await this.versions(tx, low);
      const b = parseBaselineBound(low);
      if (b || keyIsInt) {
        // The first key window: the version just captured, before the window is chosen (the same snapshot); every
        // change committed after it is read by the change windows.
        const w = await this.nextBaselineWindow(tx, low, b ? b.version : current, b ? b.key : null, maxRows);
        await tx.commit();
        return w;
      }
      let high: string | null = current;
      if (low !== null) {
        const req = new sql.Request(tx);
        req.input('low', sql.BigInt, low);
        req.input('cur', sql.BigInt, current);
        req.input('n', sql.Int, maxRows);
        const res = await req.query<{ high: string | null }>(
          `SELECT CONVERT(varchar(20), MAX(v)) AS high FROM (
             SELECT TOP (@n) ct.SYS_CHANGE_VERSION AS v FROM CHANGETABLE(CHANGES ${qualifiedMssql(this.table!)}, @low) AS ct
              WHERE ct.SYS_CHANGE_VERSION <= @cur ORDER BY ct.SYS_CHANGE_VERSION) AS s`,
        );
        high = res.recordset[0]?.high ?? null;
      }
      await tx.commit();
      return high === null ? null : { kind: 'changes', low, high }; // low null: the baseline, at the current version
    } catch (err) {
      await tx.rollback().catch(() => undefined);
      throw this.changesError(err);
    }
  }

  // A windowed baseline's next key window after `after` (null: from the first key): up to the maxRows-th key, or, when
  // no more than maxRows rows are left, the last window: open above, high = the version (the next window is the first
  // change window).
  private async nextBaselineWindow(
    tx: sql.Transaction,
    low: string | null,
    version: string,
    after: string | null,
    maxRows: number,
  ): Promise<Window> {
    const req = new sql.Request(tx);
    req.input('n', sql.Int, Math.max(1, Math.min(2_147_483_647, Math.trunc(maxRows))));
    if (after !== null) req.input('after', sql.BigInt, after);
    const res = await req.query<{ k: string }>(
      mssqlBaselineWindowSelect(qualifiedMssql(this.table!), this.t.keyColumns[0]!, after !== null),
    );
    const top = res.recordset.length === 2 ? res.recordset[0]!.k : null;
    return { kind: 'changes', low, high: top === null ? version : baselineBound(version, top) };
  }

  // The rows a next window may take (binds @low, @settle on req): boundary set, after low, committed (rowversion)
  // or settled (timestamp).
  private afterConditions(req: sql.Request, low: string | null): string[] {
    const b = quoteMssql(boundaryColumn(this.t));
    const conds = [`${b} IS NOT NULL`];
    if (low !== null) {
      this.bindBoundary(req, 'low', low);
      conds.push(`${b} > ${this.boundaryParam('low')}`);
    }
    if (this.t.boundary.kind === 'rowversion') {
      // Rows at or above the lowest active rowversion may belong to transactions still in flight.
      conds.push(`${b} < MIN_ACTIVE_ROWVERSION()`);
    } else if (this.t.boundary.kind === 'timestamp') {
      req.input('settle', sql.Int, Math.trunc(this.t.boundary.settleMs));
      conds.push(`${b} <= DATEADD(millisecond, -@settle, SYSUTCDATETIME())`);
    }
    return conds;
  }

  async rowsAfter(low: string | null, cap: number): Promise<number> {
    const req = await this.pool.request();
    req.input('cap', sql.Int, Math.max(0, Math.min(2_147_483_647, Math.trunc(cap))));
    if (carriesChanges(this.t)) {
      // A change window's low is a Change Tracking version: the keys changed after it (CHANGETABLE reports each key
      // once), or before the baseline the rows of the table (during a windowed baseline: the rows after its last key
      // window).
      const b = parseBaselineBound(low);
      if (b) {
        req.input('after', sql.BigInt, b.key);
        const k = quoteMssql(this.t.keyColumns[0]!);
        const res = await req.query<{ n: string | number }>(
          `SELECT CONVERT(varchar(20), COUNT_BIG(*)) AS n FROM (SELECT TOP (@cap) 1 AS x FROM ${this.from} WHERE ${k} > @after) AS s`,
        );
        return Number(res.recordset[0]?.n ?? 0);
      }
      if (low !== null) req.input('low', sql.BigInt, low);
      const res = await req.query<{ n: string | number }>(
        low === null
          ? `SELECT CONVERT(varchar(20), COUNT_BIG(*)) AS n FROM (SELECT TOP (@cap) 1 AS x FROM ${this.from}) AS s`
          : `SELECT CONVERT(varchar(20), COUNT_BIG(*)) AS n FROM (SELECT TOP (@cap) 1 AS x FROM CHANGETABLE(CHANGES ${qualifiedMssql(this.table!)}, @low) AS ct) AS s`,
      );
      return Number(res.recordset[0]?.n ?? 0);
    }
    const conds = this.afterConditions(req, low);
    const res = await req.query<{ n: string | number }>(
      `SELECT CONVERT(varchar(20), COUNT_BIG(*)) AS n FROM (SELECT TOP (@cap) 1 AS x FROM ${this.from} WHERE ${conds.join(' AND ')}) AS s`,
    );
    return Number(res.recordset[0]?.n ?? 0);
  }

  async nextWindow(
    low: string | null,
    maxRows: number,
    opts: { baselineWindows?: boolean } = {},
  ): Promise<Window | null> {
    if (carriesChanges(this.t)) return this.nextChangeWindow(low, maxRows, opts.baselineWindows === true);
    const b = quoteMssql(boundaryColumn(this.t));
    const req = await this.pool.request();
    const conds = this.afterConditions(req, low);
    req.input('n', sql.Int, maxRows);
    let highExpr = `CONVERT(varchar(20), MAX(b))`;
    if (this.t.boundary.kind === 'timestamp') {
      if (this.boundaryDeclared === null) await this.readSchema();
      // Window bounds are UTC wall-clock text with six fraction digits (compared as datetime2(7), which SQL Server
      // widens to datetimeoffset at +00:00 for a datetimeoffset column). A datetimeoffset is switched to UTC first:
      // CONVERT(datetime2, datetimeoffset) keeps the local time and drops the offset. datetime2/datetimeoffset hold
      // 100 ns ticks (and datetime converts to .xxx3333): the high bound is rounded UP to the microsecond (+900 ns,
      // then the canonical text cuts to six digits), so the newest row is inside the window. Cutting it down instead
      // would leave that row outside (low, high] and every later window would end at the same high: never sent.
      const utc = /^datetimeoffset/i.test(this.boundaryDeclared ?? '')
        ? `CONVERT(datetime2(7), SWITCHOFFSET(MAX(b), '+00:00'))`
        : `CONVERT(datetime2(7), MAX(b))`;
      highExpr = `CONVERT(varchar(27), DATEADD(nanosecond, 900, ${utc}), 126)`;
    }
    const res = await req.query<{ high: string | null }>(
      `SELECT ${highExpr} AS high FROM (SELECT TOP (@n) ${this.boundaryRef()} AS b FROM ${this.from} WHERE ${conds.join(' AND ')} ORDER BY ${b}) AS s`,
    );
    const high = res.recordset[0]?.high ?? null;
    if (high === null) return null;
    return {
      kind: this.t.boundary.kind,
      low,
      high: this.t.boundary.kind === 'timestamp' ? canonicalValue('timestamp', high)! : high,
    };
  }

  // Key-set comparison (keyCompare): the keys of the window's rows now, canonical text in keyColumns order. A key
  // window holds at most about batchSize rows, so the keys are read in one result.
  async windowKeys(w: Window, schema: SourceSchema): Promise<KeyTuple[]> {
    const keys = this.t.keyColumns.map((k) => schema.columns.find((c) => c.name === k)!);
    const req = await this.pool.request();
    req.arrayRowMode = true;
    const where = this.windowPredicate(req, w);
    const res = await req.query(
      `SELECT ${keys.map((c) => mssqlSelectExpr(quoteMssql(c.name), c.logical, c.type)).join(', ')} FROM ${this.from} WHERE ${where}`,
    );
    return (res.recordset as unknown as unknown[][]).map((row) =>
      row.map((v, i) => canonicalValue(keys[i]!.logical, v)),
    );
  }

  // The manifest is computed in TypeScript from the streamed rows: keel-v1 only.
  async checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]> {
    return ['keel-v1'];
  }

  async manifest(w: Window, schema: SourceSchema, algorithm: ChecksumAlgorithm): Promise<Manifest> {
    if (algorithm !== 'keel-v1')
      throw new Error(`a SQL Server source computes keel-v1 checksums only, not ${algorithm}`);
    const acc = new ChecksumAccumulator();
    for await (const chunk of this.streamRows(w, schema, 5000)) for (const row of chunk) acc.add(row);
    return { rowCount: acc.count, checksum: acc.checksum };
  }

  // One consistent view of the window per read: a change window's read is a SNAPSHOT transaction; a plain window's
  // one SELECT is under READ_COMMITTED_SNAPSHOT or SNAPSHOT (statement-level row versions) unless the database allows
  // neither. Under locking READ COMMITTED a scan can miss or repeat a row that moves while it runs, so the window is
  // then read twice (a manifest, then the rows, which must agree) instead of once.
  async readsSnapshot(): Promise<boolean> {
    if (carriesChanges(this.t)) return true;
    this.isolation ??= await this.readIsolation();
    return this.isolation !== 'locking';
  }

  async *streamRows(w: Window, schema: SourceSchema, chunkSize: number): AsyncIterable<CanonicalRow[]> {
    if (carriesChanges(this.t)) {
      yield* this.streamChanges(w, schema, chunkSize);
      return;
    }
    const cols = mappedColumns(this.t, schema);
    const types = cols.map((c) => c.logical);
    const verify = this.textCheck(cols);
    const req = await this.pool.request();
    const where = this.windowPredicate(req, w);
    // nextWindow stays at the session's READ COMMITTED: under locking it waits for a row in flight below
    // MIN_ACTIVE_ROWVERSION() instead of fixing a high bound past a row it cannot see yet. This read of a fixed window
    // may use SNAPSHOT.
    this.isolation ??= await this.readIsolation();
    const text = readAtIsolation(
      this.isolation,
      `SELECT ${cols.map((c) => mssqlSelectExpr(quoteMssql(c.source), c.logical, c.type)).join(', ')} FROM ${this.from} WHERE ${where}`,
    );
    yield* this.streamQuery(req, text, types, chunkSize, false, verify);
  }

  // Refuses a text value whose UTF-16 units do not form Unicode text: an unpaired surrogate, which nvarchar holds
  // (UCS-2 units, any of them) but UTF-8 cannot. Its UTF-8 form -- what keel-v1 hashes and what every target's driver
  // sends -- is U+FFFD, so the target would store another character with both checksums agreeing on it: a silent
  // change, which the canonical form never makes (docs/transfer.md, "Guarantees"). null: no text column.
  private textCheck(
    cols: { source: string; logical: LogicalType; type: string }[],
  ): ((row: CanonicalRow) => void) | null {
    const text = cols.flatMap((c, i) => (c.logical === 'text' ? [i] : []));
    if (text.length === 0) return null;
    const keys = this.t.keyColumns.map((k) => cols.findIndex((c) => c.source === k));
    return (row) => {
      for (const i of text) {
        const v = row[i];
        if (typeof v === 'string' && !wellFormed(v)) {
          const column = cols[i]!.source;
          const key = keys.map((k) => (k < 0 ? '?' : String(row[k]))).join(', ');
          throw new TransferError(
            'unsupported_type',
            `transfer ${this.t.name}: source column ${column} (${cols[i]!.type}) holds text with an unpaired UTF-16 surrogate (row with key ${key}), which UTF-8 (the canonical text, PostgreSQL and Oracle) cannot hold: it would be stored as U+FFFD. The batch is refused before staging; exclude or convert it in source.query`,
            { column, key },
          );
        }
      }
    };
  }

  // A change window's rows, then OP_COLUMN, in one SNAPSHOT transaction that also checks the min valid version.
  private async *streamChanges(w: Window, schema: SourceSchema, chunkSize: number): AsyncIterable<CanonicalRow[]> {
    const mapped = mappedColumns(this.t, schema);
    const types: LogicalType[] = [...mapped.map((c) => c.logical), 'text'];
    const verify = this.textCheck(mapped);
    const tx = await this.snapshot();
    let ok = false;
    try {
      await this.versions(tx, w.low);
      const req = new sql.Request(tx);
      const baseline = isBaseline(w.low);
      if (!baseline) {
        req.input('low', sql.BigInt, changeLowVersion(w.low)!.toString());
        req.input('high', sql.BigInt, w.high);
      }
      // a windowed baseline's key window: its key range
      const range = baselineKeyRange(w.low, w.high);
      if (range?.low != null) req.input('klow', sql.BigInt, range.low);
      if (range?.high != null) req.input('khigh', sql.BigInt, range.high);
      const text = mssqlChangesSelect(
        qualifiedMssql(this.table!),
        this.t.keyColumns,
        mapped.map((c) => ({ source: c.source, expr: (ref: string) => mssqlSelectExpr(ref, c.logical, c.type) })),
        baseline,
        range ? { low: range.low !== null, high: range.high !== null } : null,
      );
      yield* this.streamQuery(req, text, types, chunkSize, true, verify);
      await tx.commit();
      ok = true;
    } catch (err) {
      throw this.changesError(err);
    } finally {
      // failed, or the consumer stopped early (the request was cancelled): the snapshot transaction ends here
      if (!ok) await tx.rollback().catch(() => undefined);
    }
  }

  // Streams a query's rows as canonical text in chunks, with backpressure (the TDS stream is paused per chunk).
  private async *streamQuery(
    req: sql.Request,
    text: string,
    types: LogicalType[],
    chunkSize: number,
    inTransaction = false,
    verify: ((row: CanonicalRow) => void) | null = null,
  ): AsyncIterable<CanonicalRow[]> {
    req.stream = true;
    req.arrayRowMode = true;
    const ended = new Promise<void>((resolve) => {
      req.once('done', () => resolve());
      req.once('error', () => resolve());
    });
    const ready: CanonicalRow[][] = [];
    let current: CanonicalRow[] = [];
    let done = false;
    let failure: unknown = null;
    let paused = false;
    let wake: (() => void) | null = null;
    const notify = () => {
      const w2 = wake;
      wake = null;
      w2?.();
    };
    req.on('row', (row: unknown[]) => {
      try {
        const canonical = row.map((v, i) => canonicalValue(types[i]!, v));
        verify?.(canonical);
        current.push(canonical);
      } catch (err) {
        failure = err;
        req.cancel();
        notify();
        return;
      }
      if (current.length >= chunkSize) {
        ready.push(current);
        current = [];
        // Backpressure: stop the TDS stream until the consumer took this chunk.
        if (!paused) {
          req.pause();
          paused = true;
        }
        notify();
      }
    });
    req.on('error', (err: unknown) => {
      failure ??= err;
      notify();
    });
    req.on('done', () => {
      if (current.length) ready.push(current);
      current = [];
      done = true;
      notify();
    });
    // In stream mode the promise settles on completion; errors arrive through the 'error' event above.
    req.query(text).catch(() => undefined);
    try {
      for (;;) {
        if (failure) throw failure;
        const next = ready.shift();
        if (next) {
          yield next;
          if (ready.length === 0 && paused && !done) {
            paused = false;
            req.resume();
          }
          continue;
        }
        if (done) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
    } finally {
      // The consumer stopped early (or failed): cancel the request. A paused stream is resumed first, so the
      // server's attention acknowledgement is read and the connection goes back to the pool instead of hanging.
      if (!done) {
        if (paused) req.resume();
        req.cancel();
        // In a transaction the request must have ended before the transaction can roll back on its connection
        // (bounded: the caller rolls back or gives up after the wait).
        if (inTransaction) await Promise.race([ended, new Promise((r) => setTimeout(r, 5_000).unref())]);
      }
    }
  }

  async close(): Promise<void> {
    // The pool is shared per process (shared/engines/sqlserver/pool.ts) and closed with the host.
  }
}

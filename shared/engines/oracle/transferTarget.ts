// Oracle dialect of the transfer target (node-oracledb thin mode; shared/transfer/stagingTarget.ts runs the flow, and
// the KEEL_TRANSFER package is called through TARGET_ORACLE_PROCEDURES, targetProcedures.ts). Staging: executeMany in chunks with bindDefs (every value
// travels as its canonical text and is converted by an explicit SQL function), one transaction per staging,
// verified against the manifest (count, duplicate keys, keel-v1 checksum over the staged rows read back as
// canonical text) before it commits. Apply: KEEL_TRANSFER.APPLY_BATCH (sql/oracle), which commits itself; never
// autocommit, never direct-path; the apply's session is dropped after any error. Reconcile: KEEL_TRANSFER.TRY_CLAIM
// (the completion row, and a fence committed with a "not applied" verdict), preceded by Transaction Guard
// (DBMS_APP_CONT.GET_LTXID_OUTCOME with the LTXID recorded before the apply) only when that apply lost its connection.
// Every call runs under a watchdog (OracleSession, session.ts, with the pool); canonical text <-> Oracle and the binds
// are canonical.ts, a value's data error explained is dataErrors.ts.
// Against a real server: the contract suite test/engines/oracle.targetAdapter.test.ts and test/transfer/oracle.test.ts
// (KEEL_TEST_ORACLE_URL); without one, the fake server of test/transfer/oracleFake.ts.
import oracledb from 'oracledb';
import {
  algorithmOf,
  ChecksumAccumulator,
  canonicalValue,
  type CanonicalRow,
  type ChecksumAlgorithm,
} from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { boundaryColumn, resolvedNames } from '../../transfer/config.js';
import { TransferError } from '../../transfer/errors.js';
import { quoteOracle } from '../../transfer/identifiers.js';
import { carriesChanges, OP_DELETE, OP_UPSERT } from '../../transfer/changes.js';
import { checkColumnFits, mappedColumns } from '../../transfer/schema.js';
import {
  StagingTarget,
  type RowWriter,
  type StagingSession,
  type TargetDialect,
  type TargetFault,
} from '../../transfer/stagingTarget.js';
import {
  ensureStagingArgs,
  targetKeys,
  type TargetArgs,
  type TargetNames,
  type TargetProcedure,
  type TargetRow,
} from '../../transfer/targetProcedures.js';
import {
  requireTargetColumn,
  requireTargetKey,
  requireTargetTable,
  stagingShapeRefusal,
} from '../../transfer/targetChecks.js';
import type { ApplyContext, KeyTuple, RowFeed, SourceSchema, StageRequest, Window } from '../../transfer/types.js';
import {
  fromCanonical,
  oracleAccepts,
  oracleBindKind,
  oracleBindValue,
  bindDef,
  oracleColumnFacets,
  toCanonical,
  type TabColumnRow,
  type TargetColumn,
} from './canonical.js';
import { dataError, oraNum } from './dataErrors.js';
import { isConnectionLost, KEEL_SESSION_TAG, ORACLE_CALL_TIMEOUT_MS, OracleSession } from './session.js';
import { ORA_FAULTS, oracleCall, waitSeconds } from './targetProcedures.js';

const ORA_INVALID_SQL_NAME = 44003; // DBMS_ASSERT.SIMPLE_SQL_NAME: invalid SQL name

// Row-lock waits are bounded: APPLY_BATCH locks the staging registry row FOR UPDATE WAIT 30 (sql/oracle/V001; keep the
// two in step) and BEGIN_STAGE's registry insert, which waits on a rival staging's uncommitted row and has no WAIT
// clause, runs under a call timeout of this plus a margin. Either way a session left holding the row (an orphaned
// client, a stuck transaction) costs a retryable 'target_busy', not the 9-minute call timeout.
export const ORACLE_LOCK_WAIT_SECONDS = 30;
const ORA_LOCK_WAIT_TIMEOUT = 30006; // ORA-30006: resource busy; acquire with WAIT timeout expired
const NJS_CALL_TIMEOUT = 'NJS-123'; // node-oracledb: call timeout exceeded (thin and thick)

const ARRAY_ROWS = { outFormat: oracledb.OUT_FORMAT_ARRAY };
const ORA_UNIQUE_VIOLATED = 1; // ORA-00001: unique constraint violated
const ORA_UNSTABLE_ROWS = 30926; // ORA-30926: unable to get a stable set of rows (MERGE matched a target row twice)

// The batch's staged keys that are twice in it, or have a NULL part (at most three, as text; bind :b the batch id).
function oracleDuplicateKeysSql(t: TransferConfig, staging: string): string {
  const keys = targetKeys(t).map(quoteOracle);
  return `SELECT ${keys.map((k) => `NVL(TO_CHAR(${k}), 'NULL')`).join(` || ', ' || `)} FROM ${staging} WHERE KEEL_BATCH_ID = :b GROUP BY ${keys.join(', ')} HAVING COUNT(*) > 1 OR MAX(CASE WHEN ${keys.map((k) => `${k} IS NULL`).join(' OR ')} THEN 1 ELSE 0 END) = 1 FETCH FIRST 3 ROWS ONLY`;
}

// One staging transaction on one session: executeMany in chunks, the checksum over the rows read back.
class OracleStagingSession implements StagingSession {
  constructor(
    private readonly s: OracleSession,
    private readonly d: OracleTargetDialect,
    private readonly req: StageRequest,
    private readonly cols: TargetColumn[],
  ) {}

  // Change windows: every row ends with its operation (shared/transfer/changes.ts), staged and checksummed too.
  private get ops(): boolean {
    return carriesChanges(this.d.t);
  }

  async call<P extends 'begin_stage' | 'finish_stage'>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>> {
    const row = await oracleCall(this.s, proc, args);
    if (proc === 'begin_stage') this.s.setCallTimeout(ORACLE_CALL_TIMEOUT_MS); // (opened under a shorter one)
    return row;
  }

  // Each chunk is one executeMany, bounded by the session's watchdog (the stall clock waits for the source only).
  async rowWriter(): Promise<RowWriter> {
    const { cols, req, s, ops } = this;
    const keyColumns = this.d.t.keyColumns;
    const insert = `INSERT INTO ${this.d.stagingRef()} (KEEL_BATCH_ID, ${cols.map((x) => quoteOracle(x.target)).join(', ')}${ops ? ', KEEL_OP' : ''}) VALUES (:1, ${cols
      .map((x, i) => fromCanonical(`:${i + 2}`, x.logical, x.dataType))
      .join(', ')}${ops ? `, :${cols.length + 2}` : ''})`;
    const write = async (chunk: CanonicalRow[]) => {
      if (chunk.length === 0) return;
      const maxSizes = cols.map(() => 1);
      const values: CanonicalRow[] = [];
      const binds = chunk.map((row) => {
        const out: (string | Buffer | number | null)[] = [req.batchId];
        for (let i = 0; i < cols.length; i++) {
          const v = row[i] ?? null;
          const col = cols[i]!;
          if (v === '' && (col.logical === 'text' || col.logical === 'bytes')) {
            // Oracle stores '' and an empty RAW or BLOB bind as NULL. (A column that declared "empty": "null"
            // never gets here: the policy made it NULL before both checksums.)
            throw new TransferError(
              'unsupported_type',
              `batch ${req.batchId}: column ${col.source} holds an empty ${col.logical === 'text' ? 'string' : 'binary value'}, which Oracle stores as NULL; the batch cannot be staged unchanged (declare "empty": "null" in the column's mapping to accept NULL)`,
              { column: col.source },
            );
          }
          const b = oracleBindValue(col.bind ?? 'string', v);
          if (typeof b === 'string') maxSizes[i] = Math.max(maxSizes[i]!, Buffer.byteLength(b, 'utf8'));
          else if (Buffer.isBuffer(b)) maxSizes[i] = Math.max(maxSizes[i]!, b.length);
          out.push(b);
        }
        if (ops) {
          const op = row[cols.length] ?? null;
          if (op !== OP_UPSERT && op !== OP_DELETE)
            throw new Error(`batch ${req.batchId}: a change row's operation is ${String(op)}, not U or D`);
          out.push(op);
        }
        values.push(row.slice(0, cols.length));
        return out;
      });
      let res: oracledb.Results<unknown>;
      try {
        res = await s.run('staging insert', (c) =>
          c.executeMany(insert, binds, {
            autoCommit: false,
            batchErrors: true, // a row's error comes back with its offset, so the error can name the row
            bindDefs: [
              { type: oracledb.STRING, maxSize: 36 },
              ...cols.map((col, i) => bindDef(col.bind ?? 'string', maxSizes[i]!)),
              ...(ops ? [{ type: oracledb.STRING, maxSize: 1 }] : []),
            ],
          }),
        );
      } catch (err) {
        throw dataError(req.batchId, err, null, values, cols, keyColumns) ?? err;
      }
      const rowError = res.batchErrors?.[0];
      if (rowError) {
        const offset = typeof rowError.offset === 'number' ? rowError.offset : null;
        throw dataError(req.batchId, rowError, offset, values, cols, keyColumns) ?? rowError;
      }
    };
    return { write, end: async () => undefined, boundedWrites: true };
  }

  // Keys twice in the batch, and keys with a NULL part (never equal to the target's key: each apply would insert
  // the row again), as on PostgreSQL.
  async duplicateKeys(): Promise<string[]> {
    const dup = await this.s.run('duplicate check', (c) =>
      c.execute<[string]>(oracleDuplicateKeysSql(this.d.t, this.d.stagingRef()), { b: this.req.batchId }, ARRAY_ROWS),
    );
    return (dup.rows ?? []).map((r) => r[0]);
  }

  // The staged rows read back as canonical text and checksummed exactly like the source did.
  async stagedSums(): Promise<{ rowCount: number; checksum: string }> {
    const { cols, s } = this;
    const acc = new ChecksumAccumulator();
    const rs = await s.run('staging readback', (c) =>
      c.execute<CanonicalRow>(
        `SELECT ${cols.map((x) => toCanonical(quoteOracle(x.target), x.logical, x.dataType)).join(', ')}${this.ops ? ', KEEL_OP' : ''} FROM ${this.d.stagingRef()} WHERE KEEL_BATCH_ID = :b`,
        { b: this.req.batchId },
        {
          outFormat: oracledb.OUT_FORMAT_ARRAY,
          resultSet: true,
          fetchArraySize: 1000,
          // Text, except bytes (Buffers, hexed below) and doubles (numbers, written shortest below).
          fetchTypeHandler: (meta: oracledb.Metadata<unknown>) =>
            meta.dbType === oracledb.DB_TYPE_RAW || meta.dbType === oracledb.DB_TYPE_BLOB
              ? { type: oracledb.BUFFER }
              : meta.dbType === oracledb.DB_TYPE_BINARY_DOUBLE
                ? undefined
                : { type: oracledb.STRING },
        },
      ),
    );
    const resultSet = rs.resultSet!;
    try {
      for (;;) {
        const rows = await s.run('staging readback', () => resultSet.getRows(1000));
        if (rows.length === 0) break;
        for (const row of rows) acc.add(row.map((v, i) => canonicalValue(cols[i]?.logical ?? 'text', v)));
      }
    } finally {
      await s.run('staging readback', () => resultSet.close()).catch(() => undefined);
    }
    return { rowCount: acc.count, checksum: acc.checksum };
  }

  async commit(): Promise<void> {
    await this.s.run('commit', (c) => c.commit());
  }

  close(): Promise<void> {
    return this.s.release({ drop: false });
  }

  // A session whose rollback did not go through is dropped: its transaction must not reach another caller.
  async abort(err: unknown): Promise<unknown> {
    const rolledBack = await this.s
      .run('rollback', (c) => c.rollback())
      .then(
        () => true,
        () => false,
      );
    await this.s.release({ drop: !rolledBack });
    return err;
  }
}

export class OracleTargetDialect implements TargetDialect {
  readonly engine = 'oracle';
  // APPLY_BATCH's mirror honours a key range (p_mirror_low/p_mirror_high): a baseline may run in key windows
  // (shared/transfer/changes.ts).
  readonly mirrorsKeyRanges = true;
  readonly names: TargetNames;
  readonly stalledParty = 'the source';
  readonly mismatchCause = 'the source window changed after extraction or a value did not survive conversion';
  private columns: TargetColumn[] | null = null;

  // Last apply of a batch in this process whose connection was lost (batchId -> the LTXID recorded for it): the
  // only case in which reconcile asks Transaction Guard (see reconcile()).
  private readonly outcomeUnknown = new Map<string, string>();

  constructor(
    readonly t: TransferConfig,
    private readonly pool: oracledb.Pool,
  ) {
    const n = resolvedNames(t).targetTable;
    this.names = { schema: n.schema, table: n.name, staging: `KEEL_STG_${t.name.toUpperCase()}` };
  }

  private async session(callTimeoutMs = ORACLE_CALL_TIMEOUT_MS): Promise<OracleSession> {
    // The tag makes the pool run oracleSessionCallback (version check, NLS settings) for any session not set up yet.
    // The checkout itself is bounded by queueTimeout, connectTimeout and poolPingTimeout (createOraclePool).
    const c = await this.pool.getConnection({ tag: KEEL_SESSION_TAG });
    // A round trip over a dead network must fail inside the function's 10-minute budget (host.json), so reconcile
    // reads the outcome in the same invocation instead of the host killing it; the server decides the transaction.
    return new OracleSession(c, callTimeoutMs);
  }

  // Staging tables live in the session's current schema (the login's unless CURRENT_SCHEMA is set), beside the
  // KEEL_TRANSFER package. An unqualified target table resolves there too, so the dictionary reads below name that
  // schema (SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')), not USER: with a logon trigger that sets CURRENT_SCHEMA,
  // USER read another schema's table (or none) than the one the apply writes.
  stagingRef(): string {
    return quoteOracle(this.names.staging);
  }

  async prepare(schema: SourceSchema): Promise<void> {
    const { schema: owner, table } = this.names;
    const mapped = mappedColumns(this.t, schema);
    const s = await this.session();
    try {
      type Row = [...TabColumnRow, string | null]; // then default_on_null
      const res = await s.run('prepare', (c) =>
        c.execute<Row>(
          `SELECT column_name, data_type, data_scale, data_precision, data_length, char_length, char_used, nullable, default_on_null FROM all_tab_columns WHERE owner = NVL(:owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')) AND table_name = :tbl`,
          { owner, tbl: table },
          { outFormat: oracledb.OUT_FORMAT_ARRAY },
        ),
      );
      const types = new Map((res.rows ?? []).map((r) => [r[0], r] as const));
      requireTargetTable(this.t, types, ' (Oracle names are case-sensitive here: they are quoted)');
      const cols: TargetColumn[] = [];
      for (const m of mapped) {
        const row = requireTargetColumn(this.t, types, m.target);
        const ty = { dataType: row[1], scale: row[2] ?? null };
        if (row[8] === 'YES') {
          // The MERGE would turn a verified NULL into the column's default, after verification.
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: target column ${m.target} is declared DEFAULT ON NULL, which would store its default where the source holds NULL (after the batch was verified); drop that clause or leave the column out of the mapping`,
          );
        }
        if (!oracleAccepts(m.staged, ty.dataType, ty.scale, m.policy, row[3] ?? null)) {
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: target column ${m.target} (${ty.dataType}) cannot hold source column ${m.source} (${m.type})${
              m.logical === 'timestamp' && ty.dataType.toUpperCase() === 'DATE'
                ? '; a DATE holds whole seconds: declare "datetime": "seconds" in the mapping to cut the fraction'
                : ''
            }`,
            { column: m.source },
          );
        }
        checkColumnFits(this.t, m, oracleColumnFacets(row));
        cols.push({
          source: m.source,
          target: m.target,
          logical: m.staged,
          policy: m.policy,
          bind: oracleBindKind(m.staged, ty.dataType),
          dataType: ty.dataType,
          scale: ty.scale,
          precision: row[3] ?? null,
          dataLength: row[4] ?? null,
          charLength: row[5] ?? null,
          charUsed: row[6] ?? null,
          nullable: row[7] !== 'N',
        });
      }
      // Like the PostgreSQL target: the MERGE's ON columns must be a key of the target table (an enabled primary
      // key or unique constraint, or a unique non-function-based index on exactly those columns).
      const keys = [...targetKeys(this.t)].sort().join(',');
      const key = await s.run('prepare', (c) =>
        c.execute<[number]>(
          `SELECT COUNT(*) FROM (
           SELECT LISTAGG(cc.column_name, ',' ON OVERFLOW TRUNCATE) WITHIN GROUP (ORDER BY cc.column_name) AS cols
             FROM all_constraints k JOIN all_cons_columns cc ON cc.owner = k.owner AND cc.constraint_name = k.constraint_name AND cc.table_name = k.table_name
            WHERE k.owner = NVL(:owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')) AND k.table_name = :tbl AND k.constraint_type IN ('P', 'U') AND k.status = 'ENABLED'
            GROUP BY k.constraint_name
           UNION ALL
           SELECT LISTAGG(ic.column_name, ',' ON OVERFLOW TRUNCATE) WITHIN GROUP (ORDER BY ic.column_name)
             FROM all_indexes i JOIN all_ind_columns ic ON ic.index_owner = i.owner AND ic.index_name = i.index_name
            WHERE i.table_owner = NVL(:owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')) AND i.table_name = :tbl AND i.uniqueness = 'UNIQUE' AND i.index_type NOT LIKE 'FUNCTION-BASED%'
            GROUP BY i.owner, i.index_name)
          WHERE cols = :keys`,
          { owner, tbl: table, keys },
          { outFormat: oracledb.OUT_FORMAT_ARRAY },
        ),
      );
      requireTargetKey(
        this.t,
        Number(key.rows?.[0]?.[0] ?? 0) !== 0,
        'a primary key, unique constraint or unique index',
        targetKeys(this.t),
      );
      try {
        // change windows stage the operation column KEEL_OP too
        const ops = carriesChanges(this.t);
        await oracleCall(
          s,
          'ensure_staging',
          ensureStagingArgs(
            this.t,
            this.names,
            cols.map((x) => x.target),
            ops,
          ),
        );
      } catch (err) {
        const shape = stagingShapeRefusal(err, this.fault(err));
        if (shape) throw shape;
        // DBMS_ASSERT.SIMPLE_SQL_NAME refuses a name Keel's pattern allows (e.g. one starting with '_'): no retry
        // can change that.
        if (oraNum(err) === ORA_INVALID_SQL_NAME)
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: a mapped column or table name is not a simple Oracle SQL name (DBMS_ASSERT, ORA-44003): ${(err as Error).message}`,
          );
        throw err;
      }
      this.columns = cols;
    } finally {
      await s.release({ drop: false }); // reads and DDL only: nothing open (an abandoned session drops itself)
    }
  }

  private cols(): TargetColumn[] {
    if (!this.columns) throw new Error('OracleTransferTarget.prepare() must run first');
    return this.columns;
  }

  checkFeed(req: StageRequest, feed: RowFeed): void {
    if (feed.kind !== 'rows') throw new Error('the Oracle target takes canonical rows');
    if (algorithmOf(req.manifest.checksum) !== 'keel-v1')
      throw new Error(`the Oracle target verifies keel-v1 checksums only`);
  }

  stagedColumns(): string[] {
    return this.cols().map((x) => x.target);
  }

  async openStaging(req: StageRequest): Promise<StagingSession> {
    const cols = this.cols();
    // The registry insert may wait on a rival's (or an orphaned session's) uncommitted row: BEGIN_STAGE alone runs
    // under this shorter call timeout (the session sets the usual one once it answered).
    const s = await this.session((ORACLE_LOCK_WAIT_SECONDS + 15) * 1000);
    return new OracleStagingSession(s, this, req, cols);
  }

  beginStageError(err: unknown, req: StageRequest): TransferError | null {
    if ((err as { code?: unknown }).code !== NJS_CALL_TIMEOUT) return null;
    return new TransferError(
      'target_busy',
      `batch ${req.batchId}: another session has held its staging registry row for over ${ORACLE_LOCK_WAIT_SECONDS} s (a rival or orphaned staging); nothing was staged, run the batch again later`,
      { batchId: req.batchId },
    );
  }

  async call<P extends TargetProcedure>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>> {
    const s = await this.session();
    let ok = false;
    try {
      const row = await oracleCall(s, proc, args);
      ok = true;
      return row;
    } finally {
      await s.release({ drop: !ok });
    }
  }

  async apply(
    args: TargetArgs<'apply_batch'>,
    req: StageRequest,
    ctx: ApplyContext,
  ): Promise<TargetRow<'apply_batch'>> {
    this.outcomeUnknown.delete(req.batchId); // whatever an earlier attempt left: this attempt has its own token
    const s = await this.session();
    let ltxid: string | null = null;
    let applied = false;
    try {
      if (this.t.target.transactionGuard) {
        // node-oracledb >= 6.9 exposes the logical transaction id; keep it durable before the call.
        const raw = (s.c as unknown as { ltxid?: Buffer | Uint8Array }).ltxid;
        // It is the reconcile token: the journal keeps it and reconcile gets it back.
        if (raw && raw.length > 0) {
          ltxid = Buffer.from(raw).toString('hex');
          await ctx.onReconcileToken?.(ltxid);
        }
      }
      try {
        // APPLY_BATCH commits (or rolls back) its own single transaction
        const row = await oracleCall(s, 'apply_batch', args, { autoCommit: false });
        applied = true;
        return row;
      } catch (err) {
        // Only a lost connection leaves the outcome unknown; any other error came back from the server, after
        // APPLY_BATCH rolled back.
        if (ltxid !== null && isConnectionLost(err)) this.outcomeUnknown.set(req.batchId, ltxid);
        else this.outcomeUnknown.delete(req.batchId);
        throw err;
      }
    } finally {
      // After any error the session is dropped, never returned to the pool. With Transaction Guard its LTXID is
      // this batch's reconcile token, and an LTXID survives a rollback: the session's next commit (another
      // transfer's staging, or reconcile's own fence on this LIFO pool) would consume it, and Transaction Guard
      // would later answer "committed" for an apply that never committed. Asking about it while the session lives
      // would also block the session's next commit.
      await s.release({ drop: !applied });
    }
  }

  applyError(err: unknown, req: StageRequest): TransferError | null {
    if (oraNum(err) === ORA_LOCK_WAIT_TIMEOUT) {
      return new TransferError(
        'target_busy',
        `batch ${req.batchId}: its staging registry row, or the target table, stayed locked by another session for ${ORACLE_LOCK_WAIT_SECONDS} s (an apply or reconcile still open, an orphaned session, a LOCK TABLE); nothing was applied, run the batch again later`,
      );
    }
    return dataError(req.batchId, err, null, [], this.cols(), this.t.keyColumns);
  }

  // As on PostgreSQL: a unique violation or an unstable MERGE (APPLY_BATCH rolled back), its staged rows asked.
  keyRefusal(err: unknown): boolean {
    const n = oraNum(err);
    return n === ORA_UNIQUE_VIOLATED || n === ORA_UNSTABLE_ROWS;
  }

  async stagedKeys(req: StageRequest): Promise<string[]> {
    const s = await this.session();
    let ok = false;
    try {
      const r = await s.run('duplicate check', (c) =>
        c.execute<[string]>(oracleDuplicateKeysSql(this.t, this.stagingRef()), { b: req.batchId }, ARRAY_ROWS),
      );
      ok = true;
      return (r.rows ?? []).map((row) => row[0]);
    } finally {
      await s.release({ drop: !ok });
    }
  }

  // The completion row and the fence decide (TRY_CLAIM). Transaction Guard is asked first only when the apply of
  // this batch in this process lost its connection after recording the LTXID (node-oracledb's guide: only after a
  // recoverable error): that session is dropped, so the question is about an unavailable session, as
  // DBMS_APP_CONT requires, and it is asked at most once. Its "committed" counts only with a COMMITTED completion
  // row (a FENCED row has no count or checksum and means "not applied"); an error from it is reported, never
  // taken as a verdict, and the next reconcile decides by the completion row and the fence.
  async reconcile(
    args: TargetArgs<'try_claim'>,
    req: StageRequest,
    reconcileToken: string | null, // the LTXID (hex) handed out by apply, when Transaction Guard is on
  ): Promise<{ row: TargetRow<'try_claim'>; via?: string }> {
    const askGuard =
      this.t.target.transactionGuard === true &&
      reconcileToken !== null &&
      this.outcomeUnknown.get(req.batchId) === reconcileToken;
    this.outcomeUnknown.delete(req.batchId);
    // TRY_CLAIM waits at most twice its wait (two row locks, each capped at 60 s in SQL).
    const s = await this.session((2 * Math.min(60, waitSeconds(Number(args.wait_ms))) + 30) * 1000);
    let ok = false;
    try {
      if (askGuard) {
        let committed: boolean;
        try {
          const r = await s.run('GET_LTXID_OUTCOME', (c) =>
            c.execute(
              `DECLARE c BOOLEAN; u BOOLEAN; BEGIN DBMS_APP_CONT.GET_LTXID_OUTCOME(HEXTORAW(:l), c, u); :o_committed := CASE WHEN c THEN 1 ELSE 0 END; END;`,
              { l: reconcileToken, o_committed: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER } },
            ),
          );
          committed = Number((r.outBinds as { o_committed: number }).o_committed) === 1;
        } catch (err) {
          const e = err as { code?: unknown; errorNum?: unknown; message?: unknown };
          throw Object.assign(
            new Error(
              `batch ${req.batchId}: Transaction Guard could not tell the outcome of the apply whose connection was lost (${String(e.message)}); no verdict taken, the next reconcile decides by the completion row and the fence`,
              { cause: err },
            ),
            { code: e.code, errorNum: e.errorNum },
          );
        }
        if (committed) {
          const row = await s.run('completion row', (c) =>
            c.execute<[number, string]>(
              `SELECT ROW_COUNT, CHECKSUM FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = :b AND STATE = 'COMMITTED'`,
              { b: req.batchId },
              { outFormat: oracledb.OUT_FORMAT_ARRAY },
            ),
          );
          const first = row.rows?.[0];
          if (first) {
            ok = true;
            return {
              row: { outcome: 'committed', row_count: first[0], checksum: first[1], staged: null },
              via: 'transaction_guard',
            };
          }
          // "Committed" without a COMMITTED completion row: APPLY_BATCH writes that row in the transaction the LTXID
          // names, so something else consumed the LTXID; the claim below decides.
        }
      }
      // Not committed (or no Transaction Guard): TRY_CLAIM, which commits the fence with a "not applied" verdict.
      const row = await oracleCall(s, 'try_claim', args);
      ok = true;
      return { row };
    } finally {
      await s.release({ drop: !ok });
    }
  }

  waited(waitMs: number): string {
    return `${waitSeconds(waitMs)} s`;
  }

  fault(err: unknown): TargetFault | undefined {
    const n = oraNum(err);
    return n === undefined ? undefined : ORA_FAULTS.get(n);
  }

  // Key-set comparison (keyCompare: key windows over a mapped key column): the target table's rows in the window.
  private keyWindow(w: Window): { keys: TargetColumn[]; where: string; binds: Record<string, string> } {
    const cols = this.cols();
    const b = cols.find((c) => c.source === boundaryColumn(this.t))!;
    const binds: Record<string, string> = { hi: w.high };
    let where = `t.${quoteOracle(b.target)} <= TO_NUMBER(:hi)`;
    if (w.low !== null) {
      binds.lo = w.low;
      where = `t.${quoteOracle(b.target)} > TO_NUMBER(:lo) AND ${where}`;
    }
    return { keys: this.t.keyColumns.map((k) => cols.find((c) => c.source === k)!), where, binds };
  }

  private targetRef(): string {
    const { schema: owner, table } = this.names;
    return owner ? `${quoteOracle(owner)}.${quoteOracle(table)}` : quoteOracle(table);
  }

  async windowKeys(w: Window, _schema: SourceSchema): Promise<KeyTuple[]> {
    const k = this.keyWindow(w);
    const s = await this.session();
    let ok = false;
    try {
      const r = await s.run('window keys', (c) =>
        c.execute<CanonicalRow>(
          `SELECT ${k.keys.map((x) => toCanonical(`t.${quoteOracle(x.target)}`, x.logical, x.dataType)).join(', ')} FROM ${this.targetRef()} t WHERE ${k.where}`,
          k.binds,
          { outFormat: oracledb.OUT_FORMAT_ARRAY, fetchTypeHandler: () => ({ type: oracledb.STRING }) },
        ),
      );
      ok = true;
      return (r.rows ?? []).map((row) => row.map((v, i) => canonicalValue(k.keys[i]!.logical, v)));
    } finally {
      await s.release({ drop: !ok });
    }
  }

  // The rows of `keys` inside the window, deleted in one transaction (one DELETE per key, executeMany); committed.
  async deleteKeys(w: Window, _schema: SourceSchema, keys: KeyTuple[]): Promise<number> {
    if (keys.length === 0) return 0;
    const k = this.keyWindow(w);
    // named binds (:k0.., :lo, :hi): executeMany takes one object per key
    const sqlText = `DELETE FROM ${this.targetRef()} t WHERE ${k.where} AND ${k.keys
      .map((x, i) => `t.${quoteOracle(x.target)} = ${fromCanonical(`:k${i}`, x.logical, x.dataType)}`)
      .join(' AND ')}`;
    const rows = keys.map((key) => ({
      ...k.binds,
      ...Object.fromEntries(k.keys.map((_, i) => [`k${i}`, key[i] ?? null])),
    }));
    const s = await this.session();
    let ok = false;
    try {
      const r = await s.run('delete keys', (c) => c.executeMany(sqlText, rows, { autoCommit: false }));
      await s.run('commit', (c) => c.commit());
      ok = true;
      return r.rowsAffected ?? 0;
    } finally {
      if (!ok) await s.run('rollback', (c) => c.rollback()).catch(() => undefined);
      await s.release({ drop: !ok });
    }
  }

  // Staging and verification compute keel-v1 only.
  async checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]> {
    return ['keel-v1'];
  }

  async close(): Promise<void> {
    // The pool belongs to the factory that created it.
  }
}

export class OracleTransferTarget extends StagingTarget {
  constructor(t: TransferConfig, pool: oracledb.Pool, opts: { stallMs?: number } = {}) {
    super(t, new OracleTargetDialect(t, pool), opts);
  }
}

// Oracle transfer target (node-oracledb thin mode). Staging: executeMany in chunks with bindDefs (every value
// travels as its canonical text and is converted by an explicit SQL function), one transaction per staging,
// verified against the manifest (count, duplicate keys, keel-v1 checksum over the staged rows read back as
// canonical text) before it commits. Apply: KEEL_TRANSFER.APPLY_BATCH (sql/oracle), which commits itself; never
// autocommit, never direct-path. Reconcile: Transaction Guard (DBMS_APP_CONT.GET_LTXID_OUTCOME with the LTXID
// recorded before the apply) when the service has COMMIT_OUTCOME, then KEEL_TRANSFER.TRY_CLAIM.
// NOT RUN HERE: exercised by test/transfer/oracle.test.ts when KEEL_TEST_ORACLE_URL is set.
import oracledb from 'oracledb';
import {
  algorithmOf,
  ChecksumAccumulator,
  canonicalValue,
  type CanonicalRow,
  type ChecksumAlgorithm,
  type LogicalType,
} from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { resolvedNames } from '../../transfer/config.js';
import { TransferError } from '../../transfer/errors.js';
import { quoteOracle } from '../../transfer/identifiers.js';
import { mappedColumns } from '../../transfer/schema.js';
import type {
  ApplyContext,
  ApplyResult,
  ReconcileOutcome,
  RowFeed,
  SourceSchema,
  StageRequest,
  StageResult,
  TargetAdapter,
} from '../../transfer/types.js';

// Application error numbers raised by sql/oracle/V001 (RAISE_APPLICATION_ERROR), read from err.errorNum.
const ORA_CONFLICT = 20001;
const ORA_NOT_STAGED = 20002;
const ORA_MERGE_COUNT = 20003;
const ORA_STAGING_SHAPE = 20004;
const ORA_FENCED = 20005;

function oraNum(err: unknown): number | undefined {
  const n = (err as { errorNum?: unknown } | null)?.errorNum;
  return typeof n === 'number' ? n : undefined;
}

// oracle://user:password@host:1521/service  ->  pool attributes for thin mode.
export function parseOracleUrl(url: string): { user: string; password: string; connectString: string } {
  const u = new URL(url);
  if (u.protocol !== 'oracle:') throw new Error('Oracle connection: expected oracle://user:password@host:port/service');
  const service = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (!u.hostname || !service || !u.username)
    throw new Error(
      'Oracle connection: user, host and service are required (oracle://user:password@host:port/service)',
    );
  return {
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    connectString: `${u.hostname}:${u.port || '1521'}/${service}`,
  };
}

export const ORACLE_CALL_TIMEOUT_MS = 9 * 60_000;

// Row-lock waits are bounded: APPLY_BATCH locks the staging registry row FOR UPDATE WAIT 30 (sql/oracle/V001; keep the
// two in step) and BEGIN_STAGE's registry insert, which waits on a rival staging's uncommitted row and has no WAIT
// clause, runs under a call timeout of this plus a margin. Either way a session left holding the row (an orphaned
// client, a stuck transaction) costs a retryable 'target_busy', not the 9-minute call timeout.
export const ORACLE_LOCK_WAIT_SECONDS = 30;
const ORA_LOCK_WAIT_TIMEOUT = 30006; // ORA-30006: resource busy; acquire with WAIT timeout expired
const NJS_CALL_TIMEOUT = 'NJS-123'; // node-oracledb: call timeout exceeded (thin and thick)

// Oracle 12.2 or later: staging objects are named KEEL_STG_<transfer> and <that>_B, up to 51 characters, and names
// longer than 30 bytes need 12.2's 128-byte identifiers. LISTAGG ... ON OVERFLOW is 12.2 too.
export const ORACLE_MIN_VERSION = { major: 12, minor: 2, number: 1202000000 };

// Every session of a Keel pool is set up once, when the pool creates it (node-oracledb calls the pool's
// sessionCallback for a new session, or when the tag a caller asks for differs from the session's), instead of an
// ALTER SESSION on every checkout:
// - the server must be 12.2 or later (ORACLE_MIN_VERSION), else the connection is refused with a message saying so;
// - canonical decimals use '.' and dates the Gregorian calendar: TO_NUMBER/TO_CHAR follow the session's NLS settings
//   (every date/time conversion names its format explicitly, so NLS_DATE_FORMAT & co. do not matter); name lists
//   are sorted and compared byte-wise (key check in prepare, column check in ENSURE_STAGING).
export const KEEL_SESSION_TAG = 'KEEL_NLS=1';
export const KEEL_SESSION_SQL = `ALTER SESSION SET NLS_NUMERIC_CHARACTERS = '.,' NLS_CALENDAR = 'GREGORIAN' NLS_SORT = 'BINARY' NLS_COMP = 'BINARY'`;

type SessionConnection = Pick<oracledb.Connection, 'execute'> & {
  tag?: string;
  oracleServerVersion?: number;
  oracleServerVersionString?: string;
};

export function oracleSessionCallback(
  conn: SessionConnection,
  _requestedTag: string,
  done: (err?: Error) => void,
): void {
  const v = conn.oracleServerVersion;
  if (typeof v === 'number' && v > 0 && v < ORACLE_MIN_VERSION.number) {
    done(
      new Error(
        `Oracle ${conn.oracleServerVersionString ?? v} is not supported as a transfer target: Keel needs ${ORACLE_MIN_VERSION.major}.${ORACLE_MIN_VERSION.minor} or later (staging object names up to 51 characters, LISTAGG ... ON OVERFLOW); see docs/oracle.md`,
      ),
    );
    return;
  }
  conn.execute(KEEL_SESSION_SQL).then(
    () => {
      conn.tag = KEEL_SESSION_TAG;
      done();
    },
    (err: Error) => done(err),
  );
}

export interface OracleCredentials {
  user: string;
  password: string;
  connectString: string; // host:port/service (EZConnect) or a TNS alias
}

// From an oracle://user:password@host:port/service URL, or from separate settings (connect string, user, password).
// connectTimeoutMs: opening a connection (thin mode connectTimeout / transportConnectTimeout, in seconds) and waiting
// for a pooled one (queueTimeout). Statements are bounded by ORACLE_CALL_TIMEOUT_MS (callTimeout); expireTime sends
// keepalive probes so a dead peer is noticed between calls.
export async function createOraclePool(
  connection: string | OracleCredentials,
  connectTimeoutMs = 15_000,
): Promise<oracledb.Pool> {
  const a = typeof connection === 'string' ? parseOracleUrl(connection) : connection;
  const seconds = Math.max(1, Math.ceil(connectTimeoutMs / 1000));
  return oracledb.createPool({
    ...a,
    poolMin: 0,
    poolMax: 4,
    poolIncrement: 1,
    poolPingInterval: 30,
    connectTimeout: seconds,
    transportConnectTimeout: seconds,
    queueTimeout: connectTimeoutMs,
    expireTime: 1,
    sessionCallback: oracleSessionCallback,
  });
}

// Oracle column types that can hold a source column of each logical type.
export function oracleAccepts(logical: LogicalType, dataType: string, scale: number | null): boolean {
  const t = dataType.toUpperCase();
  switch (logical) {
    case 'int':
      return t === 'NUMBER' && (scale === 0 || scale === null);
    case 'decimal':
      return t === 'NUMBER';
    case 'text':
      return ['VARCHAR2', 'NVARCHAR2', 'CHAR', 'NCHAR', 'CLOB', 'NCLOB'].includes(t);
    case 'bool':
      return (t === 'NUMBER' && (scale === 0 || scale === null)) || t === 'BOOLEAN';
    case 'date':
      return t === 'DATE';
    case 'timestamp':
      return /^TIMESTAMP\(\d\)$/.test(t);
    case 'timestamptz':
      return /^TIMESTAMP\(\d\) WITH (LOCAL )?TIME ZONE$/.test(t);
    case 'bytes':
      return t === 'RAW'; // not BLOB: see prepare()
    case 'uuid':
      return t === 'RAW' || t === 'VARCHAR2' || t === 'CHAR';
  }
}

// SQL that turns the canonical text bind into the column's value.
function fromCanonical(bind: string, logical: LogicalType, dataType: string): string {
  switch (logical) {
    case 'int':
    case 'decimal':
      return `TO_NUMBER(${bind})`;
    case 'bool':
      // 23ai BOOLEAN columns take TRUE/FALSE; NUMBER(1) columns 1/0.
      return dataType.toUpperCase() === 'BOOLEAN'
        ? `CASE ${bind} WHEN 't' THEN TRUE WHEN 'f' THEN FALSE END`
        : `CASE ${bind} WHEN 't' THEN 1 WHEN 'f' THEN 0 END`;
    case 'date':
      return `TO_DATE(${bind}, 'YYYY-MM-DD')`;
    case 'timestamp':
      return `TO_TIMESTAMP(${bind}, 'YYYY-MM-DD"T"HH24:MI:SS.FF6')`;
    case 'timestamptz':
      return `FROM_TZ(TO_TIMESTAMP(RTRIM(${bind}, 'Z'), 'YYYY-MM-DD"T"HH24:MI:SS.FF6'), 'UTC')`;
    case 'bytes':
      return `HEXTORAW(${bind})`;
    case 'uuid':
      return dataType.toUpperCase() === 'RAW' ? `HEXTORAW(REPLACE(${bind}, '-', ''))` : bind;
    case 'text':
      return bind;
  }
}

// SQL that reads a staged column back as canonical text (normalized once more by canonicalValue).
function toCanonical(ref: string, logical: LogicalType, dataType: string): string {
  switch (logical) {
    case 'int':
    case 'decimal':
      return `TO_CHAR(${ref}, 'TM9')`;
    case 'bool':
      return dataType.toUpperCase() === 'BOOLEAN'
        ? `CASE WHEN ${ref} THEN 't' WHEN NOT ${ref} THEN 'f' END`
        : `CASE WHEN ${ref} = 1 THEN 't' WHEN ${ref} = 0 THEN 'f' END`;
    case 'date':
      return `TO_CHAR(${ref}, 'YYYY-MM-DD')`;
    case 'timestamp':
      return `TO_CHAR(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS.FF6')`;
    case 'timestamptz':
      return `TO_CHAR(SYS_EXTRACT_UTC(${ref}), 'YYYY-MM-DD"T"HH24:MI:SS.FF6') || 'Z'`;
    case 'bytes':
      return `LOWER(RAWTOHEX(${ref}))`; // RAW only (BLOB columns are refused in prepare)
    case 'uuid':
      return dataType.toUpperCase() === 'RAW'
        ? `REGEXP_REPLACE(LOWER(RAWTOHEX(${ref})), '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\\1-\\2-\\3-\\4-\\5')`
        : `LOWER(${ref})`;
    case 'text':
      return ref;
  }
}

interface TargetColumn {
  source: string;
  target: string;
  logical: LogicalType;
  dataType: string;
}

export class OracleTransferTarget implements TargetAdapter {
  readonly engine = 'oracle';
  readonly stagingTable: string;
  private readonly owner: string | null;
  private readonly table: string;
  private columns: TargetColumn[] | null = null;

  constructor(
    private readonly t: TransferConfig,
    private readonly pool: oracledb.Pool,
  ) {
    const n = resolvedNames(t).targetTable;
    this.owner = n.schema;
    this.table = n.name;
    this.stagingTable = `KEEL_STG_${t.name.toUpperCase()}`;
  }

  private async conn(): Promise<oracledb.Connection> {
    // The tag makes the pool run oracleSessionCallback (version check, NLS settings) for any session not set up yet.
    const c = await this.pool.getConnection({ tag: KEEL_SESSION_TAG });
    // A round trip over a dead network must fail inside the function's 10-minute budget (host.json), so reconcile
    // reads the outcome in the same invocation instead of the host killing it; the server decides the transaction.
    c.callTimeout = ORACLE_CALL_TIMEOUT_MS;
    return c;
  }

  private targetKeys(): string[] {
    return this.t.keyColumns.map((k) => this.t.columns.find((c) => c.source === k)!.target);
  }

  // Staging tables live in the connecting user's schema, beside the KEEL_TRANSFER package.
  private stagingRef(): string {
    return quoteOracle(this.stagingTable);
  }

  async prepare(schema: SourceSchema): Promise<void> {
    const mapped = mappedColumns(this.t, schema);
    const c = await this.conn();
    try {
      const res = await c.execute<[string, string, number | null]>(
        `SELECT column_name, data_type, data_scale FROM all_tab_columns WHERE owner = NVL(:owner, USER) AND table_name = :tbl`,
        { owner: this.owner, tbl: this.table },
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      const types = new Map<string, { dataType: string; scale: number | null }>(
        (res.rows ?? []).map((r) => [r[0], { dataType: r[1], scale: r[2] }]),
      );
      if (types.size === 0)
        throw new TransferError(
          'target_incompatible',
          `transfer ${this.t.name}: target table ${this.t.target.table} does not exist (Oracle names are case-sensitive here: they are quoted)`,
        );
      const cols: TargetColumn[] = [];
      for (const m of mapped) {
        const ty = types.get(m.target);
        if (!ty)
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: target column ${m.target} does not exist in ${this.t.target.table}`,
          );
        if (ty.dataType.toUpperCase() === 'BLOB') {
          // Staging binds every value as text (HEXTORAW of up to 4,000 hex characters in SQL) and reads it back as
          // text to checksum it: a BLOB value over 2,000 bytes would fail to bind (ORA-01461) or be read back cut.
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: target column ${m.target} is a BLOB, which the Oracle target does not take: values over 2,000 bytes cannot be staged and verified through text binds. Use a RAW column (up to 2,000 bytes; 32,767 with MAX_STRING_SIZE = EXTENDED) or leave the column out of the mapping (docs/oracle.md)`,
          );
        }
        if (!oracleAccepts(m.logical, ty.dataType, ty.scale)) {
          throw new TransferError(
            'target_incompatible',
            `transfer ${this.t.name}: target column ${m.target} (${ty.dataType}) cannot hold source column ${m.source} (${m.type})`,
          );
        }
        cols.push({ source: m.source, target: m.target, logical: m.logical, dataType: ty.dataType });
      }
      // Like the PostgreSQL target: the MERGE's ON columns must be a key of the target table (an enabled primary
      // key or unique constraint, or a unique non-function-based index on exactly those columns).
      const keys = [...this.targetKeys()].sort().join(',');
      const key = await c.execute<[number]>(
        `SELECT COUNT(*) FROM (
           SELECT LISTAGG(cc.column_name, ',' ON OVERFLOW TRUNCATE) WITHIN GROUP (ORDER BY cc.column_name) AS cols
             FROM all_constraints k JOIN all_cons_columns cc ON cc.owner = k.owner AND cc.constraint_name = k.constraint_name AND cc.table_name = k.table_name
            WHERE k.owner = NVL(:owner, USER) AND k.table_name = :tbl AND k.constraint_type IN ('P', 'U') AND k.status = 'ENABLED'
            GROUP BY k.constraint_name
           UNION ALL
           SELECT LISTAGG(ic.column_name, ',' ON OVERFLOW TRUNCATE) WITHIN GROUP (ORDER BY ic.column_name)
             FROM all_indexes i JOIN all_ind_columns ic ON ic.index_owner = i.owner AND ic.index_name = i.index_name
            WHERE i.table_owner = NVL(:owner, USER) AND i.table_name = :tbl AND i.uniqueness = 'UNIQUE' AND i.index_type NOT LIKE 'FUNCTION-BASED%'
            GROUP BY i.owner, i.index_name)
          WHERE cols = :keys`,
        { owner: this.owner, tbl: this.table, keys },
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      if (Number(key.rows?.[0]?.[0] ?? 0) === 0) {
        throw new TransferError(
          'target_incompatible',
          `transfer ${this.t.name}: target table ${this.t.target.table} needs a primary key, unique constraint or unique index on exactly (${this.targetKeys().join(', ')})`,
        );
      }
      try {
        await c.execute(`BEGIN KEEL_TRANSFER.ENSURE_STAGING(:transfer, :owner, :tbl, :cols, :stg); END;`, {
          transfer: this.t.name,
          owner: this.owner,
          tbl: this.table,
          cols: cols.map((x) => x.target).join(','),
          stg: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 128 },
        });
      } catch (err) {
        if (oraNum(err) === ORA_STAGING_SHAPE) throw new TransferError('target_incompatible', (err as Error).message);
        throw err;
      }
      this.columns = cols;
    } finally {
      await c.close();
    }
  }

  private cols(): TargetColumn[] {
    if (!this.columns) throw new Error('OracleTransferTarget.prepare() must run first');
    return this.columns;
  }

  async stage(req: StageRequest, feed: RowFeed): Promise<StageResult> {
    if (feed.kind !== 'rows') throw new Error('the Oracle target takes canonical rows');
    if (algorithmOf(req.manifest.checksum) !== 'keel-v1')
      throw new Error(`the Oracle target verifies keel-v1 checksums only`);
    const cols = this.cols();
    const c = await this.conn();
    try {
      let opened: string;
      try {
        c.callTimeout = (ORACLE_LOCK_WAIT_SECONDS + 15) * 1000; // the registry insert may wait on a rival's row
        const r = await c.execute<{ r: string }>(`BEGIN :r := KEEL_TRANSFER.BEGIN_STAGE(:b, :t, :n, :cs); END;`, {
          r: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 20 },
          b: req.batchId,
          t: req.transfer,
          n: req.manifest.rowCount,
          cs: req.manifest.checksum,
        });
        opened = String((r.outBinds as { r: string }).r);
        c.callTimeout = ORACLE_CALL_TIMEOUT_MS;
      } catch (err) {
        if (oraNum(err) === ORA_CONFLICT)
          throw new TransferError('staging_conflict', (err as Error).message, { batchId: req.batchId });
        if ((err as { code?: unknown }).code === NJS_CALL_TIMEOUT) {
          throw new TransferError(
            'target_busy',
            `batch ${req.batchId}: another session has held its staging registry row for over ${ORACLE_LOCK_WAIT_SECONDS} s (a rival or orphaned staging); nothing was staged, run the batch again later`,
            { batchId: req.batchId },
          );
        }
        throw err;
      }
      if (opened === 'ALREADY_STAGED') {
        await c.commit();
        return { outcome: 'already_staged', rowCount: req.manifest.rowCount, checksum: req.manifest.checksum };
      }

      const insert = `INSERT INTO ${this.stagingRef()} (KEEL_BATCH_ID, ${cols.map((x) => quoteOracle(x.target)).join(', ')}) VALUES (:1, ${cols
        .map((x, i) => fromCanonical(`:${i + 2}`, x.logical, x.dataType))
        .join(', ')})`;
      for await (const chunk of feed.rows) {
        if (chunk.length === 0) continue;
        const maxSizes = cols.map(() => 1);
        const binds = chunk.map((row) => {
          const out: (string | null)[] = [req.batchId];
          for (let i = 0; i < cols.length; i++) {
            const v = row[i] ?? null;
            if (v === '' && (cols[i]!.logical === 'text' || cols[i]!.logical === 'bytes')) {
              // Oracle stores '' and an empty RAW (HEXTORAW('')) as NULL.
              throw new TransferError(
                'unsupported_type',
                `batch ${req.batchId}: column ${cols[i]!.source} holds an empty ${cols[i]!.logical === 'text' ? 'string' : 'binary value'}, which Oracle stores as NULL; the batch cannot be staged unchanged`,
              );
            }
            if (v !== null) maxSizes[i] = Math.max(maxSizes[i]!, Buffer.byteLength(v, 'utf8'));
            out.push(v);
          }
          return out;
        });
        await c.executeMany(insert, binds, {
          autoCommit: false,
          bindDefs: [
            { type: oracledb.STRING, maxSize: 36 },
            ...maxSizes.map((m) => ({ type: oracledb.STRING, maxSize: m })),
          ],
        });
      }

      const keys = this.targetKeys().map(quoteOracle);
      const dup = await c.execute<[string]>(
        `SELECT ${keys.map((k) => `TO_CHAR(${k})`).join(` || ', ' || `)} FROM ${this.stagingRef()} WHERE KEEL_BATCH_ID = :b GROUP BY ${keys.join(', ')} HAVING COUNT(*) > 1 FETCH FIRST 3 ROWS ONLY`,
        { b: req.batchId },
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      if ((dup.rows ?? []).length > 0) {
        const found = (dup.rows ?? []).map((r) => `(${r[0]})`);
        throw new TransferError(
          'duplicate_keys',
          `batch ${req.batchId}: duplicate keys within the batch (${found.join(', ')})`,
          { keys: found },
        );
      }

      // Read the staged rows back as canonical text and checksum them exactly like the source did.
      const acc = new ChecksumAccumulator();
      const rs = await c.execute<CanonicalRow>(
        `SELECT ${cols.map((x) => toCanonical(quoteOracle(x.target), x.logical, x.dataType)).join(', ')} FROM ${this.stagingRef()} WHERE KEEL_BATCH_ID = :b`,
        { b: req.batchId },
        {
          outFormat: oracledb.OUT_FORMAT_ARRAY,
          resultSet: true,
          fetchArraySize: 1000,
          fetchTypeHandler: () => ({ type: oracledb.STRING }),
        },
      );
      const resultSet = rs.resultSet!;
      try {
        for (;;) {
          const rows = await resultSet.getRows(1000);
          if (rows.length === 0) break;
          for (const row of rows) acc.add(row.map((v, i) => canonicalValue(cols[i]!.logical, v)));
        }
      } finally {
        await resultSet.close();
      }
      if (acc.count !== req.manifest.rowCount || acc.checksum !== req.manifest.checksum) {
        throw new TransferError(
          'manifest_mismatch',
          `batch ${req.batchId}: staged ${acc.count} rows (checksum ${acc.checksum}) but the manifest says ${req.manifest.rowCount} rows (checksum ${req.manifest.checksum}); the source window changed after extraction or a value did not survive conversion`,
          { stagedCount: acc.count, stagedChecksum: acc.checksum },
        );
      }
      await c.execute(`BEGIN KEEL_TRANSFER.FINISH_STAGE(:b, :n, :cs); END;`, {
        b: req.batchId,
        n: acc.count,
        cs: acc.checksum,
      });
      await c.commit();
      return { outcome: 'staged', rowCount: acc.count, checksum: acc.checksum };
    } catch (err) {
      await c.rollback().catch(() => undefined);
      throw err;
    } finally {
      await c.close().catch(() => undefined);
    }
  }

  async apply(req: StageRequest, ctx: ApplyContext): Promise<ApplyResult> {
    const cols = this.cols();
    const c = await this.conn();
    try {
      if (this.t.target.transactionGuard) {
        // node-oracledb >= 6.9 exposes the logical transaction id; keep it durable before the call.
        const ltxid = (c as unknown as { ltxid?: Buffer | Uint8Array }).ltxid;
        // It is the reconcile token: the journal keeps it and reconcile gets it back.
        if (ltxid && ltxid.length > 0) await ctx.onReconcileToken?.(Buffer.from(ltxid).toString('hex'));
      }
      try {
        const r = await c.execute(
          `BEGIN KEEL_TRANSFER.APPLY_BATCH(:b, :t, :owner, :tbl, :stg, :cols, :keys, :n, :cs, :attempt, :outcome, :rows, :checksum); END;`,
          {
            b: req.batchId,
            t: req.transfer,
            owner: this.owner,
            tbl: this.table,
            stg: this.stagingTable,
            cols: cols.map((x) => x.target).join(','),
            keys: this.targetKeys().join(','),
            n: req.manifest.rowCount,
            cs: req.manifest.checksum,
            attempt: ctx.attempt,
            outcome: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 20 },
            rows: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER },
            checksum: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 24 },
          },
          { autoCommit: false }, // APPLY_BATCH commits (or rolls back) its own single transaction
        );
        const o = r.outBinds as { outcome: string; rows: number; checksum: string };
        return {
          outcome: o.outcome === 'APPLIED' ? 'applied' : 'already_committed',
          rowCount: Number(o.rows),
          checksum: String(o.checksum),
        };
      } catch (err) {
        if (oraNum(err) === ORA_FENCED)
          throw new TransferError('attempt_fenced', (err as Error).message, { attempt: ctx.attempt });
        if (oraNum(err) === ORA_NOT_STAGED) throw new TransferError('not_staged', (err as Error).message);
        if (oraNum(err) === ORA_CONFLICT) throw new TransferError('staging_conflict', (err as Error).message);
        if (oraNum(err) === ORA_MERGE_COUNT) throw new TransferError('target_incompatible', (err as Error).message);
        if (oraNum(err) === ORA_LOCK_WAIT_TIMEOUT) {
          throw new TransferError(
            'target_busy',
            `batch ${req.batchId}: its staging registry row stayed locked by another session for ${ORACLE_LOCK_WAIT_SECONDS} s (an apply or reconcile still open, or an orphaned session); nothing was applied, run the batch again later`,
          );
        }
        throw err;
      }
    } finally {
      await c.close().catch(() => undefined);
    }
  }

  async reconcile(
    req: StageRequest,
    waitMs: number,
    fenceThrough: number,
    reconcileToken: string | null, // the LTXID (hex) handed out by apply, when Transaction Guard is on
  ): Promise<ReconcileOutcome> {
    const ltxid = reconcileToken;
    const c = await this.conn();
    try {
      if (this.t.target.transactionGuard && ltxid) {
        // Transaction Guard: the outcome of the recorded logical transaction; asking also blocks it from
        // committing later, so "not committed" is final for that transaction.
        try {
          const r = await c.execute(
            `DECLARE c BOOLEAN; u BOOLEAN; BEGIN DBMS_APP_CONT.GET_LTXID_OUTCOME(HEXTORAW(:l), c, u); :committed := CASE WHEN c THEN 1 ELSE 0 END; END;`,
            { l: ltxid, committed: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER } },
          );
          const committed = Number((r.outBinds as { committed: number }).committed) === 1;
          if (committed) {
            const row = await c.execute<[number, string]>(
              `SELECT ROW_COUNT, CHECKSUM FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = :b`,
              { b: req.batchId },
              { outFormat: oracledb.OUT_FORMAT_ARRAY },
            );
            const first = row.rows?.[0];
            if (first)
              return {
                outcome: 'committed',
                rowCount: Number(first[0]),
                checksum: String(first[1]),
                via: 'transaction_guard',
              };
          }
        } catch {
          // e.g. the original session is still active (the server knows more than we do): fall through to the claim.
        }
      }
      // Not committed (or no Transaction Guard): TRY_CLAIM, which commits the fence with a "not applied" verdict.
      const r = await c.execute(
        `BEGIN KEEL_TRANSFER.TRY_CLAIM(:b, :wait, :fence, :outcome, :rows, :checksum, :staged); END;`,
        {
          b: req.batchId,
          wait: Math.max(1, Math.ceil(waitMs / 1000)),
          fence: fenceThrough,
          outcome: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 20 },
          rows: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER },
          checksum: { dir: oracledb.BIND_OUT, type: oracledb.STRING, maxSize: 24 },
          staged: { dir: oracledb.BIND_OUT, type: oracledb.NUMBER },
        },
      );
      const o = r.outBinds as { outcome: string; rows: number | null; checksum: string | null; staged: number };
      if (o.outcome === 'COMMITTED')
        return { outcome: 'committed', rowCount: Number(o.rows), checksum: String(o.checksum), via: 'completion_row' };
      if (o.outcome === 'NOT_APPLIED')
        return { outcome: 'not_applied', staged: Number(o.staged) === 1, via: 'claim_obtained' };
      return {
        outcome: 'blocked',
        reason: `the claim on batch ${req.batchId} is held by an open transaction on the target (waited ${Math.max(1, Math.ceil(waitMs / 1000))} s)`,
      };
    } finally {
      await c.close().catch(() => undefined);
    }
  }

  async purgeStaged(batchId: string): Promise<void> {
    const c = await this.conn();
    try {
      await c.execute(`BEGIN KEEL_TRANSFER.PURGE_STAGED(:b, :stg); END;`, { b: batchId, stg: this.stagingTable });
    } finally {
      await c.close().catch(() => undefined);
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

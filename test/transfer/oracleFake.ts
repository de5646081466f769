// A model of the Oracle server and node-oracledb thin pool that the Oracle target talks to, for the tests that need
// no server (test/transfer/oracleReconcile.test.ts). It keeps only what the reconcile path depends on, as Oracle and
// thin mode document it:
// - the pool is LIFO (node_modules/oracledb/lib/thin/pool.js: _freeConnectionList.pop()/push()), and close() returns
//   a session to it unless { drop: true };
// - each session has a logical transaction id (LTXID) that its next COMMIT consumes, whichever transaction that is,
//   and that survives a rollback (Oracle RAC guide, Transaction Guard: "The LTXID persists on commit, and is reused
//   following a rollback");
// - DBMS_APP_CONT.GET_LTXID_OUTCOME answers "committed" for a consumed LTXID; otherwise it blocks the LTXID (its
//   commit then fails) and answers "not committed"; asked on the session that owns the LTXID it raises ORA-14906;
// - KEEL_TRANSFER's procedures (sql/oracle/R__010) as far as their committed rows go: the registry row, the
//   completion row (CLAIMED/COMMITTED/FENCED), the staged rows. Row locks are not modelled (each test is sequential).
// SQL is recognised by the procedure or table it names; anything else fails the test.
import type oracledb from 'oracledb';
import oracledbTypes from 'oracledb';

type Completion = {
  state: 'COMMITTED' | 'FENCED';
  rows: number | null;
  checksum: string | null;
  fenced: number;
  deleted?: number | null;
};
type Registry = { state: 'STAGED'; count: number; checksum: string; transfer?: string };

export function oraError(num: number, text: string): Error {
  return Object.assign(new Error(`ORA-${String(num).padStart(5, '0')}: ${text}`), {
    errorNum: num,
    isRecoverable: false,
  });
}

export class FakeSession {
  readonly id: number;
  private commits = 0;
  callTimeout = 0;
  closed = false;
  closedWith: { drop: boolean } | null = null;
  tag = '';
  // the uncommitted work of the open transaction
  private pending: { registry?: [string, Registry]; rows: string[][]; ops: (() => void)[] } = { rows: [], ops: [] };

  constructor(
    private readonly server: FakeOracle,
    id: number,
  ) {
    this.id = id;
  }

  get ltxid(): Buffer {
    return Buffer.from(`${String(this.id).padStart(8, '0')}:${String(this.commits).padStart(8, '0')}`);
  }
  private get ltxidHex(): string {
    return this.ltxid.toString('hex');
  }

  private commitNow(): void {
    const l = this.ltxidHex;
    if (this.server.ltxids.get(l) === 'blocked') {
      this.rollbackNow();
      throw oraError(14950, 'the logical transaction was blocked by GET_LTXID_OUTCOME');
    }
    this.server.ltxids.set(l, 'committed');
    this.commits++;
    if (this.pending.registry) this.server.registry.set(...this.pending.registry);
    for (const op of this.pending.ops) op();
    this.server.stagedRows.push(...this.pending.rows);
    this.pending = { rows: [], ops: [] };
  }
  private rollbackNow(): void {
    this.pending = { rows: [], ops: [] };
  }

  private async enter(op: string): Promise<void> {
    if (this.closed) throw new Error(`NJS-003: invalid or closed connection (session ${this.id}, ${op})`);
    this.server.calls.push({ session: this.id, op });
    const hang = this.server.hang.get(op);
    if (hang) {
      this.server.hang.delete(op);
      await new Promise<never>(() => undefined); // a silent peer: no reply, no error, ever
    }
    const fail = this.server.failNext.get(op);
    if (fail) {
      this.server.failNext.delete(op);
      this.rollbackNow();
      throw fail;
    }
  }

  async execute(sql: string, binds: Record<string, unknown> = {}): Promise<oracledb.Result<unknown>> {
    const b = binds as Record<string, string | number | null>;
    const s = this.server;
    if (/all_tab_columns/.test(sql)) {
      await this.enter('columns');
      return { rows: s.columns };
    }
    if (/LISTAGG/.test(sql)) {
      await this.enter('key check');
      return { rows: [[1]] };
    }
    if (/ENSURE_STAGING/.test(sql)) {
      await this.enter('ENSURE_STAGING');
      return { outBinds: { o_staging: 'KEEL_STG_X' } };
    }
    if (/BEGIN_STAGE/.test(sql)) {
      await this.enter('BEGIN_STAGE');
      const id = String(b.p_batch_id);
      if (s.registry.has(id)) return { outBinds: { o_result: 'ALREADY_STAGED' } };
      this.pending.registry = [
        id,
        {
          state: 'STAGED',
          count: Number(b.p_expected_count),
          checksum: String(b.p_expected_checksum),
          transfer: String(b.p_transfer),
        },
      ];
      return { outBinds: { o_result: 'NEW' } };
    }
    // The staged keys of batch :b twice in it or with a NULL part under the key columns the query groups by (at most
    // three, as 'v1, v2' with NULL for a NULL part), over the committed staged rows and this transaction's own.
    const dupKeys = /GROUP BY (.*) HAVING COUNT\(\*\) > 1/.exec(sql);
    if (dupKeys) {
      await this.enter('duplicate check');
      const at = [...dupKeys[1]!.matchAll(/"([^"]+)"/g)].map((m) => s.stagedColumns().indexOf(m[1]!) + 1);
      const groups = new Map<string, { n: number; nulls: boolean }>();
      for (const r of [...s.stagedRows, ...this.pending.rows].filter((r) => r[0] === b.b)) {
        const parts = at.map((i) => r[i] ?? null);
        const k = parts.map((p) => p ?? 'NULL').join(', ');
        const g = groups.get(k) ?? { n: 0, nulls: false };
        groups.set(k, { n: g.n + 1, nulls: g.nulls || parts.includes(null) });
      }
      return {
        rows: [...groups]
          .filter(([, g]) => g.n > 1 || g.nulls)
          .slice(0, 3)
          .map(([k]) => [k]),
      };
    }
    if (/FROM "KEEL_STG_/.test(sql) && /^SELECT/.test(sql)) {
      const rows = this.pending.rows.filter((r) => r[0] === b.b).map((r) => r.slice(1));
      let served = false;
      return {
        resultSet: {
          getRows: async () => {
            if (served) return [];
            served = true;
            return rows;
          },
          close: async () => undefined,
        },
      } as unknown as oracledb.Result<unknown>;
    }
    if (/FINISH_STAGE/.test(sql)) {
      await this.enter('FINISH_STAGE');
      const reg = this.pending.registry!;
      reg[1] = { state: 'STAGED', count: Number(b.p_count), checksum: String(b.p_checksum) };
      return {};
    }
    if (/APPLY_BATCH/.test(sql)) {
      await this.enter('APPLY_BATCH');
      const id = String(b.p_batch_id);
      const reg = s.registry.get(id);
      if (!reg) throw oraError(20002, `batch ${id} is not staged on the target`);
      const done = s.completions.get(id);
      if (done?.state === 'COMMITTED')
        return {
          outBinds: {
            o_outcome: 'ALREADY_COMMITTED',
            o_row_count: done.rows,
            o_checksum: done.checksum,
            o_deleted: done.deleted ?? null,
          },
        };
      if (done && done.fenced >= Number(b.p_attempt))
        throw oraError(20005, `attempt ${b.p_attempt} of batch ${id} was ruled out by reconcile`);
      const rows = s.stagedRows.filter((r) => r[0] === id);
      // p_changes (OPS | MIRROR): each staged row ends with KEEL_OP; 'D' deletes its key, and MIRROR deletes every
      // row whose key is not staged -- in the same commit as the completion row.
      const changes = (b.p_changes as string | null | undefined) ?? null;
      // A windowed baseline's key window (p_mirror_low/p_mirror_high, integer texts, a null bound open): the MIRROR
      // deletes only target keys in (low, high], compared as numbers; the package refuses a range on anything but a
      // MIRROR, or when the first key column is not a NUMBER. (The model keys applied rows by the first column.)
      const low = (b.p_mirror_low as string | null | undefined) ?? null;
      const high = (b.p_mirror_high as string | null | undefined) ?? null;
      const ranged = low !== null || high !== null;
      if (ranged && changes !== 'MIRROR')
        throw oraError(20006, 'APPLY_BATCH: p_mirror_low/p_mirror_high bound a MIRROR only');
      const k1 = String(b.p_keys).split(',')[0]!;
      if (ranged && s.columns.find((c) => c[0] === k1)?.[1] !== 'NUMBER')
        throw oraError(20006, `APPLY_BATCH: a key-range mirror needs a NUMBER first key column (${k1})`);
      const inRange = (k: string) =>
        (low === null || BigInt(k) > BigInt(low)) && (high === null || BigInt(k) <= BigInt(high));
      s.mirrorRanges.push(ranged ? { low, high } : null);
      let deleted: number | null = null;
      this.pending.ops.push(() => {
        if (changes !== null) {
          deleted = 0;
          for (const r of rows)
            if (r[r.length - 1] === 'D' && s.applied.delete(r[1]!)) deleted++;
            else if (r[r.length - 1] === 'U') s.applied.set(r[1]!, r.slice(1, -1));
          if (changes === 'MIRROR') {
            const keep = new Set(rows.map((r) => r[1]!));
            for (const k of [...s.applied.keys()])
              if (!keep.has(k) && (!ranged || inRange(k)) && s.applied.delete(k)) deleted++;
          }
        } else for (const r of rows) s.applied.set(r[1]!, r.slice(1));
        s.completions.set(id, {
          state: 'COMMITTED',
          rows: rows.length,
          checksum: reg.checksum,
          fenced: done?.fenced ?? 0,
          deleted,
        });
      });
      this.commitNow();
      if (s.loseReplyOfApply) {
        // committed on the server, and the reply never arrived: the driver reports a lost connection
        s.loseReplyOfApply = false;
        this.closed = true;
        throw Object.assign(new Error('NJS-500: connection to the Oracle Database was broken'), {
          code: 'NJS-500',
          isRecoverable: true,
        });
      }
      return {
        outBinds: { o_outcome: 'APPLIED', o_row_count: rows.length, o_checksum: reg.checksum, o_deleted: deleted },
      };
    }
    if (/GET_LTXID_OUTCOME/.test(sql)) {
      await this.enter('GET_LTXID_OUTCOME');
      const l = String(b.l);
      if (l === this.ltxidHex)
        throw oraError(14906, 'Executing GET_LTXID_OUTCOME is not permitted on the current session');
      if (s.ltxids.get(l) === 'committed') return { outBinds: { o_committed: 1 } };
      s.ltxids.set(l, 'blocked');
      return { outBinds: { o_committed: 0 } };
    }
    if (/FROM KEEL_TRANSFER_COMPLETIONS/.test(sql)) {
      await this.enter('completion row');
      const c = s.completions.get(String(b.b));
      const onlyCommitted = /STATE = 'COMMITTED'/.test(sql);
      return { rows: c && (!onlyCommitted || c.state === 'COMMITTED') ? [[c.rows, c.checksum]] : [] };
    }
    if (/TRY_CLAIM/.test(sql)) {
      await this.enter('TRY_CLAIM');
      const id = String(b.p_batch_id);
      const c = s.completions.get(id);
      if (c?.state === 'COMMITTED')
        return { outBinds: { o_outcome: 'COMMITTED', o_row_count: c.rows, o_checksum: c.checksum, o_staged: 1 } };
      const fence = Number(b.p_fence_through);
      if (fence > 0) {
        this.pending.ops.push(() =>
          s.completions.set(id, {
            state: c?.state ?? 'FENCED',
            rows: c?.rows ?? null,
            checksum: c?.checksum ?? null,
            fenced: Math.max(c?.fenced ?? 0, fence),
          }),
        );
      }
      this.commitNow(); // the fence, and the release of the lock
      return {
        outBinds: {
          // as the package: the final fence (abandon's) held by the row after this call
          o_outcome: Math.max(c?.fenced ?? 0, fence) >= 2147483647 ? 'NOT_APPLIED_FINAL' : 'NOT_APPLIED',
          o_row_count: null,
          o_checksum: null,
          o_staged: s.registry.has(id) ? 1 : 0,
        },
      };
    }
    // Key-set comparison: the target table's keys in a key window (the first column is the key, as `applied` keeps it).
    if (/^SELECT .* FROM "[A-Z_]+" t WHERE/.test(sql) && !/KEEL_/.test(sql)) {
      await this.enter('window keys');
      const inWindow = (k: string) => (b.lo == null || Number(k) > Number(b.lo)) && Number(k) <= Number(b.hi);
      return { rows: [...s.applied.keys()].filter(inWindow).map((k) => [k]) };
    }
    if (/PURGE_STAGED/.test(sql)) {
      await this.enter('PURGE_STAGED');
      // The batch's rows and registry row, and those of every batch that can never be applied again (committed, or
      // fenced for good), as KEEL_TRANSFER.PURGE_STAGED deletes them.
      const gone = (id: string) => {
        const c = s.completions.get(id);
        return id === b.p_batch_id || c?.state === 'COMMITTED' || (c?.fenced ?? 0) >= 2147483647;
      };
      s.stagedRows = s.stagedRows.filter((r) => !gone(r[0]!));
      for (const id of [...s.registry.keys()]) if (gone(id)) s.registry.delete(id);
      return {};
    }
    if (/STAGED_BATCHES/.test(sql)) {
      await this.enter('STAGED_BATCHES');
      // Committed registry rows of the transfer after p_after, in id order (VARCHAR2: binary order), at most 100.
      const after = b.p_after === null || b.p_after === undefined ? null : String(b.p_after);
      const ids = [...s.registry.entries()]
        .filter(([, r]) => r.transfer === undefined || r.transfer === String(b.p_transfer))
        .map(([id]) => id)
        .filter((id) => after === null || id > after)
        .sort()
        .slice(0, Math.max(Math.min(Number(b.p_max_count), 100), 1));
      return { outBinds: { o_batch_ids: ids.length > 0 ? ids.join(',') : null } };
    }
    throw new Error(`the fake Oracle does not know this statement: ${sql.slice(0, 120)}`);
  }

  async executeMany(
    sql: string,
    rows: (string | null)[][],
    options: oracledb.ExecuteManyOptions,
  ): Promise<oracledb.Results<unknown>> {
    if (/^DELETE FROM/.test(sql)) {
      // Key-set comparison's deletes: one named-bind object per key, inside the window; applied at commit.
      await this.enter('delete keys');
      const s = this.server;
      const binds = rows as unknown as Record<string, string | null>[];
      const hit = binds.filter(
        (r) => s.applied.has(r.k0!) && (r.lo == null || Number(r.k0) > Number(r.lo)) && Number(r.k0) <= Number(r.hi),
      );
      this.pending.ops.push(() => {
        for (const r of hit) s.applied.delete(r.k0!);
      });
      return { rowsAffected: hit.length } as unknown as oracledb.Results<unknown>;
    }
    await this.enter('staging insert');
    const errors = this.server.rowErrors.splice(0);
    const failed = new Set(errors.map((e) => e.offset));
    const store = this.server.storage(sql, (options.bindDefs ?? []) as { type?: unknown }[]);
    rows.forEach((r, i) => {
      if (!failed.has(i)) this.pending.rows.push(store(r) as string[]);
    });
    return (errors.length > 0 ? { batchErrors: errors } : {}) as unknown as oracledb.Results<unknown>;
  }

  async commit(): Promise<void> {
    await this.enter('commit');
    this.commitNow();
  }

  async rollback(): Promise<void> {
    await this.enter('rollback');
    this.rollbackNow();
  }

  async close(opts?: { drop?: boolean }): Promise<void> {
    if (this.closed) throw new Error('NJS-003: invalid or closed connection');
    this.rollbackNow(); // thin close() rolls back an open transaction
    const drop = opts?.drop === true;
    this.closedWith = { drop };
    this.server.released.push({ session: this.id, drop });
    if (drop) this.closed = true;
    else this.server.free.push(this);
  }
}

export class FakeOracle {
  // ALL_TAB_COLUMNS rows: column_name, data_type, data_scale, data_precision, data_length, char_length, char_used,
  // nullable
  columns: unknown[][] = [];
  registry = new Map<string, Registry>();
  completions = new Map<string, Completion>();
  stagedRows: string[][] = []; // [batchId, ...canonical values]
  applied = new Map<string, string[]>(); // target table rows by key
  ltxids = new Map<string, 'committed' | 'blocked'>();
  free: FakeSession[] = [];
  sessions: FakeSession[] = [];
  calls: { session: number; op: string }[] = [];
  released: { session: number; drop: boolean }[] = [];
  failNext = new Map<string, Error>(); // op -> the error its next call raises (after rolling back)
  hang = new Map<string, true>(); // op -> its next call never replies
  rowErrors: { message: string; offset: number }[] = []; // batch errors of the next executeMany
  loseReplyOfApply = false; // the next APPLY_BATCH commits and its reply is lost
  mirrorRanges: ({ low: string | null; high: string | null } | null)[] = []; // each APPLY_BATCH's key range

  readonly pool = {
    getConnection: async () => {
      const s = this.free.pop() ?? new FakeSession(this, this.sessions.length + 1);
      if (!this.sessions.includes(s)) this.sessions.push(s);
      return s;
    },
    close: async () => undefined,
  } as unknown as oracledb.Pool;

  // What poolTimeout does to idle sessions (60 s by default): they are closed.
  expireIdle(): void {
    for (const s of this.free.splice(0)) s.closed = true;
  }

  // What a staged row holds, as the readback returns it, for the target columns the staging INSERT names and
  // `columns` describes (others are kept as bound): Oracle's '' (and an empty RAW/BLOB) is NULL; CHAR(n)/NCHAR(n) pad
  // to n; a DATE keeps whole seconds (read back with '.000000'); TIMESTAMP(n) keeps n fraction digits; NVARCHAR2/NCHAR
  // take only DB_TYPE_NVARCHAR binds and CLOB/NCLOB only DB_TYPE_CLOB/DB_TYPE_NCLOB; RAW/BLOB take
  // only Buffers bound as DB_TYPE_RAW/DB_TYPE_BLOB and BINARY_DOUBLE only numbers bound as DB_TYPE_BINARY_DOUBLE
  // (node-oracledb's NJS-011 otherwise), and come back as a Buffer and a number.
  storage(sql: string, bindDefs: { type?: unknown }[]): (row: unknown[]) => unknown[] {
    const list = /\(KEEL_BATCH_ID, (.*?)\) VALUES/.exec(sql)?.[1] ?? '';
    const names = [...list.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
    this.stagedNames = names;
    const metas = names.map((n) => this.columns.find((c) => c[0] === n));
    const mismatch = (col: string, v: unknown) =>
      Object.assign(new Error(`NJS-011: encountered bind value and type mismatch (${col}: ${typeof v})`), {
        code: 'NJS-011',
      });
    return (row) =>
      row.map((v, i) => {
        const meta = i === 0 ? undefined : metas[i - 1];
        if (!meta) return v;
        const [name, type, scale, , , charLength] = meta as [string, string, number | null, unknown, unknown, number];
        const def = bindDefs[i]?.type;
        const t = type.toUpperCase();
        if (t === 'RAW' || t === 'BLOB') {
          // a BLOB also takes a RAW bind (the INSERT converts it)
          const ok = def === oracledbTypes.DB_TYPE_RAW || (t === 'BLOB' && def === oracledbTypes.DB_TYPE_BLOB);
          if ((v !== null && !Buffer.isBuffer(v)) || !ok) throw mismatch(name, v);
          return v === null || (v as Buffer).length === 0 ? null : v;
        }
        if (t === 'BINARY_DOUBLE') {
          if ((v !== null && typeof v !== 'number') || def !== oracledbTypes.DB_TYPE_BINARY_DOUBLE)
            throw mismatch(name, v);
          return v;
        }
        // N columns take national-character binds, LOB columns temporary LOBs (a long string is not a LONG)
        // (or a VARCHAR2/NVARCHAR2 bind for a CLOB/NCLOB, which the INSERT converts)
        const textDefs: unknown[] | undefined = {
          NVARCHAR2: [oracledbTypes.DB_TYPE_NVARCHAR],
          NCHAR: [oracledbTypes.DB_TYPE_NVARCHAR],
          CLOB: [oracledbTypes.DB_TYPE_CLOB, oracledbTypes.DB_TYPE_VARCHAR],
          NCLOB: [oracledbTypes.DB_TYPE_NCLOB, oracledbTypes.DB_TYPE_NVARCHAR],
        }[t];
        if (textDefs !== undefined && !textDefs.includes(def)) throw mismatch(name, v);
        if (v === null || v === '') return null;
        if (typeof v !== 'string') throw mismatch(name, v);
        if (t === 'CHAR' || t === 'NCHAR') return v.padEnd(charLength, ' ');
        if (t === 'DATE') return v.length > 10 ? `${v.slice(0, 19)}.000000` : v;
        const ts = /^TIMESTAMP\((\d)\)$/.exec(t);
        if (ts) {
          const keep = Number(ts[1] ?? scale ?? 6);
          return `${v.slice(0, 20 + keep)}${'0'.repeat(6 - keep)}`;
        }
        return v;
      });
  }

  // The target columns a staged row holds after its batch id: as the last staging INSERT named them, else (rows put
  // into stagedRows by a test) the table's columns in `columns` order.
  stagedNames: string[] | null = null;
  stagedColumns(): string[] {
    return this.stagedNames ?? this.columns.map((c) => String(c[0]));
  }

  callsOf(op: string): { session: number; op: string }[] {
    return this.calls.filter((c) => c.op === op);
  }
}

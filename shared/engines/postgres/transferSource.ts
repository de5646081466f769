// PostgreSQL transfer source: schema, windows, manifest (count + keel-v1 checksum computed by the server),
// canonical rows streamed as the COPY TO STDOUT of their text, and a COPY TO STDOUT of the typed rows for PostgreSQL targets.
import type pg from 'pg';
import {
  COPY_TEXT,
  type CanonicalChunk,
  type CanonicalRow,
  type ChecksumAlgorithm,
  type LogicalType,
} from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { boundaryColumn, resolvedNames } from '../../transfer/config.js';
import {
  baselineBound,
  baselineKeyRange,
  carriesChanges,
  changeLowVersion,
  isBaseline,
  parseBaselineBound,
  BASELINE_MARK,
  OP_COLUMN,
  OP_DELETE,
  OP_UPSERT,
} from '../../transfer/changes.js';
import { qualifiedPg, quotePg, type QualifiedName } from '../../transfer/identifiers.js';
import { buildSourceSchema, mappedColumns } from '../../transfer/schema.js';
import type {
  BulkEncoding,
  BulkStream,
  KeyTuple,
  Manifest,
  SourceAdapter,
  SourceSchema,
  StreamFacts,
  Window,
} from '../../transfer/types.js';
import { TransferError } from '../../transfer/errors.js';
import {
  PG_CHECKSUM_SETTINGS_SQL,
  PG_ONE_PROCESS_SQL,
  PG_OUT_OF_RANGE_MARK,
  pgCanonical,
  pgCastFor,
  pgChecksumQuery,
  pgFacets,
  pgLogicalType,
  pgTemporalOutOfRange,
} from './transferSql.js';
import { copyOut } from './copyStreams.js';
import { PG_COPY_FORMAT, pgChecksumAlgorithms } from './serverFeatures.js';

const noop = () => undefined;

// The largest version: a change not stamped yet counts as newer than any window (it belongs to a later one).
const UNSTAMPED = '9223372036854775807';

// One field of COPY TO's text format: \N is NULL; a backslash escapes the next character (\b \f \n \r \t \v
// name control characters; anything else stands for itself), which is all COPY TO writes.
const COPY_ESCAPES: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };
export function copyTextValue(field: string): string | null {
  if (field === '\\N') return null;
  if (!field.includes('\\')) return field;
  return field.replace(/\\(.)/gs, (_m, c: string) => COPY_ESCAPES[c] ?? c);
}

function pgCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

export class PostgresTransferSource implements SourceAdapter {
  readonly engine = 'postgres';
  readonly bulkFormat = PG_COPY_FORMAT;
  readonly windowsBaselines = true; // nextChangeWindow: key windows over an integer keyColumns[0] of a table
  private readonly from: string;
  private readonly table: QualifiedName | null;

  constructor(
    private readonly t: TransferConfig,
    private readonly pool: pg.Pool,
    private readonly opts: { ownsPool?: boolean; trace?: (phase: string, ms: number) => void } = {},
  ) {
    const names = resolvedNames(t);
    this.table = names.sourceTable;
    // A configured query is trusted configuration (like a view definition), wrapped as a derived table.
    this.from = names.sourceTable ? qualifiedPg(names.sourceTable) : `(${t.source.query}) as keel_src`;
  }

  async readSchema(): Promise<SourceSchema> {
    const found = new Map<string, string>();
    const nullable = new Map<string, boolean>(); // a table's columns only (a query's result is not known)
    const bounded = new Map<string, string>(); // a query's columns: the type with its modifier, e.g. numeric(12,2)
    const names = resolvedNames(this.t);
    if (names.sourceTable) {
      const res = await this.pool.query(
        `select a.attname::text as name, format_type(a.atttypid, a.atttypmod) as type, not a.attnotnull as nullable
           from pg_attribute a where a.attrelid = to_regclass($1) and a.attnum > 0 and not a.attisdropped`,
        [qualifiedPg(names.sourceTable)],
      );
      for (const r of res.rows) {
        found.set(r.name, r.type);
        nullable.set(r.name, Boolean(r.nullable));
      }
    } else {
      const probe = await this.pool.query({ text: `select * from ${this.from} limit 0`, rowMode: 'array' });
      // The recorded type (and so the schema hash) stays the bare type name; the bounds come from the type modifier.
      const types = await this.pool.query(
        `select format_type(o, null) as type, format_type(o, nullif(m, -1)) as bounded
           from unnest($1::oid[], $2::int[]) with ordinality as u(o, m, i) order by i`,
        [probe.fields.map((f) => f.dataTypeID), probe.fields.map((f) => f.dataTypeModifier)],
      );
      probe.fields.forEach((f, i) => {
        found.set(f.name, String(types.rows[i]?.type ?? `oid ${f.dataTypeID}`));
        bounded.set(f.name, String(types.rows[i]?.bounded ?? ''));
      });
    }
    return buildSourceSchema(
      this.t,
      found,
      pgLogicalType,
      (_declared, logical) =>
        this.t.boundary.kind === 'key'
          ? logical === 'int'
          : this.t.boundary.kind === 'timestamp'
            ? logical === 'timestamp' || logical === 'timestamptz'
            : false,
      (declared, logical, name) => pgFacets(bounded.get(name) || declared, logical),
      nullable,
    );
  }

  private boundaryType(schema: SourceSchema) {
    const col = schema.columns.find((c) => c.name === boundaryColumn(this.t))!;
    return col.logical;
  }

  // ---- change windows (shared/transfer/changes.ts), over the change-capture table of sql/postgres/source ----

  private get changeTable(): string {
    return qualifiedPg({ schema: this.table!.schema, name: `${this.table!.name}_changes` });
  }

  private changesError(err: unknown): unknown {
    if (pgCode(err) === 'KC001')
      return new TransferError(
        'changes_not_enabled',
        `transfer ${this.t.name}: source table ${this.t.source.table} has no change capture: ${(err as Error).message} (sql/postgres/source, docs/transfer.md "Deletes")`,
      );
    return err;
  }

  // Fails 'changes_expired' when the window starts before the min valid version (retention removed changes after
  // its low, or a truncate invalidated them). Run inside the read's own snapshot: retention deletes the changes and
  // moves the min valid version in one transaction, so the read sees both or neither.
  private async checkChangesValid(client: pg.Pool | pg.PoolClient, low: string | null): Promise<void> {
    // A windowed baseline's next window: the changes after its version are read once it ends, so they must still be
    // there (an expired baseline fails at its next window instead of finishing for nothing).
    const baseline = parseBaselineBound(low);
    const from = baseline ? BigInt(baseline.version) : changeLowVersion(low);
    const res = await client.query(
      `select min_valid_version::text as min_valid from keel_changes.tracked where source_table = to_regclass($1)`,
      [qualifiedPg(this.table!)],
    );
    if (res.rowCount === 0)
      throw new TransferError(
        'changes_not_enabled',
        `transfer ${this.t.name}: source table ${this.t.source.table} has no change capture: run select keel_changes.enable('${this.t.source.table}', array[<key columns>]) (sql/postgres/source, docs/transfer.md "Deletes")`,
      );
    const minValid = BigInt(res.rows[0].min_valid as string);
    if (from !== null && from < minValid)
      throw new TransferError(
        'changes_expired',
        `transfer ${this.t.name}: ${baseline ? `the baseline in progress (windowed) reads the changes after version ${from} once it ends` : `the change window starts after version ${from}`}, but the source keeps changes only after version ${minValid} (min valid version; retention or a truncate removed older ones), so deletes in between cannot be known. Re-baseline the transfer (POST /api/ops/transfers/${this.t.name}/rebaseline, docs/runbook.md)`,
        { low: String(from), minValidVersion: String(minValid) },
      );
  }

  // The rows of a change window, in mapping order and then OP_COLUMN, as a select over the source (the caller adds
  // the high bound: where n.v <= high). lowRef: an SQL expression of the window's low version (a bind parameter, or
  // current_setting() for COPY); keyRef: the same for a windowed baseline's key bounds.
  private changesSelect(
    w: Window,
    schema: SourceSchema,
    lowRef: string,
    keyRef: (bound: 'low' | 'high', value: string) => string = () => {
      throw new Error('a windowed baseline needs its key bounds');
    },
  ): string {
    const mapped = mappedColumns(this.t, schema);
    if (isBaseline(w.low)) {
      const range = baselineKeyRange(w.low, w.high);
      const k = `b.${quotePg(this.t.keyColumns[0]!)}`;
      const parts: string[] = [];
      if (range?.low != null) parts.push(`${k} > ${keyRef('low', range.low)}`);
      if (range?.high != null) parts.push(`${k} <= ${keyRef('high', range.high)}`);
      return `select ${mapped.map((c) => `b.${quotePg(c.source)}`).join(', ')}, '${OP_UPSERT}'::text as ${OP_COLUMN} from ${this.from} b${parts.length ? ` where ${parts.join(' and ')}` : ''}`;
    }
    const keys = this.t.keyColumns.map(quotePg);
    const cols = mapped.map((c) =>
      this.t.keyColumns.includes(c.source)
        ? `n.${quotePg(c.source)}`
        : `case when n.op <> '${OP_DELETE}' then b.${quotePg(c.source)} end as ${quotePg(c.source)}`,
    );
    // The latest change of each key after low (seq: for one key the order its writers committed); the key is in
    // this window when that change's version is at most high. An update is read from the table as it is now.
    return `select ${cols.join(', ')},
                   (case when n.op <> '${OP_DELETE}' and b.${keys[0]} is not null then '${OP_UPSERT}' else '${OP_DELETE}' end)::text as ${OP_COLUMN}
              from (select distinct on (${keys.join(', ')}) ${keys.join(', ')}, op, coalesce(version, ${UNSTAMPED}) as v
                      from ${this.changeTable} where version > ${lowRef} or version is null
                     order by ${keys.join(', ')}, seq desc) n
              left join ${this.from} b on ${keys.map((k) => `b.${k} = n.${k}`).join(' and ')}`;
  }

  // A change window's rows as (from, where, params) for the readers; the window's high filters the latest changes.
  private changeRows(
    w: Window,
    schema: SourceSchema,
    first: number,
  ): { from: string; where: string; params: string[] } {
    if (isBaseline(w.low)) {
      const params: string[] = [];
      const sel = this.changesSelect(w, schema, '', (_bound, value) => {
        params.push(value);
        return `$${first + params.length - 1}::bigint`;
      });
      return { from: `(${sel}) as keel_chg`, where: 'true', params };
    }
    const sel = `${this.changesSelect(w, schema, `$${first}::bigint`)}
             where n.v <= $${first + 1}::bigint`;
    return { from: `(${sel}) as keel_chg`, where: 'true', params: [changeLowVersion(w.low)!.toString(), w.high] };
  }

  private async nextChangeWindow(low: string | null, maxRows: number, windowed: boolean): Promise<Window | null> {
    if (low?.startsWith(BASELINE_MARK)) {
      // A windowed baseline goes on at the version it captured before its first window.
      await this.checkChangesValid(this.pool, low);
      const b = parseBaselineBound(low)!;
      return this.nextBaselineWindow(low, b.version, b.key, maxRows);
    }
    let current: string;
    try {
      // CHANGE_TRACKING_CURRENT_VERSION(): stamps what committed since the last call (its own transaction).
      current = String(
        (
          await this.pool.query(`select keel_changes.current_version(to_regclass($1))::text as v`, [
            qualifiedPg(this.table!),
          ])
        ).rows[0].v,
      );
    } catch (err) {
      throw this.changesError(err);
    }
    await this.checkChangesValid(this.pool, low);
    if (low === null) {
      // The baseline, at the version just captured: every change committed after it is in the change windows.
      const key = (await this.readSchema()).columns.find((c) => c.name === this.t.keyColumns[0]);
      if (windowed && this.table && key?.logical === 'int')
        return this.nextBaselineWindow(null, current, null, maxRows);
      return { kind: 'changes', low: null, high: current }; // one window: the whole table at current
    }
    const keys = this.t.keyColumns.map(quotePg).join(', ');
    const res = await this.pool.query(
      `select max(v)::text as high from (
         select v from (select distinct on (${keys}) coalesce(version, ${UNSTAMPED}) as v
                          from ${this.changeTable} where version > $1::bigint or version is null
                         order by ${keys}, seq desc) n
          where v <= $2::bigint order by v limit $3) s`,
      [low, current, maxRows],
    );
    const high = res.rows[0]?.high as string | null | undefined;
    if (high === null || high === undefined) return null;
    return { kind: 'changes', low, high };
  }

  // A windowed baseline's next key window after `after` (null: from the first key): up to the maxRows-th key
  // (every row with that key value comes along), or, when no more than maxRows rows are left, the last window: open
  // above, high = the version (the next window is the first change window).
  private async nextBaselineWindow(
    low: string | null,
    version: string,
    after: string | null,
    maxRows: number,
  ): Promise<Window> {
    const k = quotePg(this.t.keyColumns[0]!);
    const res = await this.pool.query(
      `select ${k}::text as k from ${this.from} where ${k} is not null${after === null ? '' : ` and ${k} > $2::bigint`}
        order by ${k} offset $1::bigint - 1 limit 2`,
      after === null ? [Math.max(1, maxRows)] : [Math.max(1, maxRows), after],
    );
    const top = res.rows.length === 2 ? (res.rows[0].k as string) : null;
    return { kind: 'changes', low, high: top === null ? version : baselineBound(version, top) };
  }

  // (low, high] predicate; values as bind parameters starting at $first.
  private windowPredicate(w: Window, schema: SourceSchema, first: number): { sql: string; params: string[] } {
    const b = quotePg(boundaryColumn(this.t));
    const cast = pgCastFor(this.boundaryType(schema));
    const params: string[] = [];
    const parts: string[] = [];
    if (w.low !== null) {
      params.push(w.low);
      parts.push(`${b} > $${first + params.length - 1}::${cast}`);
    }
    params.push(w.high);
    parts.push(`${b} <= $${first + params.length - 1}::${cast}`);
    return { sql: parts.join(' and '), params };
  }

  // The rows a next window may take: boundary set, after low, and (timestamps) settled.
  private afterConditions(low: string | null, logical: LogicalType): { conds: string[]; params: unknown[] } {
    const b = quotePg(boundaryColumn(this.t));
    const cast = pgCastFor(logical);
    const conds: string[] = [`${b} is not null`];
    const params: unknown[] = [];
    if (low !== null) {
      params.push(low);
      conds.push(`${b} > $${params.length}::${cast}`);
    }
    if (this.t.boundary.kind === 'timestamp') {
      params.push(this.t.boundary.settleMs);
      conds.push(`${b} <= now() - make_interval(secs => $${params.length}::double precision / 1000)`);
    }
    return { conds, params };
  }

  async rowsAfter(low: string | null, cap: number): Promise<number> {
    if (carriesChanges(this.t)) {
      // A change window's low is a version: the changes recorded after it (every change of a key counts; the next
      // windows take each key once), or before the baseline the rows of the table (during a windowed baseline: the
      // rows after its last key window).
      const b = parseBaselineBound(low);
      if (b) {
        const k = quotePg(this.t.keyColumns[0]!);
        const res = await this.pool.query(
          `select count(*)::text as n from (select 1 from ${this.from} where ${k} > $1::bigint limit $2) s`,
          [b.key, Math.max(0, Math.trunc(cap))],
        );
        return Number(res.rows[0].n);
      }
      const res =
        low === null
          ? await this.pool.query(`select count(*)::text as n from (select 1 from ${this.from} limit $1) s`, [
              Math.max(0, Math.trunc(cap)),
            ])
          : await this.pool.query(
              `select count(*)::text as n from (select 1 from ${this.changeTable} where version > $1::bigint or version is null limit $2) s`,
              [low, Math.max(0, Math.trunc(cap))],
            );
      return Number(res.rows[0].n);
    }
    const { conds, params } = this.afterConditions(low, this.boundaryType(await this.readSchema()));
    params.push(Math.max(0, Math.trunc(cap)));
    const res = await this.pool.query(
      `select count(*)::text as n from (select 1 from ${this.from} where ${conds.join(' and ')} limit $${params.length}) s`,
      params,
    );
    return Number(res.rows[0].n);
  }

  async nextWindow(
    low: string | null,
    maxRows: number,
    opts: { baselineWindows?: boolean; schema?: SourceSchema } = {},
  ): Promise<Window | null> {
    if (carriesChanges(this.t)) return this.nextChangeWindow(low, maxRows, opts.baselineWindows === true);
    const schema = opts.schema ?? (await this.readSchema());
    const logical = this.boundaryType(schema);
    const b = quotePg(boundaryColumn(this.t));
    const { conds, params } = this.afterConditions(low, logical);
    params.push(maxRows);
    // A key window on a single unique integer key: (low, min(first + maxRows - 1, last)] holds at most maxRows rows
    // and is found from the two ends of the index, without walking maxRows entries. The sum is numeric: in bigint,
    // a first key within maxRows of 2^63 - 1 would overflow (22003) and stop the transfer at its last keys.
    const uniqueIntegerKey =
      this.t.boundary.kind === 'key' &&
      this.t.keyColumns.length === 1 &&
      this.t.keyColumns[0] === this.t.boundary.column;
    const res = uniqueIntegerKey
      ? await this.pool.query(
          `select (least(min(${b})::numeric + ($${params.length}::bigint - 1), max(${b})))::text as high from ${this.from} where ${conds.join(' and ')}`,
          params,
        )
      : await this.pool.query(
          `select ${pgCanonical('max(b)', logical)} as high from (select ${b} as b from ${this.from} where ${conds.join(' and ')} order by ${b} limit $${params.length}) s`,
          params,
        );
    const high = res.rows[0]?.high as string | null | undefined;
    if (high === null || high === undefined) return null;
    return { kind: this.t.boundary.kind, low, high };
  }

  async manifest(
    w: Window,
    schema: SourceSchema,
    algorithm: ChecksumAlgorithm,
    opts: { ahead?: boolean } = {},
  ): Promise<Manifest> {
    const changes = carriesChanges(this.t);
    const cols: { name: string; ref: string; type: LogicalType; declared: string }[] = mappedColumns(
      this.t,
      schema,
    ).map((c) => ({
      name: c.source,
      ref: quotePg(c.source),
      type: c.logical,
      declared: c.type,
    }));
    // The operation is hashed like a text column (changes.ts): the checksum covers it.
    if (changes) cols.push({ name: OP_COLUMN, ref: OP_COLUMN, type: 'text', declared: 'text' });
    const rows = changes ? this.changeRows(w, schema, 1) : null;
    const pred = rows ? { sql: rows.where, params: rows.params } : this.windowPredicate(w, schema, 1);
    const from = rows ? rows.from : this.from;
    // keel-v1 is the canonical text (what a target other than PostgreSQL stores): a date/time value it cannot carry
    // is refused here, before anything is staged, naming the column and a row (keel-pg1/pg2 keep such values exact).
    const temporal =
      algorithm === 'keel-v1'
        ? cols.filter(
            (c): c is typeof c & { type: 'date' | 'timestamp' | 'timestamptz' } =>
              c.type === 'date' || c.type === 'timestamp' || c.type === 'timestamptz',
          )
        : [];
    const keyText = `row(${this.t.keyColumns.map(quotePg).join(', ')})::text`;
    const checks = temporal.map(
      (c, i) => `min(${keyText}) filter (where ${pgTemporalOutOfRange(c.ref, c.type)}) as bad${i}`,
    );
    const client = await this.pool.connect();
    const onError = () => undefined; // a connection lost mid-statement also surfaces as an 'error' event
    client.on('error', onError);
    let failed: Error | undefined;
    try {
      // One statement (one snapshot) for count and checksum, under the fixed output settings.
      const started = performance.now();
      // begin and the settings in one simple query: one round trip of wait a batch fewer (neither takes parameters).
      // Ahead (beside another batch's COPY): one process, no parallel workers. Two workers started per window
      // compete with that COPY's backends for the same cores; one process uses what the COPY leaves idle.
      await client.query(
        `${changes ? 'begin isolation level repeatable read read only' : 'begin read only'}; ${PG_CHECKSUM_SETTINGS_SQL}${opts.ahead ? `; ${PG_ONE_PROCESS_SQL}` : ''}`,
      );
      if (changes) await this.checkChangesValid(client, w.low);
      const res = await client.query(pgChecksumQuery(cols, from, pred.sql, algorithm, checks), pred.params);
      await client.query('commit');
      this.opts.trace?.(opts.ahead ? 'extract.manifestAhead' : 'extract.manifest', performance.now() - started);
      temporal.forEach((c, i) => {
        const key = res.rows[0][`bad${i}`] as string | null;
        if (key !== null) throw this.outOfRange(c.name, c.declared, key);
      });
      return { rowCount: Number(res.rows[0].n), checksum: String(res.rows[0].checksum) };
    } catch (err) {
      failed = err as Error; // the connection is destroyed: the server ends the read-only transaction
      throw err;
    } finally {
      if (!failed) client.off('error', onError);
      client.release(failed);
    }
  }

  private outOfRange(column: string, declared: string, key: string): TransferError {
    return new TransferError(
      'unsupported_type',
      `transfer ${this.t.name}: source column ${column} (${declared}) holds a value outside years 1..9999 or an infinity (row with key ${key}), which canonical rows (and Oracle) cannot hold; the batch is refused before staging. Exclude or convert it in source.query`,
      { column, key },
    );
  }

  // streamRows reads the window with one COPY in one repeatable read transaction: one snapshot.
  async readsSnapshot(): Promise<boolean> {
    return true;
  }

  // The window's canonical rows as COPY text (one statement, one snapshot), parsed here into chunks of chunkSize: the
  // server writes COPY text more cheaply than a cursor's FETCH results, and splitting the text costs Node about a
  // third of what the driver's per-row result parsing does (bench/README.md, runs 136-141). Backpressure: the COPY
  // stream pauses the socket while a chunk is consumed, so the server formats ahead only as far as the socket buffers.
  async *streamRows(
    w: Window,
    schema: SourceSchema,
    chunkSize: number,
    facts?: StreamFacts,
  ): AsyncIterable<CanonicalChunk> {
    const mapped = mappedColumns(this.t, schema);
    const changes = carriesChanges(this.t);
    const cols = mapped.map((c) => pgCanonical(quotePg(c.source), c.logical, c.type));
    if (changes) cols.push(OP_COLUMN);
    const width = cols.length;
    // Columns whose canonical text may carry the out-of-range mark (transferSql.ts), checked row by row below.
    const temporal = mapped.flatMap((c, i) =>
      c.logical === 'date' || c.logical === 'timestamp' || c.logical === 'timestamptz' ? [i] : [],
    );
    const keys = this.t.keyColumns.map((k) => mapped.findIndex((c) => c.source === k));
    const client = await this.pool.connect();
    const onError = () => undefined; // a connection lost mid-statement also surfaces as an 'error' event
    client.on('error', onError);
    let failed: Error | undefined;
    let stream: { destroy(): void } | undefined;
    let ended = false; // the COPY delivered its last row
    let committed = false; // committed after the last row: nothing is left to end
    try {
      await client.query('begin isolation level repeatable read read only');
      // Shortest exact text of a double (PostgreSQL 12+); the float policy normalizes it once more. COPY takes no
      // bind parameters: the window travels in transaction-local settings (as in bulkOut).
      const range = changes ? baselineKeyRange(w.low, w.high) : null;
      await client.query(
        `select set_config('extra_float_digits', '1', true),
                set_config('keel.w_low', coalesce($1, ''), true), set_config('keel.w_high', $2, true),
                set_config('keel.k_low', coalesce($3, ''), true), set_config('keel.k_high', coalesce($4, ''), true)`,
        [w.low, w.high, range?.low ?? null, range?.high ?? null],
      );
      if (changes) await this.checkChangesValid(client, w.low);
      if (facts) facts.keysUnique = await this.keysUniqueIn(client, changes);
      const copy = client.query(copyOut(`copy (${this.settingsSelect(w, schema, cols)}) to stdout`));
      stream = copy;
      copy.on('error', noop); // the iteration below reports it; never unhandled
      let rows: CanonicalRow[] = [];
      let rest: Buffer | null = null;
      // The COPY text of `rows`, whole lines, as segments of what arrived: each chunk carries its rows' bytes
      // (COPY_TEXT), which a PostgreSQL target writes as they are.
      const segments: { text: Buffer; rows: number }[] = [];
      const textOf = (n: number): Buffer => {
        const parts: Buffer[] = [];
        while (n > 0) {
          const seg = segments[0]!;
          if (seg.rows <= n) {
            parts.push(seg.text);
            n -= seg.rows;
            segments.shift();
            continue;
          }
          let end = -1;
          for (let i = 0; i < n; i++) end = seg.text.indexOf(10, end + 1);
          parts.push(seg.text.subarray(0, end + 1));
          segments[0] = { text: seg.text.subarray(end + 1), rows: seg.rows - n };
          n = 0;
        }
        return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
      };
      const chunk = (out: CanonicalChunk): CanonicalChunk => ((out[COPY_TEXT] = textOf(out.length)), out);
      // Whole lines, each ending in a newline. Fields are cut by indexOf and slice, not split() per line and per row:
      // no array per line, none of the row's size unknown (bench/README.md, runs 1350-1369).
      const take = (text: string) => {
        const n = text.length;
        let backslash = text.indexOf('\\'); // the first backslash at or after the row's start (-1: none left)
        for (let p = 0; p < n;) {
          const nl = text.indexOf('\n', p);
          const row: CanonicalRow = new Array<string | null>(width);
          for (let f = 0; f < width - 1; f++) {
            const e = text.indexOf('\t', p);
            if (e < 0 || e > nl) throw fieldCount(text.slice(p, nl), f);
            row[f] = text.slice(p, e);
            p = e + 1;
          }
          const last = text.slice(p, nl);
          if (last.includes('\t')) throw fieldCount(last, width - 1);
          row[width - 1] = last;
          if (backslash >= 0 && backslash < nl) for (let i = 0; i < width; i++) row[i] = copyTextValue(row[i]!);
          p = nl + 1;
          if (backslash >= 0 && backslash < p) backslash = text.indexOf('\\', p);
          for (const i of temporal) {
            const v = row[i];
            if (v != null && v.startsWith(PG_OUT_OF_RANGE_MARK))
              throw this.outOfRange(mapped[i]!.source, mapped[i]!.type, `(${keys.map((k) => row[k] ?? '').join(',')})`);
          }
          rows.push(row);
        }
      };
      const fieldCount = (rest: string, before = 0) =>
        new Error(`COPY row with ${before + rest.split('\t').length} fields, expected ${width}`);
      for await (const data of copy as AsyncIterable<Buffer>) {
        const buf: Buffer = rest ? Buffer.concat([rest, data]) : data;
        // Whole rows only: a newline byte never occurs inside a multi-byte UTF-8 character.
        const last = buf.lastIndexOf(10);
        if (last < 0) {
          rest = buf;
          continue;
        }
        rest = last + 1 < buf.length ? buf.subarray(last + 1) : null;
        const before = rows.length;
        take(buf.toString('utf8', 0, last + 1));
        segments.push({ text: buf.subarray(0, last + 1), rows: rows.length - before });
        while (rows.length >= chunkSize) {
          const out = rows.length === chunkSize ? rows : rows.slice(0, chunkSize);
          rows = rows.length === chunkSize ? [] : rows.slice(chunkSize);
          yield chunk(out);
        }
      }
      ended = true;
      if (rest) throw new Error('COPY output ended inside a row');
      if (rows.length > 0) yield chunk(rows);
      await client.query('commit');
      committed = true;
    } catch (err) {
      failed = err as Error;
      throw err;
    } finally {
      // Failed, or abandoned by the consumer before the COPY ended: the connection is destroyed (a rollback would
      // queue behind the COPY). Abandoned after it ended, before the commit: a rollback ends the transaction.
      if (!failed && !ended) failed = new Error('COPY TO STDOUT abandoned before it finished');
      if (failed) stream?.destroy();
      else if (!committed) await client.query('rollback').catch((e: Error) => (failed = e));
      if (!failed) client.off('error', onError);
      client.release(failed);
    }
  }

  // select <cols> of the window's rows, with the window in the transaction's keel.* settings (COPY has no bind
  // parameters); the same rows as windowPredicate/changeRows select.
  private settingsSelect(w: Window, schema: SourceSchema, cols: string[]): string {
    if (carriesChanges(this.t)) {
      const sel = isBaseline(w.low)
        ? this.changesSelect(w, schema, '', (bound) => `current_setting('keel.k_${bound}')::bigint`)
        : `${this.changesSelect(w, schema, `current_setting('keel.w_low')::bigint`)}
             where n.v <= current_setting('keel.w_high')::bigint`;
      return `select ${cols.join(', ')} from (${sel}) as keel_chg`;
    }
    const b = quotePg(boundaryColumn(this.t));
    const cast = pgCastFor(this.boundaryType(schema));
    const lowPred = w.low === null ? '' : `${b} > current_setting('keel.w_low')::${cast} and `;
    return `select ${cols.join(', ')} from ${this.from} where ${lowPred}${b} <= current_setting('keel.w_high')::${cast}`;
  }

  async bulkOut(w: Window, schema: SourceSchema, format: BulkEncoding, framed = false): Promise<BulkStream> {
    const changes = carriesChanges(this.t);
    const cols = mappedColumns(this.t, schema).map((c) => quotePg(c.source));
    if (changes) cols.push(OP_COLUMN);
    const client = await this.pool.connect();
    const onError = () => undefined; // a connection lost mid-statement also surfaces as an 'error' event
    client.on('error', onError);
    try {
      await client.query('begin isolation level repeatable read read only');
      // COPY takes no bind parameters: the window travels in transaction-local settings, read by current_setting().
      const range = changes ? baselineKeyRange(w.low, w.high) : null;
      // The keys' uniqueness (keysUniqueIn) is asked in the same statement, the read's first (its snapshot): one
      // round trip of wait a batch fewer.
      const unique = this.uniqueKeysQuery(changes, 5);
      const set = await client.query(
        `select set_config('timezone', 'UTC', true), set_config('datestyle', 'ISO, YMD', true), set_config('bytea_output', 'hex', true),
                set_config('keel.w_low', coalesce($1, ''), true), set_config('keel.w_high', $2, true),
                set_config('keel.k_low', coalesce($3, ''), true), set_config('keel.k_high', coalesce($4, ''), true)
                ${unique ? `, ${unique.sql} as unique_keys` : ''}`,
        [w.low, w.high, range?.low ?? null, range?.high ?? null, ...(unique?.params ?? [])],
      );
      if (changes) await this.checkChangesValid(client, w.low);
      const keysUnique = unique !== null && Boolean(set.rows[0].unique_keys);
      let select: string;
      if (changes) {
        // the same rows as changeRows(), with the window in settings (a baseline's low is not a version)
        const sel = isBaseline(w.low)
          ? this.changesSelect(w, schema, '', (bound) => `current_setting('keel.k_${bound}')::bigint`)
          : `${this.changesSelect(w, schema, `current_setting('keel.w_low')::bigint`)}
             where n.v <= current_setting('keel.w_high')::bigint`;
        select = `select ${cols.join(', ')} from (${sel}) as keel_chg`;
      } else {
        const b = quotePg(boundaryColumn(this.t));
        const cast = pgCastFor(this.boundaryType(schema));
        const lowPred = w.low === null ? '' : `${b} > current_setting('keel.w_low')::${cast} and `;
        select = `select ${cols.join(', ')} from ${this.from} where ${lowPred}${b} <= current_setting('keel.w_high')::${cast}`;
      }
      // framed: whole CopyData messages, which a PostgreSQL target's COPY FROM writes as they are (copyStreams.ts).
      const stream = client.query(
        copyOut(
          `copy (${select}) to stdout${format === 'binary' ? ' (format binary)' : ''}`,
          framed ? 'framed' : 'payload',
        ),
      );
      // Listened to from the first moment: the caller attaches its own handling later (a lost connection in between
      // must not raise an unhandled 'error').
      stream.on('error', noop);
      let ended = false; // the COPY delivered its last row and completed
      stream.once('end', () => {
        ended = true;
      });
      let released = false;
      return {
        stream,
        framed,
        keysUnique,
        release: async (err?: Error) => {
          if (released) return;
          released = true;
          if (err || !ended) {
            // A COPY that did not finish keeps the connection busy: a rollback would queue behind it (and the session
            // would sit idle in transaction, holding its snapshot). Destroying the connection ends both at once.
            stream.destroy();
            client.release(err ?? new Error('COPY TO STDOUT released before it finished'));
            return;
          }
          try {
            await client.query('commit');
          } catch (e) {
            client.release(e as Error);
            return;
          }
          client.off('error', onError);
          client.release();
        },
      };
    } catch (err) {
      // Nothing is streaming here, but the connection may be in doubt: destroy rather than wait for a rollback.
      client.release(err as Error);
      throw err;
    }
  }

  // Are the keys provably unique in what this transaction reads? Asked in the read's own snapshot (repeatable read:
  // catalog queries see the catalog as of that snapshot), so an index that is valid here was enforced on every row
  // the read can see. The target then skips its duplicate-key scan for integer keys (transferTarget.ts).
  private async keysUniqueIn(client: pg.PoolClient, changes: boolean): Promise<boolean> {
    const q = this.uniqueKeysQuery(changes, 1);
    if (!q) return false;
    const res = await client.query(`select ${q.sql} as unique_keys`, q.params);
    return Boolean(res.rows[0].unique_keys);
  }

  // keysUniqueIn's expression, its parameters numbered from `first`; null when no index can prove it.
  private uniqueKeysQuery(changes: boolean, first: number): { sql: string; params: unknown[] } | null {
    const sourceTable = resolvedNames(this.t).sourceTable;
    if (!sourceTable || changes) return null;
    const [rel, keys] = [`$${first}`, `$${first + 1}`];
    return {
      sql: `exists (
         select 1 from pg_index i
          where i.indrelid = to_regclass(${rel}) and i.indisunique and i.indisvalid and i.indpred is null and i.indexprs is null
            -- a select from a table also reads its inheritance children, which the index does not cover
            -- (a partitioned table's unique index covers every partition)
            and ((select c.relkind from pg_class c where c.oid = i.indrelid) = 'p'
                 or not exists (select 1 from pg_inherits h where h.inhparent = i.indrelid))
            and i.indnatts = cardinality(${keys}::text[])
            and (select array_agg(a.attname::text order by a.attname) from pg_attribute a
                  where a.attrelid = i.indrelid and a.attnum = any (i.indkey::int2[]) and a.attnotnull)
                = (select array_agg(k order by k) from unnest(${keys}::text[]) k))`,
      params: [qualifiedPg(sourceTable), this.t.keyColumns],
    };
  }

  // Key-set comparison: the keys of the window's rows now (canonical text, keyColumns order).
  async windowKeys(w: Window, schema: SourceSchema): Promise<KeyTuple[]> {
    const keys = this.t.keyColumns.map((k) => {
      const c = schema.columns.find((x) => x.name === k)!;
      return pgCanonical(quotePg(k), c.logical, c.type);
    });
    const pred = this.windowPredicate(w, schema, 1);
    const res = await this.pool.query({
      text: `select ${keys.join(', ')} from ${this.from} where ${pred.sql}`,
      values: pred.params,
      rowMode: 'array',
    });
    return res.rows as KeyTuple[];
  }

  checksumAlgorithms() {
    return pgChecksumAlgorithms(this.pool);
  }

  async close(): Promise<void> {
    if (this.opts.ownsPool) await this.pool.end();
  }
}

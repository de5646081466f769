// PostgreSQL dialect of the transfer target (shared/transfer/stagingTarget.ts runs the flow): staging with COPY FROM
// STDIN in one transaction (bounded memory: rows are streamed with backpressure), verification of count + checksum +
// duplicate keys before the staging commits (keel-v1 from the staged rows read back, transferSql.ts pgReadBackSums), and the keel_transfer.* functions
// (sql/postgres/target) called through TARGET_POSTGRES_FUNCTIONS.
import type pg from 'pg';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import { Transform, type Writable } from 'node:stream';
import { type CanonicalRow, type ChecksumAlgorithm, type LogicalType } from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { boundaryColumn, resolvedNames } from '../../transfer/config.js';
import { TransferError } from '../../transfer/errors.js';
import { quotePg } from '../../transfer/identifiers.js';
import { carriesChanges, OP_COLUMN } from '../../transfer/changes.js';
import { checkColumnFits, mappedColumns, type MappedColumn } from '../../transfer/schema.js';
import {
  StagingTarget,
  type RowWriter,
  type StagingSession,
  type StagingTargetOptions,
  type StallGuard,
  type TargetDialect,
  type TargetFault,
} from '../../transfer/stagingTarget.js';
import {
  ensureStagingArgs,
  targetKeys,
  type TargetArgs,
  type TargetNames,
  type TargetParam,
  type TargetProcedure,
  type TargetRow,
} from '../../transfer/targetProcedures.js';
import {
  requireTargetColumn,
  requireTargetKey,
  requireTargetTable,
  stagingShapeRefusal,
} from '../../transfer/targetChecks.js';
import type {
  ApplyContext,
  ApplyResult,
  BulkStream,
  KeyTuple,
  Manifest,
  RowFeed,
  RowsFeed,
  SourceSchema,
  StageRequest,
  Window,
} from '../../transfer/types.js';
import {
  copyChunk,
  PG_CHECKSUM_SETTINGS_SQL,
  pgCanonical,
  pgChecksumQuery,
  pgReadBackSums,
  pgFacets,
  pgLogicalType,
} from './transferSql.js';
import { copyIn } from './copyStreams.js';
import { PG_COPY_FORMAT, pgChecksumAlgorithms } from './serverFeatures.js';
import { pgStatement, type PgSignature } from './procedures.js';
import { applyDirect, type DirectClaim } from './directApply.js';
import { DEFAULT_TRANSFER_TIMEOUTS } from '../../transfer/timeouts.js';

// The PostgreSQL side of TARGET_PROCEDURES: the type of each parameter of keel_transfer.<name>(p_<param>, ...) in
// declaration order, and what the function returns (test/engines/parity.test.ts checks it against pg_proc).
export const TARGET_POSTGRES_FUNCTIONS: { [P in TargetProcedure]: PgSignature<TargetParam<P>> } = {
  ensure_staging: {
    params: { transfer: 'text', target_schema: 'text', target_table: 'text', columns: 'text[]', ops: 'boolean' },
    returns: 'text',
  },
  begin_stage: {
    params: { batch_id: 'uuid', transfer: 'text', expected_count: 'bigint', expected_checksum: 'text' },
    returns: 'text',
  },
  finish_stage: { params: { batch_id: 'uuid', count: 'bigint', checksum: 'text' }, returns: 'void' },
  apply_batch: {
    params: {
      batch_id: 'uuid',
      transfer: 'text',
      target_schema: 'text',
      target_table: 'text',
      staging_table: 'text',
      columns: 'text[]',
      keys: 'text[]',
      expected_count: 'bigint',
      expected_checksum: 'text',
      attempt: 'bigint',
      changes: 'text',
      mirror_low: 'text',
      mirror_high: 'text',
    },
    returns: 'rows',
    // counts as text: bigint beyond 2^53 stays exact until the shared mapping reads it
    select: 'r.outcome, r.row_count::text as row_count, r.checksum, r.deleted_count::text as deleted_count',
  },
  try_claim: {
    params: { batch_id: 'uuid', wait_ms: 'integer', fence_through: 'bigint' },
    returns: 'rows',
    select: 'r.outcome, r.row_count::text as row_count, r.checksum, r.staged',
  },
  purge_staged: { params: { batch_id: 'uuid', staging_table: 'text' }, returns: 'bigint' },
  staged_batches: { params: { transfer: 'text', max_count: 'integer', after: 'uuid' }, returns: 'text' },
};

// The statement of one call: named notation, every value a typed parameter. A function returning one value answers
// it in column `result`, which the contract names by its single result (begin_stage: opened).
export function targetStatement<P extends TargetProcedure>(proc: P, args: TargetArgs<P>) {
  return pgStatement(proc, TARGET_POSTGRES_FUNCTIONS[proc] as PgSignature, args, 'keel_transfer');
}

function toRow<P extends TargetProcedure>(proc: P, rows: Record<string, unknown>[]): TargetRow<P> {
  const r = rows[0] ?? {};
  if (proc === 'begin_stage') return { opened: r.result } as TargetRow<P>;
  if (proc === 'staged_batches') return { batch_ids: r.result } as TargetRow<P>;
  return r as TargetRow<P>;
}

// SQLSTATEs raised by sql/postgres/target (structured codes, never message text).
const PG_FAULTS: Record<string, TargetFault> = {
  KT001: 'conflict',
  KT002: 'not_staged',
  KT003: 'merge_count',
  KT004: 'staging_shape',
  KT005: 'fenced',
};

// The batch's staged keys that are twice in it, or have a NULL part (at most three, as text).
async function pgDuplicateKeys(
  db: pg.Pool | pg.PoolClient,
  t: TransferConfig,
  staging: string,
  batchId: string,
): Promise<string[]> {
  const keyRefs = targetKeys(t).map(quotePg);
  const dup = await db.query<{ k: string }>(
    `select ${keyRefs.map((k) => `coalesce(${k}::text, 'NULL')`).join(` || ', ' || `)} as k from ${staging} where keel_batch_id = $1 group by ${keyRefs.join(', ')} having count(*) > 1 or bool_or(${keyRefs.map((k) => `${k} is null`).join(' or ')}) limit 3`,
    [batchId],
  );
  return dup.rows.map((r) => r.k);
}

function pgCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

// A value of the batch that the target refuses, and refuses again on every retry (the window is re-read with the
// same value): data exceptions (class 22: too long, out of range, bad date), NOT NULL and CHECK violations. The batch
// is refused with the terminal 'unsupported_type', with what the server says of the column and line, instead of
// being staged again and again (issue 23). A foreign key (23503) stays retryable: its parent row may arrive later.
export function pgDataError(batchId: string, err: unknown): TransferError | null {
  const code = pgCode(err);
  if (code === undefined || !(code.startsWith('22') || code === '23502' || code === '23514')) return null;
  const e = err as { message?: string; where?: string; column?: string };
  const column = e.column ?? /column (\w+)/.exec(e.where ?? '')?.[1] ?? null;
  return new TransferError(
    'unsupported_type',
    `batch ${batchId}: SQLSTATE ${code} (${e.message ?? String(err)})${column ? ` at column ${column}` : ''}${e.where ? ` [${e.where.split('\n')[0]}]` : ''}. The same value fails on every retry, so the batch is refused; change the target column or the source value`,
    { sqlstate: code, column },
  );
}

const noop = () => undefined;

// An open COPY FROM STDIN into the staging table. While it is open a rollback would queue behind it forever: only
// destroying the connection ends it.
interface CopyIn {
  sink: Writable & { acceptFramed(): void };
  failed: Promise<never>;
  finished: Promise<void>;
}

// The source's native COPY, from the moment it is asked for until it is released.
type SourceCopy = { opening: Promise<BulkStream>; stream?: BulkStream };

// One staging transaction on a dedicated pool client. Its state is explicit: the COPY while it is open, the source's
// COPY while it is held, and the first error the connection reported (it is then never reused).
class PgStagingSession implements StagingSession {
  private lost: Error | undefined;
  private copy: CopyIn | undefined;
  private source: SourceCopy | undefined;
  private readonly onError = (e: Error) => {
    this.lost ??= e;
  };

  constructor(
    private readonly client: pg.PoolClient,
    private readonly d: PostgresTargetDialect,
    private readonly req: Omit<StageRequest, 'manifest'>,
    private readonly mapped: MappedColumn[],
  ) {
    client.on('error', this.onError); // a connection lost mid-statement also surfaces as an 'error' event
  }

  // Change windows: every row ends with its operation (shared/transfer/changes.ts), staged and checksummed too.
  private get ops(): boolean {
    return carriesChanges(this.d.t);
  }

  private get staging(): string {
    return `keel_transfer.${quotePg(this.d.names.staging)}`;
  }

  async begin(): Promise<void> {
    await this.client.query('begin');
    await this.client.query(PG_CHECKSUM_SETTINGS_SQL);
    await this.client.query(`select set_config('keel.batch_id', $1, true)`, [this.req.batchId]);
  }

  async call<P extends 'begin_stage' | 'finish_stage'>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>> {
    const { text, values } = targetStatement(proc, args);
    return toRow(proc, (await this.client.query(text, values)).rows);
  }

  private openCopy(binary: boolean, stall: StallGuard): CopyIn {
    const columnList = [...this.mapped.map((c) => quotePg(c.target)), ...(this.ops ? [OP_COLUMN] : [])].join(', ');
    const sink = this.client.query(
      copyIn(`copy ${this.staging} (${columnList}) from stdin${binary ? ' (format binary)' : ''}`),
    );
    stall.touch();
    // Listened to from the first moment: the connection can die while the source opens or between two chunks
    // (an 'error' without a listener would crash the process).
    sink.on('error', noop);
    const failed = new Promise<never>((_, reject) => sink.once('error', reject));
    failed.catch(noop);
    const finished = new Promise<void>((resolve) => sink.once('finish', resolve));
    this.copy = { sink, failed, finished };
    return this.copy;
  }

  async rowWriter(stall: StallGuard): Promise<RowWriter> {
    const copy = this.openCopy(false, stall);
    const types: LogicalType[] = [...this.mapped.map((c) => c.staged), ...(this.ops ? (['text'] as const) : [])];
    return {
      failed: copy.failed,
      write: async (rows: CanonicalRow[]) => {
        // (the skeleton's wait on this fails as soon as the COPY or the stall guard does)
        if (!copy.sink.write(copyChunk(rows, types))) await once(copy.sink, 'drain');
      },
      end: async () => {
        copy.sink.end();
        await copy.finished;
        this.copy = undefined;
      },
    };
  }

  // Binary COPY when every column has the same declared type on both sides (no text formatting or parsing); text
  // otherwise, which converts between compatible types (e.g. integer -> bigint).
  async writeBulk(feed: Extract<RowFeed, { kind: 'bulk' }>, stall: StallGuard): Promise<{ keysUnique: boolean }> {
    const types = this.d.targetTypes;
    const binary = this.mapped.every((c) => types.get(c.target)?.toLowerCase() === c.type.toLowerCase());
    const copy = this.openCopy(binary, stall);
    const source: SourceCopy = { opening: feed.open(binary ? 'binary' : 'text', true) };
    this.source = source;
    const src = await Promise.race([source.opening, copy.failed, stall.failed]);
    source.stream = src;
    src.stream.on('error', noop); // the pipeline below reports it; never unhandled
    if (src.framed) copy.sink.acceptFramed(); // the source's CopyData messages, written as they came
    // Duplicate keys are impossible when the source guarantees unique keys in the COPY's snapshot and the key
    // columns are integers (equal on the target exactly when equal on the source; the staged values are proven
    // equal to the source's by the checksum, which is compared before anything is declared staged).
    const keyTargets = new Set(targetKeys(this.d.t));
    const keysUnique =
      src.keysUnique === true && this.mapped.filter((c) => keyTargets.has(c.target)).every((c) => c.logical === 'int');
    stall.touch();
    const moved = pipeline(
      src.stream,
      new Transform({ transform: (chunk, _enc, cb) => (stall.touch(), cb(null, chunk)) }),
      copy.sink,
    );
    moved.catch(noop);
    await Promise.race([moved, stall.failed]);
    this.copy = undefined;
    this.source = undefined;
    await src.release();
    return { keysUnique };
  }

  // The staging table was just filled in this transaction and has no statistics, so the planner would think the
  // verification scans are tiny and run them in one process: make parallel workers free for these two queries.
  async beforeVerify(): Promise<void> {
    await this.client.query(
      `select set_config('parallel_setup_cost', '0', true), set_config('parallel_tuple_cost', '0', true), set_config('min_parallel_table_scan_size', '0', true),
                set_config('work_mem', '32MB', true)`,
    );
  }

  // Keys twice in the batch, and keys with a NULL part: a NULL never equals the target's key, so every apply of
  // such a row (a replay, a later window carrying it again) would insert it once more beside the earlier copy.
  async duplicateKeys(): Promise<string[]> {
    return pgDuplicateKeys(this.client, this.d.t, this.staging, this.req.batchId);
  }

  async stagedSums(algorithm: ChecksumAlgorithm): Promise<{ rowCount: number; checksum: string }> {
    const types = this.d.targetTypes;
    const cols = [
      ...this.mapped.map((c) => ({ ref: quotePg(c.target), type: c.staged, declared: types.get(c.target) })),
      ...(this.ops ? [{ ref: OP_COLUMN, type: 'text' as const, declared: 'text' }] : []),
    ];
    if (algorithm === 'keel-v1') {
      // The staged rows read back in this transaction and hashed in Node (transferSql.ts, pgReadBackSums); the
      // batch id travels in a transaction-local setting (COPY has no bind parameters).
      return pgReadBackSums(this.client, cols, this.staging, `keel_batch_id = current_setting('keel.rb_batch')::uuid`, {
        'keel.rb_batch': this.req.batchId,
      });
    }
    const sums = await this.client.query(pgChecksumQuery(cols, this.staging, 'keel_batch_id = $1', algorithm), [
      this.req.batchId,
    ]);
    return { rowCount: Number(sums.rows[0].n), checksum: String(sums.rows[0].checksum) };
  }

  async commit(): Promise<void> {
    await this.client.query('commit');
  }

  close(): void {
    if (!this.lost) this.client.off('error', this.onError);
    this.client.release(this.lost);
  }

  async abort(err: unknown): Promise<unknown> {
    // A source COPY that opened after we gave up, or that is still streaming: released with the error, which
    // destroys its connection when the COPY did not finish (never a rollback queued behind it).
    const source = this.source;
    if (source?.stream) await source.stream.release(err as Error).catch(noop);
    else if (source) source.opening.then((s) => s.release(err as Error), noop).catch(noop);
    let broken: Error | undefined; // set: the client is destroyed on release instead of going back to the pool
    if (this.copy || this.lost || !(err instanceof TransferError)) {
      // The COPY FROM STDIN is still open, or the connection is in doubt: destroying the connection ends the
      // server's transaction (and its COPY) at once; a rollback could wait forever behind the COPY.
      broken = err as Error;
    } else {
      await this.client.query('rollback').catch((e: Error) => {
        broken = e;
      });
    }
    if (!broken && !this.lost) this.client.off('error', this.onError);
    this.client.release(broken ?? this.lost);
    return pgDataError(this.req.batchId, err) ?? err;
  }
}

export class PostgresTargetDialect implements TargetDialect {
  readonly engine = 'postgres';
  readonly bulkFormat = PG_COPY_FORMAT;
  // The apply's mirror honours a key range (keel_transfer.apply_batch's p_mirror_low/p_mirror_high): a baseline may
  // run in key windows (shared/transfer/changes.ts).
  readonly mirrorsKeyRanges = true;
  readonly names: TargetNames;
  readonly stalledParty = 'source or target';
  readonly mismatchCause = 'the source window changed after extraction';
  targetTypes = new Map<string, string>(); // target column -> declared type (from prepare)
  private targetNotNull = new Set<string>(); // target columns declared NOT NULL (from prepare)

  constructor(
    readonly t: TransferConfig,
    private readonly pool: pg.Pool,
    private readonly opts: { ownsPool?: boolean } = {},
  ) {
    const n = resolvedNames(t).targetTable;
    this.names = { schema: n.schema, table: n.name, staging: `stg_${t.name}` };
  }

  async prepare(schema: SourceSchema): Promise<void> {
    const mapped = mappedColumns(this.t, schema);
    const qualified = this.qualifiedTarget();
    const types = await this.loadTargetTypes();
    requireTargetTable(this.t, types);
    for (const c of mapped) {
      const declared = requireTargetColumn(this.t, types, c.target);
      const logical = pgLogicalType(declared);
      // A double goes into double precision only (real would round it); c.staged: after the column's policy.
      if (logical !== c.staged || (c.staged === 'float' && declared.toLowerCase() !== 'double precision')) {
        throw new TransferError(
          'target_incompatible',
          `transfer ${this.t.name}: target column ${c.target} (${declared}) cannot hold source column ${c.source} (${c.type}${c.policy ? `, declared ${c.policy.kind.replace(/_/g, ' ')}` : ''})`,
        );
      }
      const f = pgFacets(declared, logical);
      checkColumnFits(this.t, c, {
        declared,
        nullable: !this.targetNotNull.has(c.target),
        ...f,
        ...(logical === 'text' ? { maxBytes: null } : {}), // PostgreSQL lengths count characters
      });
    }
    const keys = targetKeys(this.t);
    const idx = await this.pool.query(
      `select 1 from pg_index i
        where i.indrelid = to_regclass($1) and i.indisunique and i.indpred is null and i.indexprs is null
          and (select array_agg(a.attname::text order by a.attname) from pg_attribute a where a.attrelid = i.indrelid and a.attnum = any(i.indkey))
              = (select array_agg(k order by k) from unnest($2::text[]) k)`,
      [qualified, keys],
    );
    requireTargetKey(this.t, idx.rowCount !== 0, 'a unique index or primary key', keys);
    try {
      // change windows stage the operation column too
      const args = ensureStagingArgs(this.t, this.names, this.stagedColumns(schema), carriesChanges(this.t));
      const { text, values } = targetStatement('ensure_staging', args);
      await this.pool.query(text, values);
    } catch (err) {
      throw stagingShapeRefusal(err, this.fault(err)) ?? err;
    }
  }

  private qualifiedTarget(): string {
    const { schema, table } = this.names;
    return schema ? `${quotePg(schema)}.${quotePg(table)}` : quotePg(table);
  }

  // Declared types of the target table's columns (binary COPY decision, keel-pg2 fields of character(n) columns).
  async loadTargetTypes(): Promise<Map<string, string>> {
    const res = await this.pool.query(
      `select a.attname::text as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as notnull
         from pg_attribute a where a.attrelid = to_regclass($1) and a.attnum > 0 and not a.attisdropped`,
      [this.qualifiedTarget()],
    );
    this.targetTypes = new Map<string, string>(res.rows.map((r) => [r.name, r.type]));
    this.targetNotNull = new Set<string>(res.rows.filter((r) => r.notnull).map((r) => r.name as string));
    return this.targetTypes;
  }

  // begin_stage inserts the batch's staging record (or finds an earlier one) and touches no staged row.
  readonly beginStageAfterRows = true;

  checkFeed(_req: StageRequest, feed: RowFeed): void {
    if (feed.kind === 'bulk' && feed.format !== this.bulkFormat)
      throw new Error(`the PostgreSQL target reads ${this.bulkFormat} bulk streams, not ${feed.format}`);
  }

  stagedColumns(schema: SourceSchema): string[] {
    return mappedColumns(this.t, schema).map((c) => c.target);
  }

  async openStaging(req: Omit<StageRequest, 'manifest'>): Promise<StagingSession> {
    const mapped = mappedColumns(this.t, req.schema);
    if (this.targetTypes.size === 0) await this.loadTargetTypes();
    const s = new PgStagingSession(await this.pool.connect(), this, req, mapped);
    try {
      await s.begin();
    } catch (err) {
      throw await s.abort(err);
    }
    return s;
  }

  async call<P extends TargetProcedure>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>> {
    const { text, values } = targetStatement(proc, args);
    return toRow(proc, (await this.pool.query(text, values)).rows);
  }

  apply(args: TargetArgs<'apply_batch'>, _req: StageRequest, _ctx: ApplyContext): Promise<TargetRow<'apply_batch'>> {
    return this.call('apply_batch', args);
  }

  // This target hands out no reconcile token: its completion row and fence are the whole answer.
  async reconcile(args: TargetArgs<'try_claim'>): Promise<{ row: TargetRow<'try_claim'> }> {
    return { row: await this.call('try_claim', args) };
  }

  waited(waitMs: number): string {
    return `${waitMs} ms`;
  }

  fault(err: unknown): TargetFault | undefined {
    const code = pgCode(err);
    return code === undefined ? undefined : PG_FAULTS[code];
  }

  beginStageError(): TransferError | null {
    return null;
  }

  applyError(err: unknown, req: StageRequest): TransferError | null {
    return pgDataError(req.batchId, err);
  }

  // 23505 unique_violation (the merge inserted two staged rows of one key), 21000 cardinality_violation (MERGE or ON
  // CONFLICT met one target row twice): the apply's transaction rolled back; its staged rows are asked (stagedKeys).
  keyRefusal(err: unknown): boolean {
    const code = pgCode(err);
    return code === '23505' || code === '21000';
  }

  stagedKeys(req: StageRequest): Promise<string[]> {
    return pgDuplicateKeys(this.pool, this.t, `keel_transfer.${quotePg(this.names.staging)}`, req.batchId);
  }

  // Key-set comparison (keyCompare: key windows over a key column, which is mapped): the target's keys in the window.
  private keyWindow(w: Window, schema: SourceSchema, first: number) {
    const mapped = mappedColumns(this.t, schema);
    const target = (source: string) => mapped.find((c) => c.source === source)!;
    const b = target(boundaryColumn(this.t));
    const parts: string[] = [];
    const params: string[] = [];
    if (w.low !== null) {
      params.push(w.low);
      parts.push(`t.${quotePg(b.target)} > $${first + params.length - 1}::bigint`);
    }
    params.push(w.high);
    parts.push(`t.${quotePg(b.target)} <= $${first + params.length - 1}::bigint`);
    return { keys: this.t.keyColumns.map(target), where: parts.join(' and '), params };
  }

  async windowKeys(w: Window, schema: SourceSchema): Promise<KeyTuple[]> {
    if (this.targetTypes.size === 0) await this.loadTargetTypes();
    const k = this.keyWindow(w, schema, 1);
    const res = await this.pool.query({
      text: `select ${k.keys.map((c) => pgCanonical(`t.${quotePg(c.target)}`, c.logical, this.targetTypes.get(c.target))).join(', ')}
               from ${this.qualifiedTarget()} t where ${k.where}`,
      values: k.params,
      rowMode: 'array',
    });
    return res.rows as KeyTuple[];
  }

  // Deletes the rows of `keys` that are in the window, in one statement (one transaction); returns the rows deleted.
  async deleteKeys(w: Window, schema: SourceSchema, keys: KeyTuple[]): Promise<number> {
    if (keys.length === 0) return 0;
    const k = this.keyWindow(w, schema, 1 + this.t.keyColumns.length);
    if (this.targetTypes.size === 0) await this.loadTargetTypes();
    const cols = k.keys.map((c, i) => `u.c${i}::${this.targetTypes.get(c.target)}`);
    const res = await this.pool.query(
      `delete from ${this.qualifiedTarget()} t
        where ${k.where}
          and (${k.keys.map((c) => `t.${quotePg(c.target)}`).join(', ')}) in (
                select ${cols.join(', ')} from unnest(${k.keys.map((_, i) => `$${i + 1}::text[]`).join(', ')}) as u(${k.keys.map((_, i) => `c${i}`).join(', ')}))`,
      [...k.keys.map((_, i) => keys.map((t) => t[i] ?? null)), ...k.params],
    );
    return res.rowCount ?? 0;
  }

  checksumAlgorithms() {
    return pgChecksumAlgorithms(this.pool);
  }

  async close(): Promise<void> {
    if (this.opts.ownsPool) await this.pool.end();
  }
}

export class PostgresTransferTarget extends StagingTarget {
  private readonly dialect: PostgresTargetDialect;

  constructor(
    t: TransferConfig,
    private readonly pool: pg.Pool,
    private readonly options: StagingTargetOptions & { ownsPool?: boolean } = {},
  ) {
    const d = new PostgresTargetDialect(t, pool, options);
    super(t, d, options);
    this.dialect = d;
  }

  // Direct apply (directApply.ts, docs/transfer.md): a key window over the single integer key, upserts only, from
  // a bulk stream or canonical rows: written, verified and committed in one target transaction instead of staged,
  // then applied. Change windows (deletes) stage: their operations are applied by apply_batch's merge.
  canApplyDirect(req: Omit<StageRequest, 'manifest'>, feed: RowFeed): boolean {
    const key = mappedColumns(this.t, req.schema).find((c) => c.source === this.t.keyColumns[0]);
    return (
      (feed.kind === 'rows' || feed.format === this.bulkFormat) &&
      !req.changes &&
      !carriesChanges(this.t) &&
      this.t.boundary.kind === 'key' &&
      this.t.keyColumns.length === 1 &&
      this.t.keyColumns[0] === this.t.boundary.column &&
      key?.logical === 'int'
    );
  }

  async applyDirect(
    req: StageRequest,
    w: Window,
    feed: RowFeed,
    count: () => Promise<number | null>,
  ): Promise<ApplyResult | 'not_eligible' | 'not_counted'> {
    if (!this.canApplyDirect(req, feed)) return 'not_eligible';
    return this.direct(req, w, feed, { manifest: req.manifest, count });
  }

  async applyDirectStreamed(
    req: Omit<StageRequest, 'manifest'>,
    w: Window,
    feed: RowsFeed,
    afterRows: () => Promise<{ manifest: Manifest; attempt: number }>,
  ): Promise<ApplyResult | 'not_eligible'> {
    if (!this.canApplyDirect(req, feed)) return 'not_eligible';
    const res = await this.direct(req, w, feed, { afterRows });
    if (res === 'not_counted') throw new Error(`batch ${req.batchId}: a direct apply after the rows has no count`);
    return res;
  }

  private async direct(
    req: Omit<StageRequest, 'manifest'>,
    w: Window,
    feed: RowFeed,
    when: DirectClaim,
  ): Promise<ApplyResult | 'not_eligible' | 'not_counted'> {
    const mapped = mappedColumns(this.t, req.schema);
    const key = mapped.find((c) => c.source === this.t.keyColumns[0])!;
    if (this.dialect.targetTypes.size === 0) await this.dialect.loadTargetTypes();
    const { schema, table } = this.dialect.names;
    const started = performance.now();
    const res = await applyDirect(
      {
        pool: this.pool,
        transfer: this.t.name,
        targetSchema: schema,
        targetTable: table,
        qualified: schema ? `${quotePg(schema)}.${quotePg(table)}` : quotePg(table),
        key: key.target,
        mapped,
        targetTypes: this.dialect.targetTypes,
        stallMs: this.options.stallMs ?? DEFAULT_TRANSFER_TIMEOUTS.stallMs,
        ...(this.options.trace ? { trace: this.options.trace } : {}),
      },
      req,
      w,
      feed,
      when,
      (err) => pgDataError(req.batchId, err),
    );
    this.options.trace?.('direct', performance.now() - started);
    return res;
  }
}

// PostgreSQL transfer target: staging with COPY FROM STDIN in one transaction (bounded memory: rows are
// streamed with backpressure), verification of count + keel-v1 checksum + duplicate keys by the server before
// the staging commits, apply through keel_transfer.apply_batch, reconcile through keel_transfer.try_claim.
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { algorithmOf, type LogicalType } from '../../transfer/checksum.js';
import type { TransferConfig } from '../../transfer/config.js';
import { boundaryColumn, resolvedNames } from '../../transfer/config.js';
import { TransferError } from '../../transfer/errors.js';
import { quotePg } from '../../transfer/identifiers.js';
import { carriesChanges, OP_COLUMN } from '../../transfer/changes.js';
import { checkColumnFits, mappedColumns } from '../../transfer/schema.js';
import type {
  ApplyContext,
  ApplyResult,
  BulkStream,
  KeyTuple,
  ReconcileOutcome,
  RowFeed,
  SourceSchema,
  StageRequest,
  StageResult,
  TargetAdapter,
  Window,
} from '../../transfer/types.js';
import { DEFAULT_TRANSFER_TIMEOUTS } from '../../transfer/timeouts.js';
import { PG_CHECKSUM_SETTINGS_SQL, pgCanonical, pgChecksumQuery, pgFacets, pgLogicalType } from './transferSql.js';
import { PG_COPY_FORMAT, pgChecksumAlgorithms } from './client.js';

// SQLSTATEs raised by sql/postgres/target/V001 (structured codes, never message text).
const KT_CONFLICT = 'KT001';
const KT_NOT_STAGED = 'KT002';
const KT_MERGE_COUNT = 'KT003';
const KT_STAGING_SHAPE = 'KT004';
const KT_FENCED = 'KT005';

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

// COPY text format: backslash, tab, newline and carriage return escaped; NULL is \N.
function copyField(v: string | null, type: LogicalType): string {
  if (v === null) return '\\N';
  const s = type === 'bytes' ? `\\x${v}` : v;
  return s.replace(/[\\\t\n\r]/g, (ch) => (ch === '\\' ? '\\\\' : ch === '\t' ? '\\t' : ch === '\n' ? '\\n' : '\\r'));
}

const noop = () => undefined;

// Fails (retryable TransferError 'stream_stalled') when touch() was not called for ms: no staging data moved.
function stallGuard(ms: number, batchId: string) {
  let timer: NodeJS.Timeout | undefined;
  let fail: (e: Error) => void = noop;
  const failed = new Promise<never>((_, reject) => {
    fail = reject;
  });
  failed.catch(noop);
  let stopped = false;
  // The first touch() starts the clock.
  const touch = () => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(
      () =>
        fail(
          new TransferError(
            'stream_stalled',
            `batch ${batchId}: no staging data moved for ${ms} ms (source or target stopped answering)`,
          ),
        ),
      ms,
    );
  };
  return {
    failed,
    touch,
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

// Waits on per-chunk promises, failing as soon as one of the long-lived `failures` rejects. A Promise.race with the
// long-lived promises per chunk would attach a reaction to each of them per chunk, and every reaction keeps its
// race's result (that chunk's rows) reachable until the staging ends: memory growing with the batch (1M rows in one
// batch: over 300 MB). Here each failure promise gets one listener, and a settled wait leaves nothing behind.
function failFast(failures: Promise<never>[]): <T>(p: Promise<T>) => Promise<T> {
  let failed: { err: unknown } | undefined;
  const waiting = new Set<(err: unknown) => void>();
  for (const f of failures)
    f.catch((err: unknown) => {
      failed ??= { err };
      for (const reject of waiting) reject(err);
      waiting.clear();
    });
  return <T>(p: Promise<T>) =>
    new Promise<T>((resolve, reject) => {
      if (failed) {
        p.catch(noop);
        reject(failed.err);
        return;
      }
      waiting.add(reject);
      p.then(
        (v) => {
          waiting.delete(reject);
          resolve(v);
        },
        (err: unknown) => {
          waiting.delete(reject);
          reject(err);
        },
      );
    });
}

export class PostgresTransferTarget implements TargetAdapter {
  readonly engine = 'postgres';
  readonly bulkFormat = PG_COPY_FORMAT;
  // The apply's mirror honours a key range (keel_transfer.apply_batch's p_mirror_low/p_mirror_high): a baseline may
  // run in key windows (shared/transfer/changes.ts).
  readonly mirrorsKeyRanges = true;
  readonly stagingTable: string;
  private readonly targetSchema: string | null;
  private readonly targetTable: string;
  private targetTypes = new Map<string, string>(); // target column -> declared type (from prepare)
  private targetNotNull = new Set<string>(); // target columns declared NOT NULL (from prepare)

  constructor(
    private readonly t: TransferConfig,
    private readonly pool: pg.Pool,
    // stallMs: staging fails (retryable) when no data moved for this long (a peer that stopped answering).
    private readonly opts: { ownsPool?: boolean; trace?: (phase: string, ms: number) => void; stallMs?: number } = {},
  ) {
    const n = resolvedNames(t).targetTable;
    this.targetSchema = n.schema;
    this.targetTable = n.name;
    this.stagingTable = `stg_${t.name}`;
  }

  async prepare(schema: SourceSchema): Promise<void> {
    const mapped = mappedColumns(this.t, schema);
    const qualified = this.qualifiedTarget();
    const types = await this.loadTargetTypes();
    if (types.size === 0)
      throw new TransferError(
        'target_incompatible',
        `transfer ${this.t.name}: target table ${this.t.target.table} does not exist`,
      );
    for (const c of mapped) {
      const declared = types.get(c.target);
      if (!declared)
        throw new TransferError(
          'target_incompatible',
          `transfer ${this.t.name}: target column ${c.target} does not exist in ${this.t.target.table}`,
        );
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
    const keys = this.targetKeys();
    const idx = await this.pool.query(
      `select 1 from pg_index i
        where i.indrelid = to_regclass($1) and i.indisunique and i.indpred is null and i.indexprs is null
          and (select array_agg(a.attname::text order by a.attname) from pg_attribute a where a.attrelid = i.indrelid and a.attnum = any(i.indkey))
              = (select array_agg(k order by k) from unnest($2::text[]) k)`,
      [qualified, keys],
    );
    if (idx.rowCount === 0) {
      throw new TransferError(
        'target_incompatible',
        `transfer ${this.t.name}: target table ${this.t.target.table} needs a unique index or primary key on exactly (${keys.join(', ')})`,
      );
    }
    try {
      await this.pool.query(`select keel_transfer.ensure_staging($1, $2, $3, $4::text[], $5)`, [
        this.t.name,
        this.targetSchema,
        this.targetTable,
        mapped.map((c) => c.target),
        carriesChanges(this.t), // change windows stage the operation column too
      ]);
    } catch (err) {
      if (pgCode(err) === KT_STAGING_SHAPE) throw new TransferError('target_incompatible', (err as Error).message);
      throw err;
    }
  }

  private qualifiedTarget(): string {
    return this.targetSchema ? `${quotePg(this.targetSchema)}.${quotePg(this.targetTable)}` : quotePg(this.targetTable);
  }

  // Declared types of the target table's columns (binary COPY decision, keel-pg2 fields of character(n) columns).
  private async loadTargetTypes(): Promise<Map<string, string>> {
    const res = await this.pool.query(
      `select a.attname::text as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as notnull
         from pg_attribute a where a.attrelid = to_regclass($1) and a.attnum > 0 and not a.attisdropped`,
      [this.qualifiedTarget()],
    );
    this.targetTypes = new Map<string, string>(res.rows.map((r) => [r.name, r.type]));
    this.targetNotNull = new Set<string>(res.rows.filter((r) => r.notnull).map((r) => r.name as string));
    return this.targetTypes;
  }

  private targetKeys(): string[] {
    return this.t.keyColumns.map((k) => this.t.columns.find((c) => c.source === k)!.target);
  }

  async stage(req: StageRequest, feed: RowFeed): Promise<StageResult> {
    if (feed.kind === 'bulk' && feed.format !== this.bulkFormat)
      throw new Error(`the PostgreSQL target reads ${this.bulkFormat} bulk streams, not ${feed.format}`);
    const mapped = mappedColumns(this.t, req.schema);
    const stg = `keel_transfer.${quotePg(this.stagingTable)}`;
    if (this.targetTypes.size === 0) await this.loadTargetTypes();
    const client = await this.pool.connect();
    let lost: Error | undefined; // the connection reported an error: it is never reused
    const onError = (e: Error) => {
      lost ??= e;
    };
    client.on('error', onError); // a connection lost mid-statement also surfaces as an 'error' event
    let broken: Error | undefined; // set: the client is destroyed on release instead of going back to the pool
    let copyOpen = false; // a COPY FROM STDIN is open: a rollback would queue behind it forever (only destroy ends it)
    let opening: Promise<BulkStream> | undefined; // the source's COPY, while it opens
    let src: BulkStream | undefined;
    const stall = stallGuard(this.opts.stallMs ?? DEFAULT_TRANSFER_TIMEOUTS.stallMs, req.batchId);
    try {
      await client.query('begin');
      await client.query(PG_CHECKSUM_SETTINGS_SQL);
      await client.query(`select set_config('keel.batch_id', $1, true)`, [req.batchId]);
      let opened: string;
      try {
        opened = (
          await client.query(`select keel_transfer.begin_stage($1, $2, $3, $4) as r`, [
            req.batchId,
            req.transfer,
            req.manifest.rowCount,
            req.manifest.checksum,
          ])
        ).rows[0].r;
      } catch (err) {
        if (pgCode(err) === KT_CONFLICT)
          throw new TransferError('staging_conflict', (err as Error).message, { batchId: req.batchId });
        throw err;
      }
      if (opened === 'already_staged') {
        await client.query('commit');
        return { outcome: 'already_staged', rowCount: req.manifest.rowCount, checksum: req.manifest.checksum };
      }

      // Change windows: every row ends with its operation (shared/transfer/changes.ts), staged and checksummed too.
      const ops = carriesChanges(this.t);
      const columnList = [...mapped.map((c) => quotePg(c.target)), ...(ops ? [OP_COLUMN] : [])].join(', ');
      let mark = performance.now();
      const lap = (phase: string) => {
        const now = performance.now();
        this.opts.trace?.(phase, now - mark);
        mark = now;
      };
      // Binary COPY when every column has the same declared type on both sides (no text formatting or
      // parsing); text otherwise, which converts between compatible types (e.g. integer -> bigint).
      const binary =
        feed.kind === 'bulk' &&
        mapped.every((c) => this.targetTypes.get(c.target)?.toLowerCase() === c.type.toLowerCase());
      const sink = client.query(copyFrom(`copy ${stg} (${columnList}) from stdin${binary ? ' (format binary)' : ''}`));
      copyOpen = true;
      stall.touch();
      // Listened to from the first moment: the connection can die while the source opens or between two chunks
      // (an 'error' without a listener would crash the process).
      sink.on('error', noop);
      const sinkFailed = new Promise<never>((_, reject) => sink.once('error', reject));
      sinkFailed.catch(noop);
      const sinkFinished = new Promise<void>((resolve) => sink.once('finish', resolve));
      const keyTargets = new Set(this.targetKeys());
      // Duplicate keys are impossible when the source guarantees unique keys in the COPY's snapshot and the key
      // columns are integers (equal on the target exactly when equal on the source; the staged values are proven
      // equal to the source's by the checksum below, which is then compared before anything is declared staged).
      let keysProvenUnique = false;
      if (feed.kind === 'bulk') {
        opening = feed.open(binary ? 'binary' : 'text');
        src = await Promise.race([opening, sinkFailed, stall.failed]);
        src.stream.on('error', noop); // the pipeline below reports it; never unhandled
        keysProvenUnique =
          src.keysUnique === true && mapped.filter((c) => keyTargets.has(c.target)).every((c) => c.logical === 'int');
        stall.touch();
        const moved = pipeline(
          src.stream,
          new Transform({ transform: (chunk, _enc, cb) => (stall.touch(), cb(null, chunk)) }),
          sink,
        );
        moved.catch(noop);
        await Promise.race([moved, stall.failed]);
        copyOpen = false;
        const s = src;
        src = undefined;
        opening = undefined;
        await s.release();
      } else {
        const types: LogicalType[] = [...mapped.map((c) => c.staged), ...(ops ? (['text'] as const) : [])];
        const rows = feed.rows[Symbol.asyncIterator]();
        const guard = failFast([sinkFailed, stall.failed]);
        try {
          for (;;) {
            const next = await guard(rows.next());
            if (next.done) break;
            stall.touch();
            let buf = '';
            for (const row of next.value) {
              for (let i = 0; i < types.length; i++) {
                if (i > 0) buf += '\t';
                buf += copyField(row[i] ?? null, types[i]!);
              }
              buf += '\n';
            }
            if (!sink.write(buf)) await guard(once(sink, 'drain'));
            stall.touch();
          }
          sink.end();
          await guard(sinkFinished);
          copyOpen = false;
        } catch (err) {
          // Ends the source's read (its own cleanup releases its connection); not awaited: a source that stopped
          // answering must not hold this step.
          rows.return?.().catch(noop);
          throw err;
        }
      }
      stall.stop();

      lap('stage.copy');
      // The staging table was just filled in this transaction and has no statistics, so the planner would think the
      // verification scans are tiny and run them in one process: make parallel workers free for these two queries.
      await client.query(
        `select set_config('parallel_setup_cost', '0', true), set_config('parallel_tuple_cost', '0', true), set_config('min_parallel_table_scan_size', '0', true),
                set_config('work_mem', '32MB', true)`,
      );
      const keyRefs = this.targetKeys().map(quotePg);
      const dup = keysProvenUnique
        ? { rowCount: 0, rows: [] as { k: string }[] }
        : await client.query(
            `select ${keyRefs.map((k) => `${k}::text`).join(` || ', ' || `)} as k from ${stg} where keel_batch_id = $1 group by ${keyRefs.join(', ')} having count(*) > 1 limit 3`,
            [req.batchId],
          );
      if ((dup.rowCount ?? 0) > 0) {
        throw new TransferError(
          'duplicate_keys',
          `batch ${req.batchId}: duplicate keys within the batch (${dup.rows.map((r) => `(${r.k})`).join(', ')})`,
          { keys: dup.rows.map((r) => r.k) },
        );
      }
      lap('stage.duplicateCheck');
      const sums = await client.query(
        pgChecksumQuery(
          [
            ...mapped.map((c) => ({
              ref: quotePg(c.target),
              type: c.staged,
              declared: this.targetTypes.get(c.target),
            })),
            ...(ops ? [{ ref: OP_COLUMN, type: 'text' as const, declared: 'text' }] : []),
          ],
          stg,
          'keel_batch_id = $1',
          algorithmOf(req.manifest.checksum),
        ),
        [req.batchId],
      );
      const rowCount = Number(sums.rows[0].n);
      const checksum = String(sums.rows[0].checksum);
      if (rowCount !== req.manifest.rowCount || checksum !== req.manifest.checksum) {
        throw new TransferError(
          'manifest_mismatch',
          `batch ${req.batchId}: staged ${rowCount} rows (checksum ${checksum}) but the manifest says ${req.manifest.rowCount} rows (checksum ${req.manifest.checksum}); the source window changed after extraction`,
          { stagedCount: rowCount, stagedChecksum: checksum },
        );
      }
      lap('stage.checksum');
      await client.query(`select keel_transfer.finish_stage($1, $2, $3)`, [req.batchId, rowCount, checksum]);
      await client.query('commit');
      lap('stage.commit');
      return { outcome: 'staged', rowCount, checksum };
    } catch (err) {
      stall.stop();
      // A source COPY that opened after we gave up, or that is still streaming: released with the error, which
      // destroys its connection when the COPY did not finish (never a rollback queued behind it).
      if (opening && !src) opening.then((s) => s.release(err as Error), noop).catch(noop);
      if (src) await src.release(err as Error).catch(noop);
      if (copyOpen || lost || !(err instanceof TransferError)) {
        // The COPY FROM STDIN is still open, or the connection is in doubt: destroying the connection ends the
        // server's transaction (and its COPY) at once; a rollback could wait forever behind the COPY.
        broken = err as Error;
      } else {
        await client.query('rollback').catch((e: Error) => {
          broken = e;
        });
      }
      throw pgDataError(req.batchId, err) ?? err;
    } finally {
      if (!broken && !lost) client.off('error', onError);
      client.release(broken ?? lost);
    }
  }

  async apply(req: StageRequest, ctx: ApplyContext): Promise<ApplyResult> {
    const mapped = mappedColumns(this.t, req.schema);
    const started = performance.now();
    try {
      const res = await this.pool.query(
        `select outcome, row_count::text as row_count, checksum, deleted_count::text as deleted_count
           from keel_transfer.apply_batch($1, $2, $3, $4, $5, $6::text[], $7::text[], $8, $9, $10, $11, $12, $13)`,
        [
          req.batchId,
          req.transfer,
          this.targetSchema,
          this.targetTable,
          this.stagingTable,
          mapped.map((c) => c.target),
          this.targetKeys(),
          req.manifest.rowCount,
          req.manifest.checksum,
          ctx.attempt,
          req.changes ?? null,
          req.mirrorRange?.low ?? null,
          req.mirrorRange?.high ?? null,
        ],
      );
      const r = res.rows[0];
      this.opts.trace?.('apply', performance.now() - started);
      return {
        outcome: r.outcome,
        rowCount: Number(r.row_count),
        checksum: String(r.checksum),
        ...(r.deleted_count !== null ? { deleted: Number(r.deleted_count) } : {}),
      };
    } catch (err) {
      if (pgCode(err) === KT_FENCED)
        throw new TransferError('attempt_fenced', (err as Error).message, { attempt: ctx.attempt });
      if (pgCode(err) === KT_NOT_STAGED) throw new TransferError('not_staged', (err as Error).message);
      if (pgCode(err) === KT_CONFLICT) throw new TransferError('staging_conflict', (err as Error).message);
      if (pgCode(err) === KT_MERGE_COUNT) throw new TransferError('target_incompatible', (err as Error).message);
      throw pgDataError(req.batchId, err) ?? err;
    }
  }

  async reconcile(
    req: StageRequest,
    waitMs: number,
    fenceThrough: number,
    _reconcileToken: string | null, // this target hands out none: its completion row and fence are the whole answer
  ): Promise<ReconcileOutcome> {
    const res = await this.pool.query(
      `select outcome, row_count::text as row_count, checksum, staged from keel_transfer.try_claim($1, $2, $3)`,
      [req.batchId, waitMs, fenceThrough],
    );
    const r = res.rows[0];
    if (r.outcome === 'committed')
      return {
        outcome: 'committed',
        rowCount: Number(r.row_count),
        checksum: String(r.checksum),
        via: 'completion_row',
      };
    if (r.outcome === 'not_applied')
      return { outcome: 'not_applied', staged: Boolean(r.staged), via: 'claim_obtained' };
    return {
      outcome: 'blocked',
      reason: `the claim on batch ${req.batchId} is held by an open transaction on the target (waited ${waitMs} ms)`,
    };
  }

  async purgeStaged(batchId: string): Promise<void> {
    const started = performance.now();
    await this.pool.query(`select keel_transfer.purge_staged($1, $2)`, [batchId, this.stagingTable]);
    this.opts.trace?.('purge', performance.now() - started);
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

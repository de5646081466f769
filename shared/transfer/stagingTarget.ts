// The transfer target's flow, once for every engine: staging (open, begin_stage, write the feed under the stall
// guard, verify count + duplicate keys + checksum against the manifest, finish_stage, commit), apply (apply_batch,
// its faults as TransferErrors, the completion row as the result), reconcile (try_claim's verdict) and purge, each
// procedure called with the arguments targetProcedures.ts builds. An engine supplies only its dialect
// (TargetDialect): prepare's checks against its catalog, how a staging session opens and ends, how rows are written
// and verified, how a procedure call runs, and which of its errors mean which fault. Dialects: shared/engines/postgres/transferTarget.ts (COPY),
// shared/engines/oracle/transferTarget.ts (executeMany).
import { algorithmOf, type CanonicalRow, type ChecksumAlgorithm } from './checksum.js';
import type { TransferConfig } from './config.js';
import { keysChangedSince, mappedColumns } from './schema.js';
import { TransferError } from './errors.js';
import {
  applyBatchArgs,
  beginStageArgs,
  finishStageArgs,
  purgeStagedArgs,
  stagedBatchesArgs,
  toBatchIds,
  toApplyResult,
  toOpened,
  toReconcileOutcome,
  tryClaimArgs,
  type TargetArgs,
  type TargetNames,
  type TargetProcedure,
  type TargetRow,
} from './targetProcedures.js';
import { DEFAULT_TRANSFER_TIMEOUTS } from './timeouts.js';
import type {
  ApplyContext,
  ApplyResult,
  KeyTuple,
  Manifest,
  ReconcileOutcome,
  RowFeed,
  RowsFeed,
  SourceSchema,
  StageRequest,
  StageResult,
  TargetAdapter,
  Window,
} from './types.js';

const noop = () => undefined;

// What a target procedure's error means, whatever the engine raises it as (PostgreSQL SQLSTATE KT00n, Oracle
// ORA-2000n: sql/<engine>/ target migrations).
export type TargetFault = 'conflict' | 'not_staged' | 'merge_count' | 'staging_shape' | 'fenced';

// No staging data moved for ms: the retryable 'stream_stalled'. The first touch() starts the clock; hold() stops it
// while the dialect waits on a call that is bounded otherwise (touch() starts it again).
export class StallGuard {
  readonly failed: Promise<never>;
  private fail: (e: Error) => void = noop;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly ms: number,
    private readonly batchId: string,
    private readonly who: string, // what stopped answering, for the message
  ) {
    this.failed = new Promise<never>((_, reject) => {
      this.fail = reject;
    });
    this.failed.catch(noop);
  }

  touch(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () =>
        this.fail(
          new TransferError(
            'stream_stalled',
            `batch ${this.batchId}: no staging data moved for ${this.ms} ms (${this.who} stopped answering)`,
          ),
        ),
      this.ms,
    );
  }

  hold(): void {
    clearTimeout(this.timer);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

// Waits on per-chunk promises, failing as soon as one of the long-lived `failures` rejects. A Promise.race with the
// long-lived promises per chunk would attach a reaction to each of them per chunk, and every reaction keeps its
// race's result (that chunk's rows) reachable until the staging ends: memory growing with the batch (1M rows in one
// batch: over 300 MB). Here each failure promise gets one listener, and a settled wait leaves nothing behind.
export function failFast(failures: Promise<never>[]): <T>(p: Promise<T>) => Promise<T> {
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

// Where canonical rows go during one staging, a chunk at a time.
export interface RowWriter {
  write(rows: CanonicalRow[]): Promise<void>;
  end(): Promise<void>;
  // Rejects when the writer broke between two calls (a lost connection): ends the staging at once.
  readonly failed?: Promise<never>;
  // true: the stall clock stops while a chunk is written (the dialect bounds the call itself).
  readonly boundedWrites?: boolean;
}

// One staging transaction on one connection of the target.
export interface StagingSession {
  call<P extends 'begin_stage' | 'finish_stage'>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>>;
  rowWriter(stall: StallGuard): Promise<RowWriter>;
  // A native bulk stream (only for a dialect with a bulkFormat); keysUnique: the source proved the keys unique.
  writeBulk?(feed: Extract<RowFeed, { kind: 'bulk' }>, stall: StallGuard): Promise<{ keysUnique: boolean }>;
  beforeVerify?(): Promise<void>;
  // Up to three keys staged more than once in the batch, each as text ('a, b').
  duplicateKeys(): Promise<string[]>;
  // count and checksum of the staged rows, with the manifest's algorithm
  stagedSums(algorithm: ChecksumAlgorithm): Promise<{ rowCount: number; checksum: string }>;
  commit(): Promise<void>;
  // After commit: the connection goes back to the pool.
  close(): void | Promise<void>;
  // After any failure: rolls back, or drops the connection when a rollback cannot be trusted; answers the error to
  // throw (the engine's data errors as 'unsupported_type').
  abort(err: unknown): Promise<unknown>;
}

export interface TargetDialect {
  readonly engine: string;
  readonly bulkFormat?: string;
  // Its apply_batch honours mirror_low/mirror_high (a baseline may run in key windows, changes.ts).
  readonly mirrorsKeyRanges?: boolean;
  readonly names: TargetNames;
  // How a stall names the silent party in its message.
  readonly stalledParty: string;
  // Why staged rows may disagree with the manifest, for its message.
  readonly mismatchCause: string;
  prepare(schema: SourceSchema): Promise<void>;
  // Throws unless the dialect can stage this feed and manifest.
  checkFeed(req: StageRequest, feed: RowFeed): void;
  // true: begin_stage may run after the rows, in the same staging transaction (it records the manifest and refuses
  // other content for the batch id, and touches no staged row): the target offers stageStreamed (one source read).
  readonly beginStageAfterRows?: boolean;
  // The staged (target) columns, in mapping order.
  stagedColumns(schema: SourceSchema): string[];
  // (The manifest is not known yet with one source read.)
  openStaging(req: Omit<StageRequest, 'manifest'>): Promise<StagingSession>;
  // One call in its own transaction (purge_staged).
  call<P extends TargetProcedure>(proc: P, args: TargetArgs<P>): Promise<TargetRow<P>>;
  apply(args: TargetArgs<'apply_batch'>, req: StageRequest, ctx: ApplyContext): Promise<TargetRow<'apply_batch'>>;
  // try_claim (or the engine's own way first); via: how a 'committed' was known, when not by the completion row.
  reconcile(
    args: TargetArgs<'try_claim'>,
    req: StageRequest,
    reconcileToken: string | null,
  ): Promise<{ row: TargetRow<'try_claim'>; via?: string }>;
  // How long try_claim waited, in the engine's unit, for the 'blocked' reason.
  waited(waitMs: number): string;
  fault(err: unknown): TargetFault | undefined;
  // An error the fault map does not name, as the TransferError it means (or null): a bounded lock wait, a value
  // the target refuses on every retry.
  beginStageError(err: unknown, req: StageRequest): TransferError | null;
  applyError(err: unknown, req: StageRequest): TransferError | null;
  // The staged rows' keys that are twice in the batch or have a NULL part under the transfer's key columns now (at
  // most three). The stage checked the keys configured when it ran: a batch staged under other key columns is asked
  // before its apply (a NULL part merges as a new row beside the target's, with no error to catch), and after an
  // apply the target refused on a key (keyRefusal), so that it is refused for good instead of applied wrongly or
  // failing the same way at every retry.
  stagedKeys?(req: StageRequest): Promise<string[]>;
  // Whether an apply's error is the target refusing a key: a unique violation, a merge meeting one target row twice.
  keyRefusal?(err: unknown): boolean;
  windowKeys(w: Window, schema: SourceSchema): Promise<KeyTuple[]>;
  deleteKeys(w: Window, schema: SourceSchema, keys: KeyTuple[]): Promise<number>;
  checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]>;
  close(): Promise<void>;
}

export interface StagingTargetOptions {
  trace?: (phase: string, ms: number) => void;
  // Staging fails (retryable) when no data moved for this long (a peer that stopped answering).
  stallMs?: number;
}

export class StagingTarget implements TargetAdapter {
  readonly engine: string;
  readonly bulkFormat?: string;
  readonly mirrorsKeyRanges?: boolean;
  readonly stagingTable: string;
  // One source read (types.ts): only with a dialect whose begin_stage may follow the rows.
  readonly stageStreamed?: (
    req: Omit<StageRequest, 'manifest'>,
    feed: RowsFeed,
    manifest: Promise<Manifest>,
  ) => Promise<StageResult>;

  constructor(
    protected readonly t: TransferConfig,
    private readonly d: TargetDialect,
    private readonly opts: StagingTargetOptions = {},
  ) {
    this.engine = d.engine;
    if (d.bulkFormat !== undefined) this.bulkFormat = d.bulkFormat;
    if (d.mirrorsKeyRanges) this.mirrorsKeyRanges = true;
    this.stagingTable = d.names.staging;
    if (d.beginStageAfterRows) this.stageStreamed = (req, feed, manifest) => this.stageWith(req, feed, manifest);
  }

  prepare(schema: SourceSchema): Promise<void> {
    return this.d.prepare(schema);
  }

  stage(req: StageRequest, feed: RowFeed): Promise<StageResult> {
    this.d.checkFeed(req, feed);
    return this.stageWith(req, feed, req.manifest);
  }

  // expected: the manifest, or (one source read) the promise of it, recorded once the feed's last row has passed:
  // begin_stage then runs after the rows, in the same transaction, before anything is verified or committed.
  private async stageWith(
    req: Omit<StageRequest, 'manifest'>,
    feed: RowFeed,
    expected: Manifest | Promise<Manifest>,
  ): Promise<StageResult> {
    const s = await this.d.openStaging(req);
    const stall = new StallGuard(
      this.opts.stallMs ?? DEFAULT_TRANSFER_TIMEOUTS.stallMs,
      req.batchId,
      this.d.stalledParty,
    );
    const open = async (m: Manifest): Promise<'new' | 'already_staged'> => {
      const full = { ...req, manifest: m };
      try {
        return toOpened(await s.call('begin_stage', beginStageArgs(full)));
      } catch (err) {
        if (this.d.fault(err) === 'conflict')
          throw new TransferError('staging_conflict', (err as Error).message, { batchId: req.batchId });
        throw this.d.beginStageError(err, full) ?? err;
      }
    };
    try {
      if (!(expected instanceof Promise) && (await open(expected)) === 'already_staged') {
        await s.commit();
        await s.close();
        return { outcome: 'already_staged', rowCount: expected.rowCount, checksum: expected.checksum };
      }
      const lap = this.laps();
      const { keysUnique } =
        feed.kind === 'bulk' ? await s.writeBulk!(feed, stall) : await this.writeRows(feed, req.schema, s, stall);
      stall.stop();
      let manifest: Manifest;
      if (expected instanceof Promise) {
        manifest = await expected; // rejects when it could not be recorded
        if ((await open(manifest)) === 'already_staged') {
          // an earlier staging of this batch id holds the same content: this transaction's rows are not needed
          await s.abort(new Error('already staged'));
          return { outcome: 'already_staged', rowCount: manifest.rowCount, checksum: manifest.checksum };
        }
      } else manifest = expected;
      lap('stage.copy');
      await s.beforeVerify?.();
      const dup = keysUnique ? [] : await s.duplicateKeys();
      if (dup.length > 0)
        throw new TransferError(
          'duplicate_keys',
          `batch ${req.batchId}: duplicate or NULL keys within the batch (${dup.map((k) => `(${k})`).join(', ')})`,
          { keys: dup },
        );
      lap('stage.duplicateCheck');
      const { rowCount, checksum } = await s.stagedSums(algorithmOf(manifest.checksum));
      if (rowCount !== manifest.rowCount || checksum !== manifest.checksum)
        throw new TransferError(
          'manifest_mismatch',
          `batch ${req.batchId}: staged ${rowCount} rows (checksum ${checksum}) but the manifest says ${manifest.rowCount} rows (checksum ${manifest.checksum}); ${this.d.mismatchCause}`,
          { stagedCount: rowCount, stagedChecksum: checksum },
        );
      lap('stage.checksum');
      await s.call('finish_stage', finishStageArgs(req.batchId, rowCount, checksum));
      await s.commit();
      await s.close();
      lap('stage.commit');
      return { outcome: 'staged', rowCount, checksum };
    } catch (err) {
      stall.stop();
      throw await s.abort(err);
    }
  }

  // The feed's chunks into the session's writer: every wait (the source's next chunk, the writer) fails as soon as
  // the writer breaks or nothing moved for stallMs.
  private async writeRows(
    feed: RowsFeed,
    schema: SourceSchema,
    s: StagingSession,
    stall: StallGuard,
  ): Promise<{ keysUnique: boolean }> {
    const writer = await s.rowWriter(stall);
    const rows = feed.rows[Symbol.asyncIterator]();
    const guard = failFast(writer.failed ? [writer.failed, stall.failed] : [stall.failed]);
    stall.touch();
    try {
      for (;;) {
        const next = await guard(rows.next());
        if (next.done) break;
        stall.touch();
        if (writer.boundedWrites) stall.hold();
        await guard(writer.write(next.value));
        stall.touch();
      }
      await guard(writer.end());
    } catch (err) {
      // Ends the source's read (its own cleanup releases its connection); not awaited: a source that stopped
      // answering must not hold this step.
      rows.return?.().catch(noop);
      throw err;
    }
    // Keys the source proved unique in the snapshot it read (StreamFacts): integer keys are equal on the target
    // exactly when equal at the source, and the checksum below proves the staged values the source's.
    const keys = mappedColumns(this.t, schema).filter((c) => this.t.keyColumns.includes(c.source));
    return { keysUnique: feed.facts?.keysUnique === true && keys.every((c) => c.logical === 'int') };
  }

  private laps(): (phase: string) => void {
    let mark = performance.now();
    return (phase) => {
      const now = performance.now();
      this.opts.trace?.(phase, now - mark);
      mark = now;
    };
  }

  async apply(req: StageRequest, ctx: ApplyContext): Promise<ApplyResult> {
    const args = applyBatchArgs(this.t, this.d.names, this.d.stagedColumns(req.schema), req, ctx);
    const started = performance.now();
    // Recorded under other key columns (the batch's recorded schema says which), or not known (a batch journalled
    // before they were recorded): a staged row with a NULL part of today's key would merge as a row of its own beside
    // the target's, matching nothing and raising nothing, so the staged keys are asked first (one read of the batch's
    // staged rows, only after such a change or for such an old batch).
    if (this.d.stagedKeys && keysChangedSince(req.schema.columns, this.t.keyColumns)) {
      const keys = await this.d.stagedKeys(req);
      if (keys.length > 0) throw this.stagedKeysError(req, keys, 'nothing was applied');
    }
    let row: TargetRow<'apply_batch'>;
    try {
      row = await this.d.apply(args, req, ctx);
    } catch (err) {
      const message = (err as Error).message;
      switch (this.d.fault(err)) {
        case 'fenced':
          throw new TransferError('attempt_fenced', message, { attempt: ctx.attempt });
        case 'not_staged':
          throw new TransferError('not_staged', message);
        case 'conflict':
          throw new TransferError('staging_conflict', message);
        case 'merge_count':
        case 'staging_shape': // the target table changed since the batch was staged
          throw new TransferError('target_incompatible', message);
      }
      const keys = this.d.keyRefusal?.(err) ? await this.d.stagedKeys?.(req).catch(() => null) : null;
      if (keys && keys.length > 0) throw this.stagedKeysError(req, keys, message);
      throw this.d.applyError(err, req) ?? err;
    }
    this.opts.trace?.('apply', performance.now() - started);
    return toApplyResult(row);
  }

  private stagedKeysError(req: StageRequest, keys: string[], why: string): TransferError {
    return new TransferError(
      'duplicate_keys',
      `batch ${req.batchId}: duplicate or NULL keys within the batch under the key columns (${this.t.keyColumns.join(', ')}) (${keys.map((k) => `(${k})`).join(', ')}); were they changed since it was staged? (${why})`,
      { keys, keyColumns: [...this.t.keyColumns] },
    );
  }

  async reconcile(
    req: StageRequest,
    waitMs: number,
    fenceThrough: number,
    reconcileToken: string | null,
  ): Promise<ReconcileOutcome> {
    const { row, via } = await this.d.reconcile(tryClaimArgs(req.batchId, waitMs, fenceThrough), req, reconcileToken);
    return toReconcileOutcome(row, req.batchId, this.d.waited(waitMs), via);
  }

  async purgeStaged(batchId: string): Promise<void> {
    const started = performance.now();
    await this.d.call('purge_staged', purgeStagedArgs(batchId, this.d.names.staging));
    this.opts.trace?.('purge', performance.now() - started);
  }

  async stagedBatches(maxCount: number, after: string | null): Promise<string[]> {
    return toBatchIds(await this.d.call('staged_batches', stagedBatchesArgs(this.t.name, maxCount, after)));
  }

  windowKeys(w: Window, schema: SourceSchema): Promise<KeyTuple[]> {
    return this.d.windowKeys(w, schema);
  }

  deleteKeys(w: Window, schema: SourceSchema, keys: KeyTuple[]): Promise<number> {
    return this.d.deleteKeys(w, schema, keys);
  }

  checksumAlgorithms(): Promise<readonly ChecksumAlgorithm[]> {
    return this.d.checksumAlgorithms();
  }

  close(): Promise<void> {
    return this.d.close();
  }
}

// The transfer target's flow, once for every engine: staging (open, begin_stage, write the feed under the stall
// guard, verify count + duplicate keys + checksum against the manifest, finish_stage, commit), apply (apply_batch,
// its faults as TransferErrors, the completion row as the result), reconcile (try_claim's verdict) and purge, each
// procedure called with the arguments targetProcedures.ts builds. An engine supplies only its dialect
// (TargetDialect): prepare's checks against its catalog, how a staging session opens and ends, how rows are written
// and verified, how a procedure call runs, and which of its errors mean which fault. Dialects: shared/engines/postgres/transferTarget.ts (COPY),
// shared/engines/oracle/transferTarget.ts (executeMany).
import type { CanonicalRow, ChecksumAlgorithm } from './checksum.js';
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import {
  applyBatchArgs,
  beginStageArgs,
  finishStageArgs,
  purgeStagedArgs,
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
  ReconcileOutcome,
  RowFeed,
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
  stagedSums(): Promise<{ rowCount: number; checksum: string }>;
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
  // The staged (target) columns, in mapping order.
  stagedColumns(schema: SourceSchema): string[];
  openStaging(req: StageRequest): Promise<StagingSession>;
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

  constructor(
    protected readonly t: TransferConfig,
    private readonly d: TargetDialect,
    private readonly opts: StagingTargetOptions = {},
  ) {
    this.engine = d.engine;
    if (d.bulkFormat !== undefined) this.bulkFormat = d.bulkFormat;
    if (d.mirrorsKeyRanges) this.mirrorsKeyRanges = true;
    this.stagingTable = d.names.staging;
  }

  prepare(schema: SourceSchema): Promise<void> {
    return this.d.prepare(schema);
  }

  async stage(req: StageRequest, feed: RowFeed): Promise<StageResult> {
    this.d.checkFeed(req, feed);
    const s = await this.d.openStaging(req);
    const stall = new StallGuard(
      this.opts.stallMs ?? DEFAULT_TRANSFER_TIMEOUTS.stallMs,
      req.batchId,
      this.d.stalledParty,
    );
    try {
      let opened: 'new' | 'already_staged';
      try {
        opened = toOpened(await s.call('begin_stage', beginStageArgs(req)));
      } catch (err) {
        if (this.d.fault(err) === 'conflict')
          throw new TransferError('staging_conflict', (err as Error).message, { batchId: req.batchId });
        throw this.d.beginStageError(err, req) ?? err;
      }
      if (opened === 'already_staged') {
        await s.commit();
        await s.close();
        return { outcome: 'already_staged', rowCount: req.manifest.rowCount, checksum: req.manifest.checksum };
      }
      const lap = this.laps();
      const { keysUnique } =
        feed.kind === 'bulk' ? await s.writeBulk!(feed, stall) : await this.writeRows(feed.rows, s, stall);
      stall.stop();
      lap('stage.copy');
      await s.beforeVerify?.();
      const dup = keysUnique ? [] : await s.duplicateKeys();
      if (dup.length > 0)
        throw new TransferError(
          'duplicate_keys',
          `batch ${req.batchId}: duplicate keys within the batch (${dup.map((k) => `(${k})`).join(', ')})`,
          { keys: dup },
        );
      lap('stage.duplicateCheck');
      const { rowCount, checksum } = await s.stagedSums();
      if (rowCount !== req.manifest.rowCount || checksum !== req.manifest.checksum)
        throw new TransferError(
          'manifest_mismatch',
          `batch ${req.batchId}: staged ${rowCount} rows (checksum ${checksum}) but the manifest says ${req.manifest.rowCount} rows (checksum ${req.manifest.checksum}); ${this.d.mismatchCause}`,
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
    feed: AsyncIterable<CanonicalRow[]>,
    s: StagingSession,
    stall: StallGuard,
  ): Promise<{ keysUnique: boolean }> {
    const writer = await s.rowWriter(stall);
    const rows = feed[Symbol.asyncIterator]();
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
    return { keysUnique: false };
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
          throw new TransferError('target_incompatible', message);
      }
      throw this.d.applyError(err, req) ?? err;
    }
    this.opts.trace?.('apply', performance.now() - started);
    return toApplyResult(row);
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

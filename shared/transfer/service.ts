// The transfer lifecycle (docs/transfer.md): extract -> stage -> apply -> reconcile, identical for every engine pair.
// Every batch has a durable id; retries reuse it; outcomes are read from the target, never inferred from errors.
import { randomUUID } from 'node:crypto';
import { ChecksumAccumulator, type CanonicalRow } from './checksum.js';
import type { TransferConfig } from './config.js';
import { describeError, isStatementTimeout, isTransferError, TERMINAL_CODES, TransferError } from './errors.js';
import type { BatchPatch, BatchRecord, TransferControl, TransferJournal } from './journal.js';
import { OPEN_STATES, RECONCILABLE } from './lifecycle.js';
import { withValuePolicies } from './policies.js';
import { carriesChanges, changeModeOf, REBASELINE_MARK, versionOfHigh } from './changes.js';
import { baseTransferName, newChainName } from './chains.js';
import { BatchMoves } from './moves.js';
import { baselineOpts, negotiateChecksum, negotiateFeed, readsOnce } from './negotiate.js';
import { Reconciler } from './reconcile.js';
import { boundaryColumnChanged, boundaryDerivation, describeSchemaDiff } from './schema.js';
import { stageRequest } from './stageRequest.js';
import { DEFAULT_TRANSFER_TIMEOUTS } from './timeouts.js';
import {
  iso,
  toView,
  transferSummary,
  type BatchDetail,
  type BatchListFilter,
  type BatchView,
  type KeyCompareReport,
  type RebaselinePlan,
  type ReplayPlan,
  type RowsBehind,
  type TransferState,
  type TransferSummary,
} from './view.js';
import type {
  Adapters,
  ApplyResult,
  Manifest,
  RowFeed,
  SourceSchema,
  StageRequest,
  StageResult,
  StreamFacts,
  Window,
} from './types.js';

export type { TransferConfig } from './config.js';
export type { TransferJournal } from './journal.js';
// What callers of the service read (its answers' types), from the modules that define them.
export type {
  BatchDetail,
  BatchListFilter,
  BatchView,
  KeyCompareReport,
  RebaselinePlan,
  ReplayPlan,
  RowsBehind,
  TransferState,
  TransferSummary,
} from './view.js';

// When the next window's manifest is read ahead by default: once the COPY before it has sent its last row, where on
// a server shared by source and target it no longer slows that COPY's target backend (bench/README.md, runs 1450-1476
// and 1370-1389).
export const DEFAULT_READ_AHEAD = 'afterCopy' as const;

export interface TransferServiceDeps {
  journal: TransferJournal;
  transfers: TransferConfig[];
  // Adapters for one transfer; called once per transfer and cached until close().
  connect: (transfer: TransferConfig) => Adapters | Promise<Adapters>;
  log?: (event: string, data: Record<string, unknown>) => void;
  newBatchId?: () => string;
  onClose?: () => Promise<void>; // e.g. end the pools behind `connect`
  // Stage and apply in one target transaction where the target can (TargetAdapter.applyDirect; docs/transfer.md,
  // "Direct apply"). The app turns it on (transferAdapters.ts); off, every batch is staged, then applied.
  directApply?: boolean;
  // Read the next window's manifest ahead of a full window's commit (startAhead; docs/transfer.md, "The next
  // window's manifest, ahead"). Default 'afterCopy' (DEFAULT_READ_AHEAD). true: beside the COPY. Off, every createBatch reads its manifest after the commit before it:
  // where the source shares its cores with the target (one 2-core server), the read ahead competes with the COPY's
  // target backend, and bench/transfer.ts `--read-ahead off` measures the difference on such a machine.
  // 'afterCopy': the next window is found beside the claim as with true, but its manifest is read only once the
  // source's COPY has sent its last row -- beside the target's sums, its commit and the journal's round trips to the
  // next batch instead of beside the COPY (bench/README.md, runs 1370-1389; `--read-ahead after`).
  readAhead?: boolean | 'afterCopy';
  // KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT: an apply ended by Keel's own statement timeout this many times in a row
  // fails the batch with code apply_timeout, a stage so ended with stage_timeout (its window released; batch_failed
  // event and alert), instead of retrying it for ever. 0: never (default 3).
  applyTimeoutLimit?: number;
  // KEEL_TRANSFER_STATEMENT_TIMEOUT_MS, the statement timeout the adapters' sessions set (default 5 min): a step's
  // 57014 that came sooner after its start was not that timeout (an operator's pg_cancel_backend) and is not counted.
  statementTimeoutMs?: number;
}

// The next window's manifest, read ahead while a full window's rows move (TransferService.startAhead): for the window
// low/high, the schema hash and the algorithm in `key`, finished at `at` (epoch ms).
interface Ahead {
  key: string;
  manifest: Manifest;
  at: number;
}

// The transfer's windows are of another kind than its last committed one (its configuration's boundary.kind changed):
// the next window's low would be that window's high read as a bound of the new kind (a key as a change version, or
// the reverse), so rows would be skipped or sent again. A changes transfer is re-baselined (its mirror starts the
// chain of change windows after any window); any other starts a new chain under a new name.
function kindChanged(t: TransferConfig, last: BatchRecord): TransferError {
  return new TransferError(
    'invalid_state',
    `transfer ${t.name}: its last committed window (${last.boundaryLow ?? ''}, ${last.boundaryHigh}] is a ${last.boundaryKind} window, but it now reads ${t.boundary.kind} windows: its bounds cannot be read as ${t.boundary.kind} bounds; ${t.boundary.kind === 'changes' ? 're-baseline it' : 'configure it under a new name (a new window chain)'}`,
    { recorded: last.boundaryKind, current: t.boundary.kind },
  );
}

// Nor can it change column: its bounds are values of the column it was read over (the batch's recorded schema says
// which), and read as bounds of another column they select other rows -- the next windows would skip or repeat
// rows. null: the same column, or not known (a batch journalled before the column was recorded).
function boundaryColumnMoved(t: TransferConfig, b: BatchRecord): TransferError | null {
  const recorded = b.boundaryKind === t.boundary.kind ? boundaryColumnChanged(b.schemaColumns, t) : null;
  if (recorded === null) return null;
  return new TransferError(
    'invalid_state',
    `transfer ${t.name}: its committed window (${b.boundaryLow ?? ''}, ${b.boundaryHigh}] is over boundary.column ${recorded || '(another column: not in its recorded schema)'}, but boundary.column is now ${t.boundary.column}: its bounds cannot be read as values of ${t.boundary.column} (windows would skip or repeat rows); ${recorded ? `set boundary.column back to ${recorded}, or configure` : 'set boundary.column back, or configure'} the transfer under a new name (a new window chain)${boundaryDerivation(b.batchId, b.schemaColumns)}`,
    { field: 'boundary.column', recorded: recorded || null, current: t.boundary.column },
  );
}

// A replay batch of a transfer whose key comparison deletes (keyCompare 'apply'): its apply is ordered with the
// comparison's deletes (TransferService.replayUnderWay, keysDeletedSince).
function comparesUnder(t: TransferConfig, b: BatchRecord): boolean {
  return t.keyCompare === 'apply' && b.transferName !== t.name && baseTransferName(b.transferName) === t.name;
}

// The committed windows (in seq order) a replay of (low, high] covers: from the one starting at low to the one
// ending at high (a replay's range always starts and ends at committed bounds, replay()). A bound not among the
// listed windows (the list holds the newest 1000) is taken as past that end of the list: covered up to the end.
function coveredWindows(committed: readonly BatchRecord[], low: string | null, high: string): Set<string> {
  const found = committed.findIndex((c) => c.boundaryLow === low);
  const first = found < 0 ? 0 : found;
  const end = committed.findIndex((c, i) => i >= first && c.boundaryHigh === high);
  if (found < 0 && end < 0) return new Set(); // neither bound listed: a range older than the listed windows
  return new Set(committed.slice(first, end < 0 ? committed.length : end + 1).map((c) => c.batchId));
}

// A manifest read ahead is used only this long after it was read: older, the source had time to change (a changed
// window is still caught by the target's check, but then costs a failed attempt).
const AHEAD_MAX_AGE_MS = 60_000;

const aheadKey = (w: Window, schemaHash: string, algorithm: string) =>
  JSON.stringify([w.kind, w.low, w.high, schemaHash, algorithm]);

type ReadManifest = Manifest & { ahead?: true };

// A bulk feed whose `sent` resolves once the source's stream has ended (its last row read) or closed, or `done` is
// called (the apply returned or threw, whether or not the stream was ever opened): never left pending.
function rowsSent(feed: Extract<RowFeed, { kind: 'bulk' }>): { feed: RowFeed; sent: Promise<void>; done: () => void } {
  let done!: () => void;
  const sent = new Promise<void>((resolve) => (done = resolve));
  const open: typeof feed.open = async (encoding, framed) => {
    const s = await feed.open(encoding, framed);
    s.stream.once('end', done);
    s.stream.once('close', done);
    return s;
  };
  return { feed: { ...feed, open }, sent, done };
}

export class TransferService {
  private readonly journal: TransferJournal;
  private readonly transfers: Map<string, TransferConfig>;
  private readonly connectFn: TransferServiceDeps['connect'];
  private readonly log: NonNullable<TransferServiceDeps['log']>;
  private readonly newId: () => string;
  private readonly adapters = new Map<string, Promise<Adapters>>();
  private readonly prepared = new Set<string>();
  private readonly committedViews = new WeakSet<BatchView>(); // committedByCall
  private readonly applyTimeoutLimit: number;
  private readonly statementTimeoutMs: number;
  // The transfer of each batch this service created lately (a batch's transfer never changes): its stage reads the
  // source's schema beside the journal's record instead of after it. Bounded: the oldest are dropped.
  private readonly batchTransfers = new Map<string, string>();
  private readonly onClose: (() => Promise<void>) | undefined;
  private readonly directApply: boolean;
  private readonly readAhead: boolean | 'afterCopy';
  private readonly moves: BatchMoves;
  private readonly reconciler: Reconciler;
  // The last rows-behind count per transfer, with the bound and cap it was counted for (rowsBehind's reuse).
  // The next window's manifest per transfer, read while a full window's rows move (startAhead).
  private readonly ahead = new Map<string, Promise<Ahead | null>>();
  // The window the last createBatch of each transfer chose here (its high bound and the schema it read): the next
  // createBatch asks the source for the window after it beside its journal reads (earlyWindow).
  private readonly chosen = new Map<string, { high: string; schema: SourceSchema }>();
  private readonly behindCounts = new Map<string, { low: string | null; cap: number; at: number; value: RowsBehind }>();
  // Replays of one transfer, one at a time in this process (replay's check for an open replay, then its insert; the
  // journal's insert decides across processes).
  private readonly replayTurns = new Map<string, Promise<unknown>>();
  // purgeTerminalStaging's cursor per transfer: the last registry id its previous pass read (absent: from the first).
  private readonly stagingCursors = new Map<string, string>();

  constructor(deps: TransferServiceDeps) {
    this.journal = deps.journal;
    this.transfers = new Map(deps.transfers.map((t) => [t.name, t]));
    this.connectFn = deps.connect;
    this.log = deps.log ?? (() => undefined);
    this.newId = deps.newBatchId ?? randomUUID;
    this.onClose = deps.onClose;
    this.directApply = deps.directApply ?? false;
    this.readAhead = deps.readAhead ?? DEFAULT_READ_AHEAD;
    this.applyTimeoutLimit = deps.applyTimeoutLimit ?? 3;
    this.statementTimeoutMs = deps.statementTimeoutMs ?? DEFAULT_TRANSFER_TIMEOUTS.statementMs;
    this.moves = new BatchMoves(this.journal, this.log);
    this.reconciler = new Reconciler({
      journal: this.journal,
      moves: this.moves,
      log: this.log,
      transfer: (name) => this.transfer(name),
      findTransfer: (name) => this.transfers.get(name),
      connect: (t) => this.connect(t),
    });
  }

  listTransfers(): TransferSummary[] {
    return [...this.transfers.values()].map(transferSummary);
  }

  // Operator action: no new batch for this transfer (timer, catch-up, start) and its queue steps leave its open
  // batch where it is, until resumeTransfer. Persisted in the journal; an apply already running finishes.
  async pauseTransfer(name: string, reason: string | null, by: string | null): Promise<TransferControl> {
    const t = this.transfer(name);
    const c = await this.journal.setPaused(t.name, true, reason, by);
    this.log('transfer.paused', { transfer: t.name, by, reason });
    return c;
  }

  async resumeTransfer(name: string, by: string | null): Promise<TransferControl> {
    const t = this.transfer(name);
    const c = await this.journal.setPaused(t.name, false, null, by);
    this.log('transfer.resumed', { transfer: t.name, by });
    return c;
  }

  async pausedTransfers(): Promise<Set<string>> {
    return new Set((await this.journal.controls()).filter((c) => c.paused).map((c) => c.transferName));
  }

  async isPaused(name: string): Promise<boolean> {
    return (await this.journal.controls()).some((c) => c.transferName === name && c.paused);
  }

  // Rows behind: rows at the source past the last committed high bound, under the same conditions as the next
  // window (open batch included), counted up to `cap` by the source (a bounded index walk); null when the source
  // cannot count. A count younger than maxAgeMs for the same committed bound is reused (a console polling every
  // few seconds does not walk the source's index each time).
  async rowsBehind(name: string, cap: number, maxAgeMs = 0, now = Date.now()): Promise<RowsBehind | null> {
    const t = this.transfer(name);
    if (cap <= 0) return null;
    const { lastCommitted } = await this.journal.lastForTransfer(t.name);
    return this.countBehind(t, lastCommitted?.boundaryHigh ?? null, cap, maxAgeMs, now);
  }

  private async countBehind(
    t: TransferConfig,
    low: string | null,
    cap: number,
    maxAgeMs: number,
    now: number,
  ): Promise<RowsBehind | null> {
    const cached = this.behindCounts.get(t.name);
    if (cached && cached.low === low && cached.cap === cap && now - cached.at < maxAgeMs) return cached.value;
    const a = await this.connect(t);
    if (!a.source.rowsAfter) return null;
    const rows = await a.source.rowsAfter(low, cap);
    const value: RowsBehind = { rows, capped: rows >= cap, countedAt: new Date(now).toISOString() };
    this.behindCounts.set(t.name, { low, cap, at: now, value });
    return value;
  }

  // The journal server's clock (epoch ms), the clock of every batch stamp: a host's may be off it by hours, so the
  // ages decided on or reported (the timer's stalled test and schedule, secondsSinceCommit, the freshness gauge) are
  // measured against this, never against Date.now() (test/functions/transferClockSkew.test.ts).
  async journalNow(): Promise<number> {
    return (await this.journal.now()).getTime();
  }

  // Every configured transfer with its control, open batch and last commit (one journal read per transfer), and,
  // when rowsBehindCap > 0, its rows behind (reused for rowsBehindMaxAgeMs; a failed count is null, never an error;
  // a count slower than rowsBehindWaitMs is null in this answer and goes on, so the next one may reuse it).
  async transferStates(
    now = Date.now(),
    opts: { rowsBehindCap?: number; rowsBehindMaxAgeMs?: number; rowsBehindWaitMs?: number } = {},
  ): Promise<TransferState[]> {
    const controls = new Map((await this.journal.controls()).map((c) => [c.transferName, c]));
    // secondsSinceCommit on the journal's clock, the clock of committedAt (`now` is the host's: the rows-behind cache).
    const journalNow = await this.journalNow();
    const out: TransferState[] = [];
    for (const t of this.transfers.values()) {
      const c = controls.get(t.name);
      const { open, lastCommitted: last } = await this.journal.lastForTransfer(t.name);
      const openView = open ? toView(open) : null;
      const cap = opts.rowsBehindCap ?? 0;
      let rowsBehind: RowsBehind | null = null;
      if (cap > 0) {
        const counting = this.countBehind(t, last?.boundaryHigh ?? null, cap, opts.rowsBehindMaxAgeMs ?? 0, now).catch(
          (err: unknown) => {
            this.log('transfer.rows_behind_error', { transfer: t.name, message: describeError(err).message });
            return null;
          },
        );
        let timer: NodeJS.Timeout | undefined;
        rowsBehind =
          opts.rowsBehindWaitMs === undefined
            ? await counting
            : await Promise.race([
                counting,
                new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), opts.rowsBehindWaitMs))),
              ]);
        clearTimeout(timer);
      }
      out.push({
        name: t.name,
        paused: c?.paused ?? false,
        pausedReason: c?.paused ? c.reason : null,
        changedBy: c?.changedBy ?? null,
        changedAt: c ? c.changedAt.toISOString() : null,
        openBatch: openView
          ? {
              batchId: openView.batchId,
              state: openView.state,
              status: openView.status,
              retryable: openView.retryable,
            }
          : null,
        lastCommitted: last
          ? {
              batchId: last.batchId,
              high: last.boundaryHigh,
              rows: last.appliedCount,
              committedAt: iso(last.committedAt),
            }
          : null,
        secondsSinceCommit: last?.committedAt
          ? Math.max(0, Math.round((journalNow - last.committedAt.getTime()) / 1000))
          : null,
        rowsBehind,
      });
    }
    return out;
  }

  private transfer(name: string): TransferConfig {
    const t = this.transfers.get(name);
    if (!t) throw new TransferError('unknown_transfer', `no transfer named ${name} is configured`);
    return t;
  }

  private async connect(t: TransferConfig): Promise<Adapters> {
    let p = this.adapters.get(t.name);
    if (!p) {
      // Declared value policies convert the source's rows before both checksums (policies.ts).
      p = Promise.resolve(this.connectFn(t)).then((a) => ({ ...a, source: withValuePolicies(t, a.source) }));
      this.adapters.set(t.name, p);
      p.catch(() => this.adapters.delete(t.name));
    }
    return p;
  }

  private async readSchemaOf(t: TransferConfig): Promise<SourceSchema> {
    return (await this.connect(t)).source.readSchema();
  }

  private rememberTransfer(batchId: string, transferName: string): void {
    this.batchTransfers.set(batchId, transferName);
    if (this.batchTransfers.size > 256) this.batchTransfers.delete(this.batchTransfers.keys().next().value!);
  }

  // After a failed stage or apply: what prepare read of the target (its column types, which decide the COPY format,
  // and the staging table made from them) may be what the failure was about -- the target table altered since --
  // so the next run of the transfer reads and checks it again (test/transfer/targetAltered.test.ts).
  private forgetPrepared(transferName: string): void {
    for (const key of this.prepared) if (key.startsWith(`${transferName}:`)) this.prepared.delete(key);
  }

  private async prepare(t: TransferConfig, a: Adapters, schema: SourceSchema): Promise<void> {
    const key = `${t.name}:${schema.hash}`;
    if (this.prepared.has(key)) return;
    await a.target.prepare(schema);
    this.prepared.add(key);
  }

  // Extract: the next window after the last committed boundary, the recorded schema and the manifest (count and
  // checksum), all in the journal before any row moves. Throws 'nothing_to_transfer' when there are no new rows.
  async createBatch(transferName: string): Promise<BatchView> {
    const t = this.transfer(transferName);
    // Two reads of the journal, neither depending on the other: sent together (one round trip of wait a batch
    // instead of two); the pause is still decided first.
    const last = this.journal.lastForTransfer(t.name);
    last.catch(() => undefined); // awaited below unless the pause check throws first
    // The source's schema too (the source, not the journal): read beside them, checked after them as before.
    const schemaRead = this.connect(t).then(async (a) => ({ a, schema: await a.source.readSchema() }));
    schemaRead.catch(() => undefined);
    // A manifest read ahead serves this attempt or none (whatever it ends in: drift, nothing new, an open batch).
    const ahead = this.ahead.get(t.name);
    this.ahead.delete(t.name);
    const early = this.earlyWindow(t);
    if (await this.isPaused(t.name))
      throw new TransferError('transfer_paused', `transfer ${t.name} is paused; resume it first`);
    const { open, lastCommitted } = await last;
    if (open) {
      throw new TransferError(
        'open_batch_exists',
        `transfer ${t.name} already has an open batch ${open.batchId} (${open.state}); run, reconcile or fail it first`,
        { batchId: open.batchId },
      );
    }
    if (lastCommitted && lastCommitted.boundaryKind !== t.boundary.kind) throw kindChanged(t, lastCommitted);
    const moved = lastCommitted && boundaryColumnMoved(t, lastCommitted);
    if (moved) throw moved;
    const { a, schema } = await schemaRead;
    if (lastCommitted && schema.hash !== lastCommitted.schemaHash && schema.hash !== t.acceptSchemaHash) {
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: the source schema no longer matches the recorded schema ${lastCommitted.schemaHash.slice(0, 12)} (${describeSchemaDiff(lastCommitted.schemaColumns, schema.columns)}); review the change, then set acceptSchemaHash to ${schema.hash} for this transfer`,
        { recorded: lastCommitted.schemaHash, current: schema.hash },
      );
    }
    await this.prepare(t, a, schema);
    const low = lastCommitted?.boundaryHigh ?? null;
    const window =
      early && low !== null && early.low === low && early.schemaHash === schema.hash
        ? await early.window
        : await a.source.nextWindow(low, t.batchSize, { ...baselineOpts(a), schema });
    if (!window)
      throw new TransferError(
        'nothing_to_transfer',
        `transfer ${t.name}: no rows after ${lastCommitted?.boundaryHigh ?? 'the beginning'}`,
      );
    // The manifest is read from the source beside the batch's insert into the journal (two servers; the insert
    // is one round trip of wait a batch fewer this way) and recorded, as before, only once the batch exists. A
    // window another run took meanwhile (window_taken, open_batch_exists) leaves that read unused.
    const manifestRead = this.readManifest(a, window, schema, true, ahead);
    manifestRead.catch(() => undefined); // awaited below unless the insert throws first
    const rec = await this.journal.insertBatch({
      batchId: this.newId(),
      transferName: t.name,
      boundaryKind: window.kind,
      boundaryLow: window.low,
      boundaryHigh: window.high,
      schemaHash: schema.hash,
      schemaColumns: schema.columns,
    });
    this.log('transfer.batch.created', { batchId: rec.batchId, transfer: t.name, low: window.low, high: window.high });
    this.rememberTransfer(rec.batchId, t.name);
    this.chosen.set(t.name, { high: window.high, schema });
    try {
      const m = await manifestRead;
      return toView(m && rec.rowCount === null ? await this.storeManifest(rec, m) : rec);
    } catch (err) {
      // The batch exists and holds its window; running it (same id) records the manifest first.
      await this.moves.noteError(rec, 'manifest_error', err, { fenced: true, whileOpen: true });
      return toView(await this.moves.load(rec.batchId));
    }
  }

  // The window after the one this service's last createBatch of the transfer chose, asked of the source beside the
  // journal's reads and the schema's (one round trip of wait a batch fewer in a catch-up chain): the question
  // nextWindow would be asked after them (the same low, the same schema's boundary type), a journal round trip
  // earlier. Used only when the journal's last committed high is exactly that low and the schema read now has the
  // same hash, else the window is asked after the journal as before. Not for change windows (their windows also
  // depend on the baseline state). Asked even when the call then finds the transfer paused or a batch open (one
  // bounded read of the boundary's index); an error is thrown only where the answer is used.
  private earlyWindow(t: TransferConfig): { low: string; schemaHash: string; window: Promise<Window | null> } | null {
    const c = this.chosen.get(t.name);
    if (!c || carriesChanges(t)) return null;
    const window = this.connect(t).then((a) =>
      a.source.nextWindow(c.high, t.batchSize, { ...baselineOpts(a), schema: c.schema }),
    );
    window.catch(() => undefined); // awaited only when used
    return { low: c.high, schemaHash: c.schema.hash, window };
  }

  // Operator action: send a range of committed windows again, from the source as it is now (e.g. after the target
  // table was truncated or a mapping fixed). The range must start at a committed batch's low bound and end at one's
  // high bound, and hold at most batchSize committed rows. The replay is one new batch (its own id, manifest, staging
  // and completion row, so every guarantee of a batch holds) in a chain of its own (newChainName); the target merges
  // by key, so rows already there are updated. preview: the plan only, nothing written.
  async replay(
    transferName: string,
    low: string | null,
    high: string,
    preview: boolean,
  ): Promise<{ plan: ReplayPlan; batch: BatchView | null }> {
    const t = this.transfer(transferName);
    if (carriesChanges(t))
      throw new TransferError(
        'invalid_range',
        `transfer ${t.name} reads change windows: a committed version range cannot be read again as it was (only each key's latest change is kept); re-baseline the transfer instead`,
        { field: 'low' },
      );
    const committed = (await this.journal.list({ transfer: t.name, state: 'committed', limit: 1000 })).reverse();
    const first = committed.findIndex((b) => b.boundaryLow === low);
    if (first < 0)
      throw new TransferError(
        'invalid_range',
        `transfer ${t.name}: no committed batch starts at ${low ?? 'the beginning'} (among its last 1000 committed batches)`,
        { field: 'low' },
      );
    const last = committed.findIndex((b, i) => i >= first && b.boundaryHigh === high);
    if (last < 0)
      throw new TransferError(
        'invalid_range',
        `transfer ${t.name}: no committed batch after ${low ?? 'the beginning'} ends at ${high}`,
        {
          field: 'high',
        },
      );
    const covered = committed.slice(first, last + 1);
    for (const b of covered) {
      const moved = boundaryColumnMoved(t, b);
      if (moved) throw moved;
    }
    const rows = covered.reduce((n, b) => n + (b.appliedCount ?? b.rowCount ?? 0), 0);
    if (rows > t.batchSize)
      throw new TransferError(
        'invalid_range',
        `transfer ${t.name}: the range holds ${rows} committed rows, more than batchSize ${t.batchSize}; replay it in parts`,
        { field: 'high' },
      );
    const plan: ReplayPlan = {
      transfer: t.name,
      window: { kind: covered[0]!.boundaryKind, low, high },
      batches: covered.map((b) => ({
        batchId: b.batchId,
        low: b.boundaryLow,
        high: b.boundaryHigh,
        rows: b.appliedCount,
      })),
      rows,
    };
    if (preview) return { plan, batch: null };
    return this.inTurn(this.replayTurns, t.name, () => this.insertReplay(t, low, high, covered, plan));
  }

  // Runs fn after every earlier call of the same key in this process has settled.
  private async inTurn<T>(turns: Map<string, Promise<unknown>>, key: string, fn: () => Promise<T>): Promise<T> {
    const run = (turns.get(key) ?? Promise.resolve()).then(fn, fn);
    const settled = run.catch(() => undefined);
    turns.set(key, settled);
    try {
      return await run;
    } finally {
      if (turns.get(key) === settled) turns.delete(key);
    }
  }

  // A replay batch, unless one of the same range is open: each replay is a chain of its own (REPLAY_MARK), so the
  // journal's one-open-batch index does not stop a second one. The journal's insert does, under the transfer's
  // lock (sql/README.md "Lock order"): it refuses a replay of a range a replay holds open ('open_batch_exists') and
  // any batch of a paused transfer ('transfer_paused'), so two instances replaying the same range at once create one
  // batch, and a pause that returned is never followed by a new batch. The checks here answer first (and calls in
  // this process take turns, inTurn) so that the common refusal reads neither the source nor the target.
  private async insertReplay(
    t: TransferConfig,
    low: string | null,
    high: string,
    covered: BatchRecord[],
    plan: ReplayPlan,
  ): Promise<{ plan: ReplayPlan; batch: BatchView | null }> {
    for (const state of OPEN_STATES) {
      const open = (await this.journal.list({ state, limit: 1000 })).find(
        (b) =>
          b.transferName !== t.name &&
          baseTransferName(b.transferName) === t.name &&
          b.boundaryLow === low &&
          b.boundaryHigh === high,
      );
      if (open)
        throw new TransferError(
          'open_batch_exists',
          `transfer ${t.name}: a replay of (${low ?? ''}, ${high}] is open already: batch ${open.batchId} (${open.state}); watch it, or abandon it first`,
          { batchId: open.batchId },
        );
    }
    if (await this.isPaused(t.name))
      throw new TransferError('transfer_paused', `transfer ${t.name} is paused; resume it first`);
    const a = await this.connect(t);
    const schema = await a.source.readSchema();
    const recorded = covered[covered.length - 1]!;
    if (schema.hash !== recorded.schemaHash && schema.hash !== t.acceptSchemaHash)
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: the source schema no longer matches the one the range was committed with (${describeSchemaDiff(recorded.schemaColumns, schema.columns)})`,
        { recorded: recorded.schemaHash, current: schema.hash },
      );
    await this.prepare(t, a, schema);
    const rec = await this.journal.insertBatch({
      batchId: this.newId(),
      transferName: newChainName(t.name), // named by the journal (chains.ts)
      boundaryKind: recorded.boundaryKind,
      boundaryLow: low,
      boundaryHigh: high,
      schemaHash: schema.hash,
      schemaColumns: schema.columns,
    });
    this.log('transfer.batch.replay', { batchId: rec.batchId, transfer: t.name, low, high });
    try {
      return { plan, batch: toView(await this.recordManifest(rec, t, a, schema, true)) };
    } catch (err) {
      await this.moves.noteError(rec, 'manifest_error', err, { fenced: true, whileOpen: true });
      return { plan, batch: toView(await this.moves.load(rec.batchId)) };
    }
  }

  // Operator action for a changes transfer whose next window expired at the source ('changes_expired': its low is
  // older than the min valid version): a baseline after the last committed window -- every row of the table as it
  // is now, at a version captured before it, applied as a mirror (target rows whose key is not in the batch are
  // deleted in the same transaction). This creates its first window (the whole baseline, or its first key window
  // when it runs in key windows: the next ones chain like any window). Its low is REBASELINE_MARK + the last
  // committed high, so it chains like any window.
  async rebaseline(transferName: string): Promise<BatchView> {
    const t = this.transfer(transferName);
    if (!carriesChanges(t))
      throw new TransferError(
        'invalid_state',
        `transfer ${t.name} reads ${t.boundary.kind} windows; only a changes transfer is re-baselined`,
      );
    if (await this.isPaused(t.name))
      throw new TransferError('transfer_paused', `transfer ${t.name} is paused; resume it first`);
    const { open, lastCommitted } = await this.journal.lastForTransfer(t.name);
    if (open)
      throw new TransferError(
        'open_batch_exists',
        `transfer ${t.name} already has an open batch ${open.batchId} (${open.state}); run, reconcile or abandon it first`,
        { batchId: open.batchId },
      );
    if (!lastCommitted) return this.createBatch(t.name); // the first window is a baseline anyway
    const a = await this.connect(t);
    const schema = await a.source.readSchema();
    if (schema.hash !== lastCommitted.schemaHash && schema.hash !== t.acceptSchemaHash)
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: the source schema no longer matches the recorded schema ${lastCommitted.schemaHash.slice(0, 12)} (${describeSchemaDiff(lastCommitted.schemaColumns, schema.columns)}); review the change, then set acceptSchemaHash to ${schema.hash} for this transfer`,
        { recorded: lastCommitted.schemaHash, current: schema.hash },
      );
    await this.prepare(t, a, schema);
    const baseline = await a.source.nextWindow(null, t.batchSize, baselineOpts(a));
    // (A last window of another kind -- the transfer became a changes transfer -- has no version: any baseline follows.)
    const lastVersion = lastCommitted.boundaryKind === 'changes' ? versionOfHigh(lastCommitted.boundaryHigh) : null;
    if (!baseline || (lastVersion !== null && versionOfHigh(baseline.high) <= lastVersion))
      throw new TransferError(
        'nothing_to_transfer',
        `transfer ${t.name}: the source's version has not moved past the last committed window (${lastCommitted.boundaryHigh}); nothing to re-baseline`,
      );
    const rec = await this.journal.insertBatch({
      batchId: this.newId(),
      transferName: t.name,
      boundaryKind: baseline.kind,
      boundaryLow: `${REBASELINE_MARK}${lastCommitted.boundaryHigh}`,
      boundaryHigh: baseline.high,
      schemaHash: schema.hash,
      schemaColumns: schema.columns,
    });
    // Its low is not the last committed high itself (the mark), so the journal's window indexes do not refuse it
    // when another instance created and committed the next window after the read above: read again now that this
    // batch exists (while it is open no other batch of the transfer can be created, so none can commit after this
    // read either), and release it when the chain moved on -- else two committed windows would follow one.
    const now = await this.journal.lastForTransfer(t.name);
    if (now.lastCommitted?.batchId !== lastCommitted.batchId) {
      const err = new TransferError(
        'window_taken',
        `transfer ${t.name}: window ${now.lastCommitted?.batchId ?? '?'} was committed after the last committed window ${lastCommitted.batchId} while this re-baseline was prepared; re-baseline again to follow it`,
        { batchId: now.lastCommitted?.batchId ?? null },
      );
      await this.reconciler.release(rec, err, ['extracting']);
      throw err;
    }
    this.log('transfer.batch.rebaseline', { batchId: rec.batchId, transfer: t.name, high: baseline.high });
    try {
      return toView(await this.recordManifest(rec, t, a, schema, true));
    } catch (err) {
      await this.moves.noteError(rec, 'manifest_error', err, { fenced: true, whileOpen: true });
      return toView(await this.moves.load(rec.batchId));
    }
  }

  // The re-baseline's preview: what it would do, and whether it would be refused now.
  async rebaselinePlan(transferName: string): Promise<RebaselinePlan> {
    const t = this.transfer(transferName);
    if (!carriesChanges(t))
      throw new TransferError(
        'invalid_state',
        `transfer ${t.name} reads ${t.boundary.kind} windows; only a changes transfer is re-baselined`,
      );
    const paused = await this.isPaused(t.name);
    const { open, lastCommitted } = await this.journal.lastForTransfer(t.name);
    const a = await this.connect(t);
    // As nextWindow decides: both sides able to, and an integer first key column (the source's schema, read now).
    const windowed =
      a.target.mirrorsKeyRanges === true &&
      a.source.windowsBaselines === true &&
      (await a.source.readSchema()).columns.find((c) => c.name === t.keyColumns[0])?.logical === 'int';
    const after = lastCommitted?.boundaryHigh ?? null;
    const how = windowed
      ? `in key windows of up to ${t.batchSize} rows, chained by catch-up`
      : 'as one batch (the whole table)';
    const effect = paused
      ? `Refused: transfer ${t.name} is paused; resume it first.`
      : open
        ? `Refused: transfer ${t.name} has an open batch ${open.batchId} (${open.state}); run, reconcile or abandon it first.`
        : `Every row of ${t.source.table} as it is now is sent again ${how}, at a source version captured before it, and applied as a mirror: target rows whose key is no longer at the source are deleted. ${after === null ? 'Nothing is committed yet: this is the first baseline.' : `It follows the last committed window (up to ${after}).`} Change windows then go on from the captured version.`;
    return {
      transfer: t.name,
      possible: !paused && !open,
      after,
      openBatch: open ? { batchId: open.batchId, state: open.state } : null,
      paused,
      windowed,
      effect,
    };
  }

  // Deletes for a transfer without change tracking (keyCompare, docs/transfer.md "Deletes"): for each of its last
  // `windows` committed key windows, the keys the target holds in the window that the source no longer has are
  // reported, and with apply (only when the transfer declares keyCompare 'apply') deleted on the target, one
  // statement per window. A key the source no longer has in a committed window was deleted there: key windows only
  // go forward, so a later insert of that key would not be carried either.
  async compareKeys(transferName: string, opts: { apply: boolean; windows?: number }): Promise<KeyCompareReport> {
    const t = this.transfer(transferName);
    if (t.keyCompare === 'off')
      throw new TransferError(
        'invalid_state',
        `transfer ${t.name} does not compare key sets: set keyCompare to report or apply (key windows only)`,
      );
    if (opts.apply && t.keyCompare !== 'apply')
      throw new TransferError(
        'invalid_state',
        `transfer ${t.name} declares keyCompare ${t.keyCompare}: deletes are reported, not applied (set keyCompare to apply)`,
      );
    const a = await this.connect(t);
    const readKeys = a.source.windowKeys?.bind(a.source);
    const targetKeys = a.target.windowKeys?.bind(a.target);
    const deleteKeys = a.target.deleteKeys?.bind(a.target);
    if (!readKeys || !targetKeys || (opts.apply && !deleteKeys))
      throw new TransferError(
        'target_incompatible',
        `transfer ${t.name}: a ${a.source.engine} source and a ${a.target.engine} target cannot compare key sets yet`,
      );
    const committed = await this.journal.list({ transfer: t.name, state: 'committed', limit: opts.windows ?? 1000 });
    const run = randomUUID(); // this comparison, in its events (keys_compare, keys_compare_deferred)
    const report: KeyCompareReport = {
      transfer: t.name,
      applied: opts.apply,
      windows: [],
      goneAtSource: 0,
      deleted: 0,
    };
    for (const b of committed.reverse()) {
      const schema = { columns: b.schemaColumns, hash: b.schemaHash };
      await this.prepare(t, a, schema);
      const w: Window = { kind: b.boundaryKind, low: b.boundaryLow, high: b.boundaryHigh };
      // The target's keys first, then the source's: a key the target holds was read at the source before the
      // target had it, so a replay of this window (another instance, or the operator) landing between the two reads
      // cannot make a row it just brought look gone at the source (read together, or the source first, it could, and
      // apply deleted it). What the source deletes after its read is found by the next comparison.
      const tgt = await targetKeys(w, schema);
      const src = await readKeys(w, schema);
      const present = new Set(src.map((k) => JSON.stringify(k)));
      const gone = tgt.filter((k) => !present.has(JSON.stringify(k)));
      let deleted = 0;
      let deferredBy: string | undefined;
      if (opts.apply && gone.length > 0) {
        deferredBy = await this.replayUnderWay(t, b, run, gone.length);
        if (deferredBy === undefined) deleted = await deleteKeys!(w, schema, gone);
      }
      report.windows.push({
        batchId: b.batchId,
        low: b.boundaryLow,
        high: b.boundaryHigh,
        sourceKeys: src.length,
        targetKeys: tgt.length,
        goneAtSource: gone.length,
        sample: gone.slice(0, 10).map((k) => k.join(',')),
        deleted,
        ...(deferredBy !== undefined ? { deferredBy } : {}),
      });
      report.goneAtSource += gone.length;
      report.deleted += deleted;
    }
    this.log('transfer.keys.compared', {
      transfer: t.name,
      windows: report.windows.length,
      goneAtSource: report.goneAtSource,
      deleted: report.deleted,
    });
    return report;
  }

  // A key comparison's deletes and a replay's apply of the same range are ordered through the journal (docs/transfer.md,
  // "Deletes"): a replay stages its range as the source is then, so one staged before the source deleted a key and
  // applied after the comparison deleted it on the target brings the row back. Each side first writes, then reads
  // the other's record: the comparison notes keys_compare on the committed window (an event, a number the journal
  // issues) and then looks for a replay of the window whose apply is under way; the replay's apply counts its
  // attempt (start_apply) and then looks for keys_compare events newer than its own creation (keysDeletedSince).
  // Whichever writes second sees the first: the comparison leaves the window alone for now (the next comparison
  // deletes the key once the replay has ended), or the replay fails with the reason, to be replayed again from the
  // source as it is now. A replay created after the comparison's note read the source after the comparison did, so
  // it holds no key the comparison found gone. Returns the replay's id when the window is left alone.
  private async replayUnderWay(
    t: TransferConfig,
    b: BatchRecord,
    run: string,
    gone: number,
  ): Promise<string | undefined> {
    await this.journal.note(b.batchId, 'keys_compare', {
      compare: run,
      low: b.boundaryLow,
      high: b.boundaryHigh,
      gone,
    });
    const underWay: BatchRecord[] = [];
    for (const state of ['applying', 'unresolved'] as const)
      for (const r of await this.journal.list({ state, limit: 1000 }))
        if (r.transferName !== t.name && baseTransferName(r.transferName) === t.name) underWay.push(r);
    if (underWay.length === 0) return undefined;
    // Which windows each covers: read after the note too, so a window committed since the comparison began is there.
    const committed = (await this.journal.list({ transfer: t.name, state: 'committed', limit: 1000 })).reverse();
    const r = underWay.find((x) => coveredWindows(committed, x.boundaryLow, x.boundaryHigh).has(b.batchId));
    if (!r) return undefined;
    await this.journal.note(b.batchId, 'keys_compare_deferred', { compare: run, replay: r.batchId });
    return r.batchId;
  }

  // The other side (replayUnderWay): the error that fails replay `r` when a comparison deleted keys in its range after
  // it was created (a keys_compare event newer than its 'created' one, not left alone by that comparison); null if
  // none did.
  private async keysDeletedSince(t: TransferConfig, r: BatchRecord): Promise<TransferError | null> {
    const created = (await this.journal.events(r.batchId)).find((e) => e.event === 'created')?.eventId ?? 0;
    const committed = (await this.journal.list({ transfer: t.name, state: 'committed', limit: 1000 })).reverse();
    for (const b of committed.filter((c) => coveredWindows(committed, r.boundaryLow, r.boundaryHigh).has(c.batchId))) {
      const events = await this.journal.events(b.batchId);
      const deferred = new Set(events.filter((e) => e.event === 'keys_compare_deferred').map((e) => e.detail?.compare));
      const newer = events.find(
        (e) => e.event === 'keys_compare' && e.eventId > created && !deferred.has(e.detail?.compare),
      );
      if (newer)
        return new TransferError(
          'invalid_state',
          `replay batch ${r.batchId}: a key comparison deleted keys in its range (window (${b.boundaryLow ?? ''}, ${b.boundaryHigh}], ${newer.at.toISOString()}) after the replay read it from the source; its staged rows may hold rows the source deleted, which the apply would bring back: nothing was applied, replay the range again`,
          { window: b.batchId, compare: newer.detail?.compare ?? null },
        );
    }
    return null;
  }

  // Like createBatch, but null instead of 'nothing_to_transfer' / 'open_batch_exists' (for schedules).
  async tryCreateBatch(transferName: string): Promise<BatchView | null> {
    try {
      return await this.createBatch(transferName);
    } catch (err) {
      if (
        isTransferError(err, 'nothing_to_transfer') ||
        isTransferError(err, 'open_batch_exists') ||
        isTransferError(err, 'window_taken') ||
        isTransferError(err, 'transfer_paused')
      )
        return null;
      throw err;
    }
  }

  // deferrable (a new batch): with one source read (readsOnce) the manifest is left to the stage, which computes it
  // from the rows it stages; the batch stays 'extracting' without a manifest until then.
  private async recordManifest(
    rec: BatchRecord,
    t: TransferConfig,
    a: Adapters,
    schema: SourceSchema,
    deferrable = false,
  ): Promise<BatchRecord> {
    if (rec.rowCount !== null) return rec;
    const w: Window = { kind: rec.boundaryKind, low: rec.boundaryLow, high: rec.boundaryHigh };
    const m = await this.readManifest(a, w, schema, deferrable);
    return m ? this.storeManifest(rec, m) : rec;
  }

  // The window's manifest from the source; null when it is left to the stage (deferrable, one source read). `ahead`:
  // a manifest read ahead (startAhead), taken only for exactly this window, schema hash and algorithm, and fresh.
  private async readManifest(
    a: Adapters,
    w: Window,
    schema: SourceSchema,
    deferrable: boolean,
    ahead?: Promise<Ahead | null>,
  ): Promise<ReadManifest | null> {
    if (deferrable && (await readsOnce(a, w))) return null;
    const algorithm = await negotiateChecksum(a);
    const got = ahead ? await ahead : null;
    if (got && got.key === aheadKey(w, schema.hash, algorithm) && Date.now() - got.at <= AHEAD_MAX_AGE_MS)
      return { ...got.manifest, ahead: true };
    return a.source.manifest(w, schema, algorithm);
  }

  private async storeManifest(rec: BatchRecord, m: ReadManifest): Promise<BatchRecord> {
    const moved = await this.moves.move(rec.batchId, {
      move: 'record_manifest',
      set: { rowCount: m.rowCount, checksum: m.checksum, stamp: 'extracted_at' },
      detail: { rowCount: m.rowCount, checksum: m.checksum, ...(m.ahead ? { readAhead: true } : {}) },
    });
    return moved ?? (await this.moves.load(rec.batchId));
  }

  // Stage: rows of the window into the target's staging table, verified against the manifest before it counts.
  async stage(batchId: string): Promise<BatchView> {
    // A batch this service created: the source's schema is read beside the journal's record (two servers, one
    // round trip of wait a batch fewer), and checked against it below as before; unused unless the batch is staged.
    const known = this.batchTransfers.get(batchId);
    const early = known === undefined ? null : this.readSchemaOf(this.transfer(known));
    early?.catch(() => undefined); // awaited below only when the batch is to be staged
    let b = await this.moves.load(batchId);
    if (b.state === 'applying' || b.state === 'unresolved') {
      const r = await this.reconcile(batchId);
      if (r.state !== 'extracting') return r;
      b = await this.moves.load(batchId);
    }
    if (b.state !== 'extracting') return toView(b);
    const t = this.transfer(baseTransferName(b.transferName));
    const a = await this.connect(t);
    const started = Date.now();
    try {
      // Its bounds are of the kind it was extracted with: read as another kind's, they select other rows.
      if (b.boundaryKind !== t.boundary.kind)
        throw new TransferError(
          'schema_drift',
          `batch ${b.batchId}: its window (${b.boundaryLow ?? ''}, ${b.boundaryHigh}] is a ${b.boundaryKind} window; the transfer now reads ${t.boundary.kind} windows`,
          { recorded: b.boundaryKind, current: t.boundary.kind },
        );
      // Nor of another column's (boundaryColumnMoved): read over this one, they select other rows.
      const column = boundaryColumnChanged(b.schemaColumns, t);
      if (column !== null)
        throw new TransferError(
          'schema_drift',
          `batch ${b.batchId}: its window (${b.boundaryLow ?? ''}, ${b.boundaryHigh}] is over boundary.column ${column || '(another column)'}; the transfer now reads windows over ${t.boundary.column}${boundaryDerivation(b.batchId, b.schemaColumns)}`,
          { field: 'boundary.column', recorded: column || null, current: t.boundary.column ?? null },
        );
      const schema = early && known === t.name ? await early : await a.source.readSchema();
      if (schema.hash !== b.schemaHash) {
        throw new TransferError(
          'schema_drift',
          `batch ${b.batchId}: the source schema changed since extraction (${describeSchemaDiff(b.schemaColumns, schema.columns)})`,
          {
            recorded: b.schemaHash,
            current: schema.hash,
          },
        );
      }
      await this.prepare(t, a, schema);
      const w: Window = { kind: b.boundaryKind, low: b.boundaryLow, high: b.boundaryHigh };
      let res: StageResult;
      const oneRead = b.rowCount === null && (await readsOnce(a, w));
      let triedDirect = false;
      // A replay a key comparison may delete under is staged, then applied (apply() checks the comparisons first).
      const direct = this.directApply && !comparesUnder(t, b);
      if (oneRead && direct && a.target.applyDirectStreamed) {
        const direct = await this.applyDirectlyOnce(b, t, a, w);
        if (direct) return direct;
        // Not eligible (rows of the window exist, or the written rows did not match): nothing was written; if the
        // attempt was counted, reconcile fenced it and moved the batch back (its manifest recorded). Staged instead.
        triedDirect = true;
        b = await this.moves.load(batchId);
        if (b.state !== 'extracting') return toView(b);
      }
      if (oneRead && b.rowCount === null) {
        res = await this.stageReadOnce(b, t, a, w);
      } else {
        b = await this.recordManifest(b, t, a, schema);
        const req = stageRequest(b, t);
        let feed = negotiateFeed(a, w, req.schema, t.chunkSize);
        if (!triedDirect && direct && a.target.applyDirect && a.target.canApplyDirect?.(req, feed)) {
          const direct = await this.applyDirectly(b, t, a, req, w, feed);
          if (direct) return direct;
          // Not eligible after all (rows of the window exist on the target): nothing was written, reconcile fenced
          // the attempt and moved the batch back; it is staged and applied (canonical rows read again: the direct
          // apply took the first stream).
          b = await this.moves.load(batchId);
          if (b.state !== 'extracting') return toView(b);
          if (feed.kind === 'rows') feed = negotiateFeed(a, w, req.schema, t.chunkSize);
        }
        res = await a.target.stage(req, feed);
      }
      const moved = await this.moves.move(b.batchId, {
        move: 'stage',
        event: res.outcome,
        set: {
          stagedCount: res.rowCount,
          stagedChecksum: res.checksum,
          stamp: 'staged_at',
          lastError: null,
          lastErrorCode: null,
        },
        detail: { rowCount: res.rowCount, checksum: res.checksum, ms: Date.now() - started },
      });
      if (moved) return toView(moved);
      // Failed meanwhile (an abandon while the rows were staged): the rows this staging committed are garbage.
      const now = await this.moves.load(batchId);
      if (now.state === 'failed') await this.reconciler.purge(a, now);
      return toView(now);
    } catch (err) {
      this.forgetPrepared(t.name);
      if (err instanceof TransferError && TERMINAL_CODES.has(err.code))
        return toView(await this.reconciler.release(b, err, ['extracting']));
      // Fenced, and only while the batch is open: a run that ended it meanwhile (an abandon, a rival run's terminal
      // failure, its commit) keeps its reason; this error is kept as an event (test/transfer/staleStageError.test.ts).
      const timedOut = this.ranOutOfTime(err, started);
      await this.moves.noteError(b, 'stage_error', err, { fenced: true, whileOpen: true, timedOut });
      const terminal = timedOut ? await this.timeoutError(batchId, 'stage') : null;
      if (terminal)
        return toView(await this.reconciler.release(await this.moves.load(batchId), terminal, ['extracting']));
      throw err;
    }
  }

  // One source read (readsOnce): the window's rows stream once, into the target's staging, and are checksummed here
  // as they pass (keel-v1 over the very canonical rows the target receives). When the last row has passed, the
  // manifest (count, checksum) is recorded in the journal -- before the target may commit its staging: the target
  // awaits it after the rows and verifies the staged rows against it on its own server, as stage() does against a
  // manifest recorded before. A manifest some other run of this batch recorded meanwhile wins (never overwritten):
  // the target then verifies against that one.
  private async stageReadOnce(b: BatchRecord, t: TransferConfig, a: Adapters, w: Window): Promise<StageResult> {
    const { req, feed, manifest } = this.oneReadFeed(b, t, a, w, { ownManifest: true });
    return a.target.stageStreamed!(req, feed, manifest);
  }

  // The rows of one source read, checksummed here as they pass to the target; `manifest` resolves to the recorded
  // manifest once the last row has passed (rejects when the rows stopped before, or it could not be recorded).
  // ownManifest: it rejects (retryable, invalid_state) when the recorded manifest is another run's and not these
  // rows' -- a duplicate message's run of the batch read the window in another snapshot, around a change of the
  // source, and recorded first. Staged, these rows could only fail verification against it: manifest_mismatch,
  // terminal, failing the batch (and releasing the window) while the other run may be staging it correctly.
  private oneReadFeed(b: BatchRecord, t: TransferConfig, a: Adapters, w: Window, opts: { ownManifest?: boolean } = {}) {
    const changes = changeModeOf(t, b.boundaryLow);
    const req = {
      batchId: b.batchId,
      transfer: t.name,
      schema: { columns: b.schemaColumns, hash: b.schemaHash },
      ...(changes ? { changes } : {}),
    };
    let settle!: { resolve: (m: Manifest) => void; reject: (e: unknown) => void };
    const manifest = new Promise<Manifest>((resolve, reject) => (settle = { resolve, reject }));
    manifest.catch(() => undefined); // the target awaits it only after the rows; a failed stream ends it first
    const facts: StreamFacts = {};
    const record = (m: Manifest) => this.recordStreamedManifest(b.batchId, m);
    async function* rows(): AsyncGenerator<CanonicalRow[]> {
      const acc = new ChecksumAccumulator();
      let ended = false;
      try {
        for await (const chunk of a.source.streamRows(w, req.schema, t.chunkSize, facts)) {
          // A target that writes the rows as PostgreSQL COPY text hashes them in the same pass (copyTextHashing).
          acc.expect(chunk);
          yield chunk;
          // Hashed after the target took the chunk (its server parses it meanwhile), unless it was hashed then.
          acc.addChunk(chunk);
        }
        ended = true;
        const own = { rowCount: acc.count, checksum: acc.checksum };
        const recorded = await record(own);
        if (opts.ownManifest && (recorded.rowCount !== own.rowCount || recorded.checksum !== own.checksum))
          throw new TransferError(
            'invalid_state',
            `batch ${b.batchId}: another run of it recorded its manifest first (${recorded.rowCount} rows, ${recorded.checksum}) from other rows than this run read (${own.rowCount} rows, ${own.checksum}): the window changed between the two reads; this run stops, the batch is verified against the recorded manifest`,
            { recorded, read: own },
          );
        settle.resolve(recorded);
      } catch (err) {
        settle.reject(err);
        throw err;
      } finally {
        if (!ended) settle.reject(new Error(`batch ${b.batchId}: the rows stopped before the window ended`));
      }
    }
    return { req, feed: { kind: 'rows' as const, rows: rows(), facts }, manifest };
  }

  // Direct apply with one source read (docs/transfer.md, "Direct apply of the row path"): the rows go into the
  // table, the manifest computed from them is recorded, then the attempt is counted (start_apply, durable before the
  // target claims the batch id with it), and the target verifies and commits. null: not eligible, staged instead.
  private async applyDirectlyOnce(
    b: BatchRecord,
    t: TransferConfig,
    a: Adapters,
    w: Window,
  ): Promise<BatchView | null> {
    const { req, feed, manifest } = this.oneReadFeed(b, t, a, w);
    if (!a.target.canApplyDirect?.(req, feed)) {
      await feed.rows.return(undefined); // never started: the source's read was not opened
      return null;
    }
    let counted: BatchRecord | null = null;
    const afterRows = async () => {
      const m = await manifest;
      const claimed = await this.moves.move(b.batchId, {
        move: 'start_apply',
        from: ['extracting'],
        set: { incrementAttempts: true, stamp: 'apply_started_at', targetReconcileToken: null },
        detail: { attempt: b.attempts + 1, direct: true, oneRead: true },
      });
      if (!claimed)
        throw new TransferError(
          'invalid_state',
          `batch ${b.batchId} was moved by another run while its rows were written`,
        );
      counted = claimed;
      return { manifest: m, attempt: claimed.attempts };
    };
    let res: ApplyResult | 'not_eligible';
    const started = Date.now();
    try {
      res = await a.target.applyDirectStreamed!(req, w, feed, afterRows);
    } catch (err) {
      if (!counted) throw err; // nothing claimed: the stage's own error handling
      return this.directFailed(counted, err, started);
    }
    if (res === 'not_eligible') {
      if (!counted) return null;
      const view = await this.reconcile(b.batchId);
      return view.state === 'extracting' ? null : view;
    }
    // The target committed: an error from here on is the journal's (recordCommitted), never the apply's.
    return this.directCommitted(b, t, res);
  }

  private async recordStreamedManifest(batchId: string, m: Manifest): Promise<Manifest> {
    const now = await this.moves.load(batchId);
    if (now.rowCount !== null && now.checksum !== null) return { rowCount: now.rowCount, checksum: now.checksum };
    if (now.state !== 'extracting')
      throw new TransferError('invalid_state', `batch ${batchId} moved to ${now.state} while its rows were staged`);
    const moved = await this.moves.move(batchId, {
      move: 'record_manifest',
      set: { rowCount: m.rowCount, checksum: m.checksum, stamp: 'extracted_at' },
      detail: { rowCount: m.rowCount, checksum: m.checksum, oneRead: true },
    });
    if (!moved || moved.rowCount === null || moved.checksum === null)
      throw new TransferError('invalid_state', `batch ${batchId}: its manifest could not be recorded`);
    return { rowCount: moved.rowCount, checksum: moved.checksum };
  }

  // Apply: one target procedure call, one local transaction. Any error is followed by reconcile.
  async apply(batchId: string): Promise<BatchView> {
    let b = await this.moves.load(batchId);
    if (b.state === 'applying' || b.state === 'unresolved') {
      const r = await this.reconcile(batchId);
      if (r.state !== 'staged') return r;
      b = await this.moves.load(batchId);
    }
    if (b.state === 'extracting')
      throw new TransferError('invalid_state', `batch ${batchId} is not staged yet; run it (stage + apply)`);
    if (b.state !== 'staged') return toView(b);
    const t = this.transfer(baseTransferName(b.transferName));
    const a = await this.connect(t);
    const req = stageRequest(b, t);
    try {
      await this.prepare(t, a, req.schema); // target adapters need the column mapping (cached per schema)
    } catch (err) {
      // The configuration changed since the batch was staged (a mapped column no longer in its recorded schema, a
      // key without its unique index on the target, ...): it can never be applied as staged. Released like any
      // terminal failure (after the final fence), so that a new batch covers the window under the new configuration,
      // instead of the batch staying staged with a step that throws at every retry and no error recorded.
      if (err instanceof TransferError && TERMINAL_CODES.has(err.code))
        return toView(await this.reconciler.release(b, err, ['staged']));
      await this.moves.noteError(b, 'apply_error', err, { fenced: true, whileOpen: true }); // as stage_error
      throw err;
    }
    const claimed = await this.moves.move(b.batchId, {
      move: 'start_apply',
      set: { incrementAttempts: true, stamp: 'apply_started_at', targetReconcileToken: null },
      detail: { attempt: b.attempts + 1 },
    });
    if (!claimed) return toView(await this.moves.load(batchId)); // someone else moved it
    // A replay whose range a key comparison deleted keys in since it was created: its staged rows were read before
    // (they may hold a row the source deleted), and applied they would bring it back. Asked after start_apply is
    // durable: a comparison that deletes later sees this apply under way and leaves the window alone (compareKeys).
    if (comparesUnder(t, claimed)) {
      const deletedSince = await this.keysDeletedSince(t, claimed);
      if (deletedSince) return toView(await this.reconciler.release(claimed, deletedSince));
    }
    // The batch's version as this apply last wrote it (start_apply, then the token's note: each write raises it by
    // one): its error is noted only while no other run moved or noted the batch since.
    let version = claimed.version;
    let res: ApplyResult;
    const started = Date.now();
    try {
      res = await a.target.apply(req, {
        attempt: claimed.attempts, // fenced on the target: an attempt that reconcile ruled out fails instead of committing
        // Durable before the target may act on it: reconcile of this attempt reads it back from the journal.
        // Fenced on the version start_apply left, like reconcile's notes: once another run moved or noted the batch
        // (a reconcile that ruled this attempt out and cleared the token), a token written now would be stale -- a
        // later reconcile would ask the target about it, and an Oracle LTXID can be consumed by an unrelated commit.
        // Refused, the call does not go out: the attempt is no longer the batch's latest word.
        onReconcileToken: async (token) => {
          const kept = await this.journal.note(
            b.batchId,
            'reconcile_token_recorded',
            { token, attempt: claimed.attempts },
            { targetReconcileToken: token },
            claimed.version,
          );
          if (!kept)
            throw new TransferError(
              'attempt_fenced',
              `batch ${b.batchId} changed after attempt ${claimed.attempts} started; its apply was not sent`,
            );
          version = claimed.version + 1;
        },
      });
    } catch (err) {
      // Fenced: an abandon that ended the batch while this call was on its way keeps its record -- the operator's
      // reason on a failed batch is not replaced by this late apply's refusal (the event is kept, marked stale); a
      // batch a rival's reconcile only moved back (still open) gets the error (whileOpen).
      const timedOut = this.ranOutOfTime(err, started);
      await this.moves.noteError({ ...b, version }, 'apply_error', err, { fenced: true, whileOpen: true, timedOut });
      this.forgetPrepared(t.name);
      const view = await this.reconcile(batchId);
      const terminal = await this.terminalError(view, err, timedOut);
      if (terminal) return toView(await this.reconciler.release(await this.moves.load(batchId), terminal));
      return view;
    }
    // The target committed: from here on an error is the journal's, never the apply's (recordCommitted).
    const view = await this.recordCommitted(
      b.batchId,
      res,
      { appliedCount: res.rowCount, stamp: 'committed_at', lastError: null, lastErrorCode: null },
      {
        rowCount: res.rowCount,
        checksum: res.checksum,
        ...(res.deleted !== undefined ? { deleted: res.deleted } : {}),
      },
    );
    this.log('transfer.batch.committed', {
      batchId,
      transfer: t.name,
      outcome: res.outcome,
      rows: res.rowCount,
      ...(res.deleted !== undefined ? { deleted: res.deleted } : {}),
    });
    await this.reconciler.purge(a, b);
    return view;
  }

  // The target's own answer is authoritative whenever it arrives, whatever a concurrent reconcile wrote meanwhile.
  // When the journal's note of it is lost (its connection died before the journal committed it, or after, with the
  // reply lost), the answer still stands: nothing is noted on the batch as an apply error (the apply did not fail), the
  // journal is read again, and where the note did not land reconcile reads the outcome from the target. The call
  // says it committed the batch (committedByCall: the queue step continues the catch-up chain) exactly when the
  // journal's commit was its own -- its note landed (the journal's commit event is its outcome 'applied', which only
  // the one apply the target answered 'applied' can write) or its reconcile made the move -- so a lost reply neither
  // stops the chain nor lets a second step of the batch continue it too.
  private async recordCommitted(
    batchId: string,
    res: ApplyResult,
    set: BatchPatch,
    detail: Record<string, unknown>,
  ): Promise<BatchView> {
    let done: BatchRecord | null;
    try {
      done = await this.moves.move(batchId, { move: 'commit', event: res.outcome, set, detail });
    } catch (err) {
      await this.journal.note(batchId, 'commit_note_error', describeError(err)).catch(() => undefined);
      const now = await this.moves.load(batchId); // the journal unreachable: the step fails, and is retried
      if (now.state !== 'committed') return this.reconcile(batchId);
      const events = await this.journal.events(batchId);
      const moved = [...events].reverse().find((e) => e.toState === 'committed' && e.fromState !== 'committed');
      return res.outcome === 'applied' && moved?.event === 'applied' ? this.committedHere(toView(now)) : toView(now);
    }
    return done ? this.committedHere(toView(done)) : toView(await this.moves.load(batchId));
  }

  // Direct apply (docs/transfer.md, "Direct apply"): the attempt counts durably first (start_apply from
  // 'extracting'), exactly as before an apply, so reconcile can fence it; then one target transaction claims the
  // id, writes the window's rows into the table, verifies them against the manifest and writes the completion row.
  // Any error or lost reply is reconciled like an apply's. null: the target found it not eligible (nothing written)
  // and reconcile moved the batch back to 'extracting'.
  private async applyDirectly(
    b: BatchRecord,
    t: TransferConfig,
    a: Adapters,
    req: StageRequest,
    w: Window,
    feed: RowFeed,
  ): Promise<BatchView | null> {
    // The target opens its transaction while the journal counts the attempt, and claims the batch id only with the
    // counted attempt (never before it is durable).
    let claimed: BatchRecord | null = null;
    // readAhead 'afterCopy': the read ahead's manifest waits for the source's last row (or the end of this call).
    const copied = this.readAhead === 'afterCopy' && feed.kind === 'bulk' ? rowsSent(feed) : null;
    const count = async () => {
      claimed = await this.moves.move(b.batchId, {
        move: 'start_apply',
        from: ['extracting'],
        set: { incrementAttempts: true, stamp: 'apply_started_at', targetReconcileToken: null },
        detail: { attempt: b.attempts + 1, direct: true },
      });
      if (claimed && feed.kind === 'bulk') this.startAhead(t, a, claimed, copied?.sent);
      return claimed?.attempts ?? null;
    };
    let res: ApplyResult | 'not_eligible' | 'not_counted';
    const started = Date.now();
    try {
      res = await a.target.applyDirect!(req, w, copied?.feed ?? feed, count);
    } catch (err) {
      if (!claimed) throw err; // the count failed (or never ran): the stage's own error handling, as before
      return this.directFailed(claimed, err, started);
    } finally {
      copied?.done();
    }
    if (res === 'not_counted') return toView(await this.moves.load(b.batchId)); // someone else moved it
    if (res === 'not_eligible') {
      if (!claimed) return null;
      const view = await this.reconcile(b.batchId);
      return view.state === 'extracting' ? null : view;
    }
    // The target committed: an error from here on is the journal's (recordCommitted), never the apply's.
    return this.directCommitted(b, t, res);
  }

  // The next window's manifest, read while this batch's rows move (docs/transfer.md, "The next window's manifest,
  // ahead"): after a full window the source probably has more, and catch-up creates the next batch in this process
  // as soon as this one commits; its manifest (a scan of the window) then need not run after the commit. Read with
  // one source process (manifest's `ahead`), beside the COPY, which leaves CPU idle. Nothing durable: the result
  // waits in memory for the transfer's next createBatch, which takes it whatever happens and records it only for
  // exactly the window it chooses then (same low, the high nextWindow finds then, the schema hash it reads then, the
  // same algorithm), at most AHEAD_MAX_AGE_MS old; a crash loses it, any mismatch or failure discards it, and the
  // manifest is then read as before. Only a bulk direct apply of the transfer's own chain (not a replay), key
  // windows, no change capture, a full window.
  // `gate` (readAhead 'afterCopy'): the manifest's statement waits for it (the window is asked at once).
  private startAhead(t: TransferConfig, a: Adapters, b: BatchRecord, gate?: Promise<void>): void {
    if (
      !this.readAhead ||
      b.transferName !== t.name ||
      t.boundary.kind !== 'key' ||
      carriesChanges(t) ||
      b.rowCount === null ||
      b.rowCount < t.batchSize ||
      this.ahead.has(t.name)
    )
      return;
    const schema: SourceSchema = { columns: b.schemaColumns, hash: b.schemaHash };
    const run = (async (): Promise<Ahead | null> => {
      const w = await a.source.nextWindow(b.boundaryHigh, t.batchSize, { ...baselineOpts(a), schema });
      if (!w || (await readsOnce(a, w))) return null;
      const algorithm = await negotiateChecksum(a);
      await gate;
      const manifest = await a.source.manifest(w, schema, algorithm, { ahead: true });
      return { key: aheadKey(w, schema.hash, algorithm), manifest, at: Date.now() };
    })().catch((err: unknown) => {
      this.log('transfer.manifest_ahead_error', { transfer: t.name, message: describeError(err).message });
      return null;
    });
    this.ahead.set(t.name, run);
  }

  private async directCommitted(b: BatchRecord, t: TransferConfig, res: ApplyResult): Promise<BatchView> {
    const view = await this.recordCommitted(
      b.batchId,
      res,
      {
        stagedCount: res.rowCount,
        stagedChecksum: res.checksum,
        appliedCount: res.rowCount,
        stamp: 'committed_at',
        lastError: null,
        lastErrorCode: null,
      },
      { rowCount: res.rowCount, checksum: res.checksum, direct: true },
    );
    this.log('transfer.batch.committed', {
      batchId: b.batchId,
      transfer: t.name,
      outcome: res.outcome,
      rows: res.rowCount,
      direct: true,
    });
    return view;
  }

  // A direct apply whose attempt was counted failed: reconciled like an apply (a terminal error releases the batch).
  // `claimed`: the record start_apply returned; the error is noted fenced on it (an abandon that ended the batch
  // meanwhile keeps its record, as in apply()).
  private async directFailed(claimed: BatchRecord, err: unknown, started: number): Promise<BatchView> {
    const b = claimed;
    this.forgetPrepared(baseTransferName(b.transferName));
    const timedOut = this.ranOutOfTime(err, started);
    await this.moves.noteError(b, 'apply_error', err, { fenced: true, whileOpen: true, timedOut });
    const view = await this.reconcile(b.batchId);
    const terminal = await this.terminalError(view, err, timedOut);
    if (terminal) return toView(await this.reconciler.release(await this.moves.load(b.batchId), terminal));
    return view;
  }

  // After a failed apply, reconciled back to an open state: the error that fails the batch, if any -- a terminal
  // one, or Keel's own statement timeout for the applyTimeoutLimit-th apply in a row (timeoutError). Such a batch would
  // otherwise be retried for ever without converging: a window too large for KEEL_TRANSFER_STATEMENT_TIMEOUT_MS (or a
  // target that slow) needs an operator's decision.
  private async terminalError(view: BatchView, err: unknown, timedOut: boolean): Promise<TransferError | null> {
    if (view.state !== 'staged' && view.state !== 'extracting') return null;
    if (err instanceof TransferError) return TERMINAL_CODES.has(err.code) ? err : null;
    return timedOut ? this.timeoutError(view.batchId, 'apply') : null;
  }

  // Whether a step that started at `started` (epoch ms) failed on Keel's own statement timeout: the server's
  // statement timeout (57014) no sooner than KEEL_TRANSFER_STATEMENT_TIMEOUT_MS after the step began. The server
  // sends the same code for a pg_cancel_backend (an operator's, a monitoring tool's), in a message the server's
  // lc_messages may translate, so the code alone does not tell them apart; but a statement of the step cannot have
  // run that long sooner, so a cancel within that time is told apart (one later is counted as a timeout: the step
  // was at its limit anyway).
  private ranOutOfTime(err: unknown, started: number): boolean {
    return this.applyTimeoutLimit > 0 && isStatementTimeout(err) && Date.now() - started >= this.statementTimeoutMs;
  }

  // The step's (stage's or apply's: apply_error and stage_error events) Keel statement timeouts in a row, newest
  // first: at applyTimeoutLimit, the error that fails the batch (apply_timeout or stage_timeout). Any other error of
  // the step breaks the row; a cancel from outside (57014 not marked timeout) neither counts nor breaks it.
  private async timeoutError(batchId: string, step: 'stage' | 'apply'): Promise<TransferError | null> {
    const event = step === 'stage' ? 'stage_error' : 'apply_error';
    let inARow = 0;
    for (const e of [...(await this.journal.events(batchId))].reverse()) {
      if (e.event !== event) continue;
      if (e.detail?.timeout === true) inARow++;
      else if (e.detail?.code !== '57014') break;
    }
    if (inARow < this.applyTimeoutLimit) return null;
    return new TransferError(
      step === 'stage' ? 'stage_timeout' : 'apply_timeout',
      `batch ${batchId}: its ${step} ran out of Keel's statement timeout ${inARow} times in a row (KEEL_TRANSFER_STATEMENT_TIMEOUT_MS ${this.statementTimeoutMs}; KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT ${this.applyTimeoutLimit}): raise the timeout or lower the transfer's batchSize, then start the transfer again (its window is released)`,
      { timeouts: inARow },
    );
  }

  // Stage (if needed) and apply in one call, reconciling after any failure: for callers that run a batch in one go
  // (the tests, scripts). The queue steps call stage and apply separately (functions/transferStage.ts,
  // transferApply.ts). Never throws for transfer-level problems: the view's status/retryable/nextAction say what
  // happened and what to do.
  async run(batchId: string): Promise<BatchView> {
    let view: BatchView;
    try {
      view = await this.stage(batchId);
    } catch (err) {
      if (isTransferError(err, 'unknown_batch') || isTransferError(err, 'unknown_transfer')) throw err;
      return toView(await this.moves.load(batchId));
    }
    if (view.state !== 'staged') return view;
    try {
      return await this.apply(batchId);
    } catch (err) {
      if (isTransferError(err, 'unknown_batch') || isTransferError(err, 'unknown_transfer')) throw err;
      return toView(await this.moves.load(batchId));
    }
  }

  // Reads the durable outcome from the target (its completion row, and whatever the reconcile token lets it ask) for every batch that
  // is not committed or failed -- 'staged' too: an apply the journal no longer expects may still have committed. A
  // missing completion row is not proof: the target adapter takes the claim itself with a bounded wait, and when
  // it obtains it, commits a fence with the verdict so that no apply of an attempt so far (<= attempts) can commit
  // afterwards. The verdict is therefore final (docs/transfer.md, "Reconcile and the fence").
  async reconcile(batchId: string): Promise<BatchView> {
    const { rec, committed } = await this.reconciler.settle(await this.moves.load(batchId), false);
    return committed ? this.committedHere(toView(rec)) : toView(rec);
  }

  // Whether the call that returned `view` (stage, apply, reconcile of this service) moved the batch to committed
  // itself -- not a batch found committed by another run. The queue steps continue a catch-up chain only then, so
  // two steps of one batch (a duplicate message, a retry racing a resumed post) continue it once between them.
  committedByCall(view: BatchView): boolean {
    return this.committedViews.has(view);
  }

  private committedHere(view: BatchView): BatchView {
    this.committedViews.add(view);
    return view;
  }

  // Maintenance: reconcile batches whose apply outcome is unknown and that nobody touched for olderThanMs.
  async reconcileStale(olderThanMs: number, limit: number): Promise<BatchView[]> {
    // 'staged' too: a batch whose apply committed after a reconcile had moved it back (only possible for an attempt
    // the journal had not yet started when that reconcile fenced) is found and recorded committed here.
    const stale = await this.journal.stale(RECONCILABLE, olderThanMs, limit);
    const out: BatchView[] = [];
    for (const b of stale) {
      try {
        out.push(await this.reconcile(b.batchId));
      } catch (err) {
        await this.moves.noteError(b, 'reconcile_error', err, { fenced: true }).catch(() => undefined);
        out.push(toView((await this.journal.get(b.batchId)) ?? b));
      }
    }
    return out;
  }

  // Maintenance: open batches in `extracting` that nobody touched for olderThanMs (nothing to reconcile: no apply
  // of one can be open, start_apply moves it to `applying` first). The caller re-posts those that made no progress
  // (shared/app/timerPasses.ts): a lost stage message otherwise leaves a batch the timer does not look at (a transfer
  // it does not start, a replay, a re-baseline) open for ever.
  async staleExtracting(olderThanMs: number, limit: number): Promise<BatchView[]> {
    return (await this.journal.stale(['extracting'], olderThanMs, limit)).map(toView);
  }

  // Maintenance: the staged rows and staging registry rows of batches that can never be applied again -- committed
  // or failed in the journal -- that are still on the target: their own purge failed (a cut connection, its bounded
  // lock wait ran out) or never ran (the target was unreachable when the batch failed), or a run of the batch
  // committed a staging after the batch had failed. purge_staged already takes the rows of batches whose completion
  // row says so (committed, or fenced for good); a batch failed before any apply has no completion row, and only the
  // journal knows it is over. Bounded: at most maxPerTransfer registry rows read per transfer and pass, in id order
  // after the last id the previous pass read, from the first again once a pass read fewer (the end): ids it must
  // keep (open batches, another app's batches on a shared target), however many, never hide the ones behind them,
  // and every registry row is looked at within (rows / maxPerTransfer) + 1 passes. The cursor is this process's
  // (another instance keeps its own; lost on restart, it starts from the first). Safe beside live batches: only ids the
  // journal holds terminal are purged (no run can start an apply of them: start_apply moves staged/extracting only),
  // and purge_staged keeps every other batch's rows. Idempotent: two passes at once purge the same ids, the second
  // finds nothing. Errors are counted, never thrown: the next pass tries again.
  async purgeTerminalStaging(maxPerTransfer = 20): Promise<{ purged: string[]; errors: number }> {
    const purged: string[] = [];
    let errors = 0;
    for (const t of this.transfers.values()) {
      try {
        const a = await this.connect(t);
        if (!a.target.stagedBatches) continue;
        const cap = Math.max(1, Math.min(maxPerTransfer, 100)); // the target's bound: a full page means "more"
        const ids = await a.target.stagedBatches(cap, this.stagingCursors.get(t.name) ?? null);
        if (ids.length < cap) this.stagingCursors.delete(t.name);
        else this.stagingCursors.set(t.name, ids[ids.length - 1]!);
        for (const id of ids) {
          const b = await this.journal.get(id);
          // Unknown to this journal (another app's batch on a shared target): not ours to judge.
          if (!b || (b.state !== 'committed' && b.state !== 'failed')) continue;
          try {
            await a.target.purgeStaged(id);
            purged.push(id);
            this.log('transfer.staging.purged', { batchId: id, transfer: t.name, state: b.state });
          } catch (err) {
            errors++;
            await this.journal.note(id, 'purge_error', describeError(err)).catch(() => undefined);
          }
        }
      } catch {
        errors++; // target or journal unreachable: the next pass asks again
      }
    }
    return { purged, errors };
  }

  // Operator action: give up on a batch and release its window. Refused (the batch is returned as it is) unless
  // the target proves it not applied under the final fence: the fence makes every apply of this batch id, also
  // one still on its way, fail on the target, so the window can never be applied by two batches.
  async abandon(batchId: string, reason: string): Promise<BatchView> {
    return (await this.abandonOnce(batchId, reason)).batch;
  }

  // abandon(), also saying whether this call abandoned the batch: of concurrent abandons of one batch exactly one
  // gets abandoned: true (the journal's move to failed is fenced by the batch's state), the others find it failed.
  async abandonOnce(batchId: string, reason: string): Promise<{ batch: BatchView; abandoned: boolean }> {
    const b = await this.moves.load(batchId);
    if (!OPEN_STATES.includes(b.state)) return { batch: toView(b), abandoned: false };
    const { rec, released } = await this.reconciler.releaseOnce(
      b,
      new TransferError('invalid_state', `abandoned by operator: ${reason}`),
    );
    return { batch: toView(rec), abandoned: released };
  }

  async getBatch(batchId: string): Promise<BatchDetail | null> {
    const b = await this.journal.get(batchId);
    if (!b) return null;
    return {
      ...toView(b),
      schemaColumns: b.schemaColumns,
      targetReconcileToken: b.targetReconcileToken,
      events: await this.journal.events(batchId),
    };
  }

  // The open batches of a transfer's replay chains (REPLAY_MARK: each its own chain, so they are not the transfer's
  // open batch), oldest first. Open batches are few (at most one a chain): read by state, as insertReplay does.
  async openReplays(name: string): Promise<BatchView[]> {
    const t = this.transfer(name);
    const out: BatchRecord[] = [];
    for (const state of OPEN_STATES)
      for (const b of await this.journal.list({ state, limit: 1000 }))
        if (b.transferName !== t.name && baseTransferName(b.transferName) === t.name) out.push(b);
    return out.sort((x, y) => x.createdAt.getTime() - y.createdAt.getTime()).map(toView);
  }

  async listBatches(filter: BatchListFilter): Promise<BatchView[]> {
    return (await this.journal.list(filter)).map(toView);
  }

  async close(): Promise<void> {
    // A manifest still being read ahead uses the source: it ends (or fails) before the adapters close.
    const ahead = [...this.ahead.values()];
    this.ahead.clear();
    await Promise.all(ahead);
    const all = [...this.adapters.values()];
    this.adapters.clear();
    for (const p of all) {
      const a = await p.catch(() => null);
      if (a) {
        await a.source.close().catch(() => undefined);
        await a.target.close().catch(() => undefined);
      }
    }
    await this.journal.close();
    await this.onClose?.();
  }
}

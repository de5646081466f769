// Reconcile (docs/transfer.md, "Reconcile and the fence"): the target's durable answer about a batch's applies, and
// the one way a batch fails -- its window is released only once no apply of it can ever commit.
import type { TransferConfig } from './config.js';
import { describeError, TransferError } from './errors.js';
import type { BatchRecord, TransferJournal } from './journal.js';
import { baseTransferName } from './chains.js';
import { OPEN_STATES } from './lifecycle.js';
import type { BatchMoves, TransferLog } from './moves.js';
import { stageRequest } from './stageRequest.js';
import { FINAL_FENCE, type Adapters, type BatchState } from './types.js';

// What the target said when reconcile asked it ('skipped': nothing to ask; 'error': no answer).
export type Verdict = 'committed' | 'not_applied' | 'blocked' | 'error' | 'skipped';

export interface ReconcilerDeps {
  journal: TransferJournal;
  moves: BatchMoves;
  log: TransferLog;
  transfer: (name: string) => TransferConfig; // throws 'unknown_transfer'
  findTransfer: (name: string) => TransferConfig | undefined;
  connect: (t: TransferConfig) => Promise<Adapters>;
}

export class Reconciler {
  private readonly journal: TransferJournal;
  private readonly moves: BatchMoves;
  private readonly log: TransferLog;

  constructor(private readonly deps: ReconcilerDeps) {
    this.journal = deps.journal;
    this.moves = deps.moves;
    this.log = deps.log;
  }

  // final: fence every attempt, for good (abandon, and before a window is released).
  // committed: true when this call moved the batch to committed (not a record of another run's commit).
  async settle(b: BatchRecord, final: boolean): Promise<{ rec: BatchRecord; verdict: Verdict; committed?: boolean }> {
    if (!OPEN_STATES.includes(b.state)) return { rec: b, verdict: 'skipped' };
    // Without a manifest nothing was staged, and nothing can have been applied (an apply needs 'staged' first).
    if (b.rowCount === null || b.checksum === null) return { rec: b, verdict: 'skipped' };
    // 'extracting' after attempts: reconcile found the staging gone; an apply of those attempts is fenced already.
    if (b.state === 'extracting' && b.attempts === 0 && !final) return { rec: b, verdict: 'skipped' };
    const t = this.deps.transfer(baseTransferName(b.transferName));
    const fenceThrough = final ? FINAL_FENCE : b.attempts;
    const open = b.state === 'applying' || b.state === 'unresolved';
    let outcome;
    let a: Adapters;
    try {
      a = await this.deps.connect(t);
      outcome = await a.target.reconcile(stageRequest(b, t), t.reconcileWaitMs, fenceThrough, b.targetReconcileToken);
    } catch (err) {
      const d = describeError(err);
      if (open) {
        const moved = await this.moves.move(b.batchId, {
          move: 'reconcile_error',
          set: { lastError: `reconcile could not reach a verdict: ${d.message}`, lastErrorCode: d.code },
          detail: d,
          ifVersion: b.version,
        });
        return { rec: moved ?? (await this.moves.load(b.batchId)), verdict: 'error' };
      }
      // Fenced on the version read: a batch another run moved or noted meanwhile keeps its newer record.
      await this.journal.note(
        b.batchId,
        'reconcile_error',
        d,
        { lastError: `reconcile could not reach a verdict: ${d.message}`, lastErrorCode: d.code },
        b.version,
      );
      return { rec: await this.moves.load(b.batchId), verdict: 'error' };
    }
    // Every move below but the commit is fenced on the version read with the batch (`b`): the verdict is about the
    // attempts `b` counted, and between that read and the move another run may have started an apply (attempt
    // fenceThrough + 1, which this verdict does not cover) or an operator moved the batch; such a move would write
    // the stale verdict over the newer record (an apply in flight recorded as not applied). Then nothing moves, and
    // the event is kept, marked stale. A committed answer is the target's durable word: it is taken from any state.
    if (outcome.outcome === 'committed') {
      const mismatch = outcome.checksum !== b.checksum;
      const moved = await this.moves.move(b.batchId, {
        move: 'commit',
        event: 'reconciled_committed',
        set: {
          appliedCount: outcome.rowCount,
          stamp: 'committed_at',
          lastError: mismatch
            ? `target completion row checksum ${outcome.checksum} differs from the manifest ${b.checksum}`
            : null,
          lastErrorCode: mismatch ? 'completion_checksum_mismatch' : null,
        },
        detail: { via: outcome.via, rowCount: outcome.rowCount, checksum: outcome.checksum, from: b.state },
      });
      await this.purge(a, b);
      return { rec: moved ?? (await this.moves.load(b.batchId)), verdict: 'committed', committed: moved !== null };
    }
    if (outcome.outcome === 'not_applied' && outcome.final && !final) {
      // The target holds the final fence: an abandon committed it, and its journal move to failed was lost (cut,
      // reply lost). No apply of this batch can ever commit, so the abandon is finished here: failed, window
      // released. Left open, the batch would be retried for ever, each apply refused by the fence (attempt_fenced).
      const r = await this.fail(
        b,
        OPEN_STATES,
        new TransferError(
          'invalid_state',
          'abandoned: the target holds the final fence (the abandon was not recorded)',
          {
            via: outcome.via,
            fencedThrough: FINAL_FENCE,
          },
        ),
      );
      return { rec: r.rec, verdict: 'not_applied' };
    }
    if (outcome.outcome === 'not_applied') {
      const to: BatchState = outcome.staged ? 'staged' : 'extracting';
      const detail = { via: outcome.via, staged: outcome.staged, fencedThrough: fenceThrough };
      let moved: BatchRecord | null = null;
      // The verdict is final for every attempt so far, so their reconcile token is spent: cleared, so that no later
      // reconcile asks the target about it again (an Oracle LTXID can be consumed by a later, unrelated commit).
      if (open)
        moved = await this.moves.move(b.batchId, {
          move: 'not_applied',
          to,
          set: { targetReconcileToken: null },
          detail,
          ifVersion: b.version,
        });
      else if (b.state === 'staged' && !outcome.staged)
        moved = await this.moves.move(b.batchId, {
          move: 'staging_gone',
          set: { targetReconcileToken: null },
          detail,
          ifVersion: b.version,
        });
      // Unchanged state: noted, and marked touched (updated_at), so maintenance asks again only after the stale age.
      // The touch rewrites the last error it read, so it is fenced on the version read: when another run moved the
      // batch or noted a newer error meanwhile, the row keeps that newer record (the event is kept, marked stale).
      else await this.journal.note(b.batchId, 'reconciled_not_applied', detail, { lastError: b.lastError }, b.version);
      return { rec: moved ?? (await this.moves.load(b.batchId)), verdict: 'not_applied' };
    }
    const moved = await this.moves.move(b.batchId, {
      move: 'blocked',
      set: { lastError: outcome.reason, lastErrorCode: 'claim_blocked' },
      detail: { reason: outcome.reason },
      ifVersion: b.version,
    });
    return { rec: moved ?? (await this.moves.load(b.batchId)), verdict: 'blocked' };
  }

  // Releases the batch's window (state 'failed'), but only once no apply of it can ever commit: when an apply was
  // started (attempts > 0), the target must first answer "not applied" to a final fence. A committed answer wins
  // (the batch is committed, not failed); no answer leaves the batch as the fence attempt left it.
  async release(b: BatchRecord, err: TransferError, from: readonly BatchState[] = OPEN_STATES): Promise<BatchRecord> {
    return (await this.releaseOnce(b, err, from)).rec;
  }

  // release(), also saying whether this call made the move to failed (released: true) or found it made (another
  // call released the batch meanwhile, or it was not released): concurrent abandons get one success between them.
  async releaseOnce(
    b: BatchRecord,
    err: TransferError,
    from: readonly BatchState[] = OPEN_STATES,
  ): Promise<{ rec: BatchRecord; released: boolean }> {
    let now = b;
    if (b.attempts === 0 && b.state === 'extracting' && from.includes('extracting')) {
      // No apply started as far as `b` says -- but `b` may be stale: a direct apply moves 'extracting' to 'applying'
      // (start_apply) and may commit. So the move to failed is from 'extracting' only (no apply can be started or
      // open then: reconcile moves a batch back there only after fencing its attempts); a batch that moved
      // meanwhile is asked with the final fence like any other.
      const r = await this.fail(b, ['extracting'], err);
      if (r.released || !OPEN_STATES.includes(r.rec.state) || !from.includes(r.rec.state)) return r;
      now = r.rec;
    }
    const { rec, verdict } = await this.settle(now, true);
    if (verdict !== 'not_applied' && !(verdict === 'skipped' && rec.attempts === 0)) {
      // Not released: the reason is kept in the batch's events (its last error says why the target gave no verdict);
      // running or abandoning it again asks the target again.
      if (OPEN_STATES.includes(rec.state))
        await this.journal.note(rec.batchId, 'release_deferred', { code: err.code, message: err.message, verdict });
      return { rec: await this.moves.load(b.batchId), released: false };
    }
    return this.fail(rec, from, err);
  }

  // A terminal problem: the batch can never succeed as extracted. Only called when nothing of it is applied and no
  // apply of it can commit any more: no apply was ever started (attempts = 0), or the target committed the final
  // fence (see release()). It releases the window.
  private async fail(
    b: BatchRecord,
    from: readonly BatchState[],
    err: TransferError,
  ): Promise<{ rec: BatchRecord; released: boolean }> {
    const moved = await this.moves.move(b.batchId, {
      move: 'fail',
      from,
      set: { lastError: err.message, lastErrorCode: err.code, stamp: 'failed_at' },
      detail: { code: err.code, ...(err.detail ?? {}) },
    });
    // Once per batch: only the call that moved it to failed reports it.
    if (moved) this.log('transfer.batch.failed', { batchId: b.batchId, transfer: b.transferName, code: err.code });
    // Its staged rows (if a staging committed) are garbage now; removing them is best effort.
    const t = this.deps.findTransfer(baseTransferName(b.transferName));
    if (moved && t) {
      const a = await this.deps.connect(t).catch(() => null);
      if (a) await this.purge(a, b);
    }
    return { rec: moved ?? (await this.moves.load(b.batchId)), released: moved !== null };
  }

  async purge(a: Adapters, b: BatchRecord): Promise<void> {
    try {
      await a.target.purgeStaged(b.batchId);
    } catch (err) {
      // Staged rows of a committed batch are garbage, not state: the next purge of the table removes them.
      await this.journal.note(b.batchId, 'purge_error', describeError(err)).catch(() => undefined);
    }
  }
}

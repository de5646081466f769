// A batch's journal record as the service changes it: read, moved through the state table (lifecycle.ts), and its
// errors noted. Every step of the service (stage, apply, reconcile) goes through here.
import { describeError, TransferError } from './errors.js';
import type { BatchPatch, BatchRecord, TransferJournal } from './journal.js';
import { journalMove, type MoveName } from './lifecycle.js';
import type { BatchState } from './types.js';

export type TransferLog = (event: string, data: Record<string, unknown>) => void;

export class BatchMoves {
  constructor(
    private readonly journal: TransferJournal,
    private readonly log: TransferLog,
  ) {}

  async load(batchId: string): Promise<BatchRecord> {
    const b = await this.journal.get(batchId);
    if (!b) throw new TransferError('unknown_batch', `no batch ${batchId}`);
    return b;
  }

  // One move of the state table (lifecycle.ts) through the journal's compare-and-set. null: the batch was in none of
  // the move's `from` states, or (ifVersion) its version is no longer the one read: someone else moved it.
  move(
    batchId: string,
    m: {
      move: MoveName;
      to?: BatchState;
      event?: string;
      from?: readonly BatchState[];
      set: BatchPatch;
      detail?: Record<string, unknown>;
      ifVersion?: number;
    },
  ): Promise<BatchRecord | null> {
    const { from, to, event } = journalMove(m.move, m);
    return this.journal.transition(batchId, from, to, m.set, event, m.detail, m.ifVersion);
  }

  // fenced: write the error only while the batch is as `b` was read (its version); a caller whose record may be
  // stale (maintenance's list) never replaces a newer one.
  // whileOpen (with fenced): when the fence refuses the write, it is made once more on the batch as it is now if it
  // is still open (not committed or failed), fenced on that version -- a batch another run moved on (a reconcile's
  // verdict) still gets the error, one that ended meanwhile (an abandon's reason, a commit) keeps its record.
  async noteError(
    b: BatchRecord,
    event: string,
    err: unknown,
    // timedOut: the error was Keel's own statement timeout (TransferService.ranOutOfTime), marked on the event so
    // that the timeouts in a row can be counted apart from a cancel from outside, which has the same code.
    opts: { fenced?: boolean; whileOpen?: boolean; timedOut?: boolean } = {},
  ): Promise<void> {
    const d = describeError(err);
    const write = (version: number | undefined) =>
      this.journal.note(
        b.batchId,
        event,
        { code: d.code, message: d.message, ...(opts.timedOut ? { timeout: true } : {}) },
        { lastError: d.message, lastErrorCode: d.code },
        version,
      );
    const kept = await write(opts.fenced ? b.version : undefined);
    if (!kept && opts.fenced && opts.whileOpen) {
      const now = await this.journal.get(b.batchId);
      if (now && now.state !== 'committed' && now.state !== 'failed') await write(now.version);
    }
    this.log(`transfer.${event}`, { batchId: b.batchId, transfer: b.transferName, code: d.code });
  }
}

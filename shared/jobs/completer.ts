// Writing a finished attempt's outcome (River: internal/jobcompleter): every move out of 'processing' goes through
// one path, fenced by the claim's lease, with 'lease_lost' meaning someone else owns the job now. Successes made in
// one event-loop turn are completed together through completeMany (MicroBatcher).
import type {
  ClaimedJob,
  CompleteRef,
  CompleteResult,
  DlqReason,
  JobId,
  JobOutcome,
  JobStore,
  LeaseRef,
} from './contract.js';
import { LIMITS } from './validate.js';

// Collects owner-scoped calls made in one event-loop turn into one batch store call (completeMany, startMany):
// batching under load, no delay when idle.
export class MicroBatcher<R extends { jobId: JobId }, Ref extends LeaseRef = LeaseRef> {
  private pending: { ref: Ref; resolve: (r: R) => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;

  constructor(
    private readonly call: (refs: Ref[]) => Promise<R[]>,
    private readonly lost: (ref: Ref) => R,
    private readonly max: number,
  ) {}

  submit(ref: Ref): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ ref, resolve, reject });
      if (this.pending.length >= this.max) void this.flush();
      else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const batch = this.pending.splice(0, this.max);
    if (batch.length === 0) return;
    if (this.pending.length > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
    try {
      const results = await this.call(batch.map((b) => b.ref));
      const byId = new Map(results.map((r) => [r.jobId, r]));
      for (const b of batch) b.resolve(byId.get(b.ref.jobId) ?? this.lost(b.ref));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }
}

// Where a job goes from 'processing' (or, for 'release', from 'fetched': claimed, never started).
export type Finalization =
  // archived, with what the handler returned (JSON); or dead-lettered as 'cancelled' when a cancel was requested
  // while it ran
  | { op: 'complete'; resultJson?: string }
  | { op: 'fail'; reason: DlqReason; error: string } // dead-lettered
  | { op: 'retry'; runAt: Date; error: string } // pending again, due at runAt
  // Shutdown hands the job back due now with its attempt given back; or the store dead-letters it as 'cancelled'
  // when a cancel was requested, as retry does.
  | { op: 'interrupt'; error: string }
  | { op: 'release' }; // given back unstarted (shutdown began while its claim was in flight)

const OUTCOME: Record<Finalization['op'], JobOutcome> = {
  complete: 'succeeded',
  fail: 'dead_lettered',
  retry: 'retried',
  interrupt: 'released',
  release: 'released',
};

export class Completer {
  private readonly completions: MicroBatcher<{ jobId: JobId; status: CompleteResult }, CompleteRef>;

  constructor(
    private readonly store: JobStore,
    batchMax: number,
    // Told of every finalization that found the lease lost, with the finalization's op.
    private readonly onLeaseLost: (job: ClaimedJob, operation: Finalization['op']) => void,
  ) {
    this.completions = new MicroBatcher(
      (refs) => store.completeMany(refs),
      (r) => ({ jobId: r.jobId, status: 'lease_lost' }),
      batchMax,
    );
  }

  // The outcome, and the DLQ reason of a job dead-lettered (for 'fail', whatever the outcome, as reported).
  async finalize(job: ClaimedJob, f: Finalization): Promise<{ outcome: JobOutcome; reason?: DlqReason }> {
    const ref: LeaseRef = { jobId: job.id, leaseId: job.leaseId };
    const status = await this.move(ref, f);
    const reason = f.op === 'fail' ? f.reason : undefined;
    if (status === 'lease_lost') {
      this.onLeaseLost(job, f.op);
      return { outcome: 'lease_lost', reason };
    }
    // Cancelled while it ran, finished before it saw the request: the move put it in the DLQ as 'cancelled'.
    if (status === 'cancelled') return { outcome: 'dead_lettered', reason: 'cancelled' };
    return { outcome: OUTCOME[f.op], reason };
  }

  private async move(ref: LeaseRef, f: Finalization): Promise<CompleteResult> {
    switch (f.op) {
      case 'complete':
        return (await this.completions.submit(f.resultJson === undefined ? ref : { ...ref, resultJson: f.resultJson }))
          .status;
      case 'fail':
        return this.store.fail(ref, f.reason, f.error.slice(0, LIMITS.lastErrorChars));
      case 'retry':
        return this.store.retry(ref, f.runAt, f.error.slice(0, LIMITS.lastErrorChars));
      case 'interrupt':
        return this.store.interrupt(ref, f.error.slice(0, LIMITS.lastErrorChars));
      case 'release':
        return this.store.release(ref);
    }
  }
}

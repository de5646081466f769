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
  RetryWhen,
} from './contract.js';
import { LIMITS, toStorableText } from './validate.js';

// Collects owner-scoped calls made in one event-loop turn into one batch store call (completeMany, startMany):
// batching under load, no delay when idle. Every ref of a batch waits on the batch's one promise (join), not on a
// promise, resolving functions and a queue entry of its own.
export class MicroBatcher<R extends { jobId: JobId }, Ref extends LeaseRef = LeaseRef> {
  private pending: Ref[] = [];
  private answers: Deferred<BatchAnswers<R, Ref>> | undefined;
  private scheduled = false;

  constructor(
    private readonly call: (refs: Ref[]) => Promise<R[]>,
    private readonly lost: (ref: Ref) => R,
    private readonly max: number,
  ) {}

  submit(ref: Ref): Promise<R> {
    return this.join(ref).then((answers) => answers.get(ref));
  }

  // Adds `ref` to the batch being gathered; resolves with the answers of that batch (answers.get(ref)), or rejects
  // with the batch call's error.
  join(ref: Ref): Promise<BatchAnswers<R, Ref>> {
    this.pending.push(ref);
    const answers = (this.answers ??= new Deferred());
    if (this.pending.length >= this.max) void this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
    return answers.promise;
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const batch = this.pending;
    const answers = this.answers;
    this.pending = [];
    this.answers = undefined;
    if (batch.length === 0 || !answers) return;
    try {
      answers.resolve(new BatchAnswers(await this.call(batch), this.lost));
    } catch (err) {
      answers.reject(err);
    }
  }
}

class Deferred<T> {
  readonly promise: Promise<T>;
  resolve!: (value: T) => void;
  reject!: (err: unknown) => void;
  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.promise.catch(() => undefined); // a batch whose every waiter is gone still rejects quietly
  }
}

// A batch call's results by job id; a ref it did not answer is lost (lease_lost). The stores answer in the refs'
// order and the refs ask in it (each waiter resumes in the order it joined), so each answer is first looked for
// where the last one was found; the map by id is made only when that misses (a map per batch cost ~90 bytes a
// job, bench/README.md runs 530-539).
export class BatchAnswers<R extends { jobId: JobId }, Ref extends LeaseRef = LeaseRef> {
  private byId: Map<JobId, R> | undefined;
  private next = 0;

  constructor(
    private readonly results: readonly R[],
    private readonly lost: (ref: Ref) => R,
  ) {}

  get(ref: Ref): R {
    if (!this.byId) {
      const r = this.results[this.next];
      if (r !== undefined && r.jobId === ref.jobId) {
        this.next++;
        return r;
      }
      this.byId = new Map();
      for (const x of this.results) this.byId.set(x.jobId, x);
    }
    return this.byId.get(ref.jobId) ?? this.lost(ref);
  }
}

// Where a job goes from 'processing' (or, for 'release', from 'fetched': claimed, never started).
export type Finalization =
  // archived, with what the handler returned (JSON); or dead-lettered as 'cancelled' when a cancel was requested
  // while it ran
  | { op: 'complete'; resultJson?: string }
  | { op: 'fail'; reason: DlqReason; error: string } // dead-lettered
  | { op: 'retry'; runAt: RetryWhen; error: string } // pending again, due then (a delay: by the server's clock)
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
    if (f.op === 'complete') {
      const status = await this.complete(f.resultJson === undefined ? ref : { ...ref, resultJson: f.resultJson });
      return { outcome: this.completed(job, status), reason: status === 'cancelled' ? 'cancelled' : undefined };
    }
    const status = await this.move(ref, f);
    const reason = f.op === 'fail' ? f.reason : undefined;
    if (status === 'lease_lost') {
      this.onLeaseLost(job, f.op);
      return { outcome: 'lease_lost', reason };
    }
    // Cancelled while it ran, failed before it saw the request: the move put it in the DLQ as 'cancelled'.
    if (status === 'cancelled') return { outcome: 'dead_lettered', reason: 'cancelled' };
    return { outcome: OUTCOME[f.op], reason };
  }

  // A success's move (archived, or dead-lettered as 'cancelled' when a cancel was requested while it ran), batched
  // with the others of this turn; `ref` is sent as it is (jobId, leaseId, resultJson).
  async complete(ref: CompleteRef): Promise<CompleteResult> {
    return (await this.completions.join(ref)).get(ref).status;
  }

  // The same, for a caller that takes its own answer from its batch's (answers.get(ref)): no promise of its own.
  joinCompletion(ref: CompleteRef): Promise<BatchAnswers<{ jobId: JobId; status: CompleteResult }, CompleteRef>> {
    return this.completions.join(ref);
  }

  // Where a success's move left the job: cancelled while it ran, finished before it saw the request, the move put
  // it in the DLQ as 'cancelled'.
  completed(job: ClaimedJob, status: CompleteResult): JobOutcome {
    if (status === 'lease_lost') {
      this.onLeaseLost(job, 'complete');
      return 'lease_lost';
    }
    return status === 'cancelled' ? 'dead_lettered' : 'succeeded';
  }

  private move(ref: LeaseRef, f: Exclude<Finalization, { op: 'complete' }>): Promise<CompleteResult> {
    switch (f.op) {
      case 'fail':
        return this.store.fail(ref, f.reason, storedError(f.error));
      case 'retry':
        return this.store.retry(ref, f.runAt, storedError(f.error));
      case 'interrupt':
        return this.store.interrupt(ref, storedError(f.error));
      case 'release':
        return this.store.release(ref);
    }
  }
}

// A failed attempt's error as the store keeps it: its first LIMITS.lastErrorChars characters, storable (a NUL or lone
// surrogate as U+FFFD). PostgreSQL text holds no NUL: a handler's message with one failed the move itself, and the job
// stayed processing until its lease ran out, every attempt the same.
function storedError(error: string): string {
  return toStorableText(error.slice(0, LIMITS.lastErrorChars));
}

// The claim loop (River: producer.go): claims due jobs (claim and start in one statement) while slots are free, hands
// them to the processor to run, and waits (for a slot, a poll or a wake-up) when it may not claim. Worker runs it for
// as long as it lives; JobProcessor.drain for a time budget (the timer dispatcher).
import type { JobId, JobOutcome, StartedJob, WakeupSource } from './contract.js';
import type { JobLogger } from './registry.js';

// What the claim loop needs of the processor.
export interface ClaimLoopRunner {
  claimAndStart(queues: string[], limit: number): Promise<StartedJob[]>;
  // onJobDone once per job as its outcome is written; onHandlerDone once per job as its handler ends (before that).
  runStarted(
    jobs: StartedJob[],
    onJobDone?: (outcome: JobOutcome, jobId: JobId) => void,
    onHandlerDone?: () => void,
  ): Promise<JobOutcome[]>;
}

export interface ClaimLoopOptions {
  queues: string[];
  concurrency: number;
  claimBatch?: number;
  shouldStop: () => boolean;
  // jobFinished: enough jobs' handlers or finalizations ended for the loop to claim again (at least claimBatch
  // slots free, or nothing held). allFinalized(): resolves once no claimed job is left running
  // or being finalized (at once when none is); nextFinalized(): once the next claimed job is finalized (at once when
  // none is held); each called only by a wait that needs it, so no waiter is left behind.
  // held: how many claimed jobs are running or being finalized as the wait begins.
  // 'poll': the wait's poll interval passed: the loop claims into whatever slots are free, even fewer than claimBatch.
  idleWait: (
    mode: 'idle' | 'slots',
    jobFinished: Promise<void>,
    allFinalized: () => Promise<void>,
    held: number,
    nextFinalized: () => Promise<void>,
  ) => Promise<'stop' | 'continue' | 'poll'>;
  onOutcome?: (o: JobOutcome, jobId: JobId) => void;
  stopWhenIdle?: boolean;
}

// The loop's count of claimed jobs: handlers running, and jobs held (claimed and not yet finalized: running, or
// being completed, retried or dead-lettered). Each change wakes `changed`, and the last finalization the waiters of
// allFinalized().
export class Inflight {
  private running = 0;
  private held = 0;
  // Made when asked for (the loop waits a few times a batch; the counts change twice a job).
  private signal: (() => void) | undefined;
  private changedPromise: Promise<void> | undefined;
  private readonly finalizedWaiters: (() => void)[] = [];
  private readonly nextWaiters: (() => void)[] = [];

  // `changed` settles at a change after which `free(concurrency) >= claimBatch`, or nothing is held: what the claim
  // loop waits for while its slots are taken (waking at every job's end cost a loop pass, a wait's promise and its
  // closures per job, bench/README.md runs 530-539). Without them: at every change.
  constructor(
    private readonly concurrency = Infinity,
    private readonly claimBatch = -Infinity,
  ) {}

  get heldCount(): number {
    return this.held;
  }

  // Settles at the next change of the counts (after which the loop may claim, above).
  get changed(): Promise<void> {
    return (this.changedPromise ??= new Promise<void>((r) => (this.signal = r)));
  }

  // Slots free to claim into: a running handler takes one of `concurrency`, and at most 2 x `concurrency` jobs are
  // held (the next claim overlaps the previous jobs' completion).
  free(concurrency: number): number {
    return Math.min(concurrency - this.running, 2 * concurrency - this.held);
  }

  readonly allFinalized = (): Promise<void> =>
    this.held === 0 ? Promise.resolve() : new Promise<void>((r) => this.finalizedWaiters.push(r));

  readonly nextFinalized = (): Promise<void> =>
    this.held === 0 ? Promise.resolve() : new Promise<void>((r) => this.nextWaiters.push(r));

  // A claimed batch of n jobs. Each job reports its handler's end and its finalization once; giveBack() returns what a
  // batch that failed as a whole never reported.
  claimed(n: number): { handlerDone(): void; finalized(): void; giveBack(): void } {
    this.running += n;
    this.held += n;
    let handlersRunning = n;
    let unreported = n;
    return {
      handlerDone: () => {
        handlersRunning--;
        this.running--;
        this.notify(false);
      },
      finalized: () => {
        unreported--;
        this.held--;
        this.notify(true);
      },
      giveBack: () => {
        this.running -= handlersRunning;
        handlersRunning = 0;
        const given = unreported > 0;
        this.held -= unreported;
        unreported = 0;
        this.notify(given);
      },
    };
  }

  private notify(finalized: boolean): void {
    const s = this.signal;
    if (s && (this.held === 0 || this.free(this.concurrency) >= this.claimBatch)) {
      this.signal = this.changedPromise = undefined;
      s();
    }
    if (finalized) for (const r of this.nextWaiters.splice(0)) r();
    if (this.held === 0) for (const r of this.finalizedWaiters.splice(0)) r();
  }
}

// Claims and runs jobs, keeping at most `concurrency` handlers (jobs, not batches) running. Once jobs are running it
// claims again only when at least `claimBatch` slots are free (default half the concurrency: claims of a quarter made
// six Worker processes on one queue slower than one, bench:workers run 56), so a busy loop claims and completes in
// batches instead of one round trip per job. A slot is free once its handler has finished: the next claim overlaps
// the previous jobs' completion (their round trip and commit), with at most 2 x `concurrency` jobs held in all
// (running or being finalized). Claims start the jobs in the same statement (claimAndStart): what this loop claims it
// runs at once, so the separate 'fetched' step would only cost a row version and a round trip per job.
// (processById keeps claim + start: its claim may come back as not_claimed.)
export async function runClaimLoop(runner: ClaimLoopRunner, log: JobLogger, opts: ClaimLoopOptions): Promise<void> {
  const concurrency = Math.max(1, Math.floor(opts.concurrency));
  const claimBatch = Math.max(1, Math.min(concurrency, opts.claimBatch ?? Math.ceil(concurrency / 2)));
  const batches = new Set<Promise<void>>();
  const inflight = new Inflight(concurrency, claimBatch);
  // A poll came while fewer than claimBatch slots were free: claim into them all the same. Long jobs holding more than
  // concurrency - claimBatch slots otherwise kept the rest idle for as long as they ran, due jobs or not.
  let polled = false;
  while (!opts.shouldStop()) {
    const free = inflight.free(concurrency);
    let idle = false;
    const least = inflight.heldCount === 0 || polled ? 1 : claimBatch;
    polled = false;
    if (free >= least) {
      let jobs: StartedJob[] = [];
      try {
        jobs = await runner.claimAndStart(opts.queues, free);
      } catch (err) {
        log.error('claim failed', { error: String(err) });
      }
      if (jobs.length > 0) {
        const batch = inflight.claimed(jobs.length);
        const p: Promise<void> = runner
          .runStarted(
            jobs,
            (o, jobId) => {
              batch.finalized();
              opts.onOutcome?.(o, jobId);
            },
            batch.handlerDone,
          )
          .then(() => undefined)
          .catch((err) => log.error('batch failed', { error: String(err) }))
          .finally(() => {
            batches.delete(p);
            batch.giveBack(); // a batch that failed as a whole gives its slots back too
          });
        batches.add(p);
        if (jobs.length === free) continue; // there may be more due: claim again as soon as slots free up
      } else if (inflight.heldCount === 0 && opts.stopWhenIdle) break;
      idle = true; // fewer due jobs than free slots
    }
    // 'slots': wait for a running job to finish. 'idle': nothing (more) is due; wait for the poll or a wake-up.
    const wait = opts.idleWait(
      idle ? 'idle' : 'slots',
      inflight.changed,
      inflight.allFinalized,
      inflight.heldCount,
      inflight.nextFinalized,
    );
    const woke = await wait;
    if (woke === 'stop') break;
    polled = woke === 'poll';
  }
  await Promise.allSettled([...batches]);
}

// What the long-running Worker drives: the processor's claim loop and its graceful stop.
export interface WorkerProcessor {
  runSlots(opts: ClaimLoopOptions): Promise<void>;
  shutdown(graceMs?: number): Promise<void>;
}

// A long-running worker (npm start, tests): keeps up to `concurrency` jobs running. It polls every pollIntervalMs
// when idle, and wakes at once when `wakeups` (e.g. PostgreSQL LISTEN/NOTIFY on enqueue) says jobs arrived.
export class Worker<P extends WorkerProcessor = WorkerProcessor> {
  private loop: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  private wokenWhileBusy = false; // a wake-up that arrived while the loop was claiming: do not sleep on it
  private awaitingFinalized = false; // an idle wait asked to be woken when the loop's next held job is finalized
  private slotsFreed: Promise<void> | undefined; // the slots waits' promise a wake-up is chained to
  private unsubscribe: (() => Promise<void>) | undefined;

  constructor(
    readonly processor: P,
    private readonly opts: {
      queues: string[];
      concurrency: number;
      claimBatch?: number;
      pollIntervalMs?: number;
      log?: JobLogger;
      wakeups?: WakeupSource;
    },
  ) {}

  start(): void {
    if (this.loop) return;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    if (this.opts.wakeups) {
      try {
        this.unsubscribe = await this.opts.wakeups.subscribe(this.opts.queues, () => {
          if (this.wake) this.wake();
          else this.wokenWhileBusy = true;
        });
      } catch (err) {
        this.opts.log?.warn('wake-up subscription failed; polling only', { error: String(err) });
      }
    }
    try {
      await this.processor.runSlots({
        queues: this.opts.queues,
        concurrency: this.opts.concurrency,
        claimBatch: this.opts.claimBatch,
        shouldStop: () => this.stopped,
        idleWait: (mode, jobFinished, _allFinalized, held, nextFinalized) =>
          new Promise<'stop' | 'continue' | 'poll'>((resolve) => {
            if (this.stopped) return resolve('stop');
            if (mode === 'idle' && this.wokenWhileBusy) {
              this.wokenWhileBusy = false;
              return resolve('continue');
            }
            // Slots taken: finishing jobs free enough of them (or stop), or the poll interval, which claims into
            // whatever is free then, fewer than a claim's batch (long jobs holding the rest kept those few idle for as
            // long as they ran). Idle: the poll interval or a wake-up (or stop).
            const t = setTimeout(() => resolve('poll'), this.opts.pollIntervalMs ?? 500);
            this.wake = () => {
              clearTimeout(t);
              resolve('continue');
            };
            // Once per promise: a poll ends a slots wait before it settles, and the next wait is on the same one.
            if (mode === 'slots' && jobFinished !== this.slotsFreed) {
              this.slotsFreed = jobFinished;
              void jobFinished.then(() => this.wake?.());
            }
            // Idle while it still holds jobs: a claim came back short, which is also what a queue at its concurrency
            // limit answers. Claim again as soon as one of them is finalized (its slot may be the one the queue
            // waits for) instead of a poll interval later: one claim per completion batch, and only while claims
            // come back short. (Waiting for the loop to empty instead held a limited queue to its limit per poll
            // interval whenever the loop also held a long job of another queue: 3 jobs per 400 ms, not 60 a second.)
            // One such waiter at a time.
            else if (held > 0 && !this.awaitingFinalized) {
              this.awaitingFinalized = true;
              void nextFinalized().then(() => {
                this.awaitingFinalized = false;
                if (this.wake) this.wake();
                else this.wokenWhileBusy = true;
              });
            }
          }).finally(() => {
            this.wake = undefined;
          }),
      });
    } finally {
      await this.unsubscribe?.().catch(() => undefined);
    }
  }

  async stop(graceMs = 10_000): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.processor.shutdown(graceMs);
    await this.loop;
  }
}

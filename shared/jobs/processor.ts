// The processor: start a claimed job, run its handler (executor.ts) with heartbeats outside any transaction, then
// write where it goes: complete, retry or dead-letter (completer.ts). Every store call is fenced by the claim's
// lease; 'lease_lost' ends our interest in the job. The claim loop that feeds it is producer.ts (River's producer /
// executor / completer split); this file keeps the job's path through them, and shutdown.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import {
  JOB_OUTCOMES,
  type ClaimedJob,
  type CompleteRef,
  type DlqReason,
  type HeartbeatResult,
  type JobId,
  type JobLink,
  type JobOutcome,
  type JobStore,
  type LeaseRef,
  type StartResult,
  type StartedJob,
  type WakeupSource,
} from './contract.js';
import { Completer, MicroBatcher, type Finalization } from './completer.js';
import { AttemptLog, DEFAULT_JOB_LOG_LINES } from './jobLog.js';
import { DEFAULT_MAX_RESULT_BYTES, normalizeProgress, type JobProgress, type ProgressInput } from './progress.js';
import {
  AttemptAbort,
  AttemptTimeouts,
  RunningJobs,
  TypeConcurrencyLimit,
  attemptResult,
  callHandler,
  leaseTimes,
  parsePayload,
  runAttempt,
  type AbortReason,
  type AttemptResult,
  type AttemptRun,
  type RunningJob,
  type TimedAttempt,
} from './executor.js';
import { decideAfterFailure, effectiveMaxAttempts } from './failure.js';
import { runClaimLoop, type ClaimLoopOptions } from './producer.js';
import { WorkerPresence, type PresenceOptions } from './presence.js';
import { silentLogger, type HandlerRegistry, type JobLogger, type RegisteredHandler } from './registry.js';
import { MAX_RETRY_DELAY_MS } from './validate.js';
import { DEFAULT_BACKOFF } from './backoff.js';

// The processor's public surface, whatever part of it declares a name (importers use this module).
export { JOB_OUTCOMES, type JobOutcome, type WakeupSource };
export { AttemptAbort, JobAbortedError, resultOf, type AbortReason } from './executor.js';
export { decideAfterFailure, effectiveMaxAttempts, type FailureDecision } from './failure.js';
export { Worker } from './producer.js';

// Hooks for telemetry and tests; every hook is optional and must not throw.
export interface ProcessorEvents {
  onOutcome?(e: {
    job: ClaimedJob;
    outcome: JobOutcome;
    reason?: DlqReason;
    durationMs: number;
    attempt: number;
    // No handler for the job's type in this process: the attempt was retried (or, its attempts used up,
    // dead-lettered as 'exhausted') without running anything.
    unregisteredType?: boolean;
  }): void;
  // operation: the store call that found the lease gone, or 'expired': the worker gave the job up itself, no
  // heartbeat confirmed within its lease (the handler is aborted with reason 'lease_expired').
  onLeaseLost?(e: { job: ClaimedJob; operation: string }): void;
}

export interface ProcessorOptions {
  store: JobStore;
  registry: HandlerRegistry;
  workerId?: string;
  leaseSeconds?: number; // how long a claim stays ours before it is started (default 60)
  // Default 10 s; a job whose queue's zombie timeout is under 4 intervals beats 4 times a timeout (leaseTimes).
  heartbeatIntervalMs?: number;
  log?: JobLogger;
  events?: ProcessorEvents;
  completionBatchMax?: number; // successes finalised together through completeMany (default 200)
  progressIntervalMs?: number; // ctx.progress() and ctx.log's job log write at most this often per job (default 1 s)
  maxResultBytes?: number; // a handler's result over this is refused (default DEFAULT_MAX_RESULT_BYTES, 64 KiB)
  jobLogLines?: number; // ctx.log lines kept with each job (default 100; 0: the process log only)
  // The worker registry's row of this processor (presence.ts); none: the processor is not listed there.
  presence?: PresenceOptions;
}

export function defaultWorkerId(): string {
  return `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

// A job whose type has no handler in this process: an ordinary error, retried under the job's retry policy.
export class UnregisteredTypeError extends Error {
  constructor(type: string, where: string, registered: string[]) {
    // The list is cut: the error is stored with the job (an attempt keeps its first 2,000 characters).
    const shown = registered.slice(0, MAX_TYPES_NAMED).join(', ') || 'none';
    const more = registered.length > MAX_TYPES_NAMED ? ` and ${registered.length - MAX_TYPES_NAMED} more` : '';
    super(
      `no handler is registered for job type "${type}" on ${where} (registered: ${shown}${more}); ` +
        'retried: an instance with the handler (a newer build, in a rolling deploy) may run it',
    );
    this.name = 'UnregisteredTypeError';
  }
}
const MAX_TYPES_NAMED = 40;
// What an unregistered type's attempt is retried under (its handler's options are unknown here): a backoff sized for
// a rolling deploy, not for a failing handler. From 1 minute, doubling: a queue's default 5 attempts last ~8-15 min
// before the DLQ, time for a new instance to come up; the default backoff (from 1 s) would use them up in seconds.
export const UNREGISTERED_TYPE_BACKOFF = { baseMs: 60_000, maxMs: DEFAULT_BACKOFF.maxMs };
const UNREGISTERED_OPTIONS = { backoff: UNREGISTERED_TYPE_BACKOFF, retryOnTimeout: false, timeoutMs: 0 };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// The writes one attempt makes while its handler runs (ctx.progress, ctx.log's lines): at most one per interval, one
// after the other (a write waits for the one before it, so an older value never lands after a newer one), each
// taking what is pending when it starts. `take` returns the write to make, or undefined when nothing is pending; the
// writes it returns must not reject.
class AttemptWrites {
  private chain: Promise<void> = Promise.resolve();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastWriteAt = -Infinity;

  constructor(
    private readonly intervalMs: number,
    private readonly take: () => (() => Promise<void>) | undefined,
  ) {}

  // Something is pending: written when the interval since the last write has passed (atOnceWhenDue: now, in this
  // call; else on a timer, which gathers what the same turn adds).
  request(opts: { atOnceWhenDue?: boolean } = {}): void {
    if (this.timer !== undefined) return;
    const wait = this.lastWriteAt + this.intervalMs - Date.now();
    if (wait <= 0 && opts.atOnceWhenDue) void this.now();
    else this.timer = setTimeout(() => void this.now(), Math.max(0, wait));
  }

  // Writes what is pending now; resolves once every write so far has ended.
  now(): Promise<void> {
    this.cancel();
    const write = this.take();
    if (!write) return this.chain;
    this.lastWriteAt = Date.now();
    this.chain = this.chain.then(write);
    return this.chain;
  }

  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

// Jobs claimAndStart returned, with when their claim was sent (performance.now()).
type ClaimedBatch = StartedJob[] & { sentAt?: number };

// What a JobRun asks of its processor (made once per processor: the runs share it).
interface RunHost {
  heartbeat(run: JobRun): Promise<void>; // ctx.heartbeat: one job, at once
  leaseExpired(run: JobRun): void;
  jobLog(run: JobRun): JobLogWriter;
  progressReporter(run: JobRun): ProgressReporter;
  parents(run: JobRun): Promise<JobLink[]>;
}

interface JobLogWriter {
  logger(): JobLogger;
  flush(): Promise<void>;
}

interface ProgressReporter {
  report(input: ProgressInput): void;
  stop(): void;
}

// One started job in this processor, from its start until its outcome is written: its abort switch (it is the
// attempt's AttemptAbort), its entry among the running jobs (heartbeats), the hooks of its handler's ctx, and the
// ref its completion is batched with. One object per job where a closure per hook, an entry and refs were made
// (bench/README.md, runs 130-135).
class JobRun extends AttemptAbort implements AttemptRun, RunningJob, CompleteRef {
  readonly jobId: JobId;
  readonly leaseId: string;
  resultJson: string | undefined = undefined; // what the handler returned, for completeMany
  nextBeatAt: number;
  beatEveryMs: number;
  // The lease (executor.ts, leaseTimes): the queue's zombie timeout, 0 once the handler has ended (no deadline then),
  // and the performance.now() time it is given up at unless a heartbeat sent before then is confirmed. A heartbeat
  // answers with the queue's timeout as it is now: the newest beat's changes it (timeoutFrom: when that beat was sent).
  private leaseMs: number;
  private leaseMarginMs: number;
  private timeoutFrom = -Infinity;
  leaseDeadline = Infinity;
  timeoutAt = 0;
  timeoutPrev: TimedAttempt | undefined = undefined;
  timeoutNext: TimedAttempt | undefined = undefined;
  timeoutList: TimedAttempt['timeoutList'] = undefined;
  // ctx.progress and ctx.log's job log, made on first use: a job that uses neither costs nothing more.
  progressReporter: ProgressReporter | undefined = undefined;
  jobLogWriter: JobLogWriter | undefined = undefined;

  constructor(
    private readonly host: RunHost,
    readonly job: ClaimedJob,
    readonly attempt: number,
    readonly startedAt: number,
    private readonly heartbeatIntervalMs: number,
    leaseFrom: number, // performance.now() when the statement that started the job (its first heartbeat) was sent
  ) {
    super();
    this.jobId = job.id;
    this.leaseId = job.leaseId;
    this.leaseMs = job.queueZombieTimeoutSeconds * 1000;
    const { beatEveryMs, marginMs } = leaseTimes(heartbeatIntervalMs, this.leaseMs);
    this.beatEveryMs = beatEveryMs;
    this.leaseMarginMs = marginMs;
    // The first beat is due an interval after the lease began (the claim or start was sent), not after its answer
    // came: a claim answered late (a loaded pool, a slow path) otherwise left its first beat due after the lease's
    // deadline.
    this.nextBeatAt = startedAt + Math.max(0, beatEveryMs - (performance.now() - leaseFrom));
    this.confirmed(leaseFrom);
  }

  // A heartbeat sent at `sentAt` (performance.now()) was confirmed by the store: the lease runs from then, under
  // the queue's zombie timeout as the store read it (zombieTimeoutSeconds; none: the one known). A changed timeout
  // (an operator changed the queue; the newest beat's answer wins) changes the beat interval and the margin, and the
  // deadline is this beat's lease, shorter or longer: the rescue reads the queue's current timeout, from a
  // heartbeat_at no earlier than sentAt. Returns whether the beat interval changed.
  confirmed(sentAt: number, zombieTimeoutSeconds?: number): boolean {
    if (!(this.leaseMs > 0) || this.reason) return false;
    const ms = zombieTimeoutSeconds === undefined ? this.leaseMs : zombieTimeoutSeconds * 1000;
    if (ms > 0 && ms !== this.leaseMs && sentAt >= this.timeoutFrom) {
      this.timeoutFrom = sentAt;
      const { beatEveryMs, marginMs } = leaseTimes(this.heartbeatIntervalMs, ms);
      const changed = beatEveryMs !== this.beatEveryMs;
      this.leaseMs = ms;
      this.leaseMarginMs = marginMs;
      this.beatEveryMs = beatEveryMs;
      this.nextBeatAt = Math.min(this.nextBeatAt, Date.now() + beatEveryMs);
      this.leaseDeadline = sentAt + ms - marginMs;
      return changed;
    }
    if (zombieTimeoutSeconds !== undefined && sentAt > this.timeoutFrom) this.timeoutFrom = sentAt;
    this.leaseDeadline = Math.max(
      this.leaseDeadline === Infinity ? -Infinity : this.leaseDeadline,
      sentAt + this.leaseMs - this.leaseMarginMs,
    );
    return false;
  }

  // The handler has ended: nothing is left to abort, so the lease has no deadline any more (the moves that follow
  // are fenced by it).
  handlerEnded(): void {
    this.nextBeatAt = Infinity;
    this.leaseMs = 0;
    this.leaseDeadline = Infinity;
  }

  expire(): void {
    this.host.leaseExpired(this);
  }

  // ctx.heartbeat: settles with the attempt's abort too, so a handler awaiting a beat the store answers late (an
  // outage) stops with its signal's error when its lease expires, not seconds after another worker took the job.
  heartbeat(): Promise<void> {
    if (this.reason) return this.aborted;
    return Promise.race([this.host.heartbeat(this), this.aborted]); // not race(): that one is the handler's call's
  }

  log(): JobLogger {
    return (this.jobLogWriter ??= this.host.jobLog(this)).logger();
  }

  progress(input: ProgressInput): void {
    (this.progressReporter ??= this.host.progressReporter(this)).report(input);
  }

  parents(): Promise<JobLink[]> {
    return this.host.parents(this);
  }
}

// The jobs of one runBatch or runStarted call: each job's outcome in order, and the promise of them all, without a
// promise, a reaction and a callback per job. It settles once every job has ended: with every outcome, or with the
// first error. Not at the first error, as Promise.all would: the claim loop gives a failed batch's slots back when
// it settles, and the batch's other jobs were still running then (their handlers and finalizations reported later
// counted the slots off a second time, and the loop ran more jobs than its concurrency from then on).
class RunBatch {
  readonly outcomes: JobOutcome[];
  readonly done: Promise<JobOutcome[]>;
  private left: number;
  private error: { err: unknown } | undefined;
  private resolve!: (outcomes: JobOutcome[]) => void;
  private reject!: (err: unknown) => void;

  constructor(
    n: number,
    readonly onJobDone: ((outcome: JobOutcome, jobId: JobId) => void) | undefined,
    readonly onHandlerDone: (() => void) | undefined,
  ) {
    this.outcomes = new Array<JobOutcome>(n);
    this.left = n;
    this.done = new Promise<JobOutcome[]>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  settled(i: number, outcome: JobOutcome): void {
    this.outcomes[i] = outcome;
    this.ended();
  }

  // A job whose store call failed: it ends here, without an outcome.
  failed(err: unknown): void {
    this.error ??= { err };
    this.ended();
  }

  private ended(): void {
    if (--this.left > 0) return;
    if (this.error) this.reject(this.error.err);
    else this.resolve(this.outcomes);
  }
}

export class JobProcessor {
  readonly workerId: string;
  private readonly store: JobStore;
  private readonly registry: HandlerRegistry;
  private readonly leaseSeconds: number;
  private readonly heartbeatIntervalMs: number;
  private readonly log: JobLogger;
  private readonly events: ProcessorEvents;
  private readonly completer: Completer;
  private readonly starts: MicroBatcher<StartResult & { jobId: JobId }>;
  private readonly running: RunningJobs<JobRun>;
  private readonly typeLimits = new Map<string, TypeConcurrencyLimit>();
  private readonly timeouts = new AttemptTimeouts();
  private readonly progressIntervalMs: number;
  private readonly maxResultBytes: number;
  private readonly jobLogLines: number;
  private stopping = false;
  private jobsDone = 0;
  private readonly presence: WorkerPresence | undefined;
  private readonly presenceOptions: PresenceOptions | undefined;
  private presenceStopped: Promise<void> | undefined;
  private readonly host: RunHost = {
    heartbeat: (run) => this.heartbeat(run),
    leaseExpired: (run) => this.leaseExpired(run),
    jobLog: (run) => this.jobLog(run),
    progressReporter: (run) => this.progressReporter(run),
    parents: async (run) => (await this.store.jobLinks(run.jobId)).filter((l) => l.relation === 'parent'),
  };

  constructor(opts: ProcessorOptions) {
    this.store = opts.store;
    this.registry = opts.registry;
    this.workerId = opts.workerId ?? defaultWorkerId();
    this.leaseSeconds = opts.leaseSeconds ?? 60;
    this.heartbeatIntervalMs = opts.heartbeatIntervalMs ?? 10_000;
    this.log = opts.log ?? silentLogger;
    this.events = opts.events ?? {};
    this.progressIntervalMs = opts.progressIntervalMs ?? 1_000;
    this.maxResultBytes = opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
    this.jobLogLines = opts.jobLogLines ?? DEFAULT_JOB_LOG_LINES;
    this.running = new RunningJobs<JobRun>(this.log, (due) => this.beatMany(due));
    this.presenceOptions = opts.presence;
    this.presence = opts.presence
      ? new WorkerPresence(opts.store, this.workerId, opts.presence, () => this.jobsDone, this.log)
      : undefined;
    const batchMax = opts.completionBatchMax ?? 200;
    this.completer = new Completer(opts.store, batchMax, (job, op) => this.leaseLost(job, op));
    // Single-job starts (the queue-message path: one invocation per job) made in the same turn share one startMany.
    this.starts = new MicroBatcher(
      (refs) => opts.store.startMany(refs),
      (r) => ({ jobId: r.jobId, status: 'lease_lost', attempt: 0 }),
      batchMax,
    );
  }

  get inFlight(): number {
    return this.running.size;
  }

  // An operator cancelled this job (the store has its cancel_requested flag): when its handler runs in this
  // process, stop it now instead of at the next heartbeat. Returns whether it was running here.
  requestCancel(jobId: JobId): boolean {
    const r = this.running.get(jobId);
    if (!r) return false;
    r.abort('cancelled');
    return true;
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  // This process is doing something (a job, a timer's pass): refresh the worker registry's row when it is due
  // (presence.ts: at most once per KEEL_WORKER_REFRESH_MS, never awaited, never in a claim's or completion's path).
  touchPresence(): void {
    if (!this.stopping) this.presence?.touch();
  }

  // The registry write in flight, if any, has ended (tests).
  presenceSettled(): Promise<void> {
    return this.presence?.settled() ?? Promise.resolve();
  }

  // Claim and start up to `limit` due jobs under this processor's worker id (one statement; see runClaimLoop).
  // The jobs carry when the claim was sent (their leases run from then, as their heartbeat_at does): runStarted reads it.
  async claimAndStart(queues: string[], limit: number): Promise<StartedJob[]> {
    if (this.stopping || limit < 1) return [];
    const sentAt = performance.now();
    const jobs: ClaimedBatch = await this.store.claimAndStart({
      workerId: this.workerId,
      queues,
      limit,
      leaseSeconds: this.leaseSeconds,
    });
    jobs.sentAt = sentAt;
    return jobs;
  }

  // Claim one job by id (queue-message path) and run it.
  async processById(jobId: JobId): Promise<JobOutcome | 'not_claimed'> {
    if (this.stopping) return 'not_claimed';
    this.touchPresence();
    const job = await this.store.claimById(jobId, this.workerId, this.leaseSeconds);
    if (!job) return 'not_claimed';
    return this.runClaimed(job);
  }

  // processById that also says which queue the job was of (none when not claimed): the queue runner hands a limited
  // queue's freed slot on (shared/app/slots.ts).
  async processByIdOf(jobId: JobId): Promise<{ outcome: JobOutcome | 'not_claimed'; queue?: string }> {
    if (this.stopping) return { outcome: 'not_claimed' };
    this.touchPresence();
    const job = await this.store.claimById(jobId, this.workerId, this.leaseSeconds);
    if (!job) return { outcome: 'not_claimed' };
    return { outcome: await this.runClaimed(job), queue: job.queue };
  }

  async runClaimed(job: ClaimedJob): Promise<JobOutcome> {
    const [outcome] = await this.runBatch([job]);
    return outcome!;
  }

  // Start a batch of claimed jobs with one store call, then run them concurrently. onJobDone fires once per job as
  // soon as that job is finished (so callers can count jobs, not batches, against their concurrency limit).
  async runBatch(jobs: ClaimedJob[], onJobDone?: (outcome: JobOutcome) => void): Promise<JobOutcome[]> {
    if (jobs.length === 0) return [];
    const done = (o: JobOutcome): JobOutcome => {
      if (onJobDone) this.safe(() => onJobDone(o));
      return o;
    };
    // Shutdown began while the claims were in flight: give the jobs back unstarted.
    if (this.stopping)
      return Promise.all(
        jobs.map((job) => this.completer.finalize(job, { op: 'release' }).then((r) => done(r.outcome))),
      );
    const sentAt = performance.now(); // the start is the jobs' first heartbeat: their leases run from here
    const started =
      jobs.length === 1
        ? await this.starts.submit({ jobId: jobs[0]!.id, leaseId: jobs[0]!.leaseId }).then((s) => [s])
        : await this.store.startMany(jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
    const batch = new RunBatch(jobs.length, onJobDone, undefined);
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i]!;
      const s = started[i]!;
      if (s.status === 'lease_lost') {
        this.leaseLost(job, 'start');
        this.jobEnded(batch, i, job, 'lease_lost');
      } else void this.execute(job, s.attempt, batch, i, sentAt);
    }
    return batch.done;
  }

  // Run jobs claimAndStart already started (processing under their leases, attempt counted). Jobs whose claim was in
  // flight when shutdown began are handed back as interrupted (execute), handler not run, their attempt given back.
  runStarted(
    jobs: StartedJob[],
    onJobDone?: (outcome: JobOutcome, jobId: JobId) => void,
    onHandlerDone?: () => void,
  ): Promise<JobOutcome[]> {
    if (jobs.length === 0) return Promise.resolve([]);
    // Jobs this processor's claimAndStart claimed carry when the claim was sent; others' leases run from now.
    const sentAt = (jobs as ClaimedBatch).sentAt ?? performance.now();
    const batch = new RunBatch(jobs.length, onJobDone, onHandlerDone);
    for (let i = 0; i < jobs.length; i++) void this.execute(jobs[i]!, jobs[i]!.attempt, batch, i, sentAt);
    return batch.done;
  }

  // The claim loop (producer.ts) over this processor.
  runSlots(opts: ClaimLoopOptions): Promise<void> {
    return runClaimLoop(this, this.log, opts);
  }

  // Claim due jobs and run them until the time budget is spent (timer dispatcher path). `concurrency` is the most
  // jobs whose handlers run at once; claims are batched (see runClaimLoop).
  async drain(opts: { queues: string[]; budgetMs: number; concurrency: number; claimBatch?: number }): Promise<{
    processed: number;
    outcomes: Record<JobOutcome, number>;
    rescheduled: JobId[];
  }> {
    const deadline = Date.now() + opts.budgetMs;
    this.touchPresence();
    const outcomes = Object.fromEntries(JOB_OUTCOMES.map((o) => [o, 0])) as Record<JobOutcome, number>;
    const rescheduled: JobId[] = [];
    let processed = 0;
    await this.runSlots({
      queues: opts.queues,
      concurrency: opts.concurrency,
      claimBatch: opts.claimBatch,
      shouldStop: () => this.stopping || Date.now() >= deadline,
      stopWhenIdle: true,
      onOutcome: (o, jobId) => {
        outcomes[o]++;
        processed++;
        if (o === 'retried' || o === 'released') rescheduled.push(jobId);
      },
      idleWait: async (mode, jobFinished, allFinalized) => {
        // Slots taken: wake when jobs free enough of them. Nothing due while jobs run: poll again within 50 ms, or as
        // soon as the last claimed job is finalized, so the drain ends when its work is committed, not up to 50 ms
        // after.
        // The timer is cleared when a job finishes first, so no wait outlives drain().
        const left = Math.max(0, deadline - Date.now());
        let timer: ReturnType<typeof setTimeout> | undefined;
        const timeUp = new Promise<void>((r) => (timer = setTimeout(r, mode === 'slots' ? left : Math.min(50, left))));
        await Promise.race([mode === 'slots' ? jobFinished : allFinalized(), timeUp]);
        clearTimeout(timer);
        return 'continue';
      },
    });
    return { processed, outcomes, rescheduled };
  }

  // Stop taking work: wait up to graceMs for running handlers, then abort the rest with reason 'shutdown'; then
  // remove this worker's registry row (once, whoever calls first).
  async shutdown(graceMs = 10_000): Promise<void> {
    this.stopping = true;
    const finished = await Promise.race([this.running.whenEmpty().then(() => true), sleep(graceMs).then(() => false)]);
    if (!finished) {
      for (const r of this.running.values()) r.abort('shutdown');
      await this.running.whenEmpty();
    }
    if (this.presence) await (this.presenceStopped ??= this.presence.stop());
  }

  private leaseLost(job: ClaimedJob, operation: string): void {
    this.log.warn('lease lost', { jobId: job.id, queue: job.queue, type: job.type, operation });
    this.safe(() => this.events.onLeaseLost?.({ job, operation }));
  }

  private safe(fn: () => void): void {
    try {
      fn();
    } catch {
      // telemetry hooks must never break job processing
    }
  }

  private report(
    job: ClaimedJob,
    attempt: number,
    startedAt: number,
    outcome: JobOutcome,
    reason?: DlqReason,
    unregisteredType?: boolean,
  ): JobOutcome {
    // Attempts this process finished (the registry's jobsDone): not a lost lease, not a job handed back unrun.
    if (outcome === 'succeeded' || outcome === 'retried' || outcome === 'dead_lettered') this.jobsDone++;
    const onOutcome = this.events.onOutcome;
    if (onOutcome) {
      // Not through safe(): a closure per job.
      try {
        const durationMs = Date.now() - startedAt;
        onOutcome.call(this.events, { job, outcome, reason, durationMs, attempt, unregisteredType });
      } catch {
        // telemetry hooks must never break job processing
      }
    }
    return outcome;
  }

  // The type's concurrency limit in this instance, if its handler sets one.
  private typeLimit(type: string, registered: RegisteredHandler): TypeConcurrencyLimit | undefined {
    const limit = registered.options.concurrency;
    if (limit === undefined) return undefined;
    let slots = this.typeLimits.get(type);
    if (!slots) this.typeLimits.set(type, (slots = new TypeConcurrencyLimit(limit)));
    return slots;
  }

  // A job of a batch has its outcome (written, or lost): tell the caller, then the batch.
  private jobEnded(batch: RunBatch, i: number, job: ClaimedJob, outcome: JobOutcome): void {
    const onJobDone = batch.onJobDone;
    if (onJobDone) {
      try {
        onJobDone(outcome, job.id);
      } catch {
        // a caller's callback must never break job processing
      }
    }
    batch.settled(i, outcome);
  }

  private handlerEnded(batch: RunBatch): void {
    const onHandlerDone = batch.onHandlerDone;
    if (onHandlerDone) {
      try {
        onHandlerDone();
      } catch {
        // as above
      }
    }
  }

  // One started job, the i-th of its batch: run its attempt, then finalize it; its outcome goes to the batch (an
  // error, from a store call that failed, fails the batch). The batch's onHandlerDone fires once, as soon as the
  // handler is no longer running (before the job is finalized). One async function a job: each layer of them cost
  // a promise, a frame and an await's closures per job.
  private async execute(
    job: ClaimedJob,
    attempt: number,
    batch: RunBatch,
    i: number,
    leaseFrom: number,
  ): Promise<void> {
    const startedAt = Date.now();
    const registered = this.registry.get(job.type);
    let run: JobRun | undefined;
    let handlerRunning = true;
    let outcome: JobOutcome;
    try {
      if (!registered) {
        handlerRunning = false;
        this.handlerEnded(batch);
        outcome = await this.unregistered(job, attempt, startedAt);
      } else {
        run = new JobRun(this.host, job, attempt, startedAt, this.heartbeatIntervalMs, leaseFrom);
        this.touchPresence();
        this.running.add(run);
        // Started by a claim that was in flight when shutdown began: hand it back (interrupt) instead of running it.
        if (this.stopping) run.fire('shutdown');
        // The statement that started it answered after its lease had run out (a slow or partitioned network, a
        // stalled process): the rescue may have handed it to another worker already. Give it up unrun, as the beat
        // timer would at its next tick, instead of starting a handler that tick then aborts (a second run meanwhile).
        else if (performance.now() >= run.leaseDeadline) {
          run.leaseDeadline = Infinity; // given up once (the timer skips it)
          run.expire();
        }
        const typeLimit = this.typeLimit(job.type, registered);
        let result: AttemptResult;
        if (typeLimit) result = await runAttempt(run, registered, this.maxResultBytes, typeLimit, this.timeouts);
        else {
          // runAttempt without a slot to wait for, in this async function (one frame and one await fewer a job).
          try {
            const pending = callHandler(run, registered, parsePayload(registered, job.payload), this.timeouts);
            result = attemptResult(run, pending && (await pending), this.maxResultBytes);
          } catch (err) {
            result = { ok: false, error: err };
          } finally {
            this.timeouts.stop(run);
          }
        }
        run.handlerEnded(); // no heartbeats (nor lease deadline) while the job is finalized
        run.progressReporter?.stop(); // a progress write still throttled is dropped: the job's outcome says more
        handlerRunning = false;
        this.handlerEnded(batch);
        // The attempt's last log lines reach the job before its final move carries them to the archive or the DLQ.
        // After an expired lease the store may be out of reach and the slot must not wait on it: they are sent
        // unawaited, under the lease like every log write (fenced: the job's log gets them while the job is still
        // this attempt's, before the rescue moves it; once it has, they are refused and stay in the process log).
        if (run.jobLogWriter) {
          if (run.reason !== 'lease_expired') await run.jobLogWriter.flush();
          else void run.jobLogWriter.flush();
        }
        if (result.ok) {
          // The run is the completion's ref (jobId, leaseId, resultJson): successes are batched (completeMany).
          run.resultJson = result.resultJson;
          const { status } = (await this.completer.joinCompletion(run)).get(run);
          const o = this.completer.completed(job, status);
          outcome = this.report(job, attempt, startedAt, o, status === 'cancelled' ? 'cancelled' : undefined);
        } else {
          const next = this.afterFailure(job, attempt, registered, run.reason, result.error);
          // A lost or expired lease: someone else owns the job now, or may at any moment; touch nothing (the rescue
          // moves an expired one, this attempt counted).
          if (!next) outcome = this.report(job, attempt, startedAt, 'lease_lost');
          else outcome = await this.finalize(job, attempt, startedAt, next);
        }
      }
    } catch (err) {
      batch.failed(err);
      return;
    } finally {
      if (run) this.running.delete(run); // shutdown waits for this: the job's outcome is written
      if (handlerRunning) this.handlerEnded(batch);
    }
    this.jobEnded(batch, i, job, outcome);
  }

  private async finalize(
    job: ClaimedJob,
    attempt: number,
    startedAt: number,
    f: Finalization,
    unregisteredType?: boolean,
  ): Promise<JobOutcome> {
    const { outcome, reason } = await this.completer.finalize(job, f);
    return this.report(job, attempt, startedAt, outcome, reason, unregisteredType);
  }

  // A job of a type this process has no handler for. In a rolling deploy that is an older instance claiming a type
  // only the new build has, so it is an ordinary failed attempt (River: an unregistered kind is a retryable error):
  // retried after the default backoff while the job's attempts (its own, else its queue's: the handler's option is
  // unknown here) last, then dead-lettered as `exhausted` with this error. The attempt counts, so queues served only
  // by instances without the type still end the job in the DLQ, and the backoff keeps it from spinning.
  private unregistered(job: ClaimedJob, attempt: number, startedAt: number): Promise<JobOutcome> {
    const error = new UnregisteredTypeError(job.type, this.whereAmI(), this.registry.types());
    const maxAttempts = effectiveMaxAttempts(job.maxAttempts, {}, job.queueMaxAttempts);
    const d = decideAfterFailure({
      attempt,
      maxAttempts,
      options: UNREGISTERED_OPTIONS,
      abortReason: undefined,
      error,
    });
    // decideAfterFailure retries it (attempts left) or dead-letters it as exhausted: an ordinary error, no abort.
    const delayMs = d.kind === 'retry' ? Math.min(MAX_RETRY_DELAY_MS, Math.round(d.delayMs)) : undefined;
    const message = d.kind === 'retry' || d.kind === 'dead_letter' ? d.message : String(error);
    const f: Finalization =
      delayMs !== undefined
        ? { op: 'retry', runAt: { delayMs }, error: message }
        : { op: 'fail', reason: d.kind === 'dead_letter' ? d.reason : 'exhausted', error: message };
    this.log.warn('job type not registered in this process', {
      jobId: job.id,
      queue: job.queue,
      type: job.type,
      attempt,
      maxAttempts,
      next: delayMs !== undefined ? `retry in ${delayMs} ms` : 'dead letter',
      workerId: this.workerId,
    });
    return this.finalize(job, attempt, startedAt, f, true);
  }

  // This process, as an error names it: its worker id, host, hosting instance and app version when known.
  private whereAmI(): string {
    const p = this.presenceOptions;
    const parts = [`worker ${this.workerId}`, `host ${p?.host ?? os.hostname()}`];
    if (p?.instanceId) parts.push(`instance ${p.instanceId}`);
    if (p?.appVersion) parts.push(`version ${p.appVersion}${p.buildId ? ` (${p.buildId})` : ''}`);
    return parts.join(', ');
  }

  // The beat timer's heartbeats (RunningJobs): every job due a beat in one store call, fenced per job by its lease.
  private async beatMany(runs: JobRun[]): Promise<void> {
    this.touchPresence(); // a long job keeps its worker's row fresh (at most once per refresh interval)
    const sentAt = performance.now();
    const answers = await this.store.heartbeatMany(runs); // a JobRun is its LeaseRef (jobId, leaseId)
    for (let i = 0; i < runs.length; i++) this.beaten(runs[i]!, answers[i]!, sentAt);
  }

  // ctx.heartbeat: one beat of its own, sent at once (not with the timer's next tick: a handler awaiting it wants
  // the answer now, and a handler's own beats are rare; the timer's beats of every job are what cost a round trip
  // each).
  private async heartbeat(run: JobRun): Promise<void> {
    this.touchPresence();
    const sentAt = performance.now();
    this.beaten(run, await this.store.heartbeat({ jobId: run.jobId, leaseId: run.leaseId }), sentAt);
  }

  // A heartbeat's answer: a lost lease or a requested cancel aborts the attempt; a confirmed heartbeat extends the
  // lease from when it was sent (JobRun.confirmed).
  private beaten(run: JobRun, hb: HeartbeatResult, sentAt: number): void {
    if (hb.status === 'lease_lost') {
      this.leaseLost(run.job, 'heartbeat');
      run.fire('lease_lost');
      return;
    }
    if (run.confirmed(sentAt, hb.zombieTimeoutSeconds)) this.running.beatsChanged(run);
    if (hb.cancelRequested) run.fire('cancelled');
  }

  // No heartbeat was confirmed within the job's lease (less the margin): the store is out of reach, and the rescue
  // may give the job to another worker once the lease has run out. Stop the handler now (its signal aborts with
  // 'lease_expired'; one that ignores it runs on unawaited, and what it returns is dropped) and free the slot; the
  // job is not finalized here (any move would be fenced anyway): the rescue retries or dead-letters it.
  private leaseExpired(run: JobRun): void {
    if (run.reason) return;
    this.log.warn('lease expired: no heartbeat confirmed within the queue zombie timeout; handler aborted', {
      jobId: run.jobId,
      queue: run.job.queue,
      type: run.job.type,
      zombieTimeoutSeconds: run.job.queueZombieTimeoutSeconds,
    });
    this.safe(() => this.events.onLeaseLost?.({ job: run.job, operation: 'expired' }));
    run.fire('lease_expired');
  }

  // ctx.progress for one attempt: checks the value at once (a ValidationError for the handler), writes it under the
  // lease at most once per progressIntervalMs, the latest value winning (a trailing write when calls come faster).
  // A write that finds the lease gone aborts the attempt as a heartbeat would; other write errors are logged.
  private progressReporter(run: JobRun): ProgressReporter {
    const { job } = run;
    const ref: LeaseRef = { jobId: run.jobId, leaseId: run.leaseId };
    const abort = (reason: AbortReason) => run.fire(reason);
    let pending: JobProgress | undefined;
    let stopped = false;
    const writes = new AttemptWrites(this.progressIntervalMs, () => {
      const value = pending;
      pending = undefined;
      if (stopped || value === undefined) return undefined;
      return () =>
        this.store.reportProgress(ref, value).then(
          (status) => {
            if (status === 'lease_lost' && !stopped) {
              this.leaseLost(job, 'progress');
              abort('lease_lost');
            }
          },
          (e: unknown) => this.log.warn('progress write failed', { jobId: job.id, error: String(e) }),
        );
    });
    return {
      report: (input: ProgressInput): void => {
        const value = normalizeProgress(input);
        if (stopped) return;
        pending = value;
        writes.request({ atOnceWhenDue: true });
      },
      stop: () => {
        stopped = true;
        writes.cancel();
      },
    };
  }

  // ctx.log for one attempt (AttemptLog, shared/jobs/jobLog.ts) and the writes of its lines to the job: appended
  // under the lease at most once per progressIntervalMs while the handler runs, and once more, awaited, before the
  // final move. A write that finds the lease gone aborts the attempt; other write errors are logged (the lines then
  // stay in the process log only).
  private jobLog(run: JobRun): JobLogWriter {
    const { job, attempt } = run;
    const ref: LeaseRef = { jobId: run.jobId, leaseId: run.leaseId };
    const abort = (reason: AbortReason) => run.fire(reason);
    let log: AttemptLog | undefined;
    const writes = new AttemptWrites(this.progressIntervalMs, () => {
      const lines = log?.take() ?? [];
      if (lines.length === 0) return undefined;
      return () =>
        this.store.appendJobLog(ref, lines, this.jobLogLines).then(
          (status) => {
            // Not once the lease expired: that loss was reported then (the last lines' write may come after it).
            if (status === 'lease_lost' && run.reason !== 'lease_expired') {
              this.leaseLost(job, 'log');
              abort('lease_lost');
            }
          },
          (e: unknown) => this.log.warn('job log write failed', { jobId: job.id, error: String(e) }),
        );
    });
    return {
      logger: (): JobLogger => {
        if (this.jobLogLines <= 0) return this.log;
        log ??= new AttemptLog(this.log, job.id, attempt, this.jobLogLines, () => writes.request());
        return log;
      },
      flush: (): Promise<void> => writes.now(),
    };
  }

  // Where a failed attempt goes (decideAfterFailure), as a finalization; null when the lease is lost.
  private afterFailure(
    job: ClaimedJob,
    attempt: number,
    registered: RegisteredHandler,
    abortReason: AbortReason | undefined,
    error: unknown,
  ): Finalization | null {
    const maxAttempts = effectiveMaxAttempts(job.maxAttempts, registered.options, job.queueMaxAttempts);
    const d = decideAfterFailure({ attempt, maxAttempts, options: registered.options, abortReason, error });
    switch (d.kind) {
      case 'lease_lost':
        return null;
      case 'dead_letter':
        return { op: 'fail', reason: d.reason, error: d.message };
      case 'retry':
        // Due after the delay by the database's clock, which the claims' due test reads, not this worker's: a
        // worker whose clock runs behind would otherwise make its retries due early, its backoff cut short.
        return {
          op: 'retry',
          runAt: { delayMs: Math.min(MAX_RETRY_DELAY_MS, Math.max(0, Math.round(d.delayMs))) },
          error: d.message,
        };
      case 'interrupt':
        return { op: 'interrupt', error: d.message };
    }
  }
}

// The processor: start a claimed job, heartbeat while its handler runs (outside any transaction), then complete,
// retry or dead-letter it. Every store call is fenced by the claim's lease; 'lease_lost' ends our interest in the job.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import {
  JOB_OUTCOMES,
  type ClaimedJob,
  type DlqReason,
  type JobId,
  type JobOutcome,
  type JobStore,
  type LeaseRef,
  type CompleteRef,
  type OwnerResultById,
  type StartResult,
  type StartedJob,
} from './contract.js';
import {
  FatalError,
  RetryAfterError,
  backoffDelayMs,
  silentLogger,
  type HandlerRegistry,
  type JobContext,
  type JobLogger,
  type RegisteredHandler,
} from './registry.js';
import { AttemptLog, DEFAULT_JOB_LOG_LINES } from './jobLog.js';
import {
  DEFAULT_MAX_RESULT_BYTES,
  normalizeProgress,
  resultJson,
  type JobProgress,
  type ProgressInput,
} from './progress.js';

export { JOB_OUTCOMES, type JobOutcome };

export type AbortReason = 'cancelled' | 'timeout' | 'lease_lost' | 'shutdown';

// The error a handler's signal aborts with; `reason` says why.
export class JobAbortedError extends Error {
  constructor(readonly reason: AbortReason) {
    super(`job aborted: ${reason}`);
    this.name = 'JobAbortedError';
  }
}

// One attempt's abort switch: the handler's signal, a promise that rejects when it fires (raced against the handler,
// so a handler that ignores its signal cannot hold the worker) and the first reason given. Shared with the handler
// test kit (test/kit.ts), so a handler under test is aborted exactly as the processor aborts it.
// The AbortController (about 0.5 KB and 4 us with its signal) and the promise are made only when something asks for
// them: most handlers never read their signal, and at thousands of jobs a second they were the processor's main cost.
export class AttemptAbort {
  private controller: AbortController | undefined;
  private rejectAborted: ((e: unknown) => void) | undefined;
  private rejectRace: ((e: unknown) => void) | undefined;
  private abortedPromise: Promise<never> | undefined;
  private firstReason: AbortReason | undefined;
  private error: JobAbortedError | undefined;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.error) this.controller.abort(this.error);
    }
    return this.controller.signal;
  }

  // Rejects with the JobAbortedError once abort() is called.
  get aborted(): Promise<never> {
    if (!this.abortedPromise) {
      this.abortedPromise = this.error
        ? Promise.reject(this.error)
        : new Promise<never>((_, reject) => (this.rejectAborted = reject));
      this.abortedPromise.catch(() => undefined); // raced, not always awaited
    }
    return this.abortedPromise;
  }

  get reason(): AbortReason | undefined {
    return this.firstReason;
  }

  // Settles with the task, or rejects with the JobAbortedError as soon as the attempt is aborted (one promise, where
  // Promise.race with `aborted` takes three). For the attempt's one handler call.
  race<T>(task: Promise<T>): Promise<T> {
    if (this.error) return Promise.reject(this.error);
    return new Promise<T>((resolve, reject) => {
      this.rejectRace = reject;
      task.then(resolve, reject);
    });
  }

  readonly abort = (reason: AbortReason): void => {
    if (this.firstReason) return;
    this.firstReason = reason;
    const err = (this.error = new JobAbortedError(reason));
    this.controller?.abort(err);
    this.rejectAborted?.(err);
    this.rejectRace?.(err);
  };
}

// Hooks for telemetry and tests; every hook is optional and must not throw.
export interface ProcessorEvents {
  onOutcome?(e: {
    job: ClaimedJob;
    outcome: JobOutcome;
    reason?: DlqReason;
    durationMs: number;
    attempt: number;
  }): void;
  onLeaseLost?(e: { job: ClaimedJob; operation: string }): void;
}

export interface ProcessorOptions {
  store: JobStore;
  registry: HandlerRegistry;
  workerId?: string;
  leaseSeconds?: number; // how long a claim stays ours before it is started (default 60)
  heartbeatIntervalMs?: number; // default 10 s; keep well under the queues' zombie timeout
  log?: JobLogger;
  events?: ProcessorEvents;
  completionBatchMax?: number; // successes finalised together through completeMany (default 200)
  progressIntervalMs?: number; // ctx.progress() writes at most this often per job (default 1 s; the latest value wins)
  maxResultBytes?: number; // a handler's result over this is refused (default DEFAULT_MAX_RESULT_BYTES, 64 KiB)
  jobLogLines?: number; // ctx.log lines kept with each job (default 100; 0: the process log only)
}

// A per-type concurrency limit inside one processor: waiters are served in arrival order.
class Slots {
  private active = 0;
  private readonly waiters: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  // Resolves with a release function once a slot is free; `cancel` withdraws a waiter that no longer needs one.
  acquire(): { ready: Promise<() => void>; cancel: () => void } {
    let done = false;
    const free = () => {
      if (done) return;
      done = true;
      this.active--;
      this.waiters.shift()?.();
    };
    if (this.active < this.limit) {
      this.active++;
      return { ready: Promise.resolve(free), cancel: () => undefined };
    }
    let wake!: () => void;
    const ready = new Promise<() => void>((resolve) => {
      wake = () => {
        this.active++;
        resolve(free);
      };
      this.waiters.push(wake);
    });
    return {
      ready,
      cancel: () => {
        const i = this.waiters.indexOf(wake);
        if (i >= 0) this.waiters.splice(i, 1);
        else void ready.then((r) => r()); // woken meanwhile: hand the slot on (ready never rejects)
      },
    };
  }
}

interface Running {
  jobId: JobId;
  abort(reason: AbortReason): void;
  beat(): Promise<void>;
  nextBeatAt: number; // the processor's one heartbeat timer beats the job once this time has passed
}

// Collects owner-scoped calls made in one event-loop turn into one batch store call (completeMany, startMany):
// batching under load, no delay when idle.
class MicroBatcher<R extends { jobId: JobId }, Ref extends LeaseRef = LeaseRef> {
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

export function defaultWorkerId(): string {
  return `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// A handler with a payload schema gets the parsed payload. Enqueue already checked it; a row written around that
// check (straight through the store, or before the schema changed) fails here as 'fatal', naming the field.
function parsePayload(registered: RegisteredHandler, payload: unknown): unknown {
  const schema = registered.options.payload;
  if (!schema) return payload;
  const r = schema.safeParse(payload);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const path = issue.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
  throw new FatalError(`payload${path}: ${issue.message} (the payload does not match the handler's schema)`);
}

// A handler's return value as the JSON to store; a value that cannot be stored fails the attempt as fatal. Shared
// with the handler test kit (test/kit.ts).
export function resultOf(value: unknown, maxBytes: number): string | undefined {
  try {
    return resultJson(value, maxBytes);
  } catch (err) {
    throw new FatalError(`the handler's ${(err as Error).message}`);
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
  private readonly completions: MicroBatcher<OwnerResultById, CompleteRef>;
  private readonly progressIntervalMs: number;
  private readonly maxResultBytes: number;
  private readonly jobLogLines: number;
  private readonly starts: MicroBatcher<StartResult & { jobId: JobId }>;
  private readonly running = new Map<JobId, Running>();
  private readonly idleWaiters: (() => void)[] = []; // shutdown waiting for the running handlers to be gone
  private beatTimer: ReturnType<typeof setInterval> | undefined;
  private readonly typeSlots = new Map<string, Slots>();
  private stopping = false;

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
    const batchMax = opts.completionBatchMax ?? 200;
    this.completions = new MicroBatcher(
      (refs) => opts.store.completeMany(refs),
      (r) => ({ jobId: r.jobId, status: 'lease_lost' }),
      batchMax,
    );
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

  // Claim and start up to `limit` due jobs under this processor's worker id (one statement; see runSlots).
  async claimAndStart(queues: string[], limit: number): Promise<StartedJob[]> {
    if (this.stopping || limit < 1) return [];
    return this.store.claimAndStart({ workerId: this.workerId, queues, limit, leaseSeconds: this.leaseSeconds });
  }

  // Claim one job by id (queue-message path) and run it.
  async processById(jobId: JobId): Promise<JobOutcome | 'not_claimed'> {
    if (this.stopping) return 'not_claimed';
    const job = await this.store.claimById(jobId, this.workerId, this.leaseSeconds);
    if (!job) return 'not_claimed';
    return this.runClaimed(job);
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
    if (this.stopping) return Promise.all(jobs.map((job) => this.releaseUnstarted(job).then(done)));
    const started =
      jobs.length === 1
        ? await this.starts.submit({ jobId: jobs[0]!.id, leaseId: jobs[0]!.leaseId }).then((s) => [s])
        : await this.store.startMany(jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
    return Promise.all(
      // async: every element is a promise of an outcome (a lost lease resolves at once).
      jobs.map(async (job, i) => {
        const s = started[i]!;
        if (s.status === 'lease_lost') {
          this.leaseLost(job, 'start');
          return done('lease_lost');
        }
        return this.execute(job, s.attempt).then(done);
      }),
    );
  }

  // Run jobs claimAndStart already started (processing under their leases, attempt counted). Jobs whose claim was in
  // flight when shutdown began are handed back as interrupted (execute), handler not run, their attempt given back.
  async runStarted(
    jobs: StartedJob[],
    onJobDone?: (outcome: JobOutcome) => void,
    onHandlerDone?: () => void,
  ): Promise<JobOutcome[]> {
    return Promise.all(
      jobs.map((job) =>
        this.execute(job, job.attempt, onHandlerDone).then((o) => {
          if (onJobDone) this.safe(() => onJobDone(o));
          return o;
        }),
      ),
    );
  }

  // Claims and runs jobs, keeping at most `concurrency` handlers (jobs, not batches) running. Once jobs are running it
  // claims again only when at least `claimBatch` slots are free (default half the concurrency: claims of a quarter made
  // six Worker processes on one queue slower than one, bench:workers run 56), so a busy loop
  // claims and completes in batches instead of one round trip per job. A slot is free once its handler has finished:
  // the next claim overlaps the previous jobs' completion (their round trip and commit), with at most
  // 2 x `concurrency` jobs held in all (running or being finalized). Claims start the jobs in the same statement
  // (claimAndStart): what this loop claims it runs at once, so the separate 'fetched' step would only cost a row
  // version and a round trip per job. (processById keeps claim + start: its claim may come back as not_claimed.)
  async runSlots(opts: {
    queues: string[];
    concurrency: number;
    claimBatch?: number;
    shouldStop: () => boolean;
    // jobFinished: a job's handler or finalization ended. allFinalized(): resolves once no claimed job is left running
    // or being finalized (at once when none is); called only by a wait that needs it, so no waiter is left behind.
    idleWait: (
      mode: 'idle' | 'slots',
      jobFinished: Promise<void>,
      allFinalized: () => Promise<void>,
    ) => Promise<'stop' | 'continue'>;
    onOutcome?: (o: JobOutcome) => void;
    stopWhenIdle?: boolean;
  }): Promise<void> {
    const concurrency = Math.max(1, Math.floor(opts.concurrency));
    const claimBatch = Math.max(1, Math.min(concurrency, opts.claimBatch ?? Math.ceil(concurrency / 2)));
    const batches = new Set<Promise<void>>();
    let running = 0; // handlers running
    let held = 0; // jobs claimed and not yet finalized: running, or being completed/retried/dead-lettered
    let signal: () => void = () => undefined;
    let changed = new Promise<void>((r) => (signal = r));
    const notify = () => {
      const s = signal;
      changed = new Promise<void>((r) => (signal = r));
      s();
      if (held === 0) for (const r of finalizedWaiters.splice(0)) r();
    };
    const finalizedWaiters: (() => void)[] = [];
    const allFinalized = () => (held === 0 ? Promise.resolve() : new Promise<void>((r) => finalizedWaiters.push(r)));
    while (!opts.shouldStop()) {
      const free = Math.min(concurrency - running, 2 * concurrency - held);
      let idle = false;
      if (free >= (held === 0 ? 1 : claimBatch)) {
        let jobs: StartedJob[] = [];
        try {
          jobs = await this.claimAndStart(opts.queues, free);
        } catch (err) {
          this.log.error('claim failed', { error: String(err) });
        }
        if (jobs.length > 0) {
          running += jobs.length;
          held += jobs.length;
          let unreported = jobs.length;
          let handlersRunning = jobs.length;
          const p: Promise<void> = this.runStarted(
            jobs,
            (o) => {
              unreported--;
              held--;
              opts.onOutcome?.(o);
              notify();
            },
            () => {
              handlersRunning--;
              running--;
              notify();
            },
          )
            .then(() => undefined)
            .catch((err) => this.log.error('batch failed', { error: String(err) }))
            .finally(() => {
              // a batch that failed as a whole gives its slots back too
              running -= handlersRunning;
              handlersRunning = 0;
              held -= unreported;
              unreported = 0;
              batches.delete(p);
              notify();
            });
          batches.add(p);
          if (jobs.length === free) continue; // there may be more due: claim again as soon as slots free up
        } else if (held === 0 && opts.stopWhenIdle) break;
        idle = true; // fewer due jobs than free slots
      }
      // 'slots': wait for a running job to finish. 'idle': nothing (more) is due; wait for the poll or a wake-up.
      if ((await opts.idleWait(idle ? 'idle' : 'slots', changed, allFinalized)) === 'stop') break;
    }
    await Promise.allSettled([...batches]);
  }

  // Claim due jobs and run them until the time budget is spent (timer dispatcher path). `concurrency` is the most
  // jobs whose handlers run at once; claims are batched (see runSlots).
  async drain(opts: { queues: string[]; budgetMs: number; concurrency: number; claimBatch?: number }): Promise<{
    processed: number;
    outcomes: Record<JobOutcome, number>;
  }> {
    const deadline = Date.now() + opts.budgetMs;
    const outcomes = Object.fromEntries(JOB_OUTCOMES.map((o) => [o, 0])) as Record<JobOutcome, number>;
    let processed = 0;
    await this.runSlots({
      queues: opts.queues,
      concurrency: opts.concurrency,
      claimBatch: opts.claimBatch,
      shouldStop: () => this.stopping || Date.now() >= deadline,
      stopWhenIdle: true,
      onOutcome: (o) => {
        outcomes[o]++;
        processed++;
      },
      idleWait: async (mode, jobFinished, allFinalized) => {
        // Slots taken: wake when a job finishes. Nothing due while jobs run: poll again within 50 ms, or as soon as
        // the last claimed job is finalized, so the drain ends when its work is committed, not up to 50 ms after.
        // The timer is cleared when a job finishes first, so no wait outlives drain().
        const left = Math.max(0, deadline - Date.now());
        let timer: ReturnType<typeof setTimeout> | undefined;
        const timeUp = new Promise<void>((r) => (timer = setTimeout(r, mode === 'slots' ? left : Math.min(50, left))));
        await Promise.race([mode === 'slots' ? jobFinished : allFinalized(), timeUp]);
        clearTimeout(timer);
        return 'continue';
      },
    });
    return { processed, outcomes };
  }

  // Stop taking work: wait up to graceMs for running handlers, then abort the rest with reason 'shutdown'.
  async shutdown(graceMs = 10_000): Promise<void> {
    this.stopping = true;
    const all = () =>
      this.running.size === 0 ? Promise.resolve() : new Promise<void>((r) => this.idleWaiters.push(r));
    const finished = await Promise.race([all().then(() => true), sleep(graceMs).then(() => false)]);
    if (!finished) {
      for (const r of this.running.values()) r.abort('shutdown');
      await all();
    }
  }

  private async releaseUnstarted(job: ClaimedJob): Promise<JobOutcome> {
    const status = await this.store.release({ jobId: job.id, leaseId: job.leaseId });
    if (status === 'lease_lost') {
      this.leaseLost(job, 'release');
      return 'lease_lost';
    }
    return 'released';
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

  // One timer beats every running job whose heartbeat is due (a timer per job cost as much as the rest of a no-op
  // job's bookkeeping). It ticks at a quarter of the interval, so a beat comes at most 1.25 intervals apart.
  private scheduleBeats(): void {
    if (this.beatTimer) return;
    const tick = Math.max(5, Math.floor(this.heartbeatIntervalMs / 4));
    this.beatTimer = setInterval(() => {
      const now = Date.now();
      for (const r of this.running.values()) {
        if (now < r.nextBeatAt) continue;
        r.nextBeatAt = now + this.heartbeatIntervalMs;
        r.beat().catch((e: unknown) => this.log.warn('heartbeat failed', { jobId: r.jobId, error: String(e) }));
      }
    }, tick);
  }

  private finishedRunning(jobId: JobId): void {
    this.running.delete(jobId);
    if (this.running.size > 0) return;
    if (this.beatTimer) clearInterval(this.beatTimer);
    this.beatTimer = undefined;
    for (const wake of this.idleWaiters.splice(0)) wake();
  }

  private report(
    job: ClaimedJob,
    attempt: number,
    startedAt: number,
    outcome: JobOutcome,
    reason?: DlqReason,
  ): JobOutcome {
    const onOutcome = this.events.onOutcome;
    if (onOutcome)
      this.safe(() =>
        onOutcome.call(this.events, { job, outcome, reason, durationMs: Date.now() - startedAt, attempt }),
      );
    return outcome;
  }

  // onHandlerDone fires once, as soon as the handler is no longer running (before the job is finalized).
  private async execute(job: ClaimedJob, attempt: number, onHandlerDone?: () => void): Promise<JobOutcome> {
    const startedAt = Date.now();
    const ref: LeaseRef = { jobId: job.id, leaseId: job.leaseId };
    const registered = this.registry.get(job.type);
    if (!registered) {
      if (onHandlerDone) this.safe(onHandlerDone);
      const msg = `no handler is registered for job type "${job.type}" (registered: ${this.registry.types().join(', ') || 'none'})`;
      return this.report(job, attempt, startedAt, await this.deadLetter(job, ref, 'fatal', msg), 'fatal');
    }
    const attemptAbort = new AttemptAbort();
    const { abort } = attemptAbort;
    const beat = async () => {
      const hb = await this.store.heartbeat(ref);
      if (hb.status === 'lease_lost') {
        this.leaseLost(job, 'heartbeat');
        abort('lease_lost');
      } else if (hb.cancelRequested) abort('cancelled');
    };
    const entry: Running = { jobId: job.id, abort, beat, nextBeatAt: startedAt + this.heartbeatIntervalMs };
    // ctx.progress and ctx.log's job log, made on first use: a job that uses neither costs nothing more.
    let progress: ReturnType<JobProcessor['progressReporter']> | undefined;
    let jobLog: ReturnType<JobProcessor['jobLog']> | undefined;
    const jobLogOf = () => (jobLog ??= this.jobLog(job, ref, attempt, abort));
    this.running.set(job.id, entry);
    this.scheduleBeats();
    let handlerRunning = true;
    try {
      // Started by a claim that was in flight when shutdown began: hand it back (interrupt) instead of running it.
      if (this.stopping) abort('shutdown');
      let timeout: ReturnType<typeof setTimeout> | undefined;
      const ctx: JobContext = {
        jobId: job.id,
        attempt,
        idempotencyKey: job.idempotencyKey,
        queue: job.queue,
        type: job.type,
        get signal() {
          return attemptAbort.signal; // made on first use
        },
        get log() {
          return jobLogOf().logger();
        },
        heartbeat: beat,
        progress: (input) => (progress ??= this.progressReporter(job, ref, abort)).report(input),
      };
      let error: unknown;
      let succeeded = false;
      let resultText: string | undefined;
      let releaseSlot: (() => void) | undefined;
      try {
        const payload = parsePayload(registered, job.payload);
        const limit = registered.options.concurrency;
        if (limit !== undefined) {
          // The type's concurrency limit in this instance: the job waits, heartbeating, for a slot; its timeout
          // starts when it gets one. A cancel, lost lease or shutdown while waiting ends the wait.
          let slots = this.typeSlots.get(job.type);
          if (!slots) this.typeSlots.set(job.type, (slots = new Slots(limit)));
          const wait = slots.acquire();
          try {
            releaseSlot = await Promise.race([wait.ready, attemptAbort.aborted]);
          } catch (err) {
            wait.cancel();
            throw err;
          }
        }
        timeout = setTimeout(() => abort('timeout'), registered.options.timeoutMs);
        // A handler that throws at once lands in the catch below, as a rejection does.
        let returned: unknown;
        if (!attemptAbort.reason) returned = await attemptAbort.race(Promise.resolve(registered.handler(payload, ctx)));
        if (attemptAbort.reason) error = new JobAbortedError(attemptAbort.reason);
        // What it returned, as stored JSON; a value JSON cannot carry, or one over the limit, fails the job as
        // fatal (running it again would return the same).
        else resultText = resultOf(returned, this.maxResultBytes);
        succeeded = !attemptAbort.reason;
      } catch (err) {
        error = err;
      } finally {
        releaseSlot?.();
        clearTimeout(timeout);
        progress?.stop(); // a progress write still throttled is dropped: the job's outcome says more
        entry.nextBeatAt = Infinity; // no heartbeats while the job is finalized
        handlerRunning = false;
        if (onHandlerDone) this.safe(onHandlerDone);
      }
      // The attempt's last log lines reach the job before its final move carries them to the archive or the DLQ.
      if (jobLog) await jobLog.flush();
      if (succeeded) {
        const { status } = await this.completions.submit(
          resultText === undefined ? ref : { ...ref, resultJson: resultText },
        );
        if (status === 'lease_lost') {
          this.leaseLost(job, 'complete');
          return this.report(job, attempt, startedAt, 'lease_lost');
        }
        // Cancelled while it ran, finished before it saw the request: the move put it in the DLQ as 'cancelled'.
        if (status === 'cancelled') return this.report(job, attempt, startedAt, 'dead_lettered', 'cancelled');
        return this.report(job, attempt, startedAt, 'succeeded');
      }
      const report = (o: JobOutcome, reason?: DlqReason) => this.report(job, attempt, startedAt, o, reason);
      return await this.afterFailure(job, ref, attempt, registered, attemptAbort.reason, error, report);
    } finally {
      this.finishedRunning(job.id); // shutdown waits for this: the job's outcome is written
      if (handlerRunning && onHandlerDone) this.safe(onHandlerDone);
    }
  }

  // ctx.progress for one attempt: checks the value at once (a ValidationError for the handler), writes it under the
  // lease at most once per progressIntervalMs, the latest value winning (a trailing write when calls come faster).
  // A write that finds the lease gone aborts the attempt as a heartbeat would; other write errors are logged.
  private progressReporter(job: ClaimedJob, ref: LeaseRef, abort: (reason: AbortReason) => void) {
    let lastWriteAt = -Infinity;
    let pending: JobProgress | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const write = (value: JobProgress) => {
      lastWriteAt = Date.now();
      this.store.reportProgress(ref, value).then(
        (status) => {
          if (status === 'lease_lost' && !stopped) {
            this.leaseLost(job, 'progress');
            abort('lease_lost');
          }
        },
        (e: unknown) => this.log.warn('progress write failed', { jobId: job.id, error: String(e) }),
      );
    };
    const flush = () => {
      timer = undefined;
      if (stopped || pending === undefined) return;
      const value = pending;
      pending = undefined;
      write(value);
    };
    return {
      report: (input: ProgressInput): void => {
        const value = normalizeProgress(input);
        if (stopped) return;
        const wait = lastWriteAt + this.progressIntervalMs - Date.now();
        if (wait <= 0 && timer === undefined) return write(value);
        pending = value;
        timer ??= setTimeout(flush, Math.max(0, wait));
      },
      stop: () => {
        stopped = true;
        clearTimeout(timer);
      },
    };
  }

  // ctx.log for one attempt (AttemptLog, shared/jobs/jobLog.ts) and the writes of its lines to the job: appended
  // under the lease at most once per progressIntervalMs while the handler runs, and once more, awaited, before the
  // final move. A write that finds the lease gone aborts the attempt; other write errors are logged (the lines then
  // stay in the process log only).
  private jobLog(job: ClaimedJob, ref: LeaseRef, attempt: number, abort: (reason: AbortReason) => void) {
    let log: AttemptLog | undefined;
    let writing: Promise<void> = Promise.resolve();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let lastWriteAt = -Infinity;
    const write = (): Promise<void> => {
      timer = undefined;
      const lines = log?.take() ?? [];
      if (lines.length === 0) return writing;
      lastWriteAt = Date.now();
      writing = writing.then(() =>
        this.store.appendJobLog(ref, lines, this.jobLogLines).then(
          (status) => {
            if (status === 'lease_lost') {
              this.leaseLost(job, 'log');
              abort('lease_lost');
            }
          },
          (e: unknown) => this.log.warn('job log write failed', { jobId: job.id, error: String(e) }),
        ),
      );
      return writing;
    };
    const soon = () => {
      timer ??= setTimeout(() => void write(), Math.max(0, lastWriteAt + this.progressIntervalMs - Date.now()));
    };
    return {
      logger: (): JobLogger => {
        if (this.jobLogLines <= 0) return this.log;
        log ??= new AttemptLog(this.log, job.id, attempt, this.jobLogLines, soon);
        return log;
      },
      flush: (): Promise<void> => {
        clearTimeout(timer);
        return write();
      },
    };
  }

  private async afterFailure(
    job: ClaimedJob,
    ref: LeaseRef,
    attempt: number,
    registered: RegisteredHandler,
    abortReason: AbortReason | undefined,
    error: unknown,
    report: (o: JobOutcome, reason?: DlqReason) => JobOutcome,
  ): Promise<JobOutcome> {
    const maxAttempts = effectiveMaxAttempts(job.maxAttempts, registered.options, job.queueMaxAttempts);
    const d = decideAfterFailure({ attempt, maxAttempts, options: registered.options, abortReason, error });
    switch (d.kind) {
      case 'lease_lost':
        return report('lease_lost'); // someone else owns the job now: touch nothing
      case 'dead_letter':
        return report(await this.deadLetter(job, ref, d.reason, d.message), d.reason);
      case 'retry':
        return report(await this.retryAt(job, ref, new Date(Date.now() + d.delayMs), d.message));
      case 'interrupt':
        return report(await this.interrupt(job, ref, d.message));
    }
  }

  private async deadLetter(job: ClaimedJob, ref: LeaseRef, reason: DlqReason, error: string): Promise<JobOutcome> {
    const status = await this.store.fail(ref, reason, error.slice(0, 4000));
    if (status === 'lease_lost') {
      this.leaseLost(job, 'fail');
      return 'lease_lost';
    }
    return 'dead_lettered';
  }

  private async retryAt(job: ClaimedJob, ref: LeaseRef, runAt: Date, error: string): Promise<JobOutcome> {
    const status = await this.store.retry(ref, runAt, error.slice(0, 4000));
    if (status === 'lease_lost') {
      this.leaseLost(job, 'retry');
      return 'lease_lost';
    }
    return 'retried';
  }

  // Shutdown hands the job back due now with its attempt given back; or the store dead-letters it as 'cancelled'
  // when a cancel was requested, as retry does.
  private async interrupt(job: ClaimedJob, ref: LeaseRef, error: string): Promise<JobOutcome> {
    const status = await this.store.interrupt(ref, error.slice(0, 4000));
    if (status === 'lease_lost') {
      this.leaseLost(job, 'interrupt');
      return 'lease_lost';
    }
    return 'released';
  }
}

// A job's attempt limit: its own, else its handler's, else its queue's. The processor, zombie rescue (in SQL, with
// HandlerRegistry.maxAttemptsByType()) and the handler test kit all apply this rule.
export function effectiveMaxAttempts(
  jobMaxAttempts: number | null | undefined,
  options: Pick<RegisteredHandler['options'], 'maxAttempts'>,
  queueMaxAttempts: number,
): number {
  return jobMaxAttempts ?? options.maxAttempts ?? queueMaxAttempts;
}

export type FailureDecision =
  | { kind: 'lease_lost' }
  | { kind: 'dead_letter'; reason: DlqReason; message: string }
  | { kind: 'retry'; delayMs: number; message: string }
  // Not a failure: the worker is stopping. The job goes back due now and the attempt does not count (store.interrupt).
  | { kind: 'interrupt'; message: string };

// What a failed attempt leads to: the processor's rule, shared with the handler test kit (test/kit.ts).
// `random` feeds the backoff jitter.
export function decideAfterFailure(f: {
  attempt: number;
  maxAttempts: number;
  options: Pick<RegisteredHandler['options'], 'backoff' | 'retryOnTimeout' | 'timeoutMs'>;
  abortReason: AbortReason | undefined;
  error: unknown;
  random?: () => number;
}): FailureDecision {
  const { attempt, maxAttempts, options } = f;
  const message = f.error instanceof Error ? `${f.error.name}: ${f.error.message}` : String(f.error);
  const attemptsLeft = attempt < maxAttempts;
  switch (f.abortReason) {
    case 'lease_lost':
      return { kind: 'lease_lost' };
    case 'cancelled':
      return { kind: 'dead_letter', reason: 'cancelled', message: 'cancelled while running' };
    case 'shutdown':
      return { kind: 'interrupt', message: 'interrupted by worker shutdown' };
    case 'timeout':
      if (options.retryOnTimeout && attemptsLeft) {
        return {
          kind: 'retry',
          delayMs: backoffDelayMs(attempt, options.backoff, f.random),
          message: `timed out after ${options.timeoutMs} ms`,
        };
      }
      return { kind: 'dead_letter', reason: 'timeout', message: `timed out after ${options.timeoutMs} ms` };
    default:
      break;
  }
  if (f.error instanceof FatalError) return { kind: 'dead_letter', reason: 'fatal', message };
  if (!attemptsLeft)
    return {
      kind: 'dead_letter',
      reason: 'exhausted',
      message: `attempt ${attempt} of ${maxAttempts} failed: ${message}`,
    };
  const delayMs =
    f.error instanceof RetryAfterError
      ? Math.max(0, f.error.retryAfterMs)
      : backoffDelayMs(attempt, options.backoff, f.random);
  return { kind: 'retry', delayMs, message };
}

// A long-running worker (npm start, tests): keeps up to `concurrency` jobs running. It polls every pollIntervalMs
// when idle, and wakes at once when `wakeups` (e.g. PostgreSQL LISTEN/NOTIFY on enqueue) says jobs arrived.
export interface WakeupSource {
  // Calls onWake whenever jobs of one of these queues may have become due; returns an unsubscribe.
  subscribe(queues: string[], onWake: () => void): Promise<() => Promise<void>>;
}

export class Worker {
  private loop: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  private wokenWhileBusy = false; // a wake-up that arrived while the loop was claiming: do not sleep on it
  private unsubscribe: (() => Promise<void>) | undefined;

  constructor(
    readonly processor: JobProcessor,
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
        idleWait: (mode, jobFinished) =>
          new Promise<'stop' | 'continue'>((resolve) => {
            if (this.stopped) return resolve('stop');
            if (mode === 'idle' && this.wokenWhileBusy) {
              this.wokenWhileBusy = false;
              return resolve('continue');
            }
            // Slots taken: a finishing job (or stop) frees one. Idle: the poll interval or a wake-up (or stop).
            const t =
              mode === 'slots' ? undefined : setTimeout(() => resolve('continue'), this.opts.pollIntervalMs ?? 500);
            this.wake = () => {
              if (t) clearTimeout(t);
              resolve('continue');
            };
            if (mode === 'slots') void jobFinished.then(() => this.wake?.());
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

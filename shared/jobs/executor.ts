// Executing one attempt of a started job (River: internal/jobexecutor): the handler's context, its payload parsed by
// the handler's schema, the wait for a slot under the type's concurrency limit, the timeout, and the abort switch
// raced against the handler. Heartbeats: the running jobs and the one timer that beats them. What happens to the
// job afterwards is the processor's (shared/jobs/processor.ts) and the completer's (completer.ts).
import type { ClaimedJob, JobId, JobLink } from './contract.js';
import type { JobContext, JobLogger, RegisteredHandler } from './registry.js';
import { FatalError } from './handlerErrors.js';
import { resultJson, type ProgressInput } from './progress.js';

// A handler's return value as the JSON to store; a value that cannot be stored fails the attempt as fatal (running
// it again would return the same). Shared with the handler test kit (test/kit.ts).
export function resultOf(value: unknown, maxBytes: number): string | undefined {
  try {
    return resultJson(value, maxBytes);
  } catch (err) {
    throw new FatalError(`the handler's ${(err as Error).message}`);
  }
}

// 'lease_lost': the store said the job is no longer ours. 'lease_expired': no heartbeat was confirmed for nearly the
// queue's zombie timeout (the store unreachable, the connection cut, the pool exhausted), so the zombie rescue may
// hand the job to another worker at any moment: this one stops first (leaseTimes below).
export type AbortReason = 'cancelled' | 'timeout' | 'lease_lost' | 'lease_expired' | 'shutdown';

// The error a handler's signal aborts with; `reason` says why.
export class JobAbortedError extends Error {
  constructor(readonly reason: AbortReason) {
    super(`job aborted: ${reason}`);
    this.name = 'JobAbortedError';
  }
}

// The resolving functions of the promise being made (AttemptAbort.race): the Promise constructor calls its executor
// at once, so the constructor's caller takes them straight after it.
let capturedResolve: ((value: never) => void) | undefined;
let capturedReject: ((e: unknown) => void) | undefined;
function captureResolvers(resolve: (value: never) => void, reject: (e: unknown) => void): void {
  capturedResolve = resolve;
  capturedReject = reject;
}

// One attempt's abort switch: the handler's signal, a promise that rejects when it fires (raced against the handler,
// so a handler that ignores its signal cannot hold the worker) and the first reason given. Shared with the handler
// test kit (test/kit.ts), so a handler under test is aborted exactly as the processor aborts it.
// The AbortController and the promise are made only when something asks for them: most handlers never read their
// signal, and at thousands of jobs a second they were the processor's main cost (bench/README.md).
export class AttemptAbort {
  private controller: AbortController | undefined;
  private rejectAborted: ((e: unknown) => void) | undefined;
  private rejectRace: ((e: unknown) => void) | undefined;
  private abortedPromise: Promise<never> | undefined;
  private firstReason: AbortReason | undefined;
  private error: JobAbortedError | undefined;
  private boundAbort: ((reason: AbortReason) => void) | undefined;

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
    // The executor is one module-level function, not a closure made per attempt (bench/README.md, runs 530-539).
    const raced = new Promise<T>(captureResolvers);
    const resolve = capturedResolve as (value: T) => void;
    const reject = capturedReject!;
    capturedResolve = capturedReject = undefined;
    this.rejectRace = reject;
    task.then(resolve, reject);
    return raced;
  }

  // The switch: the first reason wins. `abort` is the same, bound (made when asked for: most attempts never are).
  fire(reason: AbortReason): void {
    if (this.firstReason) return;
    this.firstReason = reason;
    const err = (this.error = new JobAbortedError(reason));
    this.controller?.abort(err);
    this.rejectAborted?.(err);
    this.rejectRace?.(err);
  }

  get abort(): (reason: AbortReason) => void {
    return (this.boundAbort ??= (reason) => this.fire(reason));
  }
}

// What an attempt's context asks of whoever runs it (the processor's per-job run): ctx.log, ctx.heartbeat,
// ctx.progress, ctx.parents.
export interface AttemptHooks {
  log(): JobLogger;
  heartbeat(): Promise<void>;
  progress(input: ProgressInput): void;
  parents(): Promise<JobLink[]>;
}

// The handler's ctx. A class, not an object literal: a literal with getters takes V8's slow path (a dictionary-mode
// object built in the runtime) and cost several µs and ~2 KB per job (bench/README.md, runs 130-135). The signal
// and the log are made on first use; the functions are bound on first use, so `const { heartbeat } = ctx` works.
class AttemptContext implements JobContext {
  readonly jobId: JobId;
  readonly attempt: number;
  readonly idempotencyKey: string | null;
  readonly queue: string;
  readonly type: string;
  readonly #abort: AttemptAbort;
  readonly #hooks: AttemptHooks;
  #bound: Partial<Pick<JobContext, 'heartbeat' | 'progress' | 'parents'>> | undefined;

  constructor(job: ClaimedJob, attempt: number, abort: AttemptAbort, hooks: AttemptHooks) {
    this.jobId = job.id;
    this.attempt = attempt;
    this.idempotencyKey = job.idempotencyKey;
    this.queue = job.queue;
    this.type = job.type;
    this.#abort = abort;
    this.#hooks = hooks;
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  get log(): JobLogger {
    return this.#hooks.log();
  }

  get heartbeat(): () => Promise<void> {
    const hooks = this.#hooks;
    return ((this.#bound ??= {}).heartbeat ??= () => hooks.heartbeat());
  }

  get progress(): (input: ProgressInput) => void {
    const hooks = this.#hooks;
    return ((this.#bound ??= {}).progress ??= (input) => hooks.progress(input));
  }

  get parents(): () => Promise<JobLink[]> {
    const hooks = this.#hooks;
    return ((this.#bound ??= {}).parents ??= () => hooks.parents());
  }
}

// A job type's concurrency limit inside one processor (HandlerOptions.concurrency): waiters are served in arrival
// order.
export class TypeConcurrencyLimit {
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

// A handler with a payload schema gets the parsed payload. Enqueue already checked it; a row written around that
// check (straight through the store, or before the schema changed) fails here as 'fatal', naming the field.
export function parsePayload(registered: RegisteredHandler, payload: unknown): unknown {
  const schema = registered.options.payload;
  if (!schema) return payload;
  const r = schema.safeParse(payload);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const path = issue.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
  throw new FatalError(`payload${path}: ${issue.message} (the payload does not match the handler's schema)`);
}

// How an attempt's handler ended: it returned (and was not aborted meanwhile), or `error` (thrown, or the
// JobAbortedError of the abort's reason).
// resultJson: what it returned, as stored JSON (absent for nothing).
export type AttemptResult = { ok: true; resultJson?: string } | { ok: false; error: unknown };
const RETURNED_NOTHING: AttemptResult = Object.freeze({ ok: true });

// One attempt as runAttempt runs it: its job and attempt number, its abort switch (it is the AttemptAbort), the
// hooks of its ctx (ctx.log is asked for on first use: the processor's job log is made then), and its place among
// the attempts whose handler timeout is running (AttemptTimeouts).
export type AttemptRun = AttemptAbort &
  AttemptHooks &
  TimedAttempt & {
    readonly job: ClaimedJob;
    readonly attempt: number;
  };

// Runs the handler once under the run's abort switch: parse the payload, wait for a slot of the type's limit (the
// job heartbeats meanwhile; a cancel, lost lease or shutdown ends the wait), then the handler, raced against the
// abort and the type's timeout, which starts when the slot is given. The slot and the timeout are released before
// it returns. The processor runs a type without a limit through callHandler and attemptResult itself, in its own
// async function: one async frame and one await fewer per job (bench/README.md, runs 530-539).
export async function runAttempt(
  run: AttemptRun,
  registered: RegisteredHandler,
  maxResultBytes: number,
  typeLimit: TypeConcurrencyLimit | undefined,
  timeouts: AttemptTimeouts,
): Promise<AttemptResult> {
  let releaseSlot: (() => void) | undefined;
  try {
    const payload = parsePayload(registered, run.job.payload);
    if (typeLimit) {
      const wait = typeLimit.acquire();
      try {
        releaseSlot = await Promise.race([wait.ready, run.aborted]);
      } catch (err) {
        wait.cancel();
        throw err;
      }
    }
    const pending = callHandler(run, registered, payload, timeouts);
    return attemptResult(run, pending && (await pending), maxResultBytes);
  } catch (err) {
    return { ok: false, error: err };
  } finally {
    releaseSlot?.();
    timeouts.stop(run);
  }
}

// The handler's call, its timeout started: what it returns raced against the abort (a rejection: what it threw, or
// the abort's JobAbortedError); undefined when the attempt was aborted before the handler was called. A handler that
// throws at once throws here, as a rejection would reject. The caller stops the timeout (timeouts.stop) once it ends.
export function callHandler(
  run: AttemptRun,
  registered: RegisteredHandler,
  payload: unknown,
  timeouts: AttemptTimeouts,
): Promise<unknown> | undefined {
  timeouts.start(run, registered.options.timeoutMs);
  if (run.reason) return undefined;
  const ctx = new AttemptContext(run.job, run.attempt, run, run);
  return run.race(Promise.resolve(registered.handler(payload, ctx)));
}

// How an attempt whose handler returned `returned` ended: aborted meanwhile, or what it returned as stored JSON
// (a FatalError thrown when that cannot be stored).
export function attemptResult(run: AttemptRun, returned: unknown, maxResultBytes: number): AttemptResult {
  if (run.reason) return { ok: false, error: new JobAbortedError(run.reason) };
  const text = resultOf(returned, maxResultBytes);
  return text === undefined ? RETURNED_NOTHING : { ok: true, resultJson: text };
}

// An attempt's place among those whose handler timeout runs (fields AttemptTimeouts keeps on it).
export interface TimedAttempt {
  fire(reason: AbortReason): void;
  timeoutAt: number; // performance.now() time
  timeoutPrev: TimedAttempt | undefined;
  timeoutNext: TimedAttempt | undefined;
  timeoutList: TimeoutList | undefined; // the list it is in; undefined: none (not started, ended, or timed out)
}

interface TimeoutList {
  readonly ms: number;
  head: TimedAttempt | undefined;
  tail: TimedAttempt | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
}

// The handler timeouts of one processor without a Node timer per attempt (one cost ~2-3 µs and ~200 bytes a job,
// bench/README.md runs 130-135). Attempts of one timeout value end their time in the order they started it, so
// each value keeps its running attempts in a list in that order, and one timer for the first of them; an attempt
// that ends leaves its list at once. The timer is cleared when its list empties, so no timer outlives the attempts.
export class AttemptTimeouts {
  private readonly lists = new Map<number, TimeoutList>();

  start(a: TimedAttempt, ms: number): void {
    let list = this.lists.get(ms);
    if (!list) this.lists.set(ms, (list = { ms, head: undefined, tail: undefined, timer: undefined }));
    a.timeoutAt = performance.now() + ms;
    a.timeoutList = list;
    a.timeoutNext = undefined;
    a.timeoutPrev = list.tail;
    if (list.tail) list.tail.timeoutNext = a;
    else list.head = a;
    list.tail = a;
    if (!list.timer) this.arm(list, ms);
  }

  stop(a: TimedAttempt): void {
    const list = a.timeoutList;
    if (!list) return;
    this.unlink(list, a);
    // Its timer is left for the next attempt (it fires early and is armed again), unless none is left.
    if (!list.head && list.timer) {
      clearTimeout(list.timer);
      list.timer = undefined;
    }
  }

  private arm(list: TimeoutList, ms: number): void {
    list.timer = setTimeout(() => this.expire(list), Math.max(1, Math.ceil(ms)));
  }

  private expire(list: TimeoutList): void {
    list.timer = undefined;
    const now = performance.now();
    let a = list.head;
    while (a && a.timeoutAt <= now) {
      this.unlink(list, a);
      a.fire('timeout');
      a = list.head;
    }
    if (a) this.arm(list, a.timeoutAt - now);
  }

  private unlink(list: TimeoutList, a: TimedAttempt): void {
    if (a.timeoutPrev) a.timeoutPrev.timeoutNext = a.timeoutNext;
    else list.head = a.timeoutNext;
    if (a.timeoutNext) a.timeoutNext.timeoutPrev = a.timeoutPrev;
    else list.tail = a.timeoutPrev;
    a.timeoutPrev = a.timeoutNext = a.timeoutList = undefined;
  }
}

// How a worker keeps a started job's lease: the job is the worker's while its heartbeats land within the queue's zombie
// timeout (leaseMs; the rescue takes back a job whose last heartbeat is older, by the server's clock). It beats at
// most every heartbeatIntervalMs and at least 4 times a lease, and gives the job up `marginMs` before the lease would
// run out counted from the last heartbeat the store confirmed (from when that heartbeat was sent, on this process's
// monotonic clock: the server wrote its heartbeat_at after that, so neither clock skew nor a slow reply can move the
// worker's deadline past the rescue's). The margin (a tenth of the lease, at least two ticks of the beat timer, at
// most half the lease) covers the timer's tick and a busy event loop. leaseMs 0: no lease known, no deadline.
export function leaseTimes(heartbeatIntervalMs: number, leaseMs: number): { beatEveryMs: number; marginMs: number } {
  if (!(leaseMs > 0)) return { beatEveryMs: heartbeatIntervalMs, marginMs: 0 };
  const beatEveryMs = Math.min(heartbeatIntervalMs, leaseMs / 4);
  const marginMs = Math.min(leaseMs / 2, Math.max(leaseMs / 10, 2 * beatTick(beatEveryMs)));
  return { beatEveryMs, marginMs };
}

// The beat timer's tick for jobs that beat every `beatEveryMs`: a beat comes at most 1.25 intervals apart.
const beatTick = (beatEveryMs: number): number => Math.max(5, Math.floor(beatEveryMs / 4));

export interface RunningJob {
  jobId: JobId;
  abort(reason: AbortReason): void;
  nextBeatAt: number; // the one heartbeat timer beats the job once this time has passed; Infinity: no more beats
  beatEveryMs: number; // its heartbeat interval (leaseTimes)
  // performance.now() time at which its lease is given up (expire()); Infinity: none (no lease, or handler ended)
  leaseDeadline: number;
  expire(): void;
}

// The jobs running in one processor, from start until their outcome is written, and the one timer that beats them
// (a timer per job cost as much as the rest of a no-op job's bookkeeping) and gives up the leases whose deadline has
// passed. It ticks at a quarter of the shortest heartbeat interval among them, so a beat comes at most 1.25
// intervals apart, and stops when no job is left. The jobs a tick finds due are beaten together: `beatMany` gets
// them in one call (the processor sends them as one store call, heartbeatMany), not one call a job, so N running
// jobs cost one round trip and one pool connection a tick, not N that queue behind the claims and completions and
// land late under load (docs/jobs.md, "Leases and heartbeats"). It is not awaited: a tick never waits for the last
// tick's beats (a beat that hangs must not hold the next), and each job's lease runs from its confirmed beats alone.
// HEARTBEAT_BATCH_MAX jobs a call at most.
export const HEARTBEAT_BATCH_MAX = 1_000;

export class RunningJobs<J extends RunningJob = RunningJob> {
  private readonly jobs = new Map<JobId, J>();
  private readonly emptyWaiters: (() => void)[] = [];
  private beatTimer: ReturnType<typeof setInterval> | undefined;
  private tickMs = Infinity;

  constructor(
    private readonly log: JobLogger,
    private readonly beatMany: (due: J[]) => Promise<void>,
  ) {}

  get size(): number {
    return this.jobs.size;
  }

  get(jobId: JobId): J | undefined {
    return this.jobs.get(jobId);
  }

  values(): IterableIterator<J> {
    return this.jobs.values();
  }

  add(job: J): J {
    this.jobs.set(job.jobId, job);
    this.scheduleBeats(beatTick(job.beatEveryMs));
    return job;
  }

  // A running job's heartbeat interval changed (its queue's zombie timeout did): the timer ticks fast enough for it.
  beatsChanged(job: J): void {
    if (this.jobs.get(job.jobId) === job) this.scheduleBeats(beatTick(job.beatEveryMs));
  }

  // Only `job` itself: the same job may have started again here meanwhile (its lease lost while this run's outcome was
  // being written, the rescue re-queued it and this processor claimed it again), and that run is the one beaten now.
  delete(job: J): void {
    if (this.jobs.get(job.jobId) !== job) return;
    this.jobs.delete(job.jobId);
    if (this.jobs.size > 0) return;
    if (this.beatTimer) clearInterval(this.beatTimer);
    this.beatTimer = undefined;
    this.tickMs = Infinity;
    for (const wake of this.emptyWaiters.splice(0)) wake();
  }

  // Resolves once no job is running (at once when none is).
  whenEmpty(): Promise<void> {
    return this.jobs.size === 0 ? Promise.resolve() : new Promise<void>((r) => this.emptyWaiters.push(r));
  }

  // A job that beats more often than the timer ticks (a short lease) makes it tick faster until no job is left.
  private scheduleBeats(tick: number): void {
    if (this.beatTimer && tick >= this.tickMs) return;
    if (this.beatTimer) clearInterval(this.beatTimer);
    this.tickMs = tick;
    this.beatTimer = setInterval(() => this.tick(), tick);
  }

  private tick(): void {
    const now = Date.now();
    const mono = performance.now();
    let due: J[] | undefined;
    for (const r of this.jobs.values()) {
      if (mono >= r.leaseDeadline) {
        r.leaseDeadline = Infinity; // given up once
        r.expire();
        continue;
      }
      if (now < r.nextBeatAt) continue;
      r.nextBeatAt = now + r.beatEveryMs;
      (due ??= []).push(r);
    }
    if (!due) return;
    for (let i = 0; i < due.length; i += HEARTBEAT_BATCH_MAX) {
      const part = due.length <= HEARTBEAT_BATCH_MAX ? due : due.slice(i, i + HEARTBEAT_BATCH_MAX);
      this.beatMany(part).catch((e: unknown) =>
        this.log.warn('heartbeat failed', {
          jobs: part.length,
          jobIds: part.slice(0, 10).map((r) => r.jobId),
          error: String(e),
        }),
      );
    }
  }
}

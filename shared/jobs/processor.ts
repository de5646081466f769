// The processor: start a claimed job, heartbeat while its handler runs (outside any transaction), then complete,
// retry or dead-letter it. Every store call is fenced by the claim's lease; 'lease_lost' ends our interest in the job.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { ClaimedJob, DlqReason, JobId, JobStore, LeaseRef, OwnerResult } from './contract.js';
import {
  FatalError, RetryAfterError, backoffDelayMs, silentLogger, type HandlerRegistry, type JobContext, type JobLogger,
  type RegisteredHandler,
} from './registry.js';

export type JobOutcome = 'succeeded' | 'retried' | 'dead_lettered' | 'lease_lost' | 'released';
export const JOB_OUTCOMES: readonly JobOutcome[] = ['succeeded', 'retried', 'dead_lettered', 'lease_lost', 'released'];

export type AbortReason = 'cancelled' | 'timeout' | 'lease_lost' | 'shutdown';

// The error a handler's signal aborts with; `reason` says why.
export class JobAbortedError extends Error {
  constructor(readonly reason: AbortReason) {
    super(`job aborted: ${reason}`);
    this.name = 'JobAbortedError';
  }
}

// Hooks for telemetry and tests; every hook is optional and must not throw.
export interface ProcessorEvents {
  onOutcome?(e: { job: ClaimedJob; outcome: JobOutcome; reason?: DlqReason; durationMs: number; attempt: number }): void;
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
        else ready.then((r) => r()); // woken meanwhile: hand the slot on
      },
    };
  }
}

interface Running {
  abort(reason: AbortReason): void;
  done: Promise<unknown>;
}

// Collects successful jobs for one completeMany call per event-loop turn: batching under load, no delay when idle.
class CompletionBatcher {
  private pending: { ref: LeaseRef; resolve: (r: OwnerResult) => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;

  constructor(
    private readonly store: JobStore,
    private readonly max: number,
  ) {}

  complete(ref: LeaseRef): Promise<OwnerResult> {
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
      const results = await this.store.completeMany(batch.map((b) => b.ref));
      const byId = new Map(results.map((r) => [r.jobId, r.status]));
      for (const b of batch) b.resolve(byId.get(b.ref.jobId) ?? 'lease_lost');
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

export class JobProcessor {
  readonly workerId: string;
  private readonly store: JobStore;
  private readonly registry: HandlerRegistry;
  private readonly leaseSeconds: number;
  private readonly heartbeatIntervalMs: number;
  private readonly log: JobLogger;
  private readonly events: ProcessorEvents;
  private readonly completions: CompletionBatcher;
  private readonly running = new Map<JobId, Running>();
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
    this.completions = new CompletionBatcher(opts.store, opts.completionBatchMax ?? 200);
  }

  get inFlight(): number {
    return this.running.size;
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  // Claim up to `limit` due jobs under this processor's worker id and lease length.
  async claim(queues: string[], limit: number): Promise<ClaimedJob[]> {
    if (this.stopping || limit < 1) return [];
    return this.store.claimNext({ workerId: this.workerId, queues, limit, leaseSeconds: this.leaseSeconds });
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

  // Start a batch of claimed jobs with one store call, then run them concurrently.
  async runBatch(jobs: ClaimedJob[]): Promise<JobOutcome[]> {
    if (jobs.length === 0) return [];
    if (this.stopping) return Promise.all(jobs.map((job) => this.releaseUnstarted(job)));
    const started = await this.store.startMany(jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
    return Promise.all(
      jobs.map((job, i) => {
        const s = started[i]!;
        if (s.status === 'lease_lost') {
          this.leaseLost(job, 'start');
          return 'lease_lost' as const;
        }
        return this.execute(job, s.attempt);
      }),
    );
  }

  // Claim due jobs and run them until the time budget is spent (timer dispatcher path).
  async drain(opts: { queues: string[]; budgetMs: number; concurrency: number }): Promise<{
    processed: number;
    outcomes: Record<JobOutcome, number>;
  }> {
    const deadline = Date.now() + opts.budgetMs;
    const outcomes = Object.fromEntries(JOB_OUTCOMES.map((o) => [o, 0])) as Record<JobOutcome, number>;
    const inflight = new Set<Promise<void>>();
    let processed = 0;
    while (!this.stopping && Date.now() < deadline) {
      const free = opts.concurrency - inflight.size;
      if (free > 0) {
        const jobs = await this.claim(opts.queues, free);
        if (jobs.length > 0) {
          const p: Promise<void> = this.runBatch(jobs)
            .then((results) => {
              for (const o of results) outcomes[o]++;
              processed += results.length;
            })
            .catch((err) => this.log.error('batch failed', { error: String(err) }))
            .finally(() => inflight.delete(p));
          inflight.add(p);
          continue;
        }
        if (inflight.size === 0) break; // nothing due and nothing running: done early
      }
      await Promise.race([...inflight, sleep(Math.max(0, Math.min(50, deadline - Date.now())))]);
    }
    await Promise.all(inflight);
    return { processed, outcomes };
  }

  // Stop taking work: wait up to graceMs for running handlers, then abort the rest with reason 'shutdown'.
  async shutdown(graceMs = 10_000): Promise<void> {
    this.stopping = true;
    const all = () => Promise.allSettled([...this.running.values()].map((r) => r.done));
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

  private async execute(job: ClaimedJob, attempt: number): Promise<JobOutcome> {
    const startedAt = Date.now();
    const ref: LeaseRef = { jobId: job.id, leaseId: job.leaseId };
    const registered = this.registry.get(job.type);
    let finished: (v: unknown) => void = () => undefined;
    const done = new Promise((r) => (finished = r));
    const report = (outcome: JobOutcome, reason?: DlqReason) => {
      this.safe(() => this.events.onOutcome?.({ job, outcome, reason, durationMs: Date.now() - startedAt, attempt }));
      return outcome;
    };
    try {
      if (!registered) {
        const msg = `no handler is registered for job type "${job.type}" (registered: ${this.registry.types().join(', ') || 'none'})`;
        return report(await this.deadLetter(job, ref, 'fatal', msg), 'fatal');
      }
      const controller = new AbortController();
      let abortReason: AbortReason | undefined;
      let rejectAbort: (e: unknown) => void = () => undefined;
      const aborted = new Promise<never>((_, reject) => (rejectAbort = reject));
      aborted.catch(() => undefined);
      const abort = (reason: AbortReason) => {
        if (abortReason) return;
        abortReason = reason;
        const err = new JobAbortedError(reason);
        controller.abort(err);
        rejectAbort(err);
      };
      this.running.set(job.id, { abort, done });
      const beat = async () => {
        const hb = await this.store.heartbeat(ref);
        if (hb.status === 'lease_lost') {
          this.leaseLost(job, 'heartbeat');
          abort('lease_lost');
        } else if (hb.cancelRequested) abort('cancelled');
      };
      const timer = setInterval(() => beat().catch((e) => this.log.warn('heartbeat failed', { jobId: job.id, error: String(e) })), this.heartbeatIntervalMs);
      let timeout: ReturnType<typeof setTimeout> | undefined;
      const ctx: JobContext = {
        jobId: job.id,
        attempt,
        idempotencyKey: job.idempotencyKey,
        queue: job.queue,
        type: job.type,
        signal: controller.signal,
        log: this.log,
        heartbeat: beat,
      };
      let error: unknown;
      let succeeded = false;
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
            releaseSlot = await Promise.race([wait.ready, aborted]);
          } catch (err) {
            wait.cancel();
            throw err;
          }
        }
        timeout = setTimeout(() => abort('timeout'), registered.options.timeoutMs);
        await Promise.race([Promise.resolve().then(() => registered.handler(payload, ctx)), aborted]);
        succeeded = !abortReason;
        if (abortReason) error = new JobAbortedError(abortReason);
      } catch (err) {
        error = err;
      } finally {
        releaseSlot?.();
        clearInterval(timer);
        clearTimeout(timeout);
      }
      if (succeeded) {
        const status = await this.completions.complete(ref);
        if (status === 'lease_lost') {
          this.leaseLost(job, 'complete');
          return report('lease_lost');
        }
        return report('succeeded');
      }
      return await this.afterFailure(job, ref, attempt, registered, abortReason, error, report);
    } finally {
      this.running.delete(job.id);
      finished(undefined);
    }
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
    const maxAttempts = job.maxAttempts ?? registered.options.maxAttempts ?? job.queueMaxAttempts;
    const d = decideAfterFailure({ attempt, maxAttempts, options: registered.options, abortReason, error });
    switch (d.kind) {
      case 'lease_lost':
        return report('lease_lost'); // someone else owns the job now: touch nothing
      case 'dead_letter':
        return report(await this.deadLetter(job, ref, d.reason, d.message), d.reason);
      case 'retry':
        return report(await this.retryAt(job, ref, new Date(Date.now() + d.delayMs), d.message));
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
}

export type FailureDecision =
  | { kind: 'lease_lost' }
  | { kind: 'dead_letter'; reason: DlqReason; message: string }
  | { kind: 'retry'; delayMs: number; message: string };

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
      return { kind: 'retry', delayMs: 0, message: 'interrupted by worker shutdown' };
    case 'timeout':
      if (options.retryOnTimeout && attemptsLeft) {
        return { kind: 'retry', delayMs: backoffDelayMs(attempt, options.backoff, f.random), message: `timed out after ${options.timeoutMs} ms` };
      }
      return { kind: 'dead_letter', reason: 'timeout', message: `timed out after ${options.timeoutMs} ms` };
    default:
      break;
  }
  if (f.error instanceof FatalError) return { kind: 'dead_letter', reason: 'fatal', message };
  if (!attemptsLeft) return { kind: 'dead_letter', reason: 'exhausted', message: `attempt ${attempt} of ${maxAttempts} failed: ${message}` };
  const delayMs = f.error instanceof RetryAfterError ? Math.max(0, f.error.retryAfterMs) : backoffDelayMs(attempt, options.backoff, f.random);
  return { kind: 'retry', delayMs, message };
}

// A long-running polling worker (npm start, tests): keeps up to `concurrency` jobs running.
export class Worker {
  private loop: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;

  constructor(
    readonly processor: JobProcessor,
    private readonly opts: { queues: string[]; concurrency: number; pollIntervalMs?: number; log?: JobLogger },
  ) {}

  start(): void {
    if (this.loop) return;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const inflight = new Set<Promise<unknown>>();
    while (!this.stopped) {
      const free = this.opts.concurrency - inflight.size;
      let claimed = 0;
      if (free > 0) {
        try {
          const jobs = await this.processor.claim(this.opts.queues, free);
          claimed = jobs.length;
          if (jobs.length > 0) {
            const p: Promise<unknown> = this.processor
              .runBatch(jobs)
              .catch((err) => this.opts.log?.error('batch failed', { error: String(err) }))
              .finally(() => {
                inflight.delete(p);
                this.wake?.();
              });
            inflight.add(p);
          }
        } catch (err) {
          this.opts.log?.error('claim failed', { error: String(err) });
        }
      }
      if (claimed === 0 || inflight.size >= this.opts.concurrency) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, this.opts.pollIntervalMs ?? 500);
          this.wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        this.wake = undefined;
      }
    }
    await Promise.allSettled([...inflight]);
  }

  async stop(graceMs = 10_000): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.processor.shutdown(graceMs);
    await this.loop;
  }
}

// A processor's row in the worker registry (keel.workers, V012): what the Workers page lists as a live processor.
//
// When it is written, and why so: the row is registered when the processor starts working (the first queue message,
// timer pass or job of the process), and refreshed only when this process does something for Keel (a job starts or
// heartbeats, a queue message is handled, the dispatcher's pass runs) and at most once per refreshMs (KEEL_WORKER_REFRESH_MS, 5 minutes by default). Never per job: the claim and completion
// statements are untouched, and a busy process adds one statement per interval. No timer of its own: an idle app
// sends nothing more than its timers' passes already cause (the dispatcher's pass refreshes the instance that runs
// the timers, one statement per interval), and a database left to auto-pause is not woken by the registry. So
// "last seen" is at most refreshMs old while the process works; a process that does nothing for longer (an idle
// queue-trigger instance) reads as not seen lately, until it works again or maintenance prunes its row
// (KEEL_WORKER_RETENTION_MS). A graceful stop removes the row.
//
// A write that fails is logged and tried again at the next activity after refreshMs: the registry is for people
// looking, never a reason for a job to fail.
import os from 'node:os';
import type { JobStore, WorkerRegistration } from './contract.js';
import type { JobLogger } from './registry.js';

export interface PresenceOptions {
  appVersion: string;
  buildId?: string | null;
  queues?: string[] | null; // the queues this process's dispatcher serves; null: every queue
  concurrency: number;
  refreshMs: number;
  // Defaults: os.hostname(), none, process.pid. The composition root passes hostingInstanceId of the process env.
  host?: string;
  instanceId?: string | null;
  pid?: number;
}

// The instance a Functions host runs on (WEBSITE_INSTANCE_ID, 64 hex digits), cut to what tells instances apart.
export function hostingInstanceId(env: NodeJS.ProcessEnv): string | null {
  const id = env.WEBSITE_INSTANCE_ID?.trim();
  return id ? id.slice(0, 128) : null;
}

// How long a graceful stop waits for the row's removal.
export const DEREGISTER_WAIT_MS = 1_000;

export class WorkerPresence {
  private lastAt = -Infinity;
  private inFlight: Promise<void> | undefined;
  private stopped = false;
  private written = false;
  private readonly startedAt = new Date();

  constructor(
    private readonly store: JobStore,
    private readonly workerId: string,
    private readonly opts: PresenceOptions,
    private readonly jobsDone: () => number,
    private readonly log: JobLogger,
  ) {}

  // This process did something: refresh the row when the last write is refreshMs old (or none was made yet). Returns
  // at once; the write runs on its own, one at a time.
  touch(): void {
    if (this.stopped || this.inFlight || Date.now() - this.lastAt < this.opts.refreshMs) return;
    this.lastAt = Date.now();
    this.inFlight = this.write().finally(() => {
      this.inFlight = undefined;
    });
  }

  // Resolves once no write is in flight (tests, shutdown).
  async settled(): Promise<void> {
    await this.inFlight;
  }

  // A graceful stop: no more writes; the row is removed once a write in flight has landed (so that write cannot bring
  // it back). Waits at most maxWaitMs: the app's stop (the host kills the worker 5 s after asking) must not hang on a
  // database that does not answer; errors are logged. Maintenance prunes a row left behind.
  async stop(maxWaitMs = DEREGISTER_WAIT_MS): Promise<void> {
    this.stopped = true;
    const work = (async () => {
      await this.inFlight;
      if (!this.written) return;
      try {
        await this.store.deregisterWorker(this.workerId);
      } catch (err) {
        this.log.warn('worker registry: could not remove this worker; maintenance prunes it', {
          workerId: this.workerId,
          error: String(err),
        });
      }
    })();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.log.warn('worker registry: removing this worker did not finish in time; maintenance prunes it', {
          workerId: this.workerId,
          waitedMs: maxWaitMs,
        });
        resolve();
      }, maxWaitMs);
    });
    await Promise.race([work, late]);
    clearTimeout(timer);
  }

  registration(): WorkerRegistration {
    return {
      workerId: this.workerId,
      host: (this.opts.host ?? os.hostname()).slice(0, 256) || 'unknown',
      instanceId: this.opts.instanceId ?? null,
      pid: this.opts.pid ?? process.pid,
      appVersion: this.opts.appVersion,
      buildId: this.opts.buildId ?? null,
      queues: this.opts.queues && this.opts.queues.length > 0 ? this.opts.queues : null,
      concurrency: this.opts.concurrency,
      startedAt: this.startedAt,
      jobsDone: this.jobsDone(),
    };
  }

  private async write(): Promise<void> {
    try {
      // Marked before the call: a write whose reply is lost may still have landed, and stop() must then remove it.
      this.written = true;
      await this.store.registerWorker(this.registration());
    } catch (err) {
      this.log.warn('worker registry: could not refresh this worker (tried again later)', {
        workerId: this.workerId,
        error: String(err),
      });
    }
  }
}

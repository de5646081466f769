// Every attempt of a job, for its page (GET /jobs/{id}, the console's job page). An attempt that ended without
// success is recorded by the move that ended it (retry, fail, interrupt, zombie rescue, a cancelled completion), as an
// entry of the job's log column
// ({kind: 'attempt', ...}: sql/postgres/R__010_jobs_functions.sql, keel._with_attempt; SQL Server keel.WithAttempt),
// in the move's own statement. A successful attempt is never written anywhere extra: it is the archive row itself
// (attempts, started_at, finished_at, worker_id), so a completion costs nothing more. The running attempt of a hot
// job is its row too.
import type { JobRecord } from './contract.js';

// A queue without a settings row allows this many attempts (keel.queues.max_attempts' default, V001).
export const DEFAULT_MAX_ATTEMPTS = 5;
// The newest this many recorded attempts are kept per job (the engines' bound; log lines have their own).
export const JOB_ATTEMPTS_KEPT = 100;
// An attempt's error is cut to this many characters (the whole last error stays on the job).
export const JOB_ATTEMPT_ERROR_CHARS = 2_000;

export type AttemptOutcome =
  | 'retried' // failed, retried later
  | 'interrupted' // handed back by a graceful shutdown; the attempt number is used again
  | 'zombie' // no heartbeat within the queue's timeout (retried or dead-lettered)
  | 'exhausted'
  | 'fatal'
  | 'timeout'
  | 'cancelled'
  | 'succeeded'
  | 'running';

export interface JobAttempt {
  attempt: number;
  worker: string | null;
  startedAt: string | null; // ISO time
  endedAt: string | null; // null while running
  outcome: AttemptOutcome;
  error: string | null;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

// Splits a stored log column into its ctx.log lines and its recorded attempts, each oldest first.
export function splitJobLog(entries: unknown): { lines: unknown[]; attempts: JobAttempt[] } {
  const lines: unknown[] = [];
  const attempts: JobAttempt[] = [];
  if (!Array.isArray(entries)) return { lines, attempts };
  for (const e of entries) {
    if (isObject(e) && e.kind === 'attempt') {
      attempts.push({
        attempt: Number(e.attempt),
        worker: typeof e.worker === 'string' ? e.worker : null,
        startedAt: isoOrNull(e.startedAt),
        endedAt: isoOrNull(e.endedAt),
        outcome: String(e.outcome) as AttemptOutcome,
        error: typeof e.error === 'string' ? e.error : null,
      });
    } else lines.push(e);
  }
  return { lines, attempts };
}

// SQL Server writes its times without a zone (UTC) and sometimes without milliseconds: one form for every engine.
function isoOrNull(v: unknown): string | null {
  if (typeof v !== 'string' || v === '') return null;
  const d = new Date(/[zZ]|[+-]\d\d:\d\d$/.test(v) ? v : `${v}Z`);
  return Number.isNaN(d.getTime()) ? v : d.toISOString();
}

// The job's attempts, oldest first: the recorded ones, then the one its row stands for (the archived success, or
// the attempt running now). A dead letter's last attempt is recorded by the move that buried it.
export function jobTimeline(job: JobRecord): JobAttempt[] {
  const out = [...(job.attemptLog ?? [])];
  const iso = (d: Date | null) => (d ? d.toISOString() : null);
  if (job.location === 'archive') {
    out.push({
      attempt: job.attempts,
      worker: job.workerId,
      startedAt: iso(job.startedAt),
      endedAt: iso(job.finishedAt),
      outcome: 'succeeded',
      error: null,
    });
  } else if (job.location === 'hot' && job.state === 'processing') {
    out.push({
      attempt: job.attempts,
      worker: job.workerId,
      startedAt: iso(job.startedAt),
      endedAt: null,
      outcome: 'running',
      error: null,
    });
  }
  return out;
}

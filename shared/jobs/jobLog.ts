// A job's own log: the lines its handler writes through ctx.log, kept with the job (hot, then archive or DLQ) so an
// operator reads them beside its error and result. Each line is cut here, once, for every engine; the stores keep
// the newest KEEL_JOB_LOG_LINES lines of the job across its attempts.
import type { JobLogger } from './registry.js';
import { toStorableText } from './validate.js';

export type JobLogLevel = 'info' | 'warn' | 'error';

export interface JobLogLine {
  attempt: number;
  at: string; // ISO time the line was written (the worker's clock)
  level: JobLogLevel;
  message: string;
  fields?: Record<string, unknown>;
}

export const DEFAULT_JOB_LOG_LINES = 100;
export const JOB_LOG_LINES_LIMIT = 10_000;
export const JOB_LOG_MESSAGE_CHARS = 2_000;
export const JOB_LOG_FIELDS_CHARS = 2_000;

// One stored line: the message cut to JOB_LOG_MESSAGE_CHARS; fields kept when their JSON fits JOB_LOG_FIELDS_CHARS,
// else replaced by a note saying how long they were (a line is never refused: logging must not fail a job).
export function jobLogLine(
  attempt: number,
  level: JobLogLevel,
  message: string,
  fields: Record<string, unknown> | undefined,
  now = new Date(),
): JobLogLine {
  const text = String(message);
  const line: JobLogLine = {
    attempt,
    at: now.toISOString(),
    level,
    // Made storable after the cut, which may split a surrogate pair.
    message: toStorableText(text.length > JOB_LOG_MESSAGE_CHARS ? `${text.slice(0, JOB_LOG_MESSAGE_CHARS)}…` : text),
  };
  if (fields !== undefined) {
    let json: string | undefined;
    try {
      json = JSON.stringify(fields, storableFields);
    } catch {
      json = undefined;
    }
    if (json === undefined) line.fields = { _dropped: 'fields are not JSON' };
    else if (json.length > JOB_LOG_FIELDS_CHARS) line.fields = { _dropped: `fields of ${json.length} characters` };
    else line.fields = JSON.parse(json) as Record<string, unknown>;
  }
  return line;
}

// PostgreSQL's jsonb holds no NUL and no lone surrogate: one in a line failed the whole append of the lines beside
// it. Each is kept as U+FFFD (toStorableText), in a message, a field's value or a field's name, as a failed attempt's
// error is (completer.ts).
function storableFields(_key: string, value: unknown): unknown {
  if (typeof value === 'string') return toStorableText(value);
  if (
    value !== null &&
    typeof value === 'object' &&
    !Array.isArray(value) &&
    Object.keys(value).some((k) => toStorableText(k) !== k)
  )
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [toStorableText(k), v]));
  return value;
}

// ctx.log for one attempt: every line goes to the process log (with the job id) and, when the job log is on
// (maxLines > 0), into a buffer the processor appends to the job under its lease (JobProcessor: throttled, and
// always before the attempt's final move). At most maxLines lines wait in the buffer; older ones are dropped, as the
// store would drop them.
export class AttemptLog implements JobLogger {
  private pending: JobLogLine[] = [];
  dropped = 0;

  constructor(
    private readonly process: JobLogger,
    private readonly jobId: string,
    private readonly attempt: number,
    private readonly maxLines: number,
    private readonly onLine: () => void,
  ) {}

  info(message: string, fields?: Record<string, unknown>): void {
    this.write('info', message, fields);
  }
  warn(message: string, fields?: Record<string, unknown>): void {
    this.write('warn', message, fields);
  }
  error(message: string, fields?: Record<string, unknown>): void {
    this.write('error', message, fields);
  }

  // The lines written since the last take, oldest first.
  take(): JobLogLine[] {
    const lines = this.pending;
    this.pending = [];
    return lines;
  }

  private write(level: JobLogLevel, message: string, fields?: Record<string, unknown>): void {
    this.process[level](message, { ...fields, jobId: this.jobId, attempt: this.attempt });
    if (this.maxLines <= 0) return;
    this.pending.push(jobLogLine(this.attempt, level, message, fields));
    if (this.pending.length > this.maxLines) {
      this.pending.shift();
      this.dropped++;
    }
    this.onLine();
  }
}

// What a running job reports about itself (ctx.progress) and what it returns (its result), checked once here for
// every engine: the stores write the values as they are given.
import { fieldPath, JSON_TOO_DEEP, jsonScalarProblem, LIMITS, textProblem, ValidationError } from './validate.js';

// How far an attempt is: a fraction, a count of a total, a short note, or any of them together.
export interface JobProgress {
  fraction: number | null; // 0..1; derived from done/total when only those are given
  done: number | null;
  total: number | null;
  note: string | null;
}

export type ProgressInput = number | { fraction?: number; done?: number; total?: number; note?: string };

export const PROGRESS_NOTE_MAX_CHARS = 200;
export const DEFAULT_MAX_RESULT_BYTES = 64 * 1024;
// The bound of KEEL_MAX_RESULT_BYTES: a result lives on its archive row and in GET /jobs/{id}.
export const MAX_RESULT_BYTES_LIMIT = 1024 * 1024;

const count = (v: unknown, field: string): number | null => {
  if (v === undefined) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new ValidationError(field, `must be a finite number >= 0 (got ${JSON.stringify(v) ?? String(v)})`);
  }
  // Stored as JSON numbers: past 2^53 a count may already have lost digits (packages/client/src/rules.ts).
  if (Number.isInteger(v) && !Number.isSafeInteger(v))
    throw new ValidationError(field, `must be a safe integer (at most ${Number.MAX_SAFE_INTEGER}; got ${v})`);
  return v;
};

// ctx.progress(0.4) or ctx.progress({done: 40, total: 100, note: 'rows'}) -> the stored form, or a ValidationError
// naming the field at fault.
export function normalizeProgress(input: ProgressInput): JobProgress {
  const given = typeof input === 'number' ? { fraction: input } : input;
  if (given === null || typeof given !== 'object' || Array.isArray(given)) {
    throw new ValidationError(
      'progress',
      'must be a number between 0 and 1 or an object {fraction, done, total, note}',
    );
  }
  const unknownKey = Object.keys(given).find((k) => !['fraction', 'done', 'total', 'note'].includes(k));
  if (unknownKey)
    throw new ValidationError(`progress.${unknownKey}`, 'is not a progress field (fraction, done, total, note)');
  let fraction = count(given.fraction, 'progress.fraction');
  const done = count(given.done, 'progress.done');
  const total = count(given.total, 'progress.total');
  if (fraction !== null && fraction > 1)
    throw new ValidationError('progress.fraction', `must be at most 1 (got ${fraction})`);
  if (done !== null && total !== null && done > total) {
    throw new ValidationError('progress.done', `must not exceed progress.total (${done} > ${total})`);
  }
  if (fraction === null && done !== null && total !== null) fraction = total === 0 ? 1 : done / total;
  let note: string | null = null;
  if (given.note !== undefined) {
    if (typeof given.note !== 'string') throw new ValidationError('progress.note', 'must be a string');
    if (given.note.length > PROGRESS_NOTE_MAX_CHARS) {
      throw new ValidationError(
        'progress.note',
        `is ${given.note.length} characters; the limit is ${PROGRESS_NOTE_MAX_CHARS}`,
      );
    }
    note = given.note;
  }
  if (fraction === null && done === null && note === null) {
    throw new ValidationError('progress', 'says nothing: give a fraction, done (with or without total) or a note');
  }
  return { fraction, done, total, note };
}

// A handler's return value as the JSON text stored with the archived job; undefined when it returned nothing (or
// null: the stores cannot tell a JSON null from no result, so neither is stored).
// Throws a ValidationError (field 'result' or one inside it) for a value JSON cannot carry or one over the limit: the processor
// dead-letters such a job as fatal, since running it again would only produce the same value.
export function resultJson(value: unknown, maxBytes: number): string | undefined {
  if (value === undefined || value === null) return undefined;
  // What JSON.stringify would change without a word (NaN and Infinity become null), what it throws on without naming
  // the field (a BigInt), integers past 2^53, text no database stores and nesting past LIMITS.payloadDepth: refused
  // naming the field ("result.rows[2].n"), jsonTextProblem's rules. Checked as JSON.stringify walks the value (its
  // replacer), in one pass, on what it writes: a toJSON's answer (a Date's text, a class's own form) is what is
  // stored, so it is what is checked, and a getter runs once.
  let problem: { path: (string | number)[]; message: string } | null = null;
  const paths = new Map<object, (string | number)[]>(); // each container written so far: its path
  function check(this: unknown, key: string, v: unknown): unknown {
    if (problem) return undefined;
    const base = paths.get(this as object); // none: the value itself (stringify's wrapper holds it)
    const at = () => (base === undefined ? [] : [...base, Array.isArray(this) ? Number(key) : key]);
    if (v !== null && typeof v === 'object') {
      const path = at();
      if (path.length >= LIMITS.payloadDepth) {
        problem = { path: [], message: JSON_TOO_DEEP };
        return undefined;
      }
      if (!Array.isArray(v))
        for (const k of Object.keys(v)) {
          const km = textProblem(k);
          if (km) {
            problem = { path: [...path, k], message: `key ${km}` };
            return undefined;
          }
        }
      paths.set(v, path);
      return v;
    }
    const m = jsonScalarProblem(v);
    if (m) {
      problem = { path: at(), message: m };
      return undefined;
    }
    return v;
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(value, check);
  } catch (err) {
    // A cyclic value (TypeError), or a toJSON or getter that threw.
    if (!problem) throw new ValidationError('result', `is not JSON: ${(err as Error).message}`);
  }
  const found = problem as { path: (string | number)[]; message: string } | null;
  if (found) throw new ValidationError(fieldPath('result', found.path), found.message);
  if (text === undefined) throw new ValidationError('result', `is not JSON (a ${typeof value})`);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxBytes) {
    throw new ValidationError(
      'result',
      `is ${bytes} bytes of JSON; the limit is ${maxBytes} bytes (KEEL_MAX_RESULT_BYTES)`,
    );
  }
  return text;
}

// The results of one completion batch as the stores pass them: a JSON object by job id ({"123": <result>}), or null
// when no job of the batch returned anything (the common case costs the move nothing). Ids are digits (isLeaseRef)
// and each resultJson is JSON already, so the object is written without an escaping pass.
export function resultsByIdJson(refs: readonly { jobId: string; resultJson?: string }[]): string | null {
  let out: string | null = null;
  for (const r of refs) {
    if (r.resultJson === undefined) continue;
    out = `${out === null ? '{' : `${out},`}"${r.jobId}":${r.resultJson}`;
  }
  return out === null ? null : `${out}}`;
}

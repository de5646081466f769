// Bounded cardinality for metric dimensions.
//
// Free-form names (queue, job type, transfer) are truncated to a maximum length and capped in count per
// dimension: the first `maxDistinctValues` distinct values seen by this process pass through, every later
// new value is reported as `other`. Closed sets (reasons, outcomes, states) map anything unknown to `other`.
// Ids (job id, batch id) never become metric dimensions; they go on events only.

import { OTHER } from './names.js';

export interface CardinalityLimits {
  /** Longest dimension value kept; longer values are cut to this many characters. Default 64. */
  maxValueLength: number;
  /** Distinct values per free-form dimension before new ones collapse to `other`. Default 50. */
  maxDistinctValues: number;
}

export const DEFAULT_CARDINALITY_LIMITS: CardinalityLimits = {
  maxValueLength: 64,
  maxDistinctValues: 50,
};

export const UNKNOWN = 'unknown';

/** Normalizes one free-form value: string, trimmed, control characters removed, truncated. */
export function normalizeValue(value: unknown, maxValueLength: number): string {
  if (value === undefined || value === null) return UNKNOWN;
  const text = String(value)
    .replace(/[\u0000-\u001f\u007f]/g, '')
    .trim();
  if (text.length === 0) return UNKNOWN;
  return text.length > maxValueLength ? text.slice(0, maxValueLength) : text;
}

/** Maps a value to itself when it is one of `allowed`, else to `other`. */
export function closedSet<T extends string>(allowed: readonly T[], value: unknown): T | typeof OTHER {
  return typeof value === 'string' && (allowed as readonly string[]).includes(value) ? (value as T) : OTHER;
}

/** Per-dimension registry of the values admitted so far. */
export class DimensionLimiter {
  private readonly seen = new Map<string, Set<string>>();

  constructor(private readonly limits: CardinalityLimits = DEFAULT_CARDINALITY_LIMITS) {}

  /** Bounded value for `dimension`: known values pass, new values pass until the cap, then `other`. */
  admit(dimension: string, value: unknown): string {
    const normalized = normalizeValue(value, this.limits.maxValueLength);
    let values = this.seen.get(dimension);
    if (!values) {
      values = new Set<string>();
      this.seen.set(dimension, values);
    }
    if (values.has(normalized)) return normalized;
    if (values.size >= this.limits.maxDistinctValues) return OTHER;
    values.add(normalized);
    return normalized;
  }

  /** Number of distinct values admitted for `dimension` (for tests and diagnostics). */
  distinct(dimension: string): number {
    return this.seen.get(dimension)?.size ?? 0;
  }
}

// How long a failed attempt waits before its retry: a handler's backoff option, its default, and the delay rule.
export interface BackoffOptions {
  baseMs: number; // first retry delay
  maxMs: number; // cap
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, maxMs: 10 * 60_000 };

// Exponential backoff with equal jitter, capped: after attempt n the delay is in [c/2, c), c = min(max, base * 2^(n-1)).
// Half fixed keeps a floor under retry storms; half random spreads the herd.
export function backoffDelayMs(attempt: number, opts: BackoffOptions, random: () => number = Math.random): number {
  const ceiling = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(ceiling / 2 + (random() * ceiling) / 2);
}

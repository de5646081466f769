// Waits for a condition in tests that cannot know when it turns true (another process, a timer, a notification):
// polls with a backoff and fails with what it waited for, never a guessed sleep.
export interface UntilOptions {
  /** How long to wait before failing (default 15 s). */
  timeoutMs?: number;
  /** First pause between probes; it doubles up to `maxPollMs` (defaults 25 and 500 ms). */
  pollMs?: number;
  maxPollMs?: number;
  /** Extra text for the failure, read when it fails (e.g. a child process's last output). */
  detail?: () => string;
}

/** Resolves with the probe's first truthy value; rejects after the timeout, naming `what`. */
export async function until<T>(
  what: string,
  probe: () => T | null | undefined | false | Promise<T | null | undefined | false>,
  options: number | UntilOptions = {},
): Promise<T> {
  const {
    timeoutMs = 15_000,
    pollMs = 25,
    maxPollMs = 500,
    detail,
  } = typeof options === 'number' ? { timeoutMs: options } : options;
  const deadline = Date.now() + timeoutMs;
  let delay = pollMs;
  while (Date.now() < deadline) {
    const v = await probe();
    if (v) return v;
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(maxPollMs, delay * 2);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail ? `\n${detail()}` : ''}`);
}

/** Settles as `p` does, or rejects naming `what` when `p` has not settled within `ms` (a hang, in a test of faults). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>(
      (_r, reject) => (timer = setTimeout(() => reject(new Error(`HANG: ${what} did not finish within ${ms} ms`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

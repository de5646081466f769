// A host whose clock is off the database server's: Date.now (and what reads it) runs offsetMs ahead (or behind,
// negative) while fn runs. realNow is the true clock, taken before any test mocks it.
import { vi } from 'vitest';

export const realNow = Date.now.bind(Date);

export async function skewed<T>(offsetMs: number, fn: () => Promise<T>): Promise<T> {
  const spy = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offsetMs);
  try {
    return await fn();
  } finally {
    spy.mockRestore();
  }
}

// What the bulk writes' preview-then-confirm shares (POST /jobs/cancel, POST /dlq/resurrect, a lowered retention,
// POST /purge): the cap of a preview's count, and where a job is now when a write did not act on it.
import type { JobRecord, JobStore } from '../jobs/contract.js';

// Previews count in SQL up to this many rows (keel.count_jobs); past it they say "at least".
export const PREVIEW_COUNT_CAP = 100_000;

// Describes where a job is, for 409 bodies after a lost race.
export function where(job: JobRecord): Record<string, unknown> {
  return { id: job.id, location: job.location, state: job.state };
}

// Why a previewed id was not acted on: where the job is now (another location, another state, or gone).
export async function whereNow(
  store: JobStore,
  id: string,
): Promise<{ id: string; why: 'not_in_dlq' | 'gone' | 'key_held'; location: string | null; state: string | null }> {
  const job = await store.getJob(id);
  if (!job) return { id, why: 'gone', location: null, state: null };
  // Still in the DLQ after a resurrect: its idempotency key is held by a hot job of its queue and type.
  if (job.location === 'dlq') return { id, why: 'key_held', location: 'dlq', state: job.state };
  return { id, why: 'not_in_dlq', location: job.location, state: job.state };
}

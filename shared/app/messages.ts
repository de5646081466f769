// Queue message shapes and their validation. A message that fails here is poison: it is moved to
// `<queue>-poison` with the reason, logged, and acknowledged; it never throws into the host.
import { z } from 'zod';
import type { InvocationContext } from '@azure/functions';
import type { Runtime } from './runtime.js';
import { batchId, jobId } from '../jobs/validate.js';

// A job id arrives as text (what Keel posts) or as a number (a hand-posted message); either way it is checked
// against the job domain's id schema (shared/jobs/validate.ts), as the ops API checks it.
const jobIdSchema = z.union([jobId, z.number().int().positive().max(Number.MAX_SAFE_INTEGER).transform(String)]);

export const jobMessageSchema = z.strictObject({ jobId: jobIdSchema });
// retry: how many delayed re-posts of this step came before this one (a retry chain ends at
// KEEL_TRANSFER_RETRY_LIMIT); afterAttempt: the apply attempt that failed before this re-post, so a chain whose
// batch was retried by someone else since (a higher attempt count) stops instead of doubling the retries.
export const transferMessageSchema = z.strictObject({
  batchId,
  retry: z.number().int().min(0).max(1000).optional(),
  afterAttempt: z.number().int().min(0).optional(),
  // Rows committed so far by the catch-up chain this batch belongs to (KEEL_TRANSFER_CATCHUP_ROWS).
  chainRows: z.number().int().min(0).optional(),
  // When that chain started (epoch ms; KEEL_TRANSFER_CATCHUP_MS). Absent: the chain starts with this batch.
  chainStartedAt: z.number().int().min(0).optional(),
});

export type ParsedMessage<T> = { ok: true; value: T } | { ok: false; reason: 'malformed'; detail: string };

// The Functions host hands JSON messages over parsed and anything else as a string (or bytes).
function asValue(message: unknown): { ok: true; value: unknown } | { ok: false; detail: string } {
  if (typeof message === 'string') {
    try {
      return { ok: true, value: JSON.parse(message) };
    } catch {
      return { ok: false, detail: 'message is not JSON' };
    }
  }
  if (message instanceof Uint8Array) return asValue(Buffer.from(message).toString('utf8'));
  return { ok: true, value: message };
}

export function parseMessage<T>(schema: z.ZodType<T>, message: unknown): ParsedMessage<T> {
  const v = asValue(message);
  if (!v.ok) return { ok: false, reason: 'malformed', detail: v.detail };
  const r = schema.safeParse(v.value);
  if (!r.success) {
    const i = r.error.issues[0]!;
    const where = i.path.length ? i.path.join('.') : i.code === 'unrecognized_keys' ? i.keys.join(',') : 'message';
    return { ok: false, reason: 'malformed', detail: `${where}: ${i.message}` };
  }
  return { ok: true, value: r.data };
}

// Moves a rejected message to the poison queue with its reason. If even that fails, the error is thrown so the
// host retries the message and, after maxDequeueCount, poisons it itself.
export async function poison(
  rt: Runtime,
  queue: string,
  context: InvocationContext,
  message: unknown,
  reason: string,
  detail: string,
): Promise<void> {
  const dequeueCount =
    typeof context.triggerMetadata?.dequeueCount === 'number' ? context.triggerMetadata.dequeueCount : undefined;
  context.warn(`poison message on ${queue} (${reason}): ${detail}; moved to ${queue}-poison`);
  await rt.queues.sendPoison(queue, {
    reason,
    detail,
    functionName: context.functionName,
    message: message instanceof Uint8Array ? Buffer.from(message).toString('base64') : message,
    ...(dequeueCount !== undefined ? { dequeueCount } : {}),
  });
}

// Example handler — the model to copy. `webhook.post` delivers a JSON body to an HTTPS endpoint of a host listed in
// the WEBHOOK_ALLOWED_HOSTS app setting (comma-separated; empty: none, so a fresh deployment posts nowhere).
//
// What it shows:
// - a payload schema: enqueue refuses a bad payload with a 400 naming the field, and `handle` gets typed data;
// - per-type options: its queue, a timeout, attempts, backoff, concurrency;
// - idempotency: the same `Idempotency-Key` on every attempt, so the receiver can drop a repeat delivery;
// - `ctx.signal` passed to fetch, so cancel, timeout and shutdown stop the request;
// - FatalError for answers that will never succeed, RetryAfterError for a 429/503 with Retry-After;
// - no redirects followed and no transport headers from the payload: the host allowlist holds for every request.
import { appSetting, defineHandler, FatalError, RetryAfterError, z } from '../shared/handlerApi.js';

// Read once, at first use: an app setting does not change while the app runs.
let hosts: string[] | undefined;
export function allowedHosts(): string[] {
  hosts ??= (appSetting('WEBHOOK_ALLOWED_HOSTS') ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  return hosts;
}

const isLocal = (host: string) => host === 'localhost' || host === '127.0.0.1' || host === '[::1]';

const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'content-type',
  'idempotency-key',
]);

export const webhookPayload = z.strictObject({
  url: z
    .url({ protocol: /^https?$/ })
    .refine((u) => {
      const url = new URL(u);
      // Plain http only to this machine (local testing); anything else must be https.
      return url.protocol === 'https:' || isLocal(url.hostname);
    }, 'must be an https URL')
    .refine((u) => allowedHosts().includes(new URL(u).host.toLowerCase()), 'host is not in WEBHOOK_ALLOWED_HOSTS'),
  body: z.json(),
  // Headers the transport owns (or that would redirect the request to another virtual host) are refused.
  headers: z
    .record(z.string().regex(/^[A-Za-z0-9-]{1,64}$/), z.string().max(1024))
    .refine(
      (h) => Object.keys(h).every((name) => !RESERVED_HEADERS.has(name.toLowerCase())),
      `must not set ${[...RESERVED_HEADERS].join(', ')}: set by the handler or the transport`,
    )
    .optional(),
});

export type WebhookPayload = z.output<typeof webhookPayload>;

function retryAfterMs(header: string | null): number | null {
  if (!header) return null;
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

export const webhook = defineHandler('webhook.post', {
  payload: webhookPayload,
  queue: 'webhooks',
  timeoutMs: 30_000,
  maxAttempts: 8,
  backoff: { baseMs: 2_000, maxMs: 10 * 60_000 },
  retryOnTimeout: true, // a slow receiver is worth another try
  concurrency: 16, // at most 16 deliveries at once per instance
  async handle(payload, ctx) {
    const response = await fetch(payload.url, {
      method: 'POST',
      headers: {
        ...payload.headers,
        'content-type': 'application/json',
        // Stable across retries and resurrection: the receiver deduplicates on it.
        'idempotency-key': ctx.idempotencyKey ?? `keel-job-${ctx.jobId}`,
      },
      body: JSON.stringify(payload.body),
      signal: ctx.signal,
      // The allowlist checks the first URL only: a redirect could lead anywhere (into the VNet, for one).
      redirect: 'manual',
    });
    await response.body?.cancel();
    if (response.status >= 300 && response.status < 400) {
      throw new FatalError(`webhook answered ${response.status} (a redirect): not followed; post to the final URL`);
    }
    if (response.ok) {
      ctx.log.info('webhook delivered', { jobId: ctx.jobId, attempt: ctx.attempt, status: response.status });
      return;
    }
    const after = retryAfterMs(response.headers.get('retry-after'));
    if ((response.status === 429 || response.status === 503) && after !== null) {
      throw new RetryAfterError(`webhook answered ${response.status}`, after);
    }
    if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
      throw new FatalError(`webhook answered ${response.status}: the request will not succeed as it is`);
    }
    throw new Error(`webhook answered ${response.status}`); // 5xx, 408, 429 without Retry-After: retry with backoff
  },
});

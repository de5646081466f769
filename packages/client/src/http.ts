// Enqueue over Keel's HTTP API (POST /api/ops/jobs, the producer level) from another application.
//
// Authentication, either or both:
// - a function key of the `ops` function (x-functions-key): /api/ops/jobs; a key grants the producer level by itself;
// - an Entra token (a callback, or an @azure/identity TokenCredential such as ManagedIdentityCredential with the
//   scope api://<Keel's app registration>/.default) whose `roles` hold the producer app role (Keel.Producer). App
//   Service authentication validates it and hands Keel the roles. Without a key the call goes to the key-less path
//   /api/console-api/ops/jobs, where the token's roles are all there is (docs/operations.md, "Auth").
//
// Retries: 429, 5xx, network errors and timeouts are retried with exponential backoff and full jitter (Retry-After
// honoured). That is safe because every job carries an idempotency key — the client gives a job without one a random
// key (autoIdempotencyKeys) — so a request whose first attempt was written before the answer got lost is answered
// with the same job (duplicate: true) instead of enqueuing it twice.
import { randomUUID } from 'node:crypto';
import { IdempotencyConflictError, KeelApiError, KeelUnavailableError } from './errors.js';
import { applyJobType, DEFAULT_QUEUE, unknownTypeError, type JobInput, type JobTypeMap } from './jobTypes.js';
import { prepareEnqueue, type EnqueueJob } from './rules.js';

// The part of @azure/identity's TokenCredential the client calls.
export interface TokenCredentialLike {
  getToken(scopes: string | string[], options?: Record<string, unknown>): Promise<{ token: string } | null>;
}

export type TokenSource = TokenCredentialLike | (() => string | Promise<string>);

export interface HttpClientOptions<M extends JobTypeMap> {
  baseUrl: string; // the function app, e.g. https://keel-prod.azurewebsites.net
  functionKey?: string;
  token?: TokenSource;
  scope?: string; // with a TokenCredential: the scope to ask for, e.g. api://<client id>/.default
  jobTypes?: M; // checks type, queue and payload before sending (the server checks them again)
  retries?: number; // retries after the first attempt (default 4)
  retryBaseMs?: number; // first backoff ceiling (default 250 ms), doubling per retry
  retryMaxMs?: number; // backoff ceiling, and the most a Retry-After is waited (default 30 s)
  timeoutMs?: number; // per attempt (default 30 s)
  autoIdempotencyKeys?: boolean; // give a job without a key a random one, so retries cannot duplicate it (default true)
  fetch?: typeof fetch;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>; // tests (the call's signal, when it has one)
  random?: () => number; // tests: the jitter
}

export interface EnqueuedJob {
  id: string;
  duplicate: boolean; // a hot job of the same queue and type held the key with the same payload (or an earlier attempt of this call wrote it)
  posted: boolean; // its queue message was posted (a worker starts it at once)
}

export interface CallOptions {
  // Ends the call: the attempt in flight, and the wait between retries (the call rejects with the signal's reason).
  signal?: AbortSignal;
}

const RETRY_STATUS = new Set([408, 429, 500, 502, 503, 504]);

function isCredential(t: TokenSource): t is TokenCredentialLike {
  return typeof t === 'object' && t !== null && typeof (t as TokenCredentialLike).getToken === 'function';
}

function retryAfterMs(header: string | null, now: number): number | null {
  if (!header) return null;
  const s = Number(header);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

export class KeelHttpClient<M extends JobTypeMap = JobTypeMap> {
  private readonly url: string;
  private readonly keyless: boolean;
  private readonly o: HttpClientOptions<M>;

  constructor(options: HttpClientOptions<M>) {
    if (!options.functionKey && !options.token)
      throw new Error('KeelHttpClient: give functionKey, token, or both (docs/jobs.md, "Producing jobs")');
    if (options.token && isCredential(options.token) && !options.scope)
      throw new Error('KeelHttpClient: a TokenCredential needs scope, e.g. "api://<Keel app registration>/.default"');
    this.o = options;
    this.keyless = !options.functionKey;
    const base = options.baseUrl.replace(/\/+$/, '');
    this.url = `${base}${this.keyless ? '/api/console-api/ops/jobs' : '/api/ops/jobs'}`;
  }

  async enqueue(job: JobInput<M>, opts: CallOptions = {}): Promise<EnqueuedJob> {
    const [r] = await this.send([job], false, opts);
    return r!;
  }

  async enqueueMany(jobs: readonly JobInput<M>[], opts: CallOptions = {}): Promise<EnqueuedJob[]> {
    if (jobs.length === 0) return [];
    return this.send(jobs, true, opts);
  }

  // The JSON body: checked by the shared rules first (ValidationError naming the field, nothing sent).
  private body(jobs: readonly JobInput<M>[], many: boolean): unknown {
    const map = this.o.jobTypes;
    const prefixOf = (i: number) => (many ? `jobs[${i}]` : '');
    const wire: Record<string, unknown>[] = [];
    const checked = jobs.map((input, i) => {
      const job = { ...(input as JobInput) } as JobInput & Record<string, unknown>;
      if (job.idempotencyKey === undefined && this.o.autoIdempotencyKeys !== false)
        job.idempotencyKey = `keel-client:${randomUUID()}`;
      wire.push(toWire(job)); // the payload as given: the server parses it with the handler's schema itself
      if (!map) return { ...job, queue: job.queue ?? DEFAULT_QUEUE };
      const spec = Object.hasOwn(map, job.type) ? map[job.type] : undefined;
      if (!spec) throw unknownTypeError(prefixOf(i), job.type, Object.keys(map), "add it to the client's jobTypes");
      return applyJobType(spec, job, prefixOf(i));
    });
    // The field checks of the stores, on what would be stored (the server's payload limit is its own setting).
    prepareEnqueue(checked as EnqueueJob[], Infinity);
    return many ? { jobs: wire } : wire[0];
  }

  private async send(jobs: readonly JobInput<M>[], many: boolean, opts: CallOptions): Promise<EnqueuedJob[]> {
    const body = this.body(jobs, many);
    const text = JSON.stringify(body);
    const fetchFn = this.o.fetch ?? fetch;
    const sleep = this.o.sleep ?? abortableSleep;
    const random = this.o.random ?? Math.random;
    const retries = this.o.retries ?? 4;
    const base = this.o.retryBaseMs ?? 250;
    const cap = this.o.retryMaxMs ?? 30_000;
    let lastError: unknown;
    for (let attempt = 0; ; attempt++) {
      let waitMs: number | null = null;
      const timeout = AbortSignal.timeout(this.o.timeoutMs ?? 30_000);
      const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
      try {
        const res = await fetchFn(this.url, {
          method: 'POST',
          headers: await this.headers(),
          body: text,
          signal,
        });
        const answer = await readJson(res);
        if (res.status === 201 || res.status === 200) {
          const a = answer as { jobs?: EnqueuedJob[] } & EnqueuedJob;
          return many ? a.jobs! : [a];
        }
        const err = toApiError(res.status, answer, jobs.length);
        if (!RETRY_STATUS.has(res.status)) throw err;
        lastError = err;
        waitMs = retryAfterMs(res.headers.get('retry-after'), Date.now());
      } catch (err) {
        if (err instanceof KeelApiError || err instanceof IdempotencyConflictError) throw err;
        if (opts.signal?.aborted) throw opts.signal.reason ?? err;
        lastError = err; // a network error or this attempt's timeout: retried
      }
      if (attempt >= retries) {
        if (lastError instanceof KeelApiError) throw lastError;
        throw new KeelUnavailableError(
          `Keel did not answer after ${attempt + 1} attempts: ${(lastError as Error)?.message ?? String(lastError)}`,
          attempt + 1,
          { cause: lastError },
        );
      }
      const backoff = random() * Math.min(cap, base * 2 ** attempt);
      await sleep(Math.min(cap, Math.max(backoff, waitMs ?? 0)), opts.signal);
      opts.signal?.throwIfAborted(); // an injected sleep may not watch the signal
    }
  }

  private async headers(): Promise<Record<string, string>> {
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
    if (this.o.functionKey) h['x-functions-key'] = this.o.functionKey;
    if (this.o.token) h.authorization = `Bearer ${await this.token(this.o.token)}`;
    // The key-less path serves the console too: its calls carry this header (a cross-site form cannot send it).
    if (this.keyless) h['x-keel-console'] = '1';
    return h;
  }

  private async token(t: TokenSource): Promise<string> {
    if (!isCredential(t)) return await t();
    const got = await t.getToken(this.o.scope!);
    if (!got?.token) throw new Error(`KeelHttpClient: the credential returned no token for ${this.o.scope}`);
    return got.token;
  }
}

// Waits ms, or until signal aborts (rejecting with its reason), so a caller's cancel also ends a backoff of up to
// retryMaxMs instead of waiting it out.
function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function toWire(job: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(job)) {
    if (v === undefined) continue;
    out[k] = v instanceof Date ? v.toISOString() : v;
  }
  return out;
}

async function readJson(res: Response): Promise<unknown> {
  const text = await res.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.slice(0, 500) };
  }
}

function toApiError(status: number, answer: unknown, count: number): Error {
  const b = (answer && typeof answer === 'object' ? answer : {}) as Record<string, unknown>;
  const code = typeof b.error === 'string' ? b.error : `http_${status}`;
  const message = typeof b.message === 'string' ? b.message : `Keel answered ${status}`;
  const field = typeof b.field === 'string' ? b.field : undefined;
  if (status === 409 && typeof b.idempotencyKey === 'string') {
    const index = field?.match(/^jobs\[(\d+)\]/)?.[1];
    return new IdempotencyConflictError(
      index !== undefined ? Number(index) : 0,
      String(b.queue),
      String(b.type),
      b.idempotencyKey,
      field ?? (count === 1 ? 'idempotencyKey' : 'jobs[?].idempotencyKey'),
    );
  }
  return new KeelApiError(status, code, message, field, answer && typeof answer === 'object' ? b : null);
}

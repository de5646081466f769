// The local host: runs the function definitions without Azure Functions Core Tools.
// - HTTP on one port with the same routes (routePrefix from host.json), function keys enforced like Azure
//   (`x-functions-key` header or `code` query) for authLevel 'function'.
// - Timers on their NCRONTAB schedules (shared/jobs/ncrontab.ts, NCrontab's grammar and day rule: six fields with
//   seconds), each a singleton across the app's local instances (a lock in the shared storage, like Azure's) and never
//   overlapping itself.
// - Queue triggers polling Azure Storage (Azurite) with host.json semantics: batchSize and newBatchThreshold for
//   concurrency, base64 message encoding, a failed message becomes visible again after visibilityTimeout, and
//   after maxDequeueCount attempts it is moved to `<queue>-poison`.
// - host.json functionTimeout on every invocation, as the Functions host enforces it (invokeWithTimeout() below).
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import Router from 'find-my-way';
import { ncrontab, type Ncrontab } from '../shared/app/ncrontab.js';
import type { QueueClient, QueueServiceClient, DequeuedMessageItem } from '@azure/storage-queue';
import type {
  HttpRequestInit,
  HttpResponseInit,
  HttpResponse as HttpResponseType,
  LogLevel,
  Timer,
} from '@azure/functions';
import type {
  FunctionDefinition,
  HttpDefinition,
  QueueDefinition,
  TimerDefinition,
} from '../shared/app/definitions.js';
import { queueNameOf, scheduleOf } from '../shared/app/definitions.js';
import type { Settings } from '../shared/config/settings.js';
import { existsSync } from 'node:fs';
import { checkFunctionKey } from '../shared/ops/auth.js';
import { principalTrustWarning } from '../shared/ops/principalTrust.js';
import { HttpRequest, HttpResponse, InvocationContext } from './azureFunctions.js';
import type { HostConfig } from '../shared/app/hostJson.js';
import { poisonQueueName } from '../shared/app/queues.js';
import type { WakeupSource } from '../shared/jobs/processor.js';
import {
  QueueTimerLock,
  timerLockQueueName,
  type ScheduleStatus,
  type TimerLock,
  type TimerLockHandle,
} from './timerLock.js';

export interface LocalHostOptions {
  definitions: readonly FunctionDefinition[];
  settings: Settings;
  hostConfig: HostConfig;
  queueService: QueueServiceClient;
  opsKey: string;
  port: number;
  hostname?: string; // default 127.0.0.1
  maxRequestBytes?: number; // the host's own cap (Azure: 100 MB); default 32 MB
  // The bytes of request bodies the host holds at once, across every request (received and not yet answered); a
  // body that would go past it is refused with 503 and Retry-After instead of being buffered (20 callers sending 30 MB
  // each took 1.1 GB). Each body is held once (a Blob under the handler's Request), so this is what the bodies cost
  // until their handlers read them. At least maxRequestBytes; default 64 MB.
  maxInflightBodyBytes?: number;
  // A request whose body has not fully arrived this long after its headers is answered 408 and its connection closed
  // (a slow or stalled sender holds a socket and its buffered bytes, never the host). Default 60 s.
  bodyTimeoutMs?: number;
  // Node's headersTimeout: the headers must have arrived within this (default 60 s, as Node's own).
  headersTimeoutMs?: number;
  log?: (line: string) => void;
  // Wake-ups when jobs become due (PostgreSQL LISTEN/NOTIFY): the named timer function (the dispatcher) runs at
  // once instead of at its next scheduled firing, so enqueue -> run does not wait for the timer or the queue poll.
  // The schedule stays as the fallback.
  wakeups?: { source: WakeupSource; timer: string };
  // The app's identity for the timers' singleton locks (Azure: the host id). Default: the job store's connection and
  // the jobs queue, which every local instance of one app shares. false: no cross-instance lock (one instance only).
  hostId?: string;
  timerLocks?: false;
  // KEEL_DEBUG, read once by dev/boot.ts: keep the debug and trace lines the host drops by default.
  debug?: boolean;
}

// The interval between a schedule's next two occurrences (useMonitor's default depends on it).
function scheduleIntervalMs(schedule: string): number {
  const [a, b] = ncrontab(schedule).nextN(2);
  return a && b ? b.getTime() - a.getTime() : Infinity;
}

export function localHostId(opts: Pick<LocalHostOptions, 'hostId' | 'settings'>): string {
  if (opts.hostId) return opts.hostId;
  const s = opts.settings;
  return [s.KEEL_STORE_ENGINE, s.KEEL_PG_URL ?? s.KEEL_SQL_CONNECTION ?? '', s.KEEL_JOBS_QUEUE].join('|');
}

type Stoppable = { stop(): Promise<void> };

// host.json "functionTimeout" as the Functions host words it ("00:10:00").
function timeSpanText(ms: number): string {
  const s = Math.floor(ms / 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  const frac = ms % 1000 ? `.${String(ms % 1000).padStart(3, '0')}` : '';
  return `${pad(Math.floor(s / 3600))}:${pad(Math.floor(s / 60) % 60)}:${pad(s % 60)}${frac}`;
}

export class FunctionTimeoutError extends Error {
  constructor(name: string, ms: number) {
    super(`Timeout value of ${timeSpanText(ms)} was exceeded by function: Functions.${name}`);
    this.name = 'FunctionTimeoutException';
  }
}

// One invocation under host.json functionTimeout, as the Functions host runs it: past the timeout the invocation has
// failed (FunctionTimeoutException), whatever the function does afterwards — a queue message is then retried, or
// poisoned at maxDequeueCount, exactly as for a thrown error; a timer run has failed and the next occurrence runs; an
// HTTP caller gets a 500. For an out-of-process language (Node) Azure also restarts the worker process, which ends the
// function and every other invocation on it; in this one process the function cannot be stopped, so it goes on
// detached and whatever it returns or throws is ignored (the log says so).
async function invokeWithTimeout<T>(
  name: string,
  opts: Pick<LocalHostOptions, 'hostConfig'>,
  context: InstanceType<typeof InvocationContext>,
  call: () => T | PromiseLike<T>,
): Promise<T> {
  const ms = opts.hostConfig.functionTimeoutMs;
  const running: Promise<T> = new Promise<T>((resolve) => resolve(call()));
  if (ms === null) return running;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      context.error(
        `Timeout value of ${timeSpanText(ms)} exceeded by function 'Functions.${name}' (Id: '${context.invocationId}'). ` +
          'Initiating cancellation. (Azure restarts the Node worker here, ending the function; the local host cannot ' +
          'stop it in-process: it goes on detached and its outcome is ignored.)',
      );
      reject(new FunctionTimeoutError(name, ms));
    }, ms);
  });
  running.catch(() => undefined); // a late failure of a timed-out invocation is not an unhandled rejection
  try {
    return await Promise.race([running, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

// Fires at each occurrence of a schedule, in the host's local time zone (Azure: WEBSITE_TIME_ZONE, UTC by default).
// A firing whose callback is still running is the caller's to skip (TimerLayer's run()).
class ScheduleClock {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly cron: Ncrontab,
    private readonly fire: () => void,
  ) {}

  nextRun(): Date | null {
    return this.cron.next(new Date());
  }

  start(): void {
    this.arm(new Date());
  }

  // The next occurrence after `after`; a timer that wakes a moment early still counts as its occurrence (arming from
  // the occurrence, not from the clock, so it never fires twice), and one beyond setTimeout's range re-arms.
  private arm(after: Date): void {
    if (this.stopped) return;
    const next = this.cron.next(after);
    if (!next) return;
    const delay = Math.min(Math.max(0, next.getTime() - Date.now()), 2 ** 31 - 1);
    this.timer = setTimeout(() => {
      if (next.getTime() - Date.now() > 1000) return this.arm(after);
      this.arm(next);
      this.fire();
    }, delay);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

const DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024;
const DEFAULT_MAX_INFLIGHT_BODY_BYTES = 64 * 1024 * 1024;

const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const;

// As the Functions host at its default level (Information): debug and trace lines are dropped, unless KEEL_DEBUG is set.
const QUIET_LEVELS: readonly LogLevel[] = ['debug', 'trace'];

function logHandlerFor(name: string, log: (line: string) => void, debug: boolean) {
  return (level: LogLevel, ...args: unknown[]) => {
    if (QUIET_LEVELS.includes(level) && !debug) return;
    const text = args
      .map((a) => (typeof a === 'string' ? a : a instanceof Error ? (a.stack ?? a.message) : JSON.stringify(a)))
      .join(' ');
    log(`[${new Date().toISOString()}] ${name} ${level}: ${text}`);
  };
}

function contextFor(
  name: string,
  log: (line: string) => void,
  opts: Pick<LocalHostOptions, 'debug'>,
  triggerMetadata?: Record<string, unknown>,
): InstanceType<typeof InvocationContext> {
  return new InvocationContext({
    invocationId: randomUUID(),
    functionName: name,
    logHandler: logHandlerFor(name, log, opts.debug === true),
    ...(triggerMetadata ? { triggerMetadata } : {}),
  });
}

// Azure route template -> find-my-way path: {name} -> :name, {*name} -> * (reported back under `name`).
function routerPath(prefix: string, route: string): { path: string; catchAll: string | null } {
  let catchAll: string | null = null;
  const segments = route.split('/').map((seg) => {
    const m = /^\{(\*?)([A-Za-z0-9_]+)(?::[^}]*)?(\??)\}$/.exec(seg);
    if (!m) return seg;
    if (m[1]) {
      catchAll = m[2]!;
      return '*';
    }
    return `:${m[2]}`;
  });
  return { path: `/${prefix ? `${prefix}/` : ''}${segments.join('/')}`, catchAll };
}

// Node's parser errors, as JSON with the status Node itself would send: 431 for headers over the limit, 408 for
// headers too slow, 400 for the rest (a bad method, request line, header or Content-Length, twice the
// Content-Length, a bad chunk). Written only when no response is under way on the socket (a half-written one would be
// corrupted: the socket is just closed), then the connection is closed: the parser cannot go on after an error.
const CLIENT_ERRORS: Record<string, { status: number; error: string; reason: string; message: string }> = {
  HPE_HEADER_OVERFLOW: {
    status: 431,
    error: 'headers_too_large',
    reason: 'Request Header Fields Too Large',
    message: `the request headers are over the host's limit of ${http.maxHeaderSize} bytes`,
  },
  ERR_HTTP_REQUEST_TIMEOUT: {
    status: 408,
    error: 'request_timeout',
    reason: 'Request Timeout',
    message: 'the request did not arrive in time',
  },
  HPE_HEADER_TIMEOUT: {
    status: 408,
    error: 'request_timeout',
    reason: 'Request Timeout',
    message: 'the request headers did not arrive in time',
  },
};

// What the parser's reason is about, as the field an error names.
function clientErrorField(detail: string): string {
  if (/content-length/i.test(detail)) return 'content-length';
  if (/transfer-encoding|chunk/i.test(detail)) return 'transfer-encoding';
  if (/method/i.test(detail)) return 'method';
  if (/header/i.test(detail)) return 'headers';
  return 'request';
}

export function answerClientError(err: NodeJS.ErrnoException, socket: import('node:stream').Duplex): void {
  const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const known = CLIENT_ERRORS[err.code ?? ''];
  const status = known?.status ?? 400;
  // The parser's own reason names what is wrong ("Duplicate Content-Length", "Invalid method encountered").
  const detail = (err as { reason?: string }).reason ?? err.message.replace(/^Parse Error: /, '');
  const body = JSON.stringify({
    error: known?.error ?? 'bad_request',
    message: known ? known.message : `the request is not valid HTTP/1.1: ${detail}`,
    code: err.code ?? null,
    field: known ? (status === 431 ? 'headers' : 'request') : clientErrorField(detail),
    in: 'header',
  });
  endWithJson(socket, status, known?.reason ?? 'Bad Request', body);
}

// A JSON answer written on the bare socket (no request object exists yet, or Node handed the socket over), then the
// connection closed.
function endWithJson(socket: import('node:stream').Duplex, status: number, reason: string, body: string): void {
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n\r\n' +
      body,
  );
}

// The bytes of request bodies the host holds, across requests: a body reserves what it declares (or, sent chunked,
// what has arrived) before it is buffered, and gives it back when its response is written.
class BodyBudget {
  private held = 0;
  constructor(readonly limit: number) {}
  get inUse(): number {
    return this.held;
  }
  tryTake(bytes: number): boolean {
    if (bytes <= 0) return true;
    if (this.held + bytes > this.limit) return false;
    this.held += bytes;
    return true;
  }
  give(bytes: number): void {
    this.held = Math.max(0, this.held - bytes);
  }
}

// body: the request's bytes, held once (a Blob the handler's Request reads, no copy of it kept here).
type BodyRead = { ok: true; body: Blob | null; reserved: number } | { ok: false };

class HttpLayer implements Stoppable {
  private server: http.Server | undefined;
  private readonly router = Router({ ignoreTrailingSlash: true });
  private readonly budget: BodyBudget;
  private readonly maxRequestBytes: number;
  private readonly bodyTimeoutMs: number;
  // Answers to requests whose refused body is still arriving: written whole, but ended (and, on a Connection: close
  // request, the socket closed by Node) only once the body is read, so a caller still sending is not reset mid-upload
  // and never sees EPIPE instead of the answer.
  private readonly lingering = new WeakSet<http.ServerResponse>();

  constructor(
    private readonly defs: HttpDefinition[],
    private readonly opts: LocalHostOptions,
    private readonly log: (line: string) => void,
  ) {
    this.maxRequestBytes = opts.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES;
    this.bodyTimeoutMs = opts.bodyTimeoutMs ?? 60_000;
    this.budget = new BodyBudget(
      Math.max(this.maxRequestBytes, opts.maxInflightBodyBytes ?? DEFAULT_MAX_INFLIGHT_BODY_BYTES),
    );
    for (const def of defs) {
      const { path, catchAll } = routerPath(opts.hostConfig.routePrefix, def.route);
      this.router.on(def.methods, path, () => undefined, { def, catchAll });
      // "ops/{*path}" also matches "ops" itself, as in Azure.
      if (catchAll && path.endsWith('/*'))
        this.router.on(def.methods, path.slice(0, -2), () => undefined, { def, catchAll });
    }
  }

  async start(): Promise<number> {
    const bodyTimeoutMs = this.bodyTimeoutMs;
    const headersTimeoutMs = this.opts.headersTimeoutMs ?? 60_000;
    const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
      this.handle(req, res).catch((err) => {
        this.log(`http: ${(err as Error).stack ?? String(err)}`);
        if (res.destroyed || res.writableEnded) return;
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify({ error: 'internal_error', message: 'local host error' }));
      });
    };
    this.server = http.createServer(
      {
        headersTimeout: headersTimeoutMs,
        // A backstop behind the host's own body timer (readBody), which answers in JSON first.
        requestTimeout: headersTimeoutMs + bodyTimeoutMs + 5_000,
        // How often Node checks those two timeouts (its default, 30 s, would let a short timeout run 30 s over).
        connectionsCheckingInterval: Math.max(100, Math.min(30_000, Math.floor(headersTimeoutMs / 4))),
      },
      onRequest,
    );
    // Expect: 100-continue (curl sends it for bodies over 1 MB): a body that would be refused for its size is refused
    // before the caller sends it, the connection closed; otherwise "100 Continue" and the request as any other.
    this.server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const declared = Number(req.headers['content-length'] ?? 0);
      const cap = this.maxRequestBytes;
      if (declared > cap || declared > this.budget.limit - this.budget.inUse) {
        res.shouldKeepAlive = false;
        return declared > cap ? this.tooLarge(res, `of ${declared} bytes is`) : this.busy(res, declared);
      }
      res.writeContinue();
      onRequest(req, res);
    });
    // What Node's HTTP parser refuses before a request exists (a bad method or Content-Length, headers over the
    // limit, a header timeout) is answered in JSON like every other error, not Node's bare status line.
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: import('node:stream').Duplex) =>
      answerClientError(err, socket),
    );
    // CONNECT (Node hands it over as a tunnel; unanswered, the socket was just dropped) and an Expect other than
    // 100-continue (Node's bare 417): JSON too.
    this.server.on('connect', (req: http.IncomingMessage, socket: import('node:stream').Duplex) => {
      const body = JSON.stringify({
        error: 'not_found',
        message: `no function serves CONNECT ${req.url ?? ''}`,
        field: 'method',
        in: 'request',
      });
      endWithJson(socket, 404, 'Not Found', body);
    });
    this.server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
      req.resume();
      this.send(res, 417, {
        error: 'expectation_failed',
        message: `Expect: ${String(req.headers.expect)} is not supported (only 100-continue)`,
        field: 'expect',
        in: 'header',
      });
    });
    this.server.keepAliveTimeout = 5000;
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(this.opts.port, this.opts.hostname ?? '127.0.0.1', () => resolve());
    });
    return (this.server.address() as import('node:net').AddressInfo).port;
  }

  private send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    if (res.destroyed || res.headersSent) return;
    const text = JSON.stringify(body);
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': String(Buffer.byteLength(text)),
      ...headers,
    });
    if (this.lingering.has(res)) res.write(text);
    else res.end(text);
  }

  // The request's URL: its path exactly as sent (origin-form; "//x/y" is the path "//x/y", not a host "x"), on the
  // Host the caller named when that is a valid host, else this host's own address.
  private requestUrl(req: http.IncomingMessage): URL | null {
    let target = req.url ?? '/';
    if (/^https?:\/\//i.test(target)) {
      // absolute-form (RFC 9112 3.2.2: a server accepts it): its path and query are the target
      try {
        const abs = new URL(target);
        target = `${abs.pathname}${abs.search}`;
      } catch {
        return null;
      }
    }
    if (!target.startsWith('/')) return null; // "*" or no path: not for a Functions app
    const local = `127.0.0.1:${(req.socket.localPort ?? this.opts.port) || 80}`;
    const host = req.headers.host ?? local;
    for (const h of [host, local]) {
      try {
        const url = new URL(`http://${h}${target}`);
        if (url.host === h.toLowerCase() || h === local) return url;
      } catch {
        // an unusable Host: the local address below
      }
    }
    return null;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = this.requestUrl(req);
    const method = (req.method ?? 'GET').toUpperCase();
    if (!url) {
      this.drain(req, res);
      return this.send(res, 400, {
        error: 'invalid_request',
        message: `the request target must be a path starting with "/" (got ${JSON.stringify((req.url ?? '').slice(0, 200))})`,
        field: 'path',
        in: 'path',
      });
    }
    try {
      decodeURIComponent(url.pathname);
    } catch {
      // A route parameter the host cannot decode ("%ZZ", bytes that are not UTF-8): the caller's mistake, named.
      this.drain(req, res);
      return this.send(res, 400, {
        error: 'invalid_request',
        message: `the URL path is not valid percent-encoded UTF-8: ${url.pathname}`,
        field: 'path',
        in: 'path',
      });
    }
    const found = (HTTP_METHODS as readonly string[]).includes(method)
      ? this.router.find(method as (typeof HTTP_METHODS)[number], url.pathname)
      : null;
    if (!found) {
      this.drain(req, res);
      return this.send(res, 404, {
        error: 'not_found',
        message: `no function serves ${method} ${url.pathname}`,
        field: 'path',
        in: 'path',
      });
    }
    const { def, catchAll } = found.store as { def: HttpDefinition; catchAll: string | null };
    if (def.authLevel !== 'anonymous') {
      const header = req.headers['x-functions-key'];
      const ok = checkFunctionKey(
        this.opts.opsKey,
        Array.isArray(header) ? header[0] : header,
        url.searchParams.get('code'),
      );
      if (!ok) {
        this.drain(req, res);
        return this.send(res, 401, {
          error: 'unauthorized',
          message: 'missing or wrong function key (x-functions-key header or code query parameter)',
          field: 'x-functions-key',
          in: 'header',
        });
      }
    }
    const limitSetting = def.bodyLimitSetting;
    const read = await this.readBody(req, res, limitSetting ? this.opts.settings[limitSetting] : null);
    if (!read.ok) return;
    try {
      await this.invoke(req, res, url, method, found, def, catchAll, read.body);
    } finally {
      this.budget.give(read.reserved);
    }
  }

  private tooLarge(res: http.ServerResponse, what: string): void {
    const cap = this.maxRequestBytes;
    this.send(res, 413, {
      error: 'payload_too_large',
      message: `request body ${what} over the host limit of ${cap} bytes`,
      field: 'body',
      in: 'body',
      limit: cap,
    });
  }

  private busy(res: http.ServerResponse, bytes: number): void {
    this.send(
      res,
      503,
      {
        error: 'server_busy',
        message: `the host is holding ${this.budget.inUse} bytes of other requests' bodies; this one (${bytes} bytes so far) would go past its in-flight body limit of ${this.budget.limit} bytes (maxInflightBodyBytes): retry later`,
        field: 'body',
        in: 'body',
        limit: this.budget.limit,
      },
      { 'retry-after': '1' },
    );
  }

  // The request's body, within the host's cap, the in-flight budget and the body timeout; or an answer already sent
  // ({ ok: false }: 413, 503, 408, or nothing when the caller went away). Nothing of a refused body is kept: the rest
  // is read and dropped (a caller still sending gets the answer, not a reset), up to the timeout.
  // `routeLimit`: the route's own body limit (HttpDefinition.bodyLimitSetting). A body past it is not held whole: a
  // declared one is not read at all (the handler refuses it by its Content-Length), a chunked one is kept only to one
  // byte past the limit (the handler's counting read refuses it); the rest is read and dropped while the handler
  // answers, so the refusal goes through the handler (role check first, audit record) as on Azure.
  private readBody(req: http.IncomingMessage, res: http.ServerResponse, routeLimit: number | null): Promise<BodyRead> {
    const cap = this.maxRequestBytes;
    const timeoutMs = this.bodyTimeoutMs;
    const tooLarge = (what: string) => this.tooLarge(res, what);
    const busy = (bytes: number) => this.busy(res, bytes);
    const declaredText = req.headers['content-length'];
    const declared = declaredText === undefined ? null : Number(declaredText); // Node's parser checked the digits
    if (declared !== null && declared > cap) {
      this.drain(req, res);
      tooLarge(`of ${declared} bytes is`);
      return Promise.resolve({ ok: false });
    }
    if (declared === 0 || (declared === null && req.headers['transfer-encoding'] === undefined)) {
      req.resume();
      return Promise.resolve({ ok: true, body: null, reserved: 0 });
    }
    if (declared !== null && routeLimit !== null && declared > routeLimit) {
      this.drain(req, res);
      return Promise.resolve({ ok: true, body: null, reserved: 0 });
    }
    // A declared length is reserved whole, up front; a chunked body chunk by chunk as it arrives.
    let reserved = 0;
    if (declared !== null) {
      if (!this.budget.tryTake(declared)) {
        this.drain(req, res);
        busy(declared);
        return Promise.resolve({ ok: false });
      }
      reserved = declared;
    }
    return new Promise<BodyRead>((resolve) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const finish = (result: BodyRead | null, refuse?: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('aborted', onGone);
        req.off('close', onClose);
        req.off('error', onGone);
        chunks.length = 0;
        if (result?.ok) return resolve(result);
        this.budget.give(reserved);
        reserved = 0;
        refuse?.();
        resolve({ ok: false });
      };
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size > cap) return finish(null, () => (this.drain(req, res), tooLarge('is')));
        if (size > reserved) {
          // Chunked (or more than declared, which Node's parser does not allow): reserve what arrived.
          if (!this.budget.tryTake(size - reserved)) return finish(null, () => (this.drain(req, res), busy(size)));
          reserved = size;
        }
        if (routeLimit !== null && size > routeLimit) {
          // Past the route's limit (only a chunked body gets here): what the handler needs to see that is the limit
          // and one byte; the rest is dropped as it comes.
          const keep = chunk.subarray(0, chunk.length - (size - routeLimit - 1));
          if (keep.length > 0) chunks.push(keep);
          const body = new Blob(chunks as BlobPart[]);
          finish({ ok: true, body, reserved });
          this.drain(req, res);
          return;
        }
        chunks.push(chunk);
      };
      // One copy, into the Blob the handler's Request reads; the chunks (slices of the socket's buffers) go.
      const onEnd = () => finish({ ok: true, body: size > 0 ? new Blob(chunks as BlobPart[]) : null, reserved });
      // The caller went away mid-body: nothing to answer; what was held is given back.
      const onGone = () => {
        this.log(
          `[${new Date().toISOString()}] http: ${req.method} ${req.url} abandoned by the caller after ${size} body bytes`,
        );
        finish(null, () => req.destroy());
      };
      const onClose = () => {
        if (!req.complete) onGone();
      };
      const timer = setTimeout(
        () =>
          finish(null, () => {
            this.send(
              res,
              408,
              {
                error: 'request_timeout',
                message: `the request body did not arrive within ${timeoutMs} ms (${size} bytes came); the connection is closed`,
                field: 'body',
                in: 'body',
                limit: timeoutMs,
              },
              { connection: 'close' },
            );
            // The answer is written, then the socket goes: a sender that stalls gets no more of the host's time.
            res.once('finish', () => req.destroy());
          }),
        timeoutMs,
      );
      timer.unref();
      req.on('data', onData);
      req.on('end', onEnd);
      req.on('aborted', onGone);
      req.on('close', onClose);
      req.on('error', onGone);
    });
  }

  // Reads and drops the rest of a refused body (the caller gets its answer instead of a reset mid-upload); a sender
  // still at it after the body timeout loses the connection. Called before the answer is sent: the answer is written
  // at once but ended when the body is in, since ending it earlier lets Node close a Connection: close socket while
  // the caller still sends (it then sees EPIPE, not the answer).
  private drain(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (req.complete) return;
    this.lingering.add(res);
    const done = () => {
      clearTimeout(timer);
      this.lingering.delete(res);
      if (res.headersSent && !res.writableEnded && !res.destroyed) res.end();
    };
    const timer = setTimeout(() => req.destroy(), this.bodyTimeoutMs);
    timer.unref();
    req.once('end', done);
    req.once('close', done);
    req.on('error', () => undefined);
    req.resume();
  }

  private async invoke(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    url: URL,
    method: string,
    found: { params: Record<string, string | undefined> },
    def: HttpDefinition,
    catchAll: string | null,
    requestBody: Blob | null,
  ): Promise<void> {
    const params: Record<string, string> = {};
    for (const [k, v] of Object.entries(found.params)) {
      if (v === undefined) continue;
      params[k === '*' && catchAll ? catchAll : k] = v;
    }
    if (catchAll && !(catchAll in params)) params[catchAll] = '';
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers))
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
    const query: Record<string, string> = {};
    for (const [k, v] of url.searchParams) query[k] = v;
    // The Request is built here, over the body's Blob, and handed to HttpRequest as its native request (what the
    // library's own streaming path does): given `body: { bytes }` it keeps them and makes two more copies (a Buffer,
    // then the Request's), three times each body held while the handler runs. GET and HEAD carry no body (the
    // Request refuses one; the library drops it too).
    const body = method === 'GET' || method === 'HEAD' ? null : requestBody;
    const nativeRequest = new Request(url, { method, headers, body });
    const init: HttpRequestInit & { nativeRequest: Request } = {
      method,
      url: url.toString(),
      query,
      params,
      nativeRequest,
    };
    const request = new HttpRequest(init);
    const context = contextFor(def.name, this.log, this.opts);
    const started = Date.now();
    let result: HttpResponseInit | HttpResponseType | undefined;
    try {
      result = (await invokeWithTimeout(def.name, this.opts, context, () => def.handler(request, context))) as
        HttpResponseInit | HttpResponseType | undefined;
    } catch (err) {
      if (!(err instanceof FunctionTimeoutError)) throw err;
      result = { status: 500, jsonBody: { error: 'internal_error', message: err.message } };
    }
    const response =
      result instanceof HttpResponse ? result : new HttpResponse((result ?? { status: 204 }) as HttpResponseInit);
    const out = Buffer.from(await response.arrayBuffer());
    const outHeaders: Record<string, string> = {};
    response.headers.forEach((v, k) => (outHeaders[k] = v));
    if (res.destroyed) return; // the caller went away meanwhile
    res.writeHead(response.status, outHeaders);
    // A body past the route's limit may still be arriving: the answer is written, and ended by drain() once it is in.
    if (this.lingering.has(res)) res.write(out);
    else res.end(out);
    this.log(
      `[${new Date().toISOString()}] ${def.name} http: ${method} ${url.pathname} -> ${response.status} (${Date.now() - started} ms)`,
    );
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeIdleConnections();
      setTimeout(() => server.closeAllConnections(), 2000).unref();
    });
  }
}

// Timers as Azure runs them: each timer function is a singleton across the app's instances (TimerLock: the lock lives
// in the storage account the instances share) and never overlaps itself on one instance. A scheduled firing that comes
// while the timer is still running is skipped (Azure schedules the next occurrence after the run ends); a wake-up
// during a run makes one more run afterwards. A firing on an instance that does not get the lock is skipped: the
// instance holding it runs the timer.
class TimerLayer implements Stoppable {
  private readonly jobs: ScheduleClock[] = [];
  private readonly running = new Set<Promise<void>>();
  private readonly fireNow = new Map<string, () => void>();
  private stopped = false;

  constructor(
    private readonly defs: TimerDefinition[],
    private readonly opts: LocalHostOptions,
    private readonly log: (line: string) => void,
  ) {}

  private lockFor(def: TimerDefinition): TimerLock | null {
    if (this.opts.timerLocks === false) return null;
    return new QueueTimerLock(this.opts.queueService, timerLockQueueName(localHostId(this.opts), def.name));
  }

  start(): void {
    for (const def of this.defs) {
      const schedule = scheduleOf(def, this.opts.settings);
      const lock = this.lockFor(def);
      let last: Date | null = null;
      let lockTrouble = false;
      // useMonitor as Azure defaults it: on for schedules of a minute or more, off for shorter ones.
      const monitored = lock !== null && scheduleIntervalMs(schedule) >= 60_000;
      const invoke = async (job: ScheduleClock | null, status: ScheduleStatus | null) => {
        const now = new Date();
        const timer: Timer = {
          // Monitored: the occurrence the status says was due is over a second late (missed while no instance ran).
          isPastDue: monitored && status !== null && now.getTime() - Date.parse(status.next) > 1000,
          schedule: { adjustForDST: true },
          scheduleStatus: {
            last: status?.last ?? (last ?? now).toISOString(),
            next: (job?.nextRun() ?? now).toISOString(),
            lastUpdated: now.toISOString(),
          },
        };
        last = now;
        const context = contextFor(def.name, this.log, this.opts);
        try {
          await invokeWithTimeout(def.name, this.opts, context, () => def.handler(timer, context));
        } catch (err) {
          context.error(`timer function failed: ${(err as Error).stack ?? String(err)}`);
        }
      };
      // One run at a time on this instance, and only with the app-wide lock.
      let current: Promise<void> | null = null;
      let again = false;
      const run = (job: ScheduleClock | null, wake: boolean): Promise<void> => {
        if (this.stopped) return Promise.resolve();
        if (current) {
          if (wake) again = true;
          return current;
        }
        const p = (async () => {
          let handle: TimerLockHandle | null = { status: null, release: async () => undefined };
          if (lock) {
            handle = await lock.tryAcquire().catch((err: Error) => {
              if (!lockTrouble) this.log(`timer ${def.name}: storage lock unavailable, firing skipped: ${err.message}`);
              lockTrouble = true;
              return null;
            });
            if (handle) lockTrouble = false;
          }
          if (!handle) return; // another instance runs this timer (or storage is down)
          const ranAt = new Date();
          try {
            await invoke(job, handle.status);
          } finally {
            const next = job?.nextRun();
            await handle.release(
              monitored && next ? { last: ranAt.toISOString(), next: next.toISOString() } : undefined,
            );
          }
        })();
        current = p;
        this.running.add(p);
        void p.finally(() => {
          this.running.delete(p);
          current = null;
          if (again) {
            again = false;
            void run(job, true);
          }
        });
        return p;
      };
      // A firing while a run is on is skipped by run() (Azure schedules the next occurrence after the run ends).
      const job: ScheduleClock = new ScheduleClock(ncrontab(schedule), () => void run(job, false));
      job.start();
      this.jobs.push(job);
      this.fireNow.set(def.name, () => void run(job, true));
      if (def.runOnStartup) void run(job, false);
      // useMonitor: an occurrence missed while no instance ran (the recorded next is past) runs once now, past due.
      if (monitored && lock) {
        lock
          .peekStatus()
          .then((status) => {
            if (status && Date.parse(status.next) < Date.now()) void run(job, false);
          })
          .catch(() => undefined); // storage down: the schedule goes on; the lock reports it at the next firing
      }
    }
  }

  wake(name: string): void {
    this.fireNow.get(name)?.();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.fireNow.clear();
    for (const j of this.jobs) j.stop();
    await Promise.allSettled([...this.running]);
  }
}

class QueuePoller implements Stoppable {
  private stopped = false;
  private loop: Promise<void> | undefined;
  private readonly inflight = new Set<Promise<void>>();
  private wake: (() => void) | undefined;
  private client!: QueueClient;
  private poison!: QueueClient;
  readonly queueName: string;

  constructor(
    private readonly def: QueueDefinition,
    private readonly opts: LocalHostOptions,
    private readonly log: (line: string) => void,
  ) {
    this.queueName = queueNameOf(def, opts.settings);
  }

  async start(): Promise<void> {
    this.client = this.opts.queueService.getQueueClient(this.queueName);
    this.poison = this.opts.queueService.getQueueClient(poisonQueueName(this.queueName));
    await this.client.createIfNotExists();
    await this.poison.createIfNotExists();
    this.loop = this.run();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async run(): Promise<void> {
    const q = this.opts.hostConfig.queues;
    let idleDelay = 100;
    while (!this.stopped) {
      // Fetch a new batch only when in-flight work drops to newBatchThreshold (the Functions host's rule).
      if (this.inflight.size > q.newBatchThreshold) {
        await Promise.race([...this.inflight, this.sleep(q.maxPollingIntervalMs)]);
        continue;
      }
      let messages: DequeuedMessageItem[] = [];
      try {
        const r = await this.client.receiveMessages({ numberOfMessages: q.batchSize, visibilityTimeout: 600 });
        messages = r.receivedMessageItems;
      } catch (err) {
        if (!this.stopped) this.log(`queue ${this.queueName}: receive failed: ${(err as Error).message}`);
      }
      if (messages.length === 0) {
        await this.sleep(idleDelay);
        idleDelay = Math.min(q.maxPollingIntervalMs, idleDelay * 2);
        continue;
      }
      idleDelay = 100;
      for (const m of messages) {
        const p = this.process(m).catch((err) =>
          this.log(`queue ${this.queueName}: ${(err as Error).stack ?? String(err)}`),
        );
        this.inflight.add(p);
        void p.finally(() => {
          this.inflight.delete(p);
          this.wake?.();
        });
      }
    }
  }

  private decode(m: DequeuedMessageItem): { ok: true; value: unknown } | { ok: false; detail: string } {
    let text = m.messageText;
    if (this.opts.hostConfig.queues.messageEncoding === 'base64') {
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0)
        return { ok: false, detail: 'message is not base64 (host.json messageEncoding=base64)' };
      text = Buffer.from(text, 'base64').toString('utf8');
    }
    // Like the Functions host: JSON arrives parsed, anything else as a string.
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch {
      return { ok: true, value: text };
    }
  }

  private async toPoison(m: DequeuedMessageItem, popReceipt: string, why: string): Promise<void> {
    await this.poison.sendMessage(m.messageText);
    await this.client.deleteMessage(m.messageId, popReceipt);
    this.log(
      `[${new Date().toISOString()}] ${this.def.name} warning: message ${m.messageId} moved to ${poisonQueueName(this.queueName)}: ${why}`,
    );
  }

  private async process(m: DequeuedMessageItem): Promise<void> {
    const q = this.opts.hostConfig.queues;
    let popReceipt = m.popReceipt;
    if (m.dequeueCount > q.maxDequeueCount)
      return this.toPoison(m, popReceipt, `dequeued ${m.dequeueCount} times (maxDequeueCount ${q.maxDequeueCount})`);
    const decoded = this.decode(m);
    if (!decoded.ok) return this.toPoison(m, popReceipt, decoded.detail);
    const context = contextFor(this.def.name, this.log, this.opts, {
      id: m.messageId,
      dequeueCount: m.dequeueCount,
      insertionTime: m.insertedOn.toISOString(),
      expirationTime: m.expiresOn.toISOString(),
      nextVisibleTime: m.nextVisibleOn.toISOString(),
      popReceipt: m.popReceipt,
    });
    // Keep the message invisible while the function runs (the host renews its lease the same way).
    const renew = setInterval(() => {
      this.client
        .updateMessage(m.messageId, popReceipt, m.messageText, 600)
        .then((r) => {
          if (r.popReceipt) popReceipt = r.popReceipt;
        })
        .catch(() => undefined);
    }, 240_000);
    let failure: unknown;
    try {
      await invokeWithTimeout(this.def.name, this.opts, context, () => this.def.handler(decoded.value, context));
    } catch (err) {
      failure = err;
    } finally {
      clearInterval(renew);
    }
    if (failure === undefined) {
      await this.client.deleteMessage(m.messageId, popReceipt);
      return;
    }
    context.error(
      `function failed (dequeue ${m.dequeueCount} of ${q.maxDequeueCount}): ${(failure as Error).stack ?? String(failure)}`,
    );
    if (m.dequeueCount >= q.maxDequeueCount) return this.toPoison(m, popReceipt, `failed ${m.dequeueCount} times`);
    await this.client.updateMessage(m.messageId, popReceipt, m.messageText, Math.ceil(q.visibilityTimeoutMs / 1000));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.loop;
    await Promise.allSettled([...this.inflight]);
  }
}

export interface RunningLocalHost {
  baseUrl: string;
  port: number;
  functions: { name: string; kind: string; detail: string }[];
  stop(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

// The local host believes the caller's x-ms-client-principal only with KEEL_TRUST_CLIENT_PRINCIPAL=local (dev/boot.ts
// sets it for npm start), never where a hosting environment is detected (principalTrustWarning throws), and not
// inside a container that listens beyond loopback: there the port is published and any key holder could claim
// the operator role. A dev container listening on 127.0.0.1 is fine.
export function checkLocalPrincipalTrust(
  hostname: string,
  env: NodeJS.ProcessEnv = process.env,
  inContainer: boolean = existsSync('/.dockerenv') || existsSync('/run/.containerenv'),
): string | null {
  const warning = principalTrustWarning(env);
  if ((env.KEEL_TRUST_CLIENT_PRINCIPAL ?? '').trim() === 'local' && inContainer && !LOOPBACK.has(hostname)) {
    throw new Error(
      `KEEL_TRUST_CLIENT_PRINCIPAL=local is refused in a container listening on ${hostname} (KEEL_HTTP_HOST): listen on 127.0.0.1, or remove the setting`,
    );
  }
  return warning;
}

export async function startLocalHost(opts: LocalHostOptions): Promise<RunningLocalHost> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const trustWarning = checkLocalPrincipalTrust(opts.hostname ?? '127.0.0.1');
  if (trustWarning) log(trustWarning);
  const httpDefs = opts.definitions.filter((d): d is HttpDefinition => d.kind === 'http');
  const timerDefs = opts.definitions.filter((d): d is TimerDefinition => d.kind === 'timer');
  const queueDefs = opts.definitions.filter((d): d is QueueDefinition => d.kind === 'queue');
  const httpLayer = new HttpLayer(httpDefs, opts, log);
  const port = await httpLayer.start();
  const hostname = opts.hostname ?? '127.0.0.1';
  const baseUrl = `http://${hostname === '0.0.0.0' ? '127.0.0.1' : hostname}:${port}`;
  const pollers = queueDefs.map((d) => new QueuePoller(d, opts, log));
  const timers = new TimerLayer(timerDefs, opts, log);
  let unsubscribe: (() => Promise<void>) | undefined;
  try {
    for (const p of pollers) await p.start();
    timers.start();
    if (opts.wakeups) {
      const { source, timer } = opts.wakeups;
      unsubscribe = await source
        .subscribe([], () => timers.wake(timer))
        .catch((err: Error) => {
          log(`wake-ups unavailable (${err.message}); timers and queue polling only`);
          return undefined;
        });
    }
  } catch (err) {
    await httpLayer.stop();
    await timers.stop();
    await Promise.allSettled(pollers.map((p) => p.stop()));
    throw err;
  }
  const functions = [
    ...httpDefs.map((d) => ({
      name: d.name,
      kind: 'http',
      detail: `[${d.methods.join(',')}] ${baseUrl}/${opts.hostConfig.routePrefix}/${d.route}`,
    })),
    ...timerDefs.map((d) => ({
      name: d.name,
      kind: 'timer',
      detail: `${scheduleOf(d, opts.settings)} (${d.scheduleSetting})`,
    })),
    ...queueDefs.map((d) => ({
      name: d.name,
      kind: 'queue',
      detail: `${queueNameOf(d, opts.settings)} (${d.queueSetting})`,
    })),
  ];
  let stopping: Promise<void> | undefined;
  return {
    baseUrl,
    port,
    functions,
    stop() {
      stopping ??= (async () => {
        await unsubscribe?.().catch(() => undefined);
        await timers.stop();
        await Promise.allSettled(pollers.map((p) => p.stop()));
        await httpLayer.stop();
      })();
      return stopping;
    },
  };
}

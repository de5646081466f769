// The ops API's edge: route table -> handler, with the role check every route declares (before the body is read),
// cross-site refusal and JSON-only bodies for every write, body size limits, zod validation (400 naming the
// field), error mapping, and the audit record of every write and refusal. One Azure HTTP function (route `ops/{*path}`) serves all of it, so Azure and the local
// host route identically; the console's key-less path relays into the same handler (channel 'console').
import Router from 'find-my-way';
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import type { z } from 'zod';
import { ValidationError, issueMessage } from '../jobs/validate.js';
import { DEFAULT_QUEUE } from '../jobs/typedEnqueue.js';
import { IdempotencyConflictError } from '../jobs/contract.js';
import type { OpsRuntime } from './context.js';
import { OpsError, errorResponse, json } from './errors.js';
import {
  authorize,
  believedPrincipal,
  type ClientPrincipal,
  type OpsChannel,
  type OpsRole,
  type RoleNames,
} from './auth.js';
import { PrincipalTrustError } from './principalTrust.js';
import { AUDIT_TEXT_LIMITS } from '../jobs/contract.js';
import { auditAffected, auditEntry, auditLog, auditText, type AuditCall } from './auditRecord.js';
import { RefusalWindows } from './refusalWindows.js';
import { decodeUtf8, silentChange } from './jsonText.js';

export type OpsMethod = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
export const OPS_METHODS: OpsMethod[] = ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'];
export const OPS_PREFIX = '/api/ops';
export const MAX_PATH_PARAM_CHARS = 1024;

export interface OpsContext<P, Q, B> {
  rt: OpsRuntime;
  params: P;
  query: Q;
  body: B;
  principal: ClientPrincipal | null;
  request: HttpRequest;
  log: InvocationContext;
}

export interface OpsResult {
  status?: number; // default 200
  body: unknown;
  headers?: Record<string, string>; // e.g. Location and Retry-After of a 202
}

export interface OpsRoute<P = unknown, Q = unknown, B = unknown> {
  method: OpsMethod;
  path: string; // find-my-way syntax below /api/ops, e.g. '/jobs/:id'
  operationId: string;
  summary: string;
  tag: string;
  // The lowest level that may call it (docs/operations.md, the role table): reader for reads, producer for
  // enqueue, operator for anything that moves, deletes or re-runs work. Required: a route without one cannot exist.
  role: OpsRole;
  params?: z.ZodType<P>;
  query?: z.ZodType<Q>;
  body?: z.ZodType<B>;
  responses: Record<number, string>;
  output?: z.ZodType; // the success body's shape, for the OpenAPI document
  handle(ctx: OpsContext<P, Q, B>): Promise<OpsResult>;
}

// Identity helper that keeps the schema types flowing into handle().
export function route<P = Record<string, never>, Q = Record<string, never>, B = undefined>(
  r: OpsRoute<P, Q, B>,
): OpsRoute<P, Q, B> {
  return r;
}

// "jobs[3].payload" style, the same as the store's ValidationError fields.
export function fieldPath(path: readonly PropertyKey[], where: 'body' | 'query' | 'path' = 'body'): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out || where;
}

function firstIssue(err: z.ZodError, where: 'body' | 'query' | 'path'): OpsError {
  const issue = err.issues[0]!;
  // Strict objects report unknown keys with an empty path: name the first unknown key.
  if (issue.code === 'unrecognized_keys' && 'keys' in issue && Array.isArray(issue.keys) && issue.keys.length > 0) {
    const field = fieldPath([...issue.path, String(issue.keys[0])]);
    return new OpsError('invalid_request', `unknown field "${String(issue.keys[0])}"`, field, { in: where });
  }
  // A union (single job vs {jobs: [...]}) reports invalid_union: use the branch whose issues went deepest.
  if (issue.code === 'invalid_union' && 'errors' in issue && Array.isArray(issue.errors)) {
    const branches = issue.errors as { path: PropertyKey[]; message: string; code: string; keys?: string[] }[][];
    let best: { path: PropertyKey[]; message: string; code: string; keys?: string[] } | undefined;
    let bestScore = -Infinity;
    for (const b of branches) {
      const i = b[0];
      if (!i) continue;
      // A branch that only misses a field the caller never meant to send (e.g. "jobs" on a single job) is the
      // least likely intent; an unknown field next; otherwise the deeper the issue, the closer the match.
      const missing = i.code === 'invalid_type' && / received undefined$/.test(i.message);
      const score = missing ? -1 + i.path.length / 100 : i.code === 'unrecognized_keys' ? 0 : i.path.length + 1;
      if (score > bestScore) {
        best = i;
        bestScore = score;
      }
    }
    if (best) {
      if (best.code === 'unrecognized_keys' && best.keys?.[0]) {
        return new OpsError(
          'invalid_request',
          `unknown field "${best.keys[0]}"`,
          fieldPath([...issue.path, ...best.path, best.keys[0]]),
          { in: where },
        );
      }
      return new OpsError('invalid_request', issueMessage(best), fieldPath([...issue.path, ...best.path]), {
        in: where,
      });
    }
  }
  return new OpsError('invalid_request', issueMessage(issue), fieldPath(issue.path, where), { in: where });
}

function parseWith<T>(schema: z.ZodType<T> | undefined, value: unknown, where: 'body' | 'query' | 'path'): T {
  if (!schema) return undefined as T;
  const r = schema.safeParse(value);
  if (!r.success) throw firstIssue(r.error, where);
  return r.data;
}

function queryObject(url: URL): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of url.searchParams) {
    if (k === 'code') continue; // the function key, consumed by the host
    if (k in out)
      throw new OpsError('invalid_request', `query parameter "${k}" appears more than once`, k, { in: 'query' });
    out[k] = v;
  }
  return out;
}

// Reads a request body of at most `maxBytes`, counting as it goes: a body past the limit is refused (413, naming it)
// as soon as the first byte over it arrives, the rest left unread (the stream cancelled), so a huge body, declared or
// chunked, never sits whole in memory here (request.arrayBuffer() would read all of it before the size could be
// checked). A body relayed by the console (shared/ops/console.ts) arrives as the caller's own stream, unread.
export async function readBodyWithin(request: HttpRequest, maxBytes: number): Promise<Buffer> {
  const tooLarge = (size: string) =>
    new OpsError(
      'payload_too_large',
      `request body is ${size} bytes; the limit is ${maxBytes} (KEEL_OPS_MAX_BODY_BYTES)`,
      undefined,
      { limit: maxBytes },
    );
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(declared);
  const stream = request.body;
  if (!stream) return Buffer.alloc(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) {
        chunks.length = 0;
        await reader.cancel().catch(() => undefined);
        throw tooLarge(`over ${maxBytes}`);
      }
      chunks.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  return Buffer.concat(chunks, size);
}

async function readJsonBody(request: HttpRequest, maxBytes: number): Promise<unknown> {
  const bytes = await readBodyWithin(request, maxBytes);
  const decoded = decodeUtf8(bytes);
  if (decoded === null) throw new OpsError('invalid_json', 'request body is not valid UTF-8', 'body');
  const text = decoded.trim();
  if (text === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new OpsError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`, 'body');
  }
  const changed = silentChange(text);
  if (changed?.kind === 'duplicate')
    throw new OpsError(
      'invalid_json',
      `field "${changed.field}" appears more than once in the request body`,
      changed.field,
      { in: 'body' },
    );
  if (changed?.kind === 'inexact') {
    const field = changed.field || 'body';
    throw new OpsError(
      'invalid_request',
      `${field}: the integer ${changed.literal} cannot be held exactly by a JSON number (a double; it would be stored as ${String(Number(changed.literal))}): send it as a string`,
      field,
      { in: 'body' },
    );
  }
  return value;
}

// JSON in, for every write, even an empty one: a cross-site HTML form can only send a form or text type, and a
// cross-site fetch that sets application/json needs a CORS preflight this app never grants (review F4). curl -d
// sends a form unless told otherwise.
function requireJsonContentType(request: HttpRequest): void {
  const type = (request.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json' && !/^application\/[a-z0-9.+-]+\+json$/.test(type)) {
    throw new OpsError(
      'unsupported_media_type',
      `every ${request.method.toUpperCase()} must be sent with Content-Type: application/json, even without a body (got ${type ? `"${type}"` : 'no Content-Type'})`,
      'content-type',
      { in: 'header' },
    );
  }
  // Neither host decompresses a request body: a gzipped one would be refused as "not UTF-8", which misleads.
  const encoding = (request.headers.get('content-encoding') ?? '').trim().toLowerCase();
  if (encoding !== '' && encoding !== 'identity') {
    throw new OpsError(
      'unsupported_media_type',
      `request bodies are taken uncompressed only (got Content-Encoding: ${JSON.stringify(encoding.slice(0, 100))})`,
      'content-encoding',
      { in: 'header' },
    );
  }
}

// Refuses a write a browser marks as coming from another site: Sec-Fetch-Site other than same-origin or none (a
// typed URL, a bookmark, curl), or an Origin whose host is not this app's. Non-browser clients send neither.
export function refuseCrossSite(request: HttpRequest): void {
  const site = request.headers.get('sec-fetch-site');
  if (site && site !== 'same-origin' && site !== 'none')
    throw new OpsError('forbidden', `cross-site call refused (sec-fetch-site: ${site})`);
  const origin = request.headers.get('origin');
  if (origin) {
    const host = request.headers.get('x-forwarded-host') ?? request.headers.get('host') ?? new URL(request.url).host;
    let originHost: string;
    try {
      originHost = new URL(origin).host;
    } catch {
      throw new OpsError('forbidden', 'cross-origin call refused (unreadable Origin header)');
    }
    if (originHost === '' || originHost !== host) throw new OpsError('forbidden', 'cross-origin call refused');
  }
}

function roleNames(settings: OpsRuntime['settings']): RoleNames {
  return {
    reader: settings.KEEL_OPS_READER_ROLE,
    producer: settings.KEEL_OPS_PRODUCER_ROLE,
    operator: settings.KEEL_OPS_OPERATOR_ROLE,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The audit trail (keel.ops_audit): recorded here, once for every route, never by the routes themselves.
// - Every write (any method but GET) leaves exactly one record: refused before it ran ('refused': 401/403, a
//   cross-site call, a wrong content type, an invalid body...), or recorded as 'started' before its handler runs and
//   finished as 'ok' or 'failed' (with the status, the reason and the count it affected) after.
// - Every 401/403 of a read leaves one 'refused' record too.
// - Except in a flood: a caller's 401/403 refusals of one route after the first within KEEL_OPS_REFUSAL_WINDOW_MS are
//   counted, not recorded one by one, and one more 'refused' record at the window's end says how many
//   (refusalWindows.ts); each is still logged.
// Fail closed: the 'started' record is written before the action, and a write whose record cannot be written is not
// run (503). We chose this over writing the record in the action's own transaction: the actions span several store
// calls, queue posts and the transfer journal (another database), so no single transaction holds them all, while
// "no record, no action" holds for every route the same way. A record left 'started' (the process died mid-action,
// or the finishing write failed after the action) says the action was attempted with its outcome unknown; it is
// never rewritten afterwards. Each record is also logged as one JSON line ("ops audit {...}"; a trace, sampled by
// the host like every trace) and sent as a `keel.ops.audit` customEvent; the database row is the record. What a
// record says is built in auditRecord.ts.

// refused: the console's front door (shared/ops/console.ts) already turned the call away; the handler records that
// refusal against the route the call named and answers with it, so every refusal is recorded here.
export type OpsHttpHandler = (
  request: HttpRequest,
  context: InvocationContext,
  channel?: OpsChannel,
  refused?: OpsError,
) => Promise<HttpResponseInit>;

function decoded(text: string): string | null {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

// The catch-all segment to route, encoded segment by segment. The host decodes "%2F" into "/" before it hands the
// segment over, so "queues/a%2Fb" arrives as "queues/a/b": routed as it came, that is the queue "a" and another
// route's path (POST transfers/batches%2F<id>/resume would resume the batch). Where the request's own URL still holds
// the segments as sent (the local host, Core Tools, the console's relay), the segments are taken from it: a "/"
// stays inside its parameter, which is then refused naming it (no name or id holds "/"). Azure's front end decodes
// "%2F" before the URL reaches the worker (azure-functions-host#9290, #5619): there the URL says what the segment
// says, and the call is the path it decodes to, as for any route (docs/operations.md).
export function routedTail(tail: string, rawPathname: string): string {
  const raw = rawPathname.split('/');
  for (let m = 1; m <= raw.length; m++) {
    const candidate = raw.slice(raw.length - m).join('/');
    if (decoded(candidate) === tail) {
      return candidate
        .split('/')
        .map((seg) => encodeURIComponent(decoded(seg)!))
        .join('/');
    }
  }
  return tail.split('/').map(encodeURIComponent).join('/');
}

// Builds the single HTTP handler for every ops route.
export function createOpsHandler(
  routes: OpsRoute<any, any, any>[],
  getRuntime: () => Promise<OpsRuntime>,
): OpsHttpHandler {
  // maxParamLength: above every path parameter's own limit (names: 128 characters, maybe percent-encoded), so a
  // long parameter reaches its schema and gets a 400 naming it instead of a 404 from the router.
  const router = Router({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: MAX_PATH_PARAM_CHARS });
  for (const r of routes) router.on(r.method, OPS_PREFIX + r.path, () => undefined, r);
  const refusals = new RefusalWindows();

  return async (request, context, channel = 'key', refused) => {
    const url = new URL(request.url);
    const method = request.method.toUpperCase() as OpsMethod;
    // Azure hands us the catch-all segment, decoded; the local host routes /api/ops/* the same way. The router reads
    // a URL path, so the segment is encoded again, segment by segment: a "?", "#" or "%" in a parameter stays in the
    // parameter (a 400 naming it) instead of ending the path (PATCH /queues/default%3Fx changed the queue "default")
    // or failing to decode (a 404). `path` is what messages show.
    const tail = request.params.path;
    const path = tail !== undefined ? `${OPS_PREFIX}/${tail}` : url.pathname;
    const routed = tail !== undefined ? `${OPS_PREFIX}/${routedTail(tail, url.pathname)}` : url.pathname;
    // Filled in as the call proceeds: what the audit record says about it (null until the route is known).
    let call: AuditCall | null = null;
    let rt: OpsRuntime | null = null;
    let auditId: string | null = null;
    try {
      const found = OPS_METHODS.includes(method) ? router.find(method, routed) : null;
      if (!found) {
        if (refused) throw refused; // a refused caller learns nothing of the route table
        const allowed = OPS_METHODS.filter((m) => router.find(m, routed) !== null);
        if (allowed.length > 0) {
          throw new OpsError('method_not_allowed', `${method} is not allowed on ${path}`, undefined, {
            allow: allowed.join(', '),
          });
        }
        throw new OpsError('not_found', `no ops route ${method} ${path}; see GET ${OPS_PREFIX}/openapi.json`);
      }
      const r = found.store as OpsRoute<unknown, unknown, unknown>;
      try {
        rt = await getRuntime();
      } catch (err) {
        // The cause (host names, logins, setting values) stays in the log: callers get a generic 503.
        context.error(`ops: the runtime could not start: ${(err as Error).message}`);
        if (refused) throw refused;
        throw new OpsError('unavailable', 'Keel could not start; see the function logs');
      }
      const names = roleNames(rt.settings);
      const registry = rt.registry;
      const rawParams: Record<string, unknown> = { ...found.params };
      call = {
        r,
        channel,
        mode: null,
        principal: null,
        names,
        params: rawParams,
        query: {},
        body: undefined,
        request,
        context,
        queueOfType: (type) => registry.get(type)?.options.queue ?? DEFAULT_QUEUE,
      };
      // Who is calling (for the record, even when refused), then: writes refused from another site, and JSON only,
      // before the role check and before the body is read (a refused call costs nothing).
      const header = request.headers.get('x-ms-client-principal');
      const believed = believedPrincipal(header, rt.principalTrust());
      call.mode = believed.mode;
      call.principal = believed.principal;
      if (refused) throw refused;
      if (method !== 'GET') {
        refuseCrossSite(request);
        requireJsonContentType(request);
      }
      const principal: ClientPrincipal | null = authorize(header, r.role, names, channel, rt.principalTrust());
      const params = parseWith(r.params, rawParams, 'path');
      const query = parseWith(r.query, queryObject(url), 'query');
      call.query = query;
      const body = r.body
        ? parseWith(r.body, await readJsonBody(request, rt.settings.KEEL_OPS_MAX_BODY_BYTES), 'body')
        : undefined;
      call.body = body;
      if (method !== 'GET') {
        // No record, no action (see above).
        const entry = auditEntry(call, 'started', null, null);
        try {
          auditId = await rt.store.recordAudit(entry);
        } catch (err) {
          context.error(
            `ops: the audit record of ${r.operationId} could not be written; not run: ${(err as Error).message}`,
          );
          throw new OpsError(
            'unavailable',
            'the audit trail could not be written, so the action was not run; retry later',
          );
        }
      }
      const result = await r.handle({ rt, params, query, body, principal, request, log: context });
      const status = result.status ?? 200;
      if (auditId !== null) await finishAudit(rt, call, auditId, 'ok', status, null, auditAffected(result.body));
      return json(status, result.body, result.headers);
    } catch (err) {
      const mapped = notFoundField(toOpsError(err, context, method, path, rt?.connectionLost), call);
      if (rt && call) {
        if (auditId !== null) await finishAudit(rt, call, auditId, 'failed', mapped.status, mapped.message, null);
        else if (method !== 'GET' || mapped.status === 401 || mapped.status === 403)
          await recordRefusal(rt, call, mapped, refusals);
      } else if (mapped.status === 401 || mapped.status === 403) {
        context.warn(
          `ops refused ${JSON.stringify({ method, path, channel, status: mapped.status, reason: mapped.message })}`,
        );
      }
      return errorResponse(mapped);
    }
  };
}

// A 404 names what was not found like a 400 names its field: the route's one path parameter (`id`, `name`) when a
// route matched, else the path itself (no such route).
function notFoundField(err: OpsError, call: AuditCall | null): OpsError {
  if (err.code !== 'not_found' || err.field !== undefined) return err;
  const keys = call ? Object.keys(call.params) : [];
  const field = call ? (keys.length === 1 ? keys[0] : undefined) : 'path';
  if (field === undefined) return err;
  return new OpsError('not_found', err.message, field, { ...err.extra, in: 'path' });
}

// Closes a started record; a failure here is logged, not returned: the action has run, and a caller told it failed
// would retry it. The record stays 'started' (outcome unknown), which is what the log line explains.
async function finishAudit(
  rt: OpsRuntime,
  call: AuditCall,
  id: string,
  outcome: 'ok' | 'failed',
  status: number,
  reason: string | null,
  affected: number | null,
): Promise<void> {
  const entry = auditEntry(call, 'started', status, reason);
  try {
    await rt.store.finishAudit(id, outcome, status, auditText(reason, AUDIT_TEXT_LIMITS.reason), affected);
    auditLog(call.context, entry, id, { outcome, affected });
  } catch (err) {
    call.context.error(
      `ops: the audit record ${id} (${call.r.operationId}) could not be finished as ${outcome} ${status}; it stays 'started': ${(err as Error).message}`,
    );
    auditLog(call.context, entry, id, { outcome, affected, recorded: false });
  }
}

// A refused call: one finished record (a 401/403 after the caller's first on the route within the window: counted
// into the record written when the window closes). Nothing ran, so a failure to write it is logged and the refusal
// stands.
async function recordRefusal(rt: OpsRuntime, call: AuditCall, err: OpsError, windows: RefusalWindows): Promise<void> {
  const entry = auditEntry(call, 'refused', err.status, err.message);
  const windowMs = rt.settings.KEEL_OPS_REFUSAL_WINDOW_MS;
  if ((err.status === 401 || err.status === 403) && windowMs > 0) {
    const first = windows.admit(entry, windowMs, (coalesced) => {
      const summary = {
        ...entry,
        reason: auditText(
          `${coalesced} more refusal${coalesced === 1 ? '' : 's'} of this caller on this route within ${windowMs} ms of its first (recorded), coalesced: ${err.message}`,
          AUDIT_TEXT_LIMITS.reason,
        ),
      };
      rt.store.recordAudit(summary).then(
        (id) => auditLog(call.context, summary, id, { coalesced }),
        (e: Error) => {
          call.context.error(
            `ops: the audit record of ${coalesced} coalesced refusals of ${call.r.operationId} could not be written: ${e.message}`,
          );
          auditLog(call.context, summary, null, { coalesced, recorded: false });
        },
      );
    });
    if (!first) {
      auditLog(call.context, entry, null, { recorded: false, coalesced: true });
      return;
    }
  }
  try {
    const id = await rt.store.recordAudit(entry);
    auditLog(call.context, entry, id);
  } catch (e) {
    call.context.error(
      `ops: the audit record of a refused ${call.r.operationId} could not be written: ${(e as Error).message}`,
    );
    auditLog(call.context, entry, null, { recorded: false });
  }
}

// Every failure as the OpsError the caller gets (internal causes stay in the log).
function toOpsError(
  err: unknown,
  context: InvocationContext,
  method: string,
  path: string,
  connectionLost?: (err: unknown) => boolean,
): OpsError {
  if (err instanceof OpsError) return err;
  if (err instanceof PrincipalTrustError) {
    context.error(`ops: ${err.message}`);
    return new OpsError('unavailable', 'the ops API is misconfigured; see the function logs');
  }
  if (err instanceof ValidationError) return new OpsError('invalid_request', err.message, err.field);
  if (err instanceof IdempotencyConflictError)
    return new OpsError('conflict', err.message, `jobs[${err.index}].idempotencyKey`, {
      idempotencyKey: err.idempotencyKey,
      queue: err.queue,
      type: err.type,
    });
  context.error(`ops ${method} ${path} failed: ${(err as Error).stack ?? String(err)}`);
  if (connectionLost?.(err))
    return new OpsError(
      'unavailable',
      method === 'GET'
        ? 'a database could not be reached or its connection broke; retry later'
        : 'a database could not be reached or its connection broke during the call, which may or may not have taken effect: check before retrying',
    );
  return new OpsError('internal_error', 'internal error; see the function logs');
}

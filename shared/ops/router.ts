// The ops API's edge: route table -> handler, with the role check every route declares (before the body is read),
// cross-site refusal and JSON-only bodies for every write, body size limits, zod validation (400 naming the
// field), and error mapping. One Azure HTTP function (route `ops/{*path}`) serves all of it, so Azure and the local
// host route identically; the console's key-less path relays into the same handler (channel 'console').
import Router from 'find-my-way';
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import type { z } from 'zod';
import { ValidationError, issueMessage } from '../jobs/validate.js';
import { IdempotencyConflictError } from '../jobs/contract.js';
import type { OpsRuntime } from './context.js';
import { OpsError, errorResponse, json } from './errors.js';
import {
  authorize,
  PrincipalTrustError,
  type ClientPrincipal,
  type OpsChannel,
  type OpsRole,
  type RoleNames,
} from './auth.js';

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

async function readJsonBody(request: HttpRequest, maxBytes: number): Promise<unknown> {
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > maxBytes) {
    throw new OpsError(
      'payload_too_large',
      `request body is ${declared} bytes; the limit is ${maxBytes} (KEEL_OPS_MAX_BODY_BYTES)`,
      undefined,
      { limit: maxBytes },
    );
  }
  const bytes = Buffer.from(await request.arrayBuffer());
  if (bytes.length > maxBytes) {
    throw new OpsError(
      'payload_too_large',
      `request body is ${bytes.length} bytes; the limit is ${maxBytes} (KEEL_OPS_MAX_BODY_BYTES)`,
      undefined,
      { limit: maxBytes },
    );
  }
  const text = bytes.toString('utf8').trim();
  if (text === '') return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new OpsError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`, 'body');
  }
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

// One record per write, JSON-encoded (a name with quotes or newlines cannot forge another line).
function auditLine(
  r: OpsRoute<unknown, unknown, unknown>,
  channel: OpsChannel,
  principal: ClientPrincipal | null,
  status: number,
  params: unknown,
): string {
  return `ops audit ${JSON.stringify({
    operation: r.operationId,
    channel,
    principal: principal ? { name: principal.name, authType: principal.authType } : null,
    params,
    status,
  })}`;
}

export type OpsHttpHandler = (
  request: HttpRequest,
  context: InvocationContext,
  channel?: OpsChannel,
) => Promise<HttpResponseInit>;

// Builds the single HTTP handler for every ops route.
export function createOpsHandler(
  routes: OpsRoute<any, any, any>[],
  getRuntime: () => Promise<OpsRuntime>,
): OpsHttpHandler {
  // maxParamLength: above every path parameter's own limit (names: 128 characters, maybe percent-encoded), so a
  // long parameter reaches its schema and gets a 400 naming it instead of a 404 from the router.
  const router = Router({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: MAX_PATH_PARAM_CHARS });
  for (const r of routes) router.on(r.method, OPS_PREFIX + r.path, () => undefined, r);

  return async (request, context, channel = 'key') => {
    const url = new URL(request.url);
    const method = request.method.toUpperCase() as OpsMethod;
    // Azure hands us the catch-all segment; the local host routes /api/ops/* the same way.
    const tail = request.params.path;
    const path = tail !== undefined ? `${OPS_PREFIX}/${tail}` : url.pathname;
    try {
      const found = OPS_METHODS.includes(method) ? router.find(method, path) : null;
      if (!found) {
        const allowed = OPS_METHODS.filter((m) => router.find(m, path) !== null);
        if (allowed.length > 0) {
          throw new OpsError('method_not_allowed', `${method} is not allowed on ${path}`, undefined, {
            allow: allowed.join(', '),
          });
        }
        throw new OpsError('not_found', `no ops route ${method} ${path}; see GET ${OPS_PREFIX}/openapi.json`);
      }
      const r = found.store as OpsRoute<unknown, unknown, unknown>;
      // Writes: refused from another site, and JSON only, before anything else (a refused call costs nothing).
      if (method !== 'GET') {
        refuseCrossSite(request);
        requireJsonContentType(request);
      }
      let rt: OpsRuntime;
      try {
        rt = await getRuntime();
      } catch (err) {
        // The cause (host names, logins, setting values) stays in the log: callers get a generic 503.
        context.error(`ops: the runtime could not start: ${(err as Error).message}`);
        throw new OpsError('unavailable', 'Keel could not start; see the function logs');
      }
      const principal: ClientPrincipal | null = authorize(
        request.headers.get('x-ms-client-principal'),
        r.role,
        roleNames(rt.settings),
        channel,
      );
      const params = parseWith(r.params, { ...found.params }, 'path');
      const query = parseWith(r.query, queryObject(url), 'query');
      const body = r.body
        ? parseWith(r.body, await readJsonBody(request, rt.settings.KEEL_OPS_MAX_BODY_BYTES), 'body')
        : undefined;
      const result = await r.handle({ rt, params, query, body, principal, request, log: context });
      if (method !== 'GET') context.info(auditLine(r, channel, principal, result.status ?? 200, params));
      return json(result.status ?? 200, result.body, result.headers);
    } catch (err) {
      if (err instanceof OpsError) {
        if (err.status === 401 || err.status === 403)
          context.warn(
            `ops refused ${JSON.stringify({ method, path, channel, status: err.status, reason: err.message })}`,
          );
        return errorResponse(err);
      }
      if (err instanceof PrincipalTrustError) {
        context.error(`ops: ${err.message}`);
        return errorResponse(new OpsError('unavailable', 'the ops API is misconfigured; see the function logs'));
      }
      if (err instanceof ValidationError) return errorResponse(new OpsError('invalid_request', err.message, err.field));
      if (err instanceof IdempotencyConflictError)
        return errorResponse(
          new OpsError('conflict', err.message, `jobs[${err.index}].idempotencyKey`, {
            idempotencyKey: err.idempotencyKey,
            queue: err.queue,
            type: err.type,
          }),
        );
      context.error(`ops ${method} ${path} failed: ${(err as Error).stack ?? String(err)}`);
      return errorResponse(new OpsError('internal_error', 'internal error; see the function logs'));
    }
  };
}

// What an ops audit record (keel.ops_audit) says about a call: who made it and how they signed in, the role it
// needed, what it was about (target), the request with every payload replaced by its size and digest (summary), and
// how many rows its answer says it affected, each cut to its column; and the JSON log line and customEvent that
// carry each record. The router (router.ts) decides when a call is recorded and writes it through the store.
import { createHash } from 'node:crypto';
import type { HttpRequest, InvocationContext } from '@azure/functions';
import { AUDIT_TEXT_LIMITS, type AuditAuthMethod, type AuditEntry } from '../jobs/contract.js';
import { telemetry } from '../telemetry/index.js';
import { grantedLevel, type ClientPrincipal, type OpsChannel, type RoleNames } from './auth.js';
import type { PrincipalMode } from './principalTrust.js';
import type { OpsRoute } from './router.js';

// Kinds of the path parameter's resource, named by the segment before it.
const TARGET_KIND: Record<string, string> = {
  queues: 'queue',
  jobs: 'job',
  dlq: 'job',
  transfers: 'transfer',
  batches: 'batch',
  schedules: 'schedule',
  handlers: 'handler',
};

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

// A value the audit columns accept: NUL and lone surrogates removed, cut to the column's width; nothing left is null
// (the store refuses an empty text, and a record it refuses fails the call: a principal claim of "\u0000" on the
// local host answered 503 and its refusals went unrecorded).
export function auditText(v: unknown, max: number): string | null {
  if (v === null || v === undefined) return null;
  let t = String(v).replace(/\u0000/g, '');
  if (t === '') return null;
  if (t.length > max) t = `${t.slice(0, max - 1)}…`;
  return t.replace(LONE_SURROGATE, '\uFFFD');
}

// What the call was about: the path parameter's resource (queue:emails, job:42, batch:<id>, transfer:orders), or
// the queue(s) a body names (enqueue, resurrect by filter, purge). A job that names no queue goes to its type's
// (queueOfType: its handler's, else "default"), so a batch over several queues reads queue:a,b: every queue once,
// sorted, whole names only; when they do not all fit the column, as many as fit and "+N more" (queue:a,b,+12 more).
function auditTarget(
  r: OpsRoute<unknown, unknown, unknown>,
  params: Record<string, unknown>,
  body: unknown,
  queueOfType: (type: string) => string | null,
): string | null {
  const m = /\/([a-z]+)\/:(\w+)/.exec(r.path);
  if (m && params[m[2]!] !== undefined) return `${TARGET_KIND[m[1]!] ?? m[1]}:${String(params[m[2]!])}`;
  if (body && typeof body === 'object') {
    const b = body as { queue?: unknown; type?: unknown; jobs?: unknown };
    const queues = new Set<string>();
    const add = (job: { queue?: unknown; type?: unknown }) => {
      if (typeof job.queue === 'string') queues.add(job.queue);
      else if (typeof job.type === 'string') {
        const q = queueOfType(job.type);
        if (q !== null) queues.add(q);
      }
    };
    if (Array.isArray(b.jobs)) {
      for (const j of b.jobs as unknown[]) if (j && typeof j === 'object') add(j);
    } else if (typeof b.queue === 'string' || (r.operationId === 'enqueue' && typeof b.type === 'string')) add(b);
    if (queues.size > 0) return queueListTarget([...queues].sort(), AUDIT_TEXT_LIMITS.target);
  }
  return null;
}

// queue:<names>, bounded by max characters: whole names only, the rest counted ("+N more").
export function queueListTarget(sorted: readonly string[], max: number): string {
  const all = `queue:${sorted.join(',')}`;
  if (all.length <= max) return all;
  let text = 'queue:';
  for (let i = 0; i < sorted.length; i++) {
    const more = `+${sorted.length - i} more`;
    const next = `${text}${i > 0 ? ',' : ''}${sorted[i]}`;
    // Room must stay for the "+N more" of the names after this one (or nothing, when this is the last).
    const tail = i + 1 < sorted.length ? `,+${sorted.length - i - 1} more` : '';
    if (next.length + tail.length > max) return `${text}${i > 0 ? ',' : ''}${more}`;
    text = next;
  }
  return text;
}

// The request, as the audit keeps it: path parameters, query and body, every payload replaced by its size and
// digest (an audit row must not copy job data); cut to the column's width.
function auditSummary(params: unknown, query: unknown, body: unknown): string | null {
  const strip = (v: unknown, depth: number): unknown => {
    if (Array.isArray(v)) return v.map((x) => strip(x, depth + 1));
    if (v === null || typeof v !== 'object' || depth > 4) return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === 'payload') {
        const text = JSON.stringify(x ?? null) ?? 'null'; // undefined for a function or symbol (none from JSON)
        out[k] = {
          bytes: Buffer.byteLength(text),
          sha256: createHash('sha256').update(text).digest('hex').slice(0, 16),
        };
      } else out[k] = strip(x, depth + 1);
    }
    return out;
  };
  // Never throws: the record is written from the router's error path too, where a throw would escape the handler
  // as a bare 500 with no record (a body the schemas passed cannot nest deep enough to overflow the stack; this
  // is the guard should one ever do so).
  try {
    const parts: Record<string, unknown> = {};
    if (params && Object.keys(params).length) parts.params = params;
    if (query && typeof query === 'object' && Object.keys(query).length) parts.query = query;
    if (body !== undefined && !(typeof body === 'object' && body !== null && Object.keys(body).length === 0))
      parts.body = strip(body, 0);
    return Object.keys(parts).length ? JSON.stringify(parts) : null;
  } catch (err) {
    return JSON.stringify({ unreadable: (err as Error).message });
  }
}

// How many rows or jobs the call affected, read from its answer: a count or deleted figure, the jobs or ids it
// lists, or 1 for a call on one job. A dry run or a preview (abandon, replay, re-baseline) affected nothing.
export function auditAffected(body: unknown): number | null {
  if (!body || typeof body !== 'object') return null;
  const b = body as Record<string, unknown>;
  if (b.dryRun === true || b.preview === true) return 0;
  if (typeof b.deleted === 'number') return b.deleted;
  if (typeof b.count === 'number') return b.count;
  for (const k of ['jobs', 'ids', 'items'] as const) if (Array.isArray(b[k])) return (b[k] as unknown[]).length;
  if (typeof b.id === 'string') return 1;
  return null;
}

function authMethodOf(
  channel: OpsChannel,
  mode: PrincipalMode | null,
  principal: ClientPrincipal | null,
): AuditAuthMethod {
  if (principal) return mode === 'caller' ? 'local' : 'principal';
  return channel === 'key' ? 'key' : 'none';
}

function clientIp(request: HttpRequest): string | null {
  const forwarded = request.headers.get('x-forwarded-for');
  if (forwarded) return forwarded.split(',')[0]!.trim();
  return request.headers.get('client-ip');
}

export interface AuditCall {
  r: OpsRoute<unknown, unknown, unknown>;
  channel: OpsChannel;
  mode: PrincipalMode | null;
  principal: ClientPrincipal | null;
  names: RoleNames;
  params: Record<string, unknown>;
  query: unknown;
  body: unknown;
  request: HttpRequest;
  context: InvocationContext;
  // The queue a job of this type goes to when it names none (the registered handler's, else "default").
  queueOfType: (type: string) => string | null;
}

export function auditEntry(
  c: AuditCall,
  outcome: 'started' | 'refused',
  status: number | null,
  reason: string | null,
): AuditEntry {
  const L = AUDIT_TEXT_LIMITS;
  return {
    principalId: auditText(c.principal?.id, L.principalId),
    principalName: auditText(c.principal?.name, L.principalName),
    tenantId: auditText(c.principal?.tenantId, L.tenantId),
    appId: auditText(c.principal?.appId, L.appId),
    authMethod: authMethodOf(c.channel, c.mode, c.principal),
    channel: c.channel,
    role: grantedLevel(c.principal, c.names, c.channel),
    requiredRole: c.r.role,
    httpMethod: c.request.method.toUpperCase().slice(0, 8),
    action: auditText(c.r.operationId, L.action)!,
    target: auditText(auditTarget(c.r, c.params, c.body, c.queueOfType), L.target),
    summary: auditText(auditSummary(c.params, c.query, c.body), L.summary),
    outcome,
    status,
    reason: auditText(reason, L.reason),
    affected: null,
    requestId: auditText(c.context.invocationId, L.requestId),
    clientIp: auditText(clientIp(c.request), L.clientIp),
  };
}

export function auditLog(
  context: InvocationContext,
  entry: AuditEntry,
  id: string | null,
  extra: Record<string, string | number | boolean | null> = {},
): void {
  const record = { id, ...entry, ...extra };
  const line = `ops audit ${JSON.stringify(record)}`;
  if (entry.outcome === 'refused') context.warn(line);
  else context.info(line);
  // The same record as a customEvent, sent by this worker's own exporter (not the host's sampled traces).
  telemetry.opsAudit(record);
}

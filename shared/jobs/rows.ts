// Result rows of the job procedures, mapped once for every engine. Engines name columns their own way
// (PostgreSQL job_id, SQL Server JobId); camelKeys() brings both to jobId, and a small codec decodes the values
// whose wire form differs (JSON payload and tags as text on SQL Server, lease ids upper-case there).
import type {
  AuditPage,
  AuditRecord,
  ClaimedJob,
  StartedJob,
  DlqReason,
  FireResult,
  FireStatus,
  JobLink,
  JobPage,
  JobRecord,
  JobSearch,
  MetricBucket,
  QueueSettings,
  QueueStats,
  RescueResult,
  ScheduleState,
  CountResult,
  DlqGroupPage,
  WorkerInfo,
  WorkerLeases,
  HeartbeatResult,
  JobId,
  LeaseRef,
} from './contract.js';
import { TEXT_SEARCH_SCAN_ROWS } from './contract.js';
import type { JobProgress } from './progress.js';
import type { JobLogLine } from './jobLog.js';
import { splitJobLog } from './attempts.js';

export type Row = Record<string, unknown>;

export interface RowCodec {
  payload(v: unknown): unknown;
  tags(v: unknown): string[];
}

// snake_case or PascalCase keys -> camelCase keys.
// Column names are a small fixed set; converting each once keeps a 500-row claim from running a regex per cell.
const camelNames = new Map<string, string>();

function camelName(k: string): string {
  let name = camelNames.get(k);
  if (name === undefined) {
    const camel = k.includes('_') ? k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()) : k;
    name = camel.charAt(0).toLowerCase() + camel.slice(1);
    if (camelNames.size < 1000) camelNames.set(k, name);
  }
  return name;
}

export function camelKeys(row: Row): Row {
  const out: Row = {};
  for (const k of Object.keys(row)) out[camelName(k)] = row[k];
  return out;
}

// Rows a driver returned as arrays of values (pg's rowMode 'array'), as objects with camelCase keys: one object per
// row instead of the driver's own plus camelKeys' copy of it.
export function camelRows(columns: readonly string[], rows: readonly (readonly unknown[])[]): Row[] {
  const keys = columns.map(camelName);
  return rows.map((values) => {
    const row: Row = {};
    for (let i = 0; i < keys.length; i++) row[keys[i]!] = values[i];
    return row;
  });
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
// A Date (the drivers' parse), epoch milliseconds (PostgreSQL's claim_and_start) or a date string.
const date = (v: unknown): Date => (v instanceof Date ? v : typeof v === 'number' ? new Date(v) : new Date(String(v)));
const dateOrNull = (v: unknown): Date | null => (v === null || v === undefined ? null : date(v));
const textOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const leaseOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : String(v).toLowerCase());
// A lease id in lower case; one of lower-case letters, digits and dashes only (PostgreSQL's uuid output), which
// toLowerCase() would return unchanged, as it is: toLowerCase() copies even an unchanged string (56 B a claimed job;
// bench/README.md, runs 540-559).
const NOT_LOWER = /[^a-z0-9-]/;
const lowerLease = (v: unknown): string => {
  const s = String(v);
  return NOT_LOWER.test(s) ? s.toLowerCase() : s;
};

export function toClaimedJob(r: Row, codec: RowCodec): ClaimedJob {
  return {
    id: String(r.jobId),
    leaseId: String(r.leaseId).toLowerCase(),
    queue: String(r.queue),
    type: String(r.type),
    payload: codec.payload(r.payload),
    priority: num(r.priority),
    attempts: num(r.attempts),
    maxAttempts: numOrNull(r.maxAttempts),
    queueMaxAttempts: num(r.queueMaxAttempts),
    idempotencyKey: textOrNull(r.idempotencyKey),
    tags: codec.tags(r.tags),
    runAt: date(r.runAt),
    createdAt: date(r.createdAt),
    leaseExpiresAt: date(r.leaseExpiresAt),
    queueZombieTimeoutSeconds: num(r.queueZombieTimeoutSeconds),
  };
}

export function toStartedJob(r: Row, codec: RowCodec): StartedJob {
  const job = toClaimedJob(r, codec) as StartedJob; // one object per row, not a copy
  job.attempt = num(r.attempt);
  return job;
}

// A claim's rows as the driver returned them (pg's rowMode 'array': an array of values per row, `columns` their
// names) straight to StartedJobs, as toStartedJob maps camelRows' objects, without that object per job in between
// (a claim of 500 made 500 objects of 15 properties only to read them once).
export function toStartedJobs(
  columns: readonly string[],
  rows: readonly (readonly unknown[])[],
  codec: RowCodec,
): StartedJob[] {
  const names = columns.map(camelName);
  const at = (name: string): number => names.indexOf(name); // -1: no such column, read as undefined
  const id = at('jobId');
  const leaseId = at('leaseId');
  const queue = at('queue');
  const type = at('type');
  const payload = at('payload');
  const priority = at('priority');
  const attempts = at('attempts');
  const maxAttempts = at('maxAttempts');
  const queueMaxAttempts = at('queueMaxAttempts');
  const idempotencyKey = at('idempotencyKey');
  const tags = at('tags');
  const runAt = at('runAt');
  const createdAt = at('createdAt');
  const leaseExpiresAt = at('leaseExpiresAt');
  const attempt = at('attempt');
  const queueZombieTimeoutSeconds = at('queueZombieTimeoutSeconds');
  const out = new Array<StartedJob>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const v = rows[i]!;
    out[i] = {
      id: String(v[id]),
      leaseId: lowerLease(v[leaseId]),
      queue: String(v[queue]),
      type: String(v[type]),
      payload: codec.payload(v[payload]),
      priority: num(v[priority]),
      attempts: num(v[attempts]),
      maxAttempts: numOrNull(v[maxAttempts]),
      queueMaxAttempts: num(v[queueMaxAttempts]),
      idempotencyKey: textOrNull(v[idempotencyKey]),
      tags: codec.tags(v[tags]),
      runAt: date(v[runAt]),
      createdAt: date(v[createdAt]),
      leaseExpiresAt: date(v[leaseExpiresAt]),
      queueZombieTimeoutSeconds: num(v[queueZombieTimeoutSeconds]),
      attempt: num(v[attempt]),
    };
  }
  return out;
}

export function toQueueSettings(r: Row): QueueSettings {
  return {
    name: String(r.name),
    paused: Boolean(r.paused),
    maxConcurrency: numOrNull(r.maxConcurrency),
    zombieTimeoutSeconds: num(r.zombieTimeoutSeconds),
    zombiePolicy: r.zombiePolicy as QueueSettings['zombiePolicy'],
    maxAttempts: num(r.maxAttempts),
    archiveRetentionSeconds: num(r.archiveRetentionSeconds),
    dlqRetentionSeconds: num(r.dlqRetentionSeconds),
    metricsRetentionSeconds: num(r.metricsRetentionSeconds),
  };
}

export function toJobRecord(r: Row, codec: RowCodec): JobRecord {
  return {
    id: String(r.jobId),
    location: r.location as JobRecord['location'],
    queue: String(r.queue),
    type: String(r.type),
    payload: codec.payload(r.payload),
    priority: num(r.priority),
    state: r.state as JobRecord['state'],
    attempts: num(r.attempts),
    idempotencyKey: textOrNull(r.idempotencyKey),
    tags: codec.tags(r.tags),
    createdAt: date(r.createdAt),
    runAt: dateOrNull(r.runAt),
    startedAt: dateOrNull(r.startedAt),
    finishedAt: dateOrNull(r.finishedAt),
    durationMs: numOrNull(r.durationMs),
    reason: textOrNull(r.reason) as DlqReason | null,
    lastError: textOrNull(r.lastError),
    cancelRequested: Boolean(r.cancelRequested),
    leaseId: leaseOrNull(r.leaseId),
    workerId: textOrNull(r.workerId),
    progress: r.progress === null || r.progress === undefined ? null : (codec.payload(r.progress) as JobProgress),
    ...(r.result === null || r.result === undefined ? {} : { result: codec.payload(r.result) }),
    ...jobLog(r.logs, codec),
    maxAttempts: numOrNull(r.maxAttempts),
    leaseExpiresAt: dateOrNull(r.leaseExpiresAt),
    heartbeatAt: dateOrNull(r.heartbeatAt),
  };
}

export function toJobLink(r: Row, codec: RowCodec): JobLink {
  return {
    relation: r.relation === 'child' ? 'child' : 'parent',
    id: String(r.jobId),
    type: textOrNull(r.type),
    queue: textOrNull(r.queue),
    location: textOrNull(r.location) as JobLink['location'],
    state: textOrNull(r.state) as JobLink['state'],
    outcome: textOrNull(r.outcome) as JobLink['outcome'],
    ...(r.result === null || r.result === undefined ? {} : { result: codec.payload(r.result) }),
  };
}

// The log column holds ctx.log lines and recorded attempts (shared/jobs/attempts.ts): each goes to its own field,
// and a field with nothing in it is left out.
function jobLog(raw: unknown, codec: RowCodec): Pick<JobRecord, 'logs' | 'attemptLog'> {
  if (raw === null || raw === undefined) return {};
  const { lines, attempts } = splitJobLog(codec.payload(raw));
  return {
    ...(lines.length ? { logs: lines as JobLogLine[] } : {}),
    ...(attempts.length ? { attemptLog: attempts } : {}),
  };
}

export function toQueueStats(r: Row): QueueStats {
  return {
    queue: String(r.queue),
    pending: num(r.pending),
    due: num(r.due),
    dueExact: Boolean(r.dueExact),
    fetched: num(r.fetched),
    processing: num(r.processing),
    waiting: num(r.waiting),
    dlq: num(r.dlq),
    oldestDueAgeMs: numOrNull(r.oldestDueAgeMs),
    succeeded: num(r.succeeded),
    failed: num(r.failed),
    retried: num(r.retried),
    cancelled: num(r.cancelled),
    zombie: num(r.zombie),
    resurrected: num(r.resurrected),
  };
}

export function toMetricBucket(r: Row): MetricBucket {
  return {
    bucketStart: date(r.bucketStart),
    queue: String(r.queue),
    outcome: r.outcome as MetricBucket['outcome'],
    reason: String(r.reason),
    count: num(r.count),
    totalDurationMs: num(r.totalDurationMs),
    maxDurationMs: num(r.maxDurationMs),
  };
}

export function toRescueResult(r: Row): RescueResult {
  return {
    releasedFetched: num(r.releasedFetched),
    retried: num(r.retried),
    deadLettered: num(r.deadLettered),
    expired: num(r.expired),
  };
}

// Schedule state rows (camelCased column names) from either engine.
export function toScheduleState(r: Record<string, unknown>): ScheduleState {
  const date = (v: unknown) => (v === null || v === undefined ? null : v instanceof Date ? v : new Date(String(v)));
  return {
    name: String(r.name),
    paused: Boolean(r.paused),
    lastTick: date(r.lastTick),
    resumedAt: date(r.resumedAt),
    lastJobId: r.lastJobId === null || r.lastJobId === undefined ? null : String(r.lastJobId),
    updatedAt: date(r.updatedAt)!,
  };
}

export function toFireResult(rows: Record<string, unknown>[]): FireResult {
  const status = String(rows[0]?.status ?? 'lost') as FireStatus;
  const jobs = rows
    .filter((r) => r.jobId !== null && r.jobId !== undefined)
    .map((r) => ({ id: String(r.jobId), duplicate: Boolean(r.duplicate) }));
  return { status, jobs };
}

// The scan bound of a search (JobSearch.scanRows): archive and DLQ searches always have one, with or without text
// (a type or queue filter that matches nothing would otherwise walk the whole table); hot searches none.
// The given bound was checked at the contract boundary (STORE_ARGUMENT_CHECKS.searchJobs).
export function searchScanRows(s: JobSearch): number | null {
  return s.scanRows ?? (s.location !== 'hot' ? TEXT_SEARCH_SCAN_ROWS : null);
}

// search_jobs rows to a page: a trailing 'scan_bound' row carries the lowest id the bounded scan examined.
export function toJobPage(rows: Row[], limit: number, toRecord: (r: Row) => JobRecord): JobPage {
  const last = rows.length > 0 ? camelKeys(rows[rows.length - 1]!) : undefined;
  const bound = last?.location === 'scan_bound';
  const floor = bound ? String(last.jobId) : null;
  const items = (bound ? rows.slice(0, -1) : rows).map(toRecord);
  if (items.length === limit) return { items, nextAfterId: items[items.length - 1]!.id, scanBounded: false };
  return { items, nextAfterId: floor, scanBounded: floor !== null };
}

// search_audit rows to a page: a trailing row with a null id carries scanFloor, the lowest id the bounded scan
// examined (the same scheme as toJobPage).
export function toAuditPage(rows: Row[], limit: number): AuditPage {
  const all = rows.map(camelKeys);
  const last = all[all.length - 1];
  const bound = last !== undefined && (last.id === null || last.id === undefined);
  const floor = bound ? String(last.scanFloor) : null;
  const items = (bound ? all.slice(0, -1) : all).map(toAuditRecord);
  if (items.length === limit) return { items, nextBeforeId: items[items.length - 1]!.id, scanBounded: false };
  return { items, nextBeforeId: floor, scanBounded: floor !== null };
}

function toAuditRecord(r: Row): AuditRecord {
  return {
    id: String(r.id),
    at: date(r.at),
    principalId: textOrNull(r.principalId),
    principalName: textOrNull(r.principalName),
    tenantId: textOrNull(r.tenantId),
    appId: textOrNull(r.appId),
    authMethod: String(r.authMethod) as AuditRecord['authMethod'],
    channel: String(r.channel) as AuditRecord['channel'],
    role: textOrNull(r.role) as AuditRecord['role'],
    requiredRole: String(r.requiredRole) as AuditRecord['requiredRole'],
    httpMethod: String(r.httpMethod),
    action: String(r.action),
    target: textOrNull(r.target),
    summary: textOrNull(r.summary),
    outcome: String(r.outcome) as AuditRecord['outcome'],
    status: numOrNull(r.status),
    reason: textOrNull(r.reason),
    affected: numOrNull(r.affected),
    requestId: textOrNull(r.requestId),
    clientIp: textOrNull(r.clientIp),
    finishedAt: dateOrNull(r.finishedAt),
  };
}

export function toCountResult(r: Row): CountResult {
  return { matched: num(r.matched), exact: Boolean(r.exact), asOf: dateOrNull(r.asOf)! };
}

// No rows: an empty DLQ (or queue), so no groups; otherwise each row carries the totals of the whole read.
export function toDlqGroupPage(rows: Row[]): DlqGroupPage {
  return {
    groups: rows.map((r) => ({
      reason: String(r.reason) as DlqReason,
      type: String(r.type),
      queue: String(r.queue),
      jobs: num(r.jobs),
      newestFailedAt: dateOrNull(r.newestFailedAt)!,
    })),
    totalGroups: num(rows[0]?.totalGroups),
    totalJobs: num(rows[0]?.totalJobs),
    more: rows[0]?.more === true || rows[0]?.more === 1,
  };
}

// A list_workers row: the registration columns are null for a lease holder with no registry row (registered false).
export function toWorkerInfo(r: Row): WorkerInfo {
  const registered = r.registered === true || r.registered === 1;
  const served = r.queuesServed === null || r.queuesServed === undefined ? null : String(r.queuesServed);
  return {
    ...toWorkerLeases(r),
    registration: registered
      ? {
          host: String(r.host),
          instanceId: r.instanceId === null || r.instanceId === undefined ? null : String(r.instanceId),
          pid: num(r.pid),
          appVersion: String(r.appVersion),
          buildId: r.buildId === null || r.buildId === undefined ? null : String(r.buildId),
          queues: served === null ? null : served === '' ? [] : served.split(','),
          concurrency: num(r.concurrency),
          jobsDone: num(r.jobsDone),
          startedAt: dateOrNull(r.startedAt)!,
          lastSeenAt: dateOrNull(r.lastSeenAt)!,
        }
      : null,
  };
}

export function toWorkerLeases(r: Row): WorkerLeases {
  return {
    workerId: String(r.workerId),
    jobsHeld: num(r.jobsHeld),
    processing: num(r.processing),
    queues: r.queues === null || r.queues === undefined ? [] : String(r.queues).split(','),
    oldestHeartbeatAt: dateOrNull(r.oldestHeartbeatAt),
    newestHeartbeatAt: dateOrNull(r.newestHeartbeatAt),
    earliestLeaseExpiresAt: dateOrNull(r.earliestLeaseExpiresAt),
    asOf: dateOrNull(r.asOf)!,
  };
}

// heartbeat_many's rows (one per job that beat: its id, lease, cancel flag and the queue's zombie timeout, under the
// engine's column names in that order) as heartbeatMany's answer: per ref in the order given, 'ok' with what its
// row says when a row has its job and lease, else 'lease_lost' (the engine fenced it, or the ref can hold no lease).
export function toBeatsByRef(
  refs: readonly LeaseRef[],
  rows: readonly Row[],
  [id, lease, cancel, zombie]: readonly [string, string, string, string],
): (HeartbeatResult & { jobId: JobId })[] {
  const beat = new Map<string, Row>();
  for (const r of rows) beat.set(`${String(r[id])}/${String(r[lease]).toLowerCase()}`, r);
  return refs.map((ref) => {
    const r = beat.get(`${ref.jobId}/${String(ref.leaseId).toLowerCase()}`);
    return r
      ? {
          jobId: ref.jobId,
          status: 'ok' as const,
          cancelRequested: Boolean(r[cancel]),
          zombieTimeoutSeconds: Number(r[zombie]),
        }
      : { jobId: ref.jobId, status: 'lease_lost' as const, cancelRequested: false };
  });
}

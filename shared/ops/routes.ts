// The ops route table: every route, its schemas, whether it is destructive, and its handler.
import type {
  DlqReason,
  HotState,
  JobCount,
  JobRecord,
  JobStore,
  PurgeTarget,
  QueueSettingsPatch,
} from '../jobs/contract.js';
import type { JobRequest } from '../jobs/typedEnqueue.js';
import { purgeInBatches } from '../jobs/maintenance.js';
import { LIMITS } from '../jobs/validate.js';
import { DEFAULT_MAX_ATTEMPTS, jobTimeline } from '../jobs/attempts.js';
import { IdempotencyConflictError } from '../jobs/contract.js';
import { OpsError, conflict, invalid, notFound } from './errors.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';
import { transferRoutes } from './transferRoutes.js';
import { openApiDocument } from './openapi.js';
import { handlerRoutes } from './handlerRoutes.js';
import { auditRoutes } from './auditRoutes.js';
import { watchRoutes } from './watchRoutes.js';
import { appVersion } from '../config/appVersion.js';

type EnqueueJobInput = import('zod').output<typeof s.enqueueJob>;

function toEnqueueRequest(j: EnqueueJobInput): JobRequest {
  return {
    ...(j.queue !== undefined ? { queue: j.queue } : {}),
    type: j.type,
    ...(j.payload !== undefined ? { payload: j.payload } : {}),
    ...(j.priority !== undefined ? { priority: j.priority } : {}),
    ...(j.delayMs !== undefined ? { delayMs: j.delayMs } : {}),
    ...(j.runAt !== undefined ? { runAt: new Date(j.runAt) } : {}),
    ...(j.tags !== undefined ? { tags: j.tags } : {}),
    ...(j.idempotencyKey !== undefined ? { idempotencyKey: j.idempotencyKey } : {}),
    ...(j.maxAttempts !== undefined ? { maxAttempts: j.maxAttempts } : {}),
    ...(j.expiresAt !== undefined ? { expiresAt: new Date(j.expiresAt) } : {}),
    ...(j.after !== undefined ? { after: j.after } : {}),
    ...(j.onFailure !== undefined ? { onFailure: j.onFailure } : {}),
  };
}

// 409 naming the key and the field; not the holder's id (the caller may not be the one who enqueued it).
export function idempotencyConflict(err: IdempotencyConflictError, count: number): OpsError {
  return new OpsError('conflict', err.message, err.field(count), {
    idempotencyKey: err.idempotencyKey,
    queue: err.queue,
    type: err.type,
  });
}

// Describes where a job is, for 409 bodies after a lost race.
function where(job: JobRecord): Record<string, unknown> {
  return { id: job.id, location: job.location, state: job.state };
}

// The retention settings and the rows each one purges.
const RETENTIONS = [
  ['archiveRetentionSeconds', 'archive'],
  ['dlqRetentionSeconds', 'dlq'],
  ['metricsRetentionSeconds', 'metrics'],
] as const satisfies readonly (readonly [keyof QueueSettingsPatch, PurgeTarget])[];
// Previews count in SQL up to this many rows (keel.count_jobs); past it they say "at least".
export const PREVIEW_COUNT_CAP = 100_000;

function dlqCount(f: {
  queue?: string;
  type?: string;
  reason?: DlqReason;
  failedAfter?: Date;
  failedBefore?: Date;
}): Omit<JobCount, 'cap'> {
  return {
    location: 'dlq',
    ...(f.queue ? { queue: f.queue } : {}),
    ...(f.type ? { type: f.type } : {}),
    ...(f.reason ? { reason: f.reason } : {}),
    ...(f.failedAfter ? { from: f.failedAfter } : {}),
    ...(f.failedBefore ? { to: f.failedBefore } : {}),
  };
}

// Why a previewed id was not acted on: where the job is now (another location, another state, or gone).
async function whereNow(
  store: JobStore,
  id: string,
): Promise<{ id: string; why: 'not_in_dlq' | 'gone' | 'key_held'; location: string | null; state: string | null }> {
  const job = await store.getJob(id);
  if (!job) return { id, why: 'gone', location: null, state: null };
  // Still in the DLQ after a resurrect: its idempotency key is held by a hot job of its queue and type.
  if (job.location === 'dlq') return { id, why: 'key_held', location: 'dlq', state: job.state };
  return { id, why: 'not_in_dlq', location: job.location, state: job.state };
}

// Characters of a payload's JSON text shown in list and search results, and of a last error.
export const PAYLOAD_PREVIEW_CHARS = 200;
export const LAST_ERROR_PREVIEW_CHARS = 1000;

// A job as list and search results show it: the payload's size and first characters instead of the payload.
export function jobSummary(job: JobRecord): Record<string, unknown> {
  const { payload, lastError, ...rest } = job;
  const text = payload === undefined ? 'null' : JSON.stringify(payload);
  return {
    ...rest,
    payloadBytes: Buffer.byteLength(text, 'utf8'),
    payloadPreview: text.length > PAYLOAD_PREVIEW_CHARS ? text.slice(0, PAYLOAD_PREVIEW_CHARS) : text,
    payloadTruncated: text.length > PAYLOAD_PREVIEW_CHARS,
    lastError:
      lastError !== null && lastError.length > LAST_ERROR_PREVIEW_CHARS
        ? `${lastError.slice(0, LAST_ERROR_PREVIEW_CHARS)}…`
        : lastError,
  };
}

export const jobRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/health',
    operationId: 'health',
    summary: 'Liveness of the store and the storage queues',
    tag: 'health',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'healthy', 503: 'store or storage unreachable' },
    output: s.out.health,
    async handle({ rt }) {
      const started = Date.now();
      const [store, storage] = await Promise.all([
        rt.store.listQueues().then(
          () => true,
          () => false,
        ),
        rt.queues.ping(),
      ]);
      const ok = store && storage;
      return {
        status: ok ? 200 : 503,
        body: {
          status: ok ? 'ok' : 'degraded',
          version: appVersion(), // package.json's, as the worker registry reports it
          engine: rt.store.engine,
          checks: { store, storage },
          transfers: rt.transfers ? 'configured' : 'not configured',
          workerId: rt.workerId,
          elapsedMs: Date.now() - started,
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/stats',
    operationId: 'stats',
    summary: 'Per-queue counters and lag',
    tag: 'stats',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'per-queue stats and totals' },
    output: s.out.stats,
    async handle({ rt }) {
      const queues = await rt.store.stats();
      const totals = {
        pending: 0,
        fetched: 0,
        processing: 0,
        waiting: 0,
        dlq: 0,
        succeeded: 0,
        failed: 0,
        retried: 0,
        cancelled: 0,
        zombie: 0,
        resurrected: 0,
      };
      for (const q of queues) for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += q[k];
      return { body: { queues, totals } };
    },
  }),
  route({
    method: 'GET',
    path: '/metrics',
    operationId: 'metrics',
    summary: 'Per-minute metric buckets (count, total and max duration) by queue, outcome and reason',
    tag: 'stats',
    role: 'reader',
    query: s.metricsQuery,
    responses: { 200: 'metric buckets' },
    output: s.out.metrics,
    async handle({ rt, query }) {
      const buckets = await rt.store.metrics(query.windowMinutes, query.queue);
      return { body: { windowMinutes: query.windowMinutes, queue: query.queue ?? null, buckets } };
    },
  }),
  route({
    method: 'GET',
    path: '/queues',
    operationId: 'listQueues',
    summary: 'Queue settings',
    tag: 'queues',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'queues' },
    output: s.out.queues,
    async handle({ rt }) {
      return { body: { items: await rt.store.listQueues() } };
    },
  }),
  route({
    method: 'GET',
    path: '/queues/:name',
    operationId: 'getQueue',
    summary: 'One queue: settings and stats',
    tag: 'queues',
    role: 'reader',
    params: s.nameParams,
    query: s.emptyQuery,
    responses: { 200: 'queue', 404: 'no such queue' },
    output: s.out.queue,
    async handle({ rt, params }) {
      const q = await rt.store.getQueue(params.name);
      if (!q) throw notFound(`queue "${params.name}"`);
      const stats = (await rt.store.stats()).find((x) => x.queue === params.name) ?? null;
      return { body: { ...q, stats } };
    },
  }),
  ...(['pause', 'resume'] as const).map((action) =>
    route({
      method: 'POST',
      path: `/queues/:name/${action}`,
      operationId: `${action}Queue`,
      summary: action === 'pause' ? 'Pause a queue: no new claims until resumed' : 'Resume a paused queue',
      tag: 'queues',
      role: 'operator',
      params: s.nameParams,
      query: s.emptyQuery,
      body: s.emptyBody,
      responses: {
        200: 'queue settings after the change (created: the queue had no settings yet and now has them)',
        403: 'operator role missing',
      },
      output: s.out.queueSettingsChanged,
      // A queue exists from its first use: an enqueue or a settings change. So a queue can be paused (or limited)
      // before its first job arrives, e.g. 'default' on a fresh install.
      async handle({ rt, params, log }) {
        const created = !(await rt.store.getQueue(params.name));
        const settings = await rt.store.updateQueue(params.name, { paused: action === 'pause' });
        // Its due jobs' messages were acknowledged while it was paused: post them now, not at the dispatcher's tick.
        if (action === 'resume') await rt.postDue([params.name], log);
        return { body: { ...settings, created } };
      },
    }),
  ),
  route({
    method: 'PATCH',
    path: '/queues/:name',
    operationId: 'updateQueue',
    summary: 'Change queue limits: max concurrency, attempts, zombie timeout and policy, retention',
    tag: 'queues',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.queuePatch,
    responses: {
      200: 'queue settings after the change (created: the queue had no settings yet and now has them)',
      400: 'invalid setting',
      403: 'operator role missing',
      409: 'a lowered retention would make the next maintenance pass delete rows: the body\'s preview counts them per target; repeat with "confirmPurge": true',
    },
    output: s.out.queueSettingsChanged,
    async handle({ rt, params, body, log }) {
      const { confirmPurge, ...patch } = body as QueueSettingsPatch & { confirmPurge?: boolean };
      const current = await rt.store.getQueue(params.name);
      if (current && !confirmPurge) {
        // Lowering a retention deletes, at the next maintenance pass, every row older than the new one: show how
        // many first (counted in SQL), and change nothing until the caller confirms.
        const preview: Record<string, { from: number; to: number; wouldPurge: number; capped: boolean }> = {};
        let total = 0;
        for (const [field, target] of RETENTIONS) {
          const to = patch[field];
          if (to === undefined || to >= current[field]) continue;
          const cutoff = new Date(Date.now() - to * 1000);
          let n: number;
          let capped = false;
          if (target === 'metrics') {
            // Buckets are kept at most the longest metrics window: count those older than the new cutoff.
            const buckets = await rt.store.metrics(LIMITS.metricsWindowMinutes, params.name);
            n = buckets.filter((b) => b.bucketStart < cutoff).length;
          } else {
            const counted = await rt.store.countJobs({
              location: target,
              queue: params.name,
              to: cutoff,
              cap: PREVIEW_COUNT_CAP,
            });
            n = counted.matched;
            capped = !counted.exact;
          }
          preview[target] = { from: current[field], to, wouldPurge: n, capped };
          total += n;
        }
        if (total > 0)
          throw new OpsError(
            'conflict',
            `lowering the retention makes the next maintenance pass delete ${Object.entries(preview)
              .filter(([, p]) => p.wouldPurge > 0)
              .map(([t, p]) => `${p.wouldPurge}${p.capped ? '+' : ''} ${t} rows`)
              .join(
                ', ',
              )} of queue "${params.name}"; nothing was changed. Repeat with "confirmPurge": true to go ahead`,
            'confirmPurge',
            { preview },
          );
      }
      const settings = await rt.store.updateQueue(params.name, patch);
      // More room than before: jobs held back by the limit may run now; post their messages.
      const limit = (q: { maxConcurrency: number | null } | null) => q?.maxConcurrency ?? Infinity;
      if (!settings.paused && limit(settings) > limit(current)) await rt.postDue([params.name], log);
      return { body: { ...settings, created: !current } };
    },
  }),
  route({
    method: 'POST',
    path: '/jobs',
    operationId: 'enqueue',
    summary: `Enqueue one job, or {"jobs": [...]} (up to ${LIMITS.batchJobs}): the row is written, then its message posted`,
    tag: 'jobs',
    role: 'producer',
    query: s.emptyQuery,
    body: s.enqueueBody,
    responses: {
      201: 'enqueued (duplicate: a hot job of the same queue and type held the idempotency key, with the same payload)',
      400: 'invalid job: unknown type, payload failing the handler\'s schema, wrong queue, a key starting with "schedule:" (reserved for the scheduler) (the field is named; nothing is enqueued)',
      409: 'an idempotency key is held by a hot job of the same queue and type with another payload (the key and field are named; nothing is enqueued)',
      413: 'body too large',
    },
    output: s.out.enqueue,
    async handle({ rt, body, log }) {
      const many = 'jobs' in body;
      const jobs = many ? body.jobs : [body];
      // Type, payload schema and queue are checked for every job before any is written (400 naming the field).
      const results = await rt
        .enqueueAndPost(jobs.map(toEnqueueRequest), log, { prefix: (i) => (many ? `jobs[${i}]` : '') })
        .catch((err: unknown) => {
          if (err instanceof IdempotencyConflictError) throw idempotencyConflict(err, many ? jobs.length : 1);
          throw err;
        });
      return { status: 201, body: many ? { jobs: results } : results[0] };
    },
  }),
  route({
    method: 'GET',
    path: '/jobs',
    operationId: 'searchJobs',
    summary:
      'Search hot, archive or DLQ jobs by queue, type, tag, state, reason, priority, idempotency key, time range and text; newest or oldest first, keyset paging; payload previews (the full payload: GET /jobs/{id})',
    tag: 'jobs',
    role: 'reader',
    query: s.jobSearchQuery,
    responses: {
      200: 'a page of jobs with payload previews; pass nextAfterId as afterId for the next page (scanBounded: the archive/DLQ search examined scanRows rows and stopped; more may match below nextAfterId)',
      400: 'a filter outside its bounds (the field is named), e.g. scanRows above 100,000 or on a hot search',
    },
    output: s.out.jobPage,
    async handle({ rt, query }) {
      if (query.state && query.location !== 'hot') throw invalid('state', 'state filters hot jobs only (location=hot)');
      if (query.reason && query.location !== 'dlq')
        throw invalid('reason', 'reason filters DLQ jobs only (location=dlq)');
      if (query.from && query.to && query.from > query.to) throw invalid('from', 'must not be after "to"');
      if (query.scanRows !== undefined && query.location === 'hot')
        throw invalid('scanRows', 'bounds archive and DLQ searches only (location=archive|dlq)');
      const page = await rt.store.searchJobs({
        location: query.location,
        ...(query.queue ? { queue: query.queue } : {}),
        ...(query.type ? { type: query.type } : {}),
        ...(query.tag ? { tag: query.tag } : {}),
        ...(query.state ? { state: query.state } : {}),
        ...(query.reason ? { reason: query.reason } : {}),
        ...(query.from ? { from: new Date(query.from) } : {}),
        ...(query.to ? { to: new Date(query.to) } : {}),
        ...(query.text ? { text: query.text } : {}),
        ...(query.priority !== undefined ? { priority: query.priority } : {}),
        ...(query.idempotencyKey ? { idempotencyKey: query.idempotencyKey } : {}),
        ...(query.order === 'oldest' ? { order: 'oldest' as const } : {}),
        ...(query.afterId ? { afterId: query.afterId } : {}),
        ...(query.scanRows !== undefined ? { scanRows: query.scanRows } : {}),
        limit: query.limit,
      });
      // Previews only: a page of full payloads (500 x up to KEEL_MAX_PAYLOAD_BYTES) could exhaust the instance
      // (review F7). The full payload is on GET /jobs/{id}.
      return { body: { location: query.location, ...page, items: page.items.map(jobSummary) } };
    },
  }),
  route({
    method: 'GET',
    path: '/jobs/:id',
    operationId: 'getJob',
    summary: 'One job wherever it is (hot, archive or DLQ)',
    tag: 'jobs',
    role: 'reader',
    params: s.idParams,
    query: s.emptyQuery,
    responses: { 200: 'the job', 404: 'no such job' },
    output: s.out.job,
    async handle({ rt, params }) {
      const job = await rt.store.getJob(params.id);
      if (!job) throw notFound(`job ${params.id}`);
      // "attempt n of max": the job's own limit, else its handler's, else its queue's (as zombie rescue decides).
      const attemptLimit =
        job.maxAttempts ??
        rt.registry.maxAttemptsByType()[job.type] ??
        (await rt.store.getQueue(job.queue))?.maxAttempts ??
        DEFAULT_MAX_ATTEMPTS;
      // A flow's job: its parents (with their results) and children; both empty for a job in no flow.
      const links = await rt.store.jobLinks(params.id);
      return {
        body: {
          ...job,
          timeline: jobTimeline(job),
          attemptLimit,
          parents: links.filter((l) => l.relation === 'parent').map(({ relation: _r, ...l }) => l),
          children: links.filter((l) => l.relation === 'child').map(({ relation: _r, result: _x, ...l }) => l),
        },
      };
    },
  }),
  route({
    method: 'POST',
    path: '/jobs/:id/cancel',
    operationId: 'cancelJob',
    summary: 'Cancel a hot job: pending jobs go to the DLQ (cancelled) at once, running ones are asked to stop',
    tag: 'jobs',
    role: 'operator',
    params: s.idParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: {
      200: 'cancelled or cancel_requested',
      403: 'operator role missing',
      404: 'no such job',
      409: 'the job already finished',
    },
    output: s.out.cancel,
    async handle({ rt, params }) {
      const result = await rt.store.cancel(params.id);
      if (result === 'not_found') {
        const job = await rt.store.getJob(params.id);
        if (!job) throw notFound(`job ${params.id}`);
        throw conflict(`job ${params.id} is no longer hot (it is in ${job.location})`, { job: where(job) });
      }
      if (result === 'cancelled') return { body: { id: params.id, result, outcome: 'dlq_cancelled' } };
      // Running: the flag is set. A handler running in this process is stopped now; one elsewhere at its next
      // heartbeat. Either way the job ends in the DLQ as 'cancelled', even if its handler finishes first.
      const stoppedNow = rt.processor.requestCancel(params.id);
      return {
        body: {
          id: params.id,
          result,
          outcome: 'dlq_cancelled',
          stoppedNow,
          message: stoppedNow
            ? 'the handler was running here and has been told to stop; the job ends in the DLQ as cancelled'
            : `the handler runs on another instance and stops at its next heartbeat (every ${rt.settings.KEEL_HEARTBEAT_MS} ms); the job ends in the DLQ as cancelled, even if it finishes first`,
        },
      };
    },
  }),
  route({
    method: 'POST',
    path: '/dlq/:id/resurrect',
    operationId: 'resurrectJob',
    summary:
      'Move one DLQ job back to hot (pending, attempts reset) and post its message. Operator only: it runs the job, and its side effects, again',
    tag: 'dlq',
    role: 'operator',
    // Resurrecting re-runs side effects and can undo an operator's cancel: the same role as the other moves.
    params: s.idParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: {
      200: 'resurrected',
      403: 'operator role missing',
      404: 'no such job',
      409: 'the job is not in the DLQ',
    },
    output: s.out.resurrected,
    async handle({ rt, params, log }) {
      const ids = await rt.store.resurrect([params.id]);
      if (!ids.includes(params.id)) {
        const job = await rt.store.getJob(params.id);
        if (!job) throw notFound(`job ${params.id}`);
        throw conflict(`job ${params.id} is not in the DLQ (it is in ${job.location})`, { job: where(job) });
      }
      const posted = await rt.postJobs(ids, log);
      return { body: { id: params.id, resurrected: true, posted: posted === 1 } };
    },
  }),
  route({
    method: 'POST',
    path: '/dlq/resurrect',
    operationId: 'resurrectByFilter',
    summary:
      'Resurrect DLQ jobs: preview a filter (dryRun=true, the default: the ids, up to limit, and an exact or "at least" count), then confirm with the preview\'s ids (dryRun=false, ids): exactly those are resurrected, and the answer says per id what changed meanwhile',
    tag: 'dlq',
    role: 'operator',
    query: s.emptyQuery,
    body: s.resurrectFilterBody,
    responses: {
      200: 'ids resurrected (or that would be, on a dry run); previewed ids skipped, and matches that arrived after the preview (not resurrected)',
      400: 'dryRun=false without ids, or a filter outside its bounds (the field is named)',
      403: 'operator role missing',
    },
    output: s.out.resurrectedMany,
    async handle({ rt, body, log }) {
      if (body.failedAfter && body.failedBefore && body.failedAfter > body.failedBefore)
        throw invalid('failedAfter', 'must not be after failedBefore');
      const filter = {
        ...(body.queue ? { queue: body.queue } : {}),
        ...(body.type ? { type: body.type } : {}),
        ...(body.reason ? { reason: body.reason as DlqReason } : {}),
        ...(body.failedAfter ? { failedAfter: new Date(body.failedAfter) } : {}),
        ...(body.failedBefore ? { failedBefore: new Date(body.failedBefore) } : {}),
      };
      const filtered = Object.keys(filter).length > 0;
      if (body.dryRun) {
        if (body.ids) {
          // A selection's preview: which of these ids are in the DLQ now.
          const found = await Promise.all(body.ids.map((id: string) => rt.store.getJob(id)));
          const ids = found.filter((j): j is JobRecord => j?.location === 'dlq').map((j) => j.id);
          return { body: { dryRun: true, count: ids.length, ids, posted: 0 } };
        }
        const preview = await rt.store.resurrectByFilter({ ...filter, limit: body.limit, dryRun: true });
        const matched = await rt.store.countJobs({ ...dlqCount(filter), cap: PREVIEW_COUNT_CAP });
        return {
          body: {
            dryRun: true,
            count: preview.ids.length,
            ids: preview.ids,
            posted: 0,
            matched: { count: matched.matched, exact: matched.exact },
          },
        };
      }
      if (!body.ids)
        throw invalid(
          'ids',
          "a resurrect acts on exactly what was previewed: send the preview's ids (POST with dryRun=true lists them)",
        );
      const ids = await rt.store.resurrect(body.ids);
      const moved = new Set(ids);
      const skipped = await Promise.all(
        body.ids.filter((id: string) => !moved.has(id)).map((id: string) => whereNow(rt.store, id)),
      );
      // Matches of the filter now that the preview did not list: reported, never acted on.
      let arrivedAfterPreview: { count: number; exact: boolean; ids: string[] } | undefined;
      if (filtered) {
        const previewed = new Set<string>(body.ids);
        const now = await rt.store.resurrectByFilter({ ...filter, limit: LIMITS.resurrectJobs, dryRun: true });
        const fresh = now.ids.filter((id) => !previewed.has(id));
        arrivedAfterPreview = {
          count: fresh.length,
          exact: now.ids.length < LIMITS.resurrectJobs,
          ids: fresh.slice(0, 50),
        };
      }
      const posted = await rt.postJobs(ids, log);
      return {
        body: {
          dryRun: false,
          count: ids.length,
          ids,
          posted,
          skipped,
          ...(arrivedAfterPreview ? { arrivedAfterPreview } : {}),
        },
      };
    },
  }),
  route({
    method: 'POST',
    path: '/jobs/cancel',
    operationId: 'cancelMany',
    summary:
      'Cancel hot jobs by filter or selection: preview (dryRun=true, the default: the ids, up to limit, and an exact or "at least" count), then confirm with the preview\'s ids (dryRun=false, ids): exactly those are cancelled, and the answer says per id what happened',
    tag: 'jobs',
    role: 'operator',
    query: s.emptyQuery,
    body: s.cancelManyBody,
    responses: {
      200: 'per id: would be / was cancelled (pending) or asked to stop (running), or not hot any more',
      400: 'dryRun=false without ids (the field is named)',
      403: 'operator role missing',
    },
    output: s.out.cancelledMany,
    async handle({ rt, body }) {
      const filter = {
        ...(body.queue ? { queue: body.queue } : {}),
        ...(body.type ? { type: body.type } : {}),
        ...(body.tag ? { tag: body.tag } : {}),
        ...(body.state ? { state: body.state as HotState } : {}),
      };
      const filtered = Object.keys(filter).length > 0;
      if (body.dryRun) {
        if (body.ids) {
          const rows = await Promise.all(
            body.ids.map(async (id: string) => {
              const j = await rt.store.getJob(id);
              if (!j) return { id, outcome: 'gone' as const, location: null, state: null };
              if (j.location !== 'hot')
                return { id, outcome: 'not_hot' as const, location: j.location, state: j.state };
              return {
                id,
                outcome: j.state === 'processing' ? ('would_request_cancel' as const) : ('would_cancel' as const),
                location: j.location,
                state: j.state,
              };
            }),
          );
          const ids = rows.filter((r) => r.outcome.startsWith('would')).map((r) => r.id);
          return { body: { dryRun: true, count: ids.length, ids, rows } };
        }
        const page = await rt.store.searchJobs({
          location: 'hot',
          ...filter,
          limit: Math.min(body.limit, LIMITS.searchJobs),
        });
        const matched = await rt.store.countJobs({ location: 'hot', ...filter, cap: PREVIEW_COUNT_CAP });
        const rows = page.items.map((j) => ({
          id: j.id,
          outcome: j.state === 'processing' ? ('would_request_cancel' as const) : ('would_cancel' as const),
          location: j.location,
          state: j.state,
        }));
        return {
          body: {
            dryRun: true,
            count: rows.length,
            ids: rows.map((r) => r.id),
            rows,
            matched: { count: matched.matched, exact: matched.exact },
          },
        };
      }
      if (!body.ids)
        throw invalid(
          'ids',
          "a cancel acts on exactly what was previewed: send the preview's ids (POST with dryRun=true lists them)",
        );
      const rows = [];
      for (const id of body.ids as string[]) {
        const result = await rt.store.cancel(id);
        if (result === 'not_found') {
          const now = await whereNow(rt.store, id);
          rows.push({
            id,
            outcome: now.why === 'gone' ? ('gone' as const) : ('not_hot' as const),
            location: now.location,
            state: now.state,
          });
          continue;
        }
        if (result === 'cancel_requested') rt.processor.requestCancel(id);
        rows.push({ id, outcome: result, location: result === 'cancelled' ? 'dlq' : 'hot', state: null });
      }
      let arrivedAfterPreview: { count: number; exact: boolean; ids: string[] } | undefined;
      if (filtered) {
        const previewed = new Set<string>(body.ids);
        const page = await rt.store.searchJobs({ location: 'hot', ...filter, limit: LIMITS.searchJobs });
        const fresh = page.items.map((j) => j.id).filter((id) => !previewed.has(id));
        arrivedAfterPreview = { count: fresh.length, exact: page.nextAfterId === null, ids: fresh.slice(0, 50) };
      }
      const ids = rows.filter((r) => r.outcome === 'cancelled' || r.outcome === 'cancel_requested').map((r) => r.id);
      return {
        body: { dryRun: false, count: ids.length, ids, rows, ...(arrivedAfterPreview ? { arrivedAfterPreview } : {}) },
      };
    },
  }),
  route({
    method: 'POST',
    path: '/purge',
    operationId: 'purge',
    summary:
      'Delete archive rows, DLQ rows or metric buckets older than an instant, in bounded batches. dryRun defaults to true',
    tag: 'dlq',
    role: 'operator',
    query: s.emptyQuery,
    body: s.purgeBody,
    responses: { 200: 'rows deleted (or, on a dry run, counted)', 403: 'operator role missing' },
    output: s.out.purge,
    async handle({ rt, body }) {
      const olderThan = new Date(body.olderThan);
      if (olderThan.getTime() > Date.now()) throw invalid('olderThan', 'must not be in the future');
      const target = body.target as PurgeTarget;
      const queue = body.queue ?? null;
      if (body.dryRun) {
        if (target === 'metrics') {
          const windowMinutes = LIMITS.metricsWindowMinutes;
          const buckets = await rt.store.metrics(windowMinutes, body.queue);
          const older = buckets.filter((b) => b.bucketStart < olderThan).length;
          return {
            body: {
              dryRun: true,
              target,
              queue,
              olderThan: body.olderThan,
              matched: older,
              note: `counts buckets of the last ${windowMinutes} minutes only`,
            },
          };
        }
        // Counted in SQL, bounded: exact up to PREVIEW_COUNT_CAP rows, else "at least".
        const counted = await rt.store.countJobs({
          location: target,
          to: olderThan,
          cap: PREVIEW_COUNT_CAP,
          ...(body.queue ? { queue: body.queue } : {}),
        });
        return {
          body: {
            dryRun: true,
            target,
            queue,
            olderThan: body.olderThan,
            matched: counted.matched,
            capped: !counted.exact,
            asOf: counted.asOf.toISOString(),
            ...(counted.exact ? {} : { note: `counted up to ${PREVIEW_COUNT_CAP} rows; more match` }),
          },
        };
      }
      // The set a purge deletes can only shrink after its preview: it is bound by olderThan, which is not in the
      // future, and rows enter the archive and the DLQ stamped with the time they enter.
      const run = await purgeInBatches(rt.store, target, queue, olderThan, body.batchSize, body.maxBatches);
      const leftMeanwhile =
        body.previewMatched !== undefined && !run.mayHaveMore
          ? Math.max(0, body.previewMatched - run.deleted)
          : undefined;
      return {
        body: {
          dryRun: false,
          target,
          queue,
          olderThan: body.olderThan,
          ...run,
          ...(leftMeanwhile !== undefined ? { leftMeanwhile } : {}),
        },
      };
    },
  }),
];

export function allRoutes(): OpsRoute<any, any, any>[] {
  const routes: OpsRoute<any, any, any>[] = [
    ...jobRoutes,
    ...watchRoutes,
    ...handlerRoutes,
    ...transferRoutes,
    ...auditRoutes,
  ];
  routes.push(
    route({
      method: 'GET',
      path: '/openapi.json',
      operationId: 'openapi',
      summary: 'This API as an OpenAPI 3.1 document',
      tag: 'health',
      role: 'reader',
      query: s.emptyQuery,
      responses: { 200: 'OpenAPI document' },
      output: s.out.openapi,
      async handle() {
        return { body: openApiDocument(routes) };
      },
    }),
  );
  return routes;
}

// Job routes: enqueue, search, read one job, cancel one job or many (preview, then confirm with the preview's ids).
import type { HotState, JobRecord } from '../jobs/contract.js';
import { IdempotencyConflictError } from '../jobs/contract.js';
import type { JobRequest } from '../jobs/typedEnqueue.js';
import { LIMITS } from '../jobs/validate.js';
import { DEFAULT_MAX_ATTEMPTS, jobTimeline } from '../jobs/attempts.js';
import { OpsError, conflict, invalid, notFound } from './errors.js';
import { PREVIEW_COUNT_CAP, where, whereNow } from './preview.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

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
      // As instants: as text, an offset or a fraction (10:00+05:00, 00:00:00.5Z) is judged by its spelling.
      if (query.from && query.to && Date.parse(query.from) > Date.parse(query.to))
        throw invalid('from', 'must not be after "to"');
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
    async handle({ rt, params, log }) {
      const holders = await rt.slotHolders([params.id], log);
      const result = await rt.store.cancel(params.id);
      if (result === 'not_found') {
        const job = await rt.store.getJob(params.id);
        if (!job) throw notFound(`job ${params.id}`);
        // Hot again: resurrected after the cancel looked (it was in the DLQ then), a lost race named as one.
        if (job.location === 'hot')
          throw conflict(`job ${params.id} was not hot when the cancel looked; it is now: cancel it again`, {
            job: where(job),
          });
        throw conflict(`job ${params.id} is no longer hot (it is in ${job.location})`, { job: where(job) });
      }
      if (result === 'cancelled') {
        // A fetched job of a limited queue held a slot: handed on now, as a finish's is (not at the dispatcher's tick).
        const queue = holders.get(params.id);
        if (queue !== undefined) await rt.handOnSlots([queue], log);
        return { body: { id: params.id, result, outcome: 'dlq_cancelled' } };
      }
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
    async handle({ rt, body, log }) {
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
      const holders = await rt.slotHolders(body.ids as string[], log);
      // One store call, a short transaction per chunk of ids (CANCEL_MANY_CHUNK), not one per id.
      const results = new Map((await rt.store.cancelMany(body.ids as string[])).map((r) => [r.jobId, r.result]));
      const rows = [];
      for (const id of body.ids as string[]) {
        const result = results.get(id) ?? 'not_found';
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
      // The fetched jobs of limited queues among those cancelled held slots: handed on now, as finishes' are.
      const freed = rows.flatMap((r) => (r.outcome === 'cancelled' && holders.has(r.id) ? [holders.get(r.id)!] : []));
      if (freed.length > 0) await rt.handOnSlots(freed, log);
      const ids = rows.filter((r) => r.outcome === 'cancelled' || r.outcome === 'cancel_requested').map((r) => r.id);
      return {
        body: { dryRun: false, count: ids.length, ids, rows, ...(arrivedAfterPreview ? { arrivedAfterPreview } : {}) },
      };
    },
  }),
];

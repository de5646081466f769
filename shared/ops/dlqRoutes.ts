// Dead-letter routes: resurrect one job, or many by filter (preview, then confirm with the preview's ids), and the
// dead letters grouped in SQL by reason, type and queue. (The DLQ's purge is in purgeRoutes.ts.)
import { z } from 'zod';
import type { DlqReason, JobCount, JobRecord } from '../jobs/contract.js';
import { LIMITS } from '../jobs/validate.js';
import { conflict, invalid, notFound } from './errors.js';
import { PREVIEW_COUNT_CAP, where, whereNow } from './preview.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

const qInt = (min: number, max: number, def: number) =>
  z
    .string()
    .regex(/^\d+$/, 'must be a non-negative integer')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .default(def)
    .meta({ type: 'integer', minimum: min, maximum: max, description: `integer, default ${def}`, pattern: undefined });

const groupsQuery = z.strictObject({
  queue: s.name.optional(),
  offset: qInt(0, 1_000_000, 0),
  limit: qInt(1, LIMITS.dlqGroups, 50),
  // The newest dead letters counted: the read stays bounded however large the DLQ grows.
  scanRows: qInt(1, LIMITS.countCap, PREVIEW_COUNT_CAP),
});

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

export const dlqRoutes: OpsRoute<any, any, any>[] = [
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
      409: 'the job is not in the DLQ, or a hot job of its queue and type holds its idempotency key (why: key_held; it stays in the DLQ)',
    },
    output: s.out.resurrected,
    async handle({ rt, params, log }) {
      const ids = await rt.store.resurrect([params.id]);
      if (!ids.includes(params.id)) {
        const job = await rt.store.getJob(params.id);
        if (!job) throw notFound(`job ${params.id}`);
        // Still in the DLQ: a hot job of its queue and type holds its idempotency key (the store leaves it there;
        // the bulk route's key_held). It read "not in the DLQ (it is in dlq)".
        if (job.location === 'dlq' && job.idempotencyKey !== null)
          throw conflict(
            `job ${params.id} stays in the DLQ: a hot job of queue "${job.queue}" and type "${job.type}" holds its idempotency key ${JSON.stringify(job.idempotencyKey)}; resurrect it once that job has finished`,
            { job: where(job), why: 'key_held' },
          );
        // Without a key it can only have come to the DLQ after the resurrect looked: a lost race, named as one.
        if (job.location === 'dlq')
          throw conflict(
            `job ${params.id} was not in the DLQ when the resurrect looked; it is now: resurrect it again`,
            {
              job: where(job),
            },
          );
        throw conflict(`job ${params.id} is not in the DLQ (it is in ${job.location})`, { job: where(job) });
      }
      // The flow children its failure dead-lettered come back with it (waiting for it again): counted apart, and
      // posted apart, so posted says whether this job's own message went out.
      const flowChildren = ids.filter((id) => id !== params.id);
      const posted = await rt.postJobs([params.id], log);
      if (flowChildren.length) await rt.postJobs(flowChildren, log);
      return {
        body: { id: params.id, resurrected: true, posted: posted === 1, count: ids.length, ids, flowChildren },
      };
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
      // As instants, not as text (an offset or a fraction would be judged by its spelling).
      if (body.failedAfter && body.failedBefore && Date.parse(body.failedAfter) > Date.parse(body.failedBefore))
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
      // ids: every row this call moved DLQ -> hot, exactly (the store answers only those): the previewed ids it
      // resurrected and the flow children their failures had dead-lettered, which come back with them. Those are
      // counted apart (fromPreview + skipped = the previewed ids), so no reader takes a child for a skipped id.
      const ids = await rt.store.resurrect(body.ids);
      const moved = new Set(ids);
      const previewed = new Set<string>(body.ids);
      const flowChildren = ids.filter((id) => !previewed.has(id));
      const skipped = await Promise.all(
        body.ids.filter((id: string) => !moved.has(id)).map((id: string) => whereNow(rt.store, id)),
      );
      // Matches of the filter now that the preview did not list: reported, never acted on.
      let arrivedAfterPreview: { count: number; exact: boolean; ids: string[] } | undefined;
      if (filtered) {
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
          fromPreview: ids.length - flowChildren.length,
          flowChildren,
          posted,
          skipped,
          ...(arrivedAfterPreview ? { arrivedAfterPreview } : {}),
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/dlq/groups',
    operationId: 'dlqGroups',
    summary:
      'Dead letters grouped by reason, type and queue, counted in SQL over the newest scanRows dead letters (or those of one queue); largest first, paged by offset; more: older dead letters were not counted',
    tag: 'dlq',
    role: 'reader',
    query: groupsQuery,
    responses: {
      200: 'a page of groups with the number of groups and of dead letters counted (lower bounds when more is true)',
    },
    async handle({ rt, query }) {
      const page = await rt.store.dlqGroups(query.queue ?? null, query.offset, query.limit, query.scanRows);
      return {
        body: {
          queue: query.queue ?? null,
          offset: query.offset,
          limit: query.limit,
          totalGroups: page.totalGroups,
          totalJobs: page.totalJobs,
          scanRows: query.scanRows,
          more: page.more,
          items: page.groups.map((g) => ({ ...g, newestFailedAt: g.newestFailedAt.toISOString() })),
        },
      };
    },
  }),
];

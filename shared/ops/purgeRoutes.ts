// POST /purge: delete archive rows, DLQ rows or metric buckets older than an instant, in bounded batches, after a
// preview (both next to the maintenance pass's purge: previewPurge, purgeInBatches in shared/jobs/maintenance.ts).
import type { PurgeTarget } from '../jobs/contract.js';
import { previewPurge, purgeInBatches, storeClock } from '../jobs/maintenance.js';
import { invalid } from './errors.js';
import { PREVIEW_COUNT_CAP } from './preview.js';
import { route } from './router.js';
import * as s from './schemas.js';

export const purgeRoute = route({
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
    // In the future of the store's clock, which wrote every finished_at, failed_at and bucket minute it compares,
    // not this host's: a host running behind refused a cutoff of "now", one running ahead let a future one through.
    if (olderThan > (await storeClock(rt.store))) throw invalid('olderThan', 'must not be in the future');
    const target = body.target as PurgeTarget;
    const queue = body.queue ?? null;
    if (body.dryRun) {
      // Counted in SQL, bounded: exact up to PREVIEW_COUNT_CAP rows, else "at least".
      const preview = await previewPurge(rt.store, target, queue, olderThan, PREVIEW_COUNT_CAP);
      const counted = { dryRun: true, target, queue, olderThan: body.olderThan, matched: preview.matched };
      if (preview.kind === 'buckets')
        return { body: { ...counted, note: `counts buckets of the last ${preview.windowMinutes} minutes only` } };
      return {
        body: {
          ...counted,
          capped: !preview.exact,
          asOf: preview.asOf.toISOString(),
          ...(preview.exact ? {} : { note: `counted up to ${PREVIEW_COUNT_CAP} rows; more match` }),
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
});

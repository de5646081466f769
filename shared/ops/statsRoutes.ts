// GET /stats and GET /metrics: per-queue counters and lag, and the per-minute metric buckets. (The workers and
// warnings, tagged stats too, are in watchRoutes.ts.)
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

export const statsRoutes: OpsRoute<any, any, any>[] = [
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
];

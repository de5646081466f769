// Example flow — continuations and fan-in (docs/jobs.md, "Flows"). A daily sales report in three steps:
//   example.report.prepare   the parent: fixes the day's exchange rate, once, and returns it;
//   example.report.region    one child per region, run after the parent: reads the rate from its parent's result
//                         (ctx.parents()), reports its progress (ctx.progress), logs its total with the job
//                         (ctx.log) and returns it (the job's result);
//   example.report.merge     the fan-in job, run after every region (onFailure 'run': also when some failed), sums the
//                         totals of the regions that succeeded and names the ones that did not.
// startDailyReport() enqueues the whole flow in one transaction (enqueueFlow): all of it, or nothing.
import { defineHandler, enqueueFlow, FatalError, z, type JobLink } from '../../shared/handlerApi.js';

const day = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a date (YYYY-MM-DD)');

export const prepare = defineHandler('example.report.prepare', {
  payload: z.strictObject({ day, currency: z.string().length(3) }),
  queue: 'reports',
  async handle(payload) {
    // A real report would fetch the rate here; the example derives one so the flow is deterministic.
    return { day: payload.day, currency: payload.currency, rate: 1.1 };
  },
});

export const region = defineHandler('example.report.region', {
  payload: z.strictObject({ region: z.string().min(1), sales: z.array(z.number()) }),
  queue: 'reports',
  async handle(payload, ctx) {
    const [parent] = await ctx.parents();
    const rate = (parent?.result as { rate?: number } | undefined)?.rate;
    if (typeof rate !== 'number') throw new FatalError('the prepare step left no rate: nothing to convert with');
    // Progress as it goes (throttled by the processor, shown on the job's page): a long region reports how far it is.
    let sum = 0;
    for (const [i, s] of payload.sales.entries()) {
      sum += s;
      if ((i + 1) % 1000 === 0) ctx.progress({ done: i + 1, total: payload.sales.length, note: payload.region });
    }
    ctx.progress({ done: payload.sales.length, total: payload.sales.length, note: payload.region });
    const total = sum * rate;
    ctx.log.info('region totalled', { region: payload.region, total });
    return { region: payload.region, total: Math.round(total * 100) / 100 };
  },
});

// What the fan-in job makes of its parents: the regions' totals and the regions that failed.
export function mergeRegions(parents: JobLink[]): { total: number; regions: number; failed: string[] } {
  let total = 0;
  let regions = 0;
  const failed: string[] = [];
  for (const p of parents) {
    const r = p.result as { region?: string; total?: number } | undefined;
    if (p.outcome === 'succeeded' && typeof r?.total === 'number') {
      total += r.total;
      regions++;
    } else failed.push(`job ${p.id}`);
  }
  return { total: Math.round(total * 100) / 100, regions, failed };
}

export const merge = defineHandler('example.report.merge', {
  payload: z.strictObject({ day }),
  queue: 'reports',
  async handle(payload, ctx) {
    const summary = mergeRegions(await ctx.parents());
    if (summary.failed.length) ctx.log.warn('regions missing from the report', { failed: summary.failed });
    return { day: payload.day, ...summary };
  },
});

// Enqueues one day's report as a flow: prepare, then every region, then merge.
export async function startDailyReport(reportDay: string, sales: Record<string, number[]>) {
  return enqueueFlow({
    parent: { type: prepare.type, payload: { day: reportDay, currency: 'EUR' }, idempotencyKey: `report:${reportDay}` },
    children: Object.entries(sales).map(([name, s]) => ({ type: region.type, payload: { region: name, sales: s } })),
    then: { type: merge.type, payload: { day: reportDay }, onFailure: 'run' },
  });
}

// Tests of the example flow (handlers/demo/report.ts) with the handler test kit: each step on its own, its parents
// given as ctx.parents() would return them.
import { describe, expect, it } from 'vitest';
import { merge, mergeRegions, prepare, region } from './report.js';
import { runHandler, startHandler } from '../../test/kit.js';
import type { JobLink } from '../../shared/handlerApi.js';

const link = (id: string, outcome: JobLink['outcome'], result?: unknown): JobLink => ({
  relation: 'parent',
  id,
  type: 'example.report.region',
  queue: 'reports',
  location: outcome === 'failed' ? 'dlq' : 'archive',
  state: outcome === 'failed' ? 'dead' : 'succeeded',
  outcome,
  ...(result === undefined ? {} : { result }),
});

describe('demo report flow', () => {
  it('prepare returns the rate its children read', async () => {
    const r = await runHandler(prepare, { day: '2026-12-01', currency: 'EUR' });
    expect(r).toMatchObject({ outcome: 'succeeded', result: { day: '2026-12-01', rate: 1.1 } });
  });

  it('a region converts with its parent result, and is fatal without one', async () => {
    const parents = [link('1', 'succeeded', { rate: 2 })];
    const run = startHandler(region, { region: 'north', sales: [1, 2.5] }, { parents });
    expect(await run.result).toMatchObject({ outcome: 'succeeded', result: { region: 'north', total: 7 } });
    expect(run.progress.at(-1)).toMatchObject({ done: 2, total: 2, note: 'north' });
    expect(run.logs).toContainEqual(expect.objectContaining({ level: 'info', message: 'region totalled' }));
    expect(await runHandler(region, { region: 'north', sales: [1] })).toMatchObject({
      outcome: 'dead_lettered',
      reason: 'fatal',
    });
  });

  it('merge sums the regions that succeeded and names the ones that failed', async () => {
    const parents = [link('2', 'succeeded', { region: 'north', total: 7 }), link('3', 'failed')];
    expect(mergeRegions(parents)).toEqual({ total: 7, regions: 1, failed: ['job 3'] });
    const r = await runHandler(merge, { day: '2026-12-01' }, { parents });
    expect(r).toMatchObject({ outcome: 'succeeded', result: { day: '2026-12-01', total: 7, failed: ['job 3'] } });
  });
});

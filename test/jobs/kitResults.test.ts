// The handler test kit reports what the processor stores: the result as the archive keeps it (or a fatal dead letter
// when it cannot be kept) and every progress value as checked.
import { describe, expect, it } from 'vitest';
import { defineHandler, z } from '../../shared/jobs/define.js';
import { runHandler, startHandler } from '../kit.js';

const build = defineHandler('kit.report', {
  payload: z.strictObject({ months: z.array(z.string()).min(1) }),
  async handle({ months }, ctx) {
    for (const [i, month] of months.entries()) ctx.progress({ done: i + 1, total: months.length, note: month });
    return { months: months.length, at: new Date('2030-01-01T00:00:00Z') };
  },
});

describe('test kit: results and progress', () => {
  it('resolves with the result as stored (JSON) and lists every progress value', async () => {
    const run = startHandler(build, { months: ['2030-01', '2030-02'] });
    expect(await run.result).toEqual({ outcome: 'succeeded', result: { months: 2, at: '2030-01-01T00:00:00.000Z' } });
    expect(run.progress).toEqual([
      { fraction: 0.5, done: 1, total: 2, note: '2030-01' },
      { fraction: 1, done: 2, total: 2, note: '2030-02' },
    ]);
  });

  it('dead-letters a result over the limit as fatal, as the processor does', async () => {
    const r = await runHandler(build, { months: ['2030-01'] }, { maxResultBytes: 10 });
    expect(r).toMatchObject({ outcome: 'dead_lettered', reason: 'fatal' });
    expect(r.message).toMatch(/result: is \d+ bytes of JSON; the limit is 10 bytes/);
  });

  it('a handler that returns nothing has no result', async () => {
    const none = defineHandler('kit.none', { async handle() {} });
    expect(await runHandler(none, undefined)).toEqual({ outcome: 'succeeded' });
  });
});

// 20 concurrent POST /api/ops/transfers/{name}/start of one transfer through the ops function, on the host's own
// wiring (journal pool of 4 connections): exactly one 202, nineteen 409 naming the open batch, nothing hangs,
// and every route still answers afterwards (issue 9, item 5: the journal used to wait on its own pool).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ops } from '../../functions/ops.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { createTestDatabase } from '../support/pg.js';
import { context, createTestRuntime, jsonOf, request, type TestRuntime } from './support.js';

let t: TestRuntime;
let source: pg.Pool;
let target: pg.Pool;
const TABLE = `create table public.items (id bigint primary key, name text not null)`;

beforeAll(async () => {
  const srcUrl = await createTestDatabase('fn_starts_src');
  const tgtUrl = await createTestDatabase('fn_starts_tgt');
  source = new pg.Pool({ connectionString: srcUrl, max: 2 });
  target = new pg.Pool({ connectionString: tgtUrl, max: 2 });
  for (const p of [source, target]) p.on('error', (err) => console.warn(`transferStarts test pool: ${err.message}`));
  await source.query(TABLE);
  await target.query(TABLE);
  await source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 300) n`);
  t = await createTestRuntime('fn_starts', {
    env: {
      FN_STARTS_SOURCE: srcUrl,
      FN_STARTS_TARGET: tgtUrl,
      KEEL_TRANSFERS: JSON.stringify([
        {
          name: 'items',
          source: { engine: 'postgres', connectionSetting: 'FN_STARTS_SOURCE', table: 'public.items' },
          target: { engine: 'postgres', connectionSetting: 'FN_STARTS_TARGET', table: 'public.items' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'id' },
            { source: 'name', target: 'name' },
          ],
          batchSize: 1000,
        },
      ]),
    },
  });
});

afterAll(async () => {
  await t?.close();
  await source?.end();
  await target?.end();
});

async function call(method: string, path: string, body?: unknown) {
  // Transfer writes need the operator role; reads are made with it too (a higher level grants the lower ones).
  const res = await ops(
    request(method, path, body === undefined ? { operator: true } : { body, operator: true }),
    context('ops'),
  );
  return { status: res.status ?? 200, body: jsonOf(res) };
}

function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>(
      (_r, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

describe('concurrent transfer starts', () => {
  it('20 at once: one 202, nineteen 409 naming the open batch; every route answers afterwards', async () => {
    const results = await bounded(
      Promise.all(Array.from({ length: 20 }, () => call('POST', 'transfers/items/start', {}))),
      30_000,
      '20 concurrent starts',
    );
    const statuses = results.map((r) => r.status).sort();
    expect(
      statuses,
      JSON.stringify(results.filter((r) => r.status !== 202 && r.status !== 409).map((r) => r.body)),
    ).toEqual([202, ...Array(19).fill(409)]);
    const created = results.find((r) => r.status === 202)!.body.batch;
    expect(created).toMatchObject({ state: 'extracting', rowCount: 300, boundary: { low: null, high: '300' } });
    for (const r of results.filter((x) => x.status === 409)) {
      expect(r.body).toMatchObject({
        error: 'conflict',
        code: 'open_batch_exists',
        detail: { batchId: created.batchId },
      });
    }
    // Only one batch exists and exactly one stage message was posted.
    expect(t.queues.take('keel-transfer-stage')).toEqual([{ batchId: created.batchId }]);

    // Every route still answers, in time, while and after the storm.
    const after = await bounded(
      Promise.all([
        call('GET', 'health'),
        call('GET', 'transfers'),
        call('GET', 'transfers/batches?transfer=items&limit=50'),
        call('GET', `transfers/batches/${created.batchId}`),
        call('POST', 'transfers/items/start', {}),
        call('POST', 'transfers/reconcile', { olderThanMs: 0, limit: 5 }),
        call('GET', 'stats'),
      ]),
      15_000,
      'routes after the storm',
    );
    expect(after.map((r) => r.status)).toEqual([200, 200, 200, 200, 409, 200, 200]);
    expect(after[2]!.body.items.map((b: { batchId: string }) => b.batchId)).toEqual([created.batchId]);
    expect(after[3]!.body.events.map((e: { event: string }) => e.event)).toEqual(['created', 'manifest_recorded']);

    // And the batch runs to the end.
    await transferStage({ batchId: created.batchId }, context('transferStage'));
    expect(t.queues.take('keel-transfer-apply')).toEqual([{ batchId: created.batchId }]);
    await transferApply({ batchId: created.batchId }, context('transferApply'));
    expect((await call('GET', `transfers/batches/${created.batchId}`)).body).toMatchObject({
      state: 'committed',
      appliedCount: 300,
    });
    expect((await target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(300);
  });
});

// The target table's unique key dropped between prepare and apply (an operator recreating the table without its
// primary key, or dropping it for a bulk load). prepare requires a unique index on exactly the key columns, but runs
// once per process and schema. Before, apply_batch took its fast path only with that index and otherwise merged
// anyway (MERGE needs no index): two applies of overlapping windows at once -- replays of overlapping ranges after
// the target was emptied, the documented use of replay -- each found the keys absent and inserted them, so the
// target held every key of the overlap twice, both batches committed. Now apply_batch requires the index under its
// table lock, as it requires the staged column types, and refuses the batch (target_incompatible, its window
// released, nothing written); the service checks the table again before the next batch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { insertSourceRows, LANE_WRITES_DDL, createLane, laneTransfer, setupDatabases, type Env } from './helpers.js';

describe('target key dropped between prepare and apply', () => {
  let env: Env;
  let slow: pg.Pool;
  beforeAll(async () => {
    env = await setupDatabases('tr_keydrop');
    await env.target.query(LANE_WRITES_DDL);
    // Each merged row costs 50 ms (the lane's write trigger): two applies of 5 and 10 rows overlap in time.
    slow = new pg.Pool({ connectionString: env.targetUrl, max: 4, options: '-c keel_test.write_delay=0.05' });
  });
  afterAll(async () => {
    await slow?.end();
    await env?.close();
  });

  it('two replays of overlapping ranges applied at once never write a key twice', async () => {
    const table = 'kd_r';
    await createLane(env, table, 5);
    const t = laneTransfer(table, { batchSize: 10 });
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, slow),
      }),
    });
    try {
      // Windows (, 5] and (5, 10], committed with the table's primary key in place (prepare checked it).
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
      await insertSourceRows(env.source, 6, 10, `public.${table}`);
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');

      // The target emptied and its key dropped; then the operator replays (, 5] and (, 10].
      await env.target.query(`truncate public.${table}`);
      await env.target.query(`delete from public.lane_writes where tbl = $1`, [table]);
      await env.target.query(`alter table public.${table} drop constraint ${table}_pkey`);
      const a = (await svc.replay(t.name, null, '5', false)).batch!;
      const b = (await svc.replay(t.name, null, '10', false)).batch!;
      expect((await svc.stage(a.batchId)).state).toBe('staged');
      expect((await svc.stage(b.batchId)).state).toBe('staged');
      const [ra, rb] = await Promise.all([svc.apply(a.batchId), svc.apply(b.batchId)]);

      const twice = await env.target.query<{ n: number }>(
        `select count(*)::int as n from (select id from public.${table} group by id having count(*) > 1) d`,
      );
      expect(twice.rows[0]!.n).toBe(0);
      // Refused, not applied: the target cannot tell a key's row apart without the key.
      for (const r of [ra, rb]) expect([r.state, r.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
      expect(ra.lastError).toMatch(/no unique index/);
      expect((await env.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(0);
      // The next batch is refused by prepare (checked again after the failure) until the key is back.
      const refused = await svc.replay(t.name, null, '5', false).catch((e: unknown) => e);
      expect(isTransferError(refused, 'target_incompatible')).toBe(true);

      await env.target.query(`alter table public.${table} add primary key (id)`);
      const again = (await svc.replay(t.name, null, '10', false)).batch!;
      expect((await svc.run(again.batchId)).state).toBe('committed');
      const rows = await env.target.query(
        `select count(*)::int as n, count(distinct id)::int as k from public.${table}`,
      );
      expect(rows.rows[0]).toEqual({ n: 10, k: 10 });
    } finally {
      await svc.close();
    }
  }, 30_000);
});

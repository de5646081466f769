// A replay racing the transfer's live window. A replay reads its range from the source as it is when it stages,
// and merges those rows when it applies. Under timestamp (or rowversion) windows an update moves a row out of its
// committed window into the next live one: before, the live window could carry the row's new version to the target
// while the replay still held the old one staged, and the replay's apply then wrote the old version back -- never
// corrected (the row's timestamp is in a committed window now). Now a replay and the transfer's own chain never have
// a batch open at once (the journal's insert, under the transfer's lock): the live window waits for the replay to
// end, and so carries the row's new version after it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTransferError } from '../../shared/transfer/errors.js';
import { insertSourceRows, makeService, ORDERS_DDL, ordersTransfer, setupDatabases, type Env } from './helpers.js';

describe('a replay racing the live window', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_replive');
    await env.source.query(ORDERS_DDL);
    await env.target.query(ORDERS_DDL);
    await insertSourceRows(env.source, 1, 10);
  });
  afterAll(async () => {
    await env?.close();
  });

  const rowsDiffer = async () => {
    const q = `select md5(coalesce(string_agg(t::text, '|' order by id), '')) as h from (select * from public.orders) t`;
    const [s, t] = await Promise.all([env.source.query(q), env.target.query(q)]);
    return s.rows[0].h !== t.rows[0].h;
  };

  it('timestamp windows: a row updated into the live window while a replay of its old window is staged ends current', async () => {
    const t = ordersTransfer('rl_ts', { boundary: { column: 'placed_at', kind: 'timestamp' }, batchSize: 5 });
    const svc = makeService(env, [t]);
    try {
      const windows: string[] = [];
      for (let b = await svc.tryCreateBatch(t.name); b; b = await svc.tryCreateBatch(t.name)) {
        expect((await svc.run(b.batchId)).state).toBe('committed');
        windows.push(b.boundary.high);
      }
      expect(windows).toHaveLength(2);

      // The operator replays the first window; it is staged with row 3 as it is now.
      const replay = (await svc.replay(t.name, null, windows[0]!, false)).batch!;
      expect((await svc.stage(replay.batchId)).state).toBe('staged');
      // Row 3 is updated at the source: its timestamp moves past the last committed window.
      await env.source.query(
        `update public.orders set customer = 'updated', placed_at = placed_at + interval '1 day' where id = 3`,
      );
      // The live window (the updated row) is refused while the replay is open, or runs now.
      const live = await svc.createBatch(t.name).catch((e: unknown) => e);
      if (isTransferError(live, 'open_batch_exists')) {
        expect((live.detail as { batchId: string }).batchId).toBe(replay.batchId);
      } else {
        expect((await svc.run((live as { batchId: string }).batchId)).state).toBe('committed');
      }
      expect((await svc.apply(replay.batchId)).state).toBe('committed');
      for (let b = await svc.tryCreateBatch(t.name); b; b = await svc.tryCreateBatch(t.name))
        expect((await svc.run(b.batchId)).state).toBe('committed');

      const row3 = await env.target.query(`select customer from public.orders where id = 3`);
      expect(row3.rows[0].customer).toBe('updated');
      expect(await rowsDiffer()).toBe(false);
    } finally {
      await svc.close();
    }
  }, 30_000);
});

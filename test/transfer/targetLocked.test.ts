// A target table held by another session (an operator's LOCK TABLE, a long report, a row of the window locked by
// an application): the transfer's bounded lock wait (KEEL_TRANSFER_LOCK_TIMEOUT_MS, PostgreSQL lock_timeout) runs
// out, nothing is written, and the batch stays open and retryable -- never failed, its window never released -- and
// commits once the lock is gone, every row written once. Staged flow (apply_batch) and direct apply (begin_direct),
// a table lock and a row lock.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import { pgTransferPoolConfig } from '../../shared/transfer/timeouts.js';
import {
  createLane,
  FAULT_TEST_TIMEOUTS,
  insertSourceRows,
  LANE_WRITES_DDL,
  laneProblems,
  laneTransfer,
  setupDatabases,
  type Env,
} from './helpers.js';

describe('a target table locked by another session', () => {
  let env: Env;
  let target: pg.Pool;
  beforeAll(async () => {
    env = await setupDatabases('tr_locked');
    await env.target.query(LANE_WRITES_DDL);
    target = new pg.Pool(pgTransferPoolConfig(env.targetUrl, { ...FAULT_TEST_TIMEOUTS, lockMs: 300 }, 3));
  });
  afterAll(async () => {
    await target?.end();
    await env?.close();
  });

  const cases = [
    { name: 'lk_apply_tbl', direct: false, lock: 'table' },
    { name: 'lk_direct_tbl', direct: true, lock: 'table' },
    { name: 'lk_apply_row', direct: false, lock: 'row' },
  ] as const;
  for (const c of cases) {
    it(`${c.direct ? 'direct apply' : 'apply'}, a ${c.lock} lock: retryable while held, committed once, after`, async () => {
      await createLane(env, c.name, 20);
      const t = laneTransfer(c.name, { batchSize: 40 });
      const svc = new TransferService({
        journal: new PostgresTransferJournal(env.control),
        transfers: [t],
        directApply: c.direct,
        connect: (tc) => ({
          source: new PostgresTransferSource(tc, env.source),
          target: new PostgresTransferTarget(tc, target),
        }),
      });
      // The first window committed; the second one (rows 21..40) meets the lock.
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
      await insertSourceRows(env.source, 21, 40, `public.${c.name}`);
      const v = await svc.createBatch(t.name);
      const side = new pg.Client({ connectionString: env.targetUrl });
      await side.connect();
      await side.query('begin');
      if (c.lock === 'table') await side.query(`lock table public.${c.name} in access exclusive mode`);
      // A key of the window written, not yet committed, by another session: the apply waits on that row.
      else
        await side.query(
          `insert into public.${c.name} (id, customer, amount, placed_at, flag, note, payload)
           select 30, customer, amount, placed_at, flag, note, payload from public.${c.name} where id = 20`,
        );
      const held = await svc.run(v.batchId);
      expect(held.state).not.toBe('failed');
      expect(held.state).not.toBe('committed');
      expect(held.retryable).toBe(true);
      const rec = await svc.getBatch(v.batchId);
      expect(rec!.lastErrorCode).toBe('55P03'); // lock_not_available, noted
      // Again while held: still open and retryable (the window is not released).
      expect((await svc.run(v.batchId)).retryable).toBe(true);
      await side.query('rollback');
      await side.end();
      const done = await svc.run(v.batchId);
      expect(done.state).toBe('committed');
      expect(await laneProblems(env, c.name, 40)).toEqual([]);
      await svc.close();
    });
  }
});

// An abandon whose journal move to failed is lost after the target committed the final fence (the journal's
// connection cut, found by test/transfer/chaos.test.ts): the batch stays open in the journal, and no apply of it can
// ever commit. Before, every run of it counted an attempt, was refused by the fence (attempt_fenced), reconciled "not
// applied" back to staged and was retried again, for ever (attempt 157 in the chaos run), holding the transfer's one
// open batch so that nothing else moved. Now the target says the fence is final (try_claim 'not_applied_final'), and
// the first step that asks -- an apply's reconcile, or maintenance's -- finishes the abandon: failed, window released,
// and the next batch covers the window.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createLane, LANE_WRITES_DDL, laneProblems, laneTransfer, setupDatabases, type Env } from './helpers.js';

describe('an abandon whose move to failed was lost after the final fence committed', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_abandon_lost');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  for (const via of ['apply', 'maintenance'] as const) {
    it(`${via} finds the final fence and fails the batch; the next batch moves the window once`, async () => {
      const table = `al_${via}`;
      await createLane(env, table, 30);
      const t = laneTransfer(table, { batchSize: 30, chunkSize: 10 });
      const journal = new PostgresTransferJournal(env.control);
      const svc = new TransferService({
        journal,
        transfers: [t],
        directApply: false,
        connect: (tc) => ({
          source: new PostgresTransferSource(tc, env.source),
          target: new PostgresTransferTarget(tc, env.target),
        }),
      });
      const created = await svc.createBatch(table);
      expect((await svc.stage(created.batchId)).state).toBe('staged');

      // The abandon: the target commits the final fence, then the journal's move to failed is lost.
      const transition = journal.transition.bind(journal);
      let cut = false;
      journal.transition = async (id, from, to, patch, event, detail) => {
        if (to === 'failed' && !cut) {
          cut = true;
          throw new Error('Connection terminated unexpectedly');
        }
        return transition(id, from, to, patch, event, detail);
      };
      await expect(svc.abandon(created.batchId, 'operator gave up')).rejects.toThrow(/Connection terminated/);
      journal.transition = transition;
      const fence = await env.target.query(
        `select state, fenced_through::text as f from keel_transfer.completions where batch_id = $1`,
        [created.batchId],
      );
      expect(fence.rows).toEqual([{ state: 'fenced', f: '2147483647' }]);
      expect((await svc.getBatch(created.batchId))?.state).toBe('staged');

      // What production does next with the open batch: the apply step (a message, a resume), or maintenance.
      const v =
        via === 'apply'
          ? await svc.apply(created.batchId)
          : (await svc.reconcileStale(0, 10)).find((x) => x.batchId === created.batchId)!;
      expect(v).toMatchObject({ state: 'failed', lastErrorCode: 'invalid_state' });
      expect(v.lastError).toMatch(/final fence/);
      expect(v.attempts).toBeLessThanOrEqual(1);

      // The window was released: a new batch covers it and commits, every row written once.
      const next = await svc.createBatch(table);
      expect(next.boundary).toEqual(created.boundary);
      expect((await svc.run(next.batchId)).state).toBe('committed');
      expect(await laneProblems(env, table, 30)).toEqual([]);
      await svc.close();
    });
  }
});

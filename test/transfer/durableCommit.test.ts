// A target database whose default is synchronous_commit = off (a DBA's bulk-load setting): a commit returns before
// its WAL is flushed, and a crash of the target right after loses it. For an apply (or a direct apply) that loss is
// silent data loss: the journal has recorded the batch committed and moves on, while the target's rows and
// completion row are gone; for a fence, the window an abandon released could be applied again. (Seen with a crash
// restart, `pg_ctl restart -m immediate`, on a server with synchronous_commit off: test/transfer/serverRestart.test.ts,
// opt-in.) Every transaction that claims or fences a batch must therefore commit with synchronous_commit on,
// whatever the default. Checked where it is decided: a trigger on the completion rows records the setting in
// effect in the transaction that writes each one (claim, commit, fence), for the staged apply, the direct apply
// (bulk and the one-read row path's late claim) and reconcile's and abandon's fences.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import { pgTransferPoolConfig } from '../../shared/transfer/timeouts.js';
import {
  createLane,
  FAULT_TEST_TIMEOUTS,
  laneTransfer,
  LANE_WRITES_DDL,
  setupDatabases,
  sqlServerShapedSource,
  type Env,
} from './helpers.js';

describe('claims and fences commit durably on a target whose default is synchronous_commit = off', () => {
  let env: Env;
  let target: pg.Pool;
  beforeAll(async () => {
    env = await setupDatabases('tr_durable');
    await env.target.query(LANE_WRITES_DDL);
    const db = new URL(env.targetUrl).pathname.slice(1);
    await env.target.query(`alter database ${pg.escapeIdentifier(db)} set synchronous_commit = off`);
    await env.target.query(`create table public.commit_modes (batch_id uuid, state text, mode text);
      create function public.log_commit_mode() returns trigger language plpgsql as $$
      begin insert into public.commit_modes values (new.batch_id, new.state, current_setting('synchronous_commit')); return new; end $$;
      create trigger completions_mode after insert or update on keel_transfer.completions
        for each row execute function public.log_commit_mode();`);
    target = new pg.Pool(pgTransferPoolConfig(env.targetUrl, FAULT_TEST_TIMEOUTS, 3)); // sessions after the ALTER
    target.on('error', () => undefined);
  });
  afterAll(async () => {
    await target?.end();
    await env?.close();
  });

  function service(table: string, o: { direct: boolean; rows?: boolean }): TransferService {
    return new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [laneTransfer(table, { batchSize: 100, reconcileWaitMs: 100 })],
      directApply: o.direct,
      connect: (tc) => {
        const s = new PostgresTransferSource(tc, env.source);
        return {
          source: o.rows ? sqlServerShapedSource(s, { oneRead: true }) : s,
          target: new PostgresTransferTarget(tc, target),
        };
      },
    });
  }
  async function modes(batchId: string): Promise<string[]> {
    const r = await env.target.query<{ x: string }>(
      `select state || ':' || mode as x from public.commit_modes where batch_id = $1 order by ctid`,
      [batchId],
    );
    return r.rows.map((x) => x.x);
  }

  it('the sessions default to off (the premise)', async () => {
    expect((await target.query(`show synchronous_commit`)).rows[0].synchronous_commit).toBe('off');
  });

  it('staged apply, bulk direct apply, one-read direct apply: claim and commit with synchronous_commit on', async () => {
    for (const [i, o] of [{ direct: false }, { direct: true }, { direct: true, rows: true }].entries()) {
      const table = `dc_${i}`;
      await createLane(env, table, 20);
      const svc = service(table, o);
      const b = await svc.createBatch(table);
      expect((await svc.run(b.batchId)).state).toBe('committed');
      const m = await modes(b.batchId);
      expect(m.length).toBeGreaterThan(0);
      expect(m, JSON.stringify(o)).toEqual(m.map((x) => x.replace(/:.*/, ':on')));
      // Nothing else of the session changed: the next statement runs with the database's default again.
      expect((await target.query(`show synchronous_commit`)).rows[0].synchronous_commit).toBe('off');
    }
  });

  it("reconcile's fence and abandon's final fence commit with synchronous_commit on", async () => {
    const table = 'dc_fence';
    await createLane(env, table, 20);
    const svc = service(table, { direct: false });
    const b = await svc.createBatch(table);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    // An apply was counted (attempt 1) but never reached the target: reconcile fences it.
    await env.control.query(`update keel.transfer_batches set state = 'applying', attempts = 1 where batch_id = $1`, [
      b.batchId,
    ]);
    expect((await svc.reconcile(b.batchId)).state).toBe('staged');
    const { batch, abandoned } = await svc.abandonOnce(b.batchId, 'test');
    expect([batch.state, abandoned]).toEqual(['failed', true]);
    const m = await modes(b.batchId);
    expect(m).toEqual(['fenced:on', 'fenced:on']);
  });
});

// The target's statement timeout and the apply (PostgreSQL target). Keel's sessions set their own statement_timeout
// at connect (KEEL_TRANSFER_STATEMENT_TIMEOUT_MS, a startup parameter), which outranks a role's or a database's
// default: a short `ALTER DATABASE ... SET statement_timeout` cannot starve the apply. An apply that Keel's own
// timeout ends (a window too large for it, a table held by another session) is retried -- but the
// KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT-th time in a row the batch fails with code apply_timeout and an error naming the
// settings, its window released (a batch_failed event and alert), instead of being retried for ever (lastErrorCode
// 57014 at every tick, never converging). Staged flow and direct apply; the timeout is forced with a table lock held
// for longer than the statement timeout (and shorter than the lock timeout), so it is deterministic. A stage ended
// so is counted alike (stage_timeout). A cancel from outside (pg_cancel_backend: the same 57014) is not Keel's
// timeout and is never counted: the batch stays open and retryable however often it comes.
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

describe("the target's statement timeout and the apply", () => {
  let env: Env;
  let target: pg.Pool;
  // Keel's statement timeout far off (20 s): the steps around the one under test, which a loaded machine could
  // otherwise slow past 300 ms (a stage timed out twice is failed too).
  let relaxed: pg.Pool;
  beforeAll(async () => {
    env = await setupDatabases('tr_apply_timeout');
    await env.target.query(LANE_WRITES_DDL);
    // Keel's statement timeout well under its lock timeout: a held table ends the apply at the statement timeout.
    target = new pg.Pool(
      pgTransferPoolConfig(
        env.targetUrl,
        { ...FAULT_TEST_TIMEOUTS, statementMs: 300, lockMs: 20_000, queryMs: 25_000 },
        3,
      ),
    );
    relaxed = new pg.Pool(pgTransferPoolConfig(env.targetUrl, FAULT_TEST_TIMEOUTS, 3));
  });
  afterAll(async () => {
    await relaxed?.end();
    await target?.end();
    await env?.close();
  });

  const service = (t: ReturnType<typeof laneTransfer>, pool: pg.Pool, direct: boolean, statementTimeoutMs = 300) =>
    new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: direct,
      applyTimeoutLimit: 2,
      statementTimeoutMs, // the pool's: KEEL_TRANSFER_STATEMENT_TIMEOUT_MS
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, pool),
      }),
    });

  it("a database's default statement_timeout of 1 ms does not reach the apply (Keel's own is set at connect)", async () => {
    await createLane(env, 'at_dbdefault', 20);
    const t = laneTransfer('at_dbdefault', { batchSize: 40 });
    const db = new URL(env.targetUrl).pathname.slice(1);
    await env.target.query(`alter database "${db}" set statement_timeout = '1ms'`);
    const pool = new pg.Pool(pgTransferPoolConfig(env.targetUrl, FAULT_TEST_TIMEOUTS, 2));
    const svc = service(t, pool, false);
    try {
      const probe = await pool.query(`select current_setting('statement_timeout') as v`);
      expect(probe.rows[0].v).toBe('20s'); // Keel's, not the database's 1ms
      expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
    } finally {
      await env.target.query(`alter database "${db}" reset statement_timeout`);
      await svc.close();
      await pool.end();
    }
    expect(await laneProblems(env, 'at_dbdefault', 20)).toEqual([]);
  });

  for (const direct of [false, true]) {
    it(`${direct ? 'direct apply' : 'apply'} ended by the statement timeout twice in a row: failed apply_timeout, window released`, async () => {
      const name = direct ? 'at_direct' : 'at_staged';
      await createLane(env, name, 20);
      const t = laneTransfer(name, { batchSize: 40 });
      const svc = service(t, target, direct);
      const easy = service(t, relaxed, direct, FAULT_TEST_TIMEOUTS.statementMs);
      expect((await easy.run((await easy.createBatch(t.name)).batchId)).state).toBe('committed');
      await insertSourceRows(env.source, 21, 40, `public.${name}`);
      const v = await easy.createBatch(t.name);
      if (!direct) expect((await easy.stage(v.batchId)).state).toBe('staged');
      const side = new pg.Client({ connectionString: env.targetUrl });
      await side.connect();
      await side.query('begin');
      await side.query(`lock table public.${name} in access exclusive mode`);
      const runOnce = () => (direct ? svc.run(v.batchId) : svc.apply(v.batchId));
      try {
        const first = await runOnce();
        expect(first.state).not.toBe('failed');
        expect(first.retryable).toBe(true);
        expect((await svc.getBatch(v.batchId))!.lastErrorCode).toBe('57014');
        const second = await runOnce();
        expect(second.state).toBe('failed');
        const rec = (await svc.getBatch(v.batchId))!;
        expect(rec.lastErrorCode).toBe('apply_timeout');
        expect(rec.lastError).toContain('KEEL_TRANSFER_STATEMENT_TIMEOUT_MS');
        expect(rec.lastError).toContain('2 times in a row');
      } finally {
        await side.query('rollback');
        await side.end();
      }
      // Its window released: a new batch covers it and commits once the table is free.
      const again = await easy.createBatch(t.name);
      expect((await easy.run(again.batchId)).state).toBe('committed');
      expect(await laneProblems(env, name, 40)).toEqual([]);
      await svc.close();
      await easy.close();
    });
  }

  // Holds `table` (access exclusive) in a side session of the target for the duration of `body`.
  async function holding<T>(table: string, body: () => Promise<T>): Promise<T> {
    const side = new pg.Client({ connectionString: env.targetUrl });
    await side.connect();
    try {
      await side.query('begin');
      await side.query(`lock table ${table} in access exclusive mode`);
      return await body();
    } finally {
      await side.query('rollback').catch(() => undefined);
      await side.end();
    }
  }

  it('a stage ended by the statement timeout twice in a row: failed stage_timeout, window released', async () => {
    await createLane(env, 'at_stage', 20);
    const t = laneTransfer('at_stage', { batchSize: 40 });
    const svc = service(t, target, false);
    const easy = service(t, relaxed, false, FAULT_TEST_TIMEOUTS.statementMs);
    expect((await easy.run((await easy.createBatch(t.name)).batchId)).state).toBe('committed');
    await insertSourceRows(env.source, 21, 40, 'public.at_stage');
    const v = await easy.createBatch(t.name);
    // The staging registry held: the stage waits for it (well within the lock timeout) until its statement timeout.
    await holding('keel_transfer.staged', async () => {
      await expect(svc.stage(v.batchId)).rejects.toMatchObject({ code: '57014' });
      expect((await svc.getBatch(v.batchId))!.state).toBe('extracting');
      const second = await svc.stage(v.batchId);
      expect(second.state).toBe('failed');
      const rec = (await svc.getBatch(v.batchId))!;
      expect(rec.lastErrorCode).toBe('stage_timeout');
      expect(rec.lastError).toContain('2 times in a row');
    });
    const again = await easy.createBatch(t.name);
    expect((await easy.run(again.batchId)).state).toBe('committed');
    expect(await laneProblems(env, 'at_stage', 40)).toEqual([]);
    await svc.close();
    await easy.close();
  });

  for (const direct of [false, true]) {
    it(`${direct ? 'direct apply' : 'apply'} cancelled from outside (pg_cancel_backend) three times: never counted, still retryable`, async () => {
      const name = direct ? 'at_cancel_direct' : 'at_cancel_staged';
      await createLane(env, name, 20);
      const t = laneTransfer(name, { batchSize: 40 });
      // Keel's statement timeout far off (20 s): each 57014 here is the cancel's.
      const svc = service(t, relaxed, direct, FAULT_TEST_TIMEOUTS.statementMs);
      try {
        expect((await svc.run((await svc.createBatch(t.name)).batchId)).state).toBe('committed');
        await insertSourceRows(env.source, 21, 40, `public.${name}`);
        const v = await svc.createBatch(t.name);
        if (!direct) expect((await svc.stage(v.batchId)).state).toBe('staged');
        await holding(`public.${name}`, async () => {
          for (let i = 0; i < 3; i++) {
            const running = direct ? svc.run(v.batchId) : svc.apply(v.batchId);
            running.catch(() => undefined);
            // The apply's backend waiting for the table: cancelled from outside.
            let cancelled = false;
            for (let tries = 0; !cancelled && tries < 500; tries++) {
              const r = await env.target.query(
                `select pg_cancel_backend(pid) as ok from pg_stat_activity
                  where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
              );
              cancelled = r.rows.some((x: { ok: boolean }) => x.ok);
              if (!cancelled) await new Promise((res) => setTimeout(res, 20));
            }
            expect(cancelled).toBe(true);
            const view = await running;
            expect(view.state, `cancel ${i + 1}`).not.toBe('failed');
            expect(view.retryable).toBe(true);
            expect((await svc.getBatch(v.batchId))!.lastErrorCode).toBe('57014');
          }
        });
        // Free again: the same batch commits.
        expect((await svc.run(v.batchId)).state).toBe('committed');
        expect(await laneProblems(env, name, 40)).toEqual([]);
      } finally {
        await svc.close();
      }
    });
  }
});

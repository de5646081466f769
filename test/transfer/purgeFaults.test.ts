// The purge after a commit is best effort (staged rows of a committed batch are garbage, not state). When it fails
// -- its session ended from a side connection while it waits for the staging table's lock, as an operator or a
// failover would -- the rows it left must not stay for good: a later purge of the table removes the rows of every
// committed batch, so the staging table empties again (and is truncated, not deleted row by row, from then on).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { FaultProxy } from '../support/faultProxy.js';
import {
  batchEvents,
  createLane,
  LANE_WRITES_DDL,
  laneProblems,
  laneTransfer,
  setupDatabases,
  sqlServerShapedSource,
  type Env,
} from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a purge cut after the commit', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_purge');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  it('leaves no staged rows of committed batches behind once the next batch is purged', async () => {
    const table = 'purged';
    await createLane(env, table, 90);
    const t = laneTransfer(table, { batchSize: 30, chunkSize: 10 });
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false, // the staged flow: stage, apply, purge
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    const staged = async () =>
      (await env.target.query(`select count(*)::int as n from keel_transfer.stg_${table}`)).rows[0].n as number;

    const first = await svc.createBatch(t.name); // prepare creates the staging table
    // A side session holds the staging table so that the purge waits for its lock; it is then terminated.
    const side = new pg.Client({ connectionString: env.targetUrl });
    await side.connect();
    await side.query(`begin; lock table keel_transfer.stg_${table} in access share mode`);
    const running = svc.run(first.batchId);
    let killed = false;
    for (let i = 0; i < 400 && !killed; i++) {
      const r = await env.target.query<{ pid: number }>(
        // This database only: another test file's purge on the same server (files run in parallel) is not ours to end.
        `select pid from pg_stat_activity where datname = current_database() and query like '%purge_staged%' and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
      );
      if (r.rows[0])
        killed = (await env.target.query(`select pg_terminate_backend($1)`, [r.rows[0].pid])).rowCount === 1;
      else await sleep(10);
    }
    await side.query('rollback');
    await side.end();
    expect(killed).toBe(true);
    expect((await running).state).toBe('committed');
    expect(await batchEvents(env, first.batchId)).toContain('purge_error');
    expect(await staged()).toBe(30); // the cut purge left the committed batch's rows

    for (let i = 0; i < 2; i++) {
      const v = await svc.createBatch(t.name);
      expect((await svc.run(v.batchId)).state).toBe('committed');
    }
    expect(await staged()).toBe(0);
    expect(await laneProblems(env, table, 90)).toEqual([]);
    await svc.close();
  });
});

describe('an abandon while the batch is staged', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_purge_ab');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // One source read: the worker records the manifest after the rows, the operator abandons the batch right then
  // (no apply was started: it fails at once and its purge finds nothing yet), and the worker's staging commits
  // after that. The rows it staged belong to a failed batch: they must not stay in the staging table.
  it('leaves no staged rows of the abandoned batch once its staging committed after the abandon', async () => {
    const table = 'abandoned';
    await createLane(env, table, 60);
    const t = laneTransfer(table, { batchSize: 30, chunkSize: 10 });
    // The row path with one source read (a SQL Server-shaped source reading a snapshot: canonical rows, keel-v1).
    const connect = (tc: typeof t) => {
      const s = new PostgresTransferSource(tc, env.source);
      const source = sqlServerShapedSource(s, { oneRead: true });
      return { source, target: new PostgresTransferTarget(tc, env.target) };
    };
    const operator = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect,
    });
    const workerJournal = new PostgresTransferJournal(env.control);
    const transition = workerJournal.transition.bind(workerJournal);
    let abandoned = false;
    workerJournal.transition = async (id, from, to, patch, event, detail) => {
      const r = await transition(id, from, to, patch, event, detail);
      if (event === 'manifest_recorded' && !abandoned)
        abandoned = (await operator.abandonOnce(id, 'abandoned while staged')).abandoned;
      return r;
    };
    const worker = new TransferService({ journal: workerJournal, transfers: [t], directApply: false, connect });
    const staged = async () =>
      (await env.target.query(`select count(*)::int as n from keel_transfer.stg_${table}`)).rows[0].n as number;

    const first = await worker.createBatch(t.name);
    expect(first.rowCount).toBeNull(); // one source read: the manifest is recorded by the stage, after the rows
    const v = await worker.run(first.batchId);
    expect(abandoned).toBe(true);
    expect(v.state).toBe('failed');
    expect(await staged()).toBe(0);
    // The window was released: the next batch covers it, staged and applied once.
    const next = await worker.createBatch(t.name);
    expect(next.boundary.low).toBeNull();
    expect((await worker.run(next.batchId)).state).toBe('committed');
    expect(await staged()).toBe(0);
    await operator.close();
    await worker.close();
  });
});

describe('maintenance purges what a failed batch left staged', () => {
  let env: Env;
  let proxy: FaultProxy;
  let proxied: pg.Pool;
  beforeAll(async () => {
    env = await setupDatabases('tr_purge_mt');
    await env.target.query(LANE_WRITES_DDL);
    const u = new URL(env.targetUrl);
    proxy = await FaultProxy.start(u.hostname, Number(u.port));
    proxied = new pg.Pool({ connectionString: proxy.urlFor(env.targetUrl), max: 3 });
    proxied.on('error', poolErrorLogger('postgres', 'transfer', 'test target pool (fault proxy)'));
  });
  afterAll(async () => {
    await proxied?.end().catch(() => undefined);
    await proxy?.close();
    await env?.close();
  });

  // A batch fails before any apply (abandoned while its one-read staging runs: no completion row, so no later
  // purge_staged takes its rows), its staging commits after that, and the purge that follows is cut. Only the
  // journal knows the batch is over: maintenance must purge its staged rows and registry row, leave a live batch's
  // alone, and two passes at once must do no harm.
  it('removes the staged and registry rows of a failed batch whose purge was cut, and keeps a live batch staged', async () => {
    const table = 'maint';
    await createLane(env, table, 60);
    const t = laneTransfer(table, { batchSize: 30, chunkSize: 10 });
    const connect = (pool: pg.Pool) => (tc: typeof t) => {
      const source = sqlServerShapedSource(new PostgresTransferSource(tc, env.source), { oneRead: true });
      return { source, target: new PostgresTransferTarget(tc, pool) };
    };
    const operator = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect: connect(env.target),
    });
    const workerJournal = new PostgresTransferJournal(env.control);
    const transition = workerJournal.transition.bind(workerJournal);
    let abandoned = false;
    workerJournal.transition = async (id, from, to, patch, event, detail) => {
      const r = await transition(id, from, to, patch, event, detail);
      if (event === 'manifest_recorded' && !abandoned) {
        abandoned = (await operator.abandonOnce(id, 'abandoned while staged')).abandoned;
        // The worker's purge of the failed batch (after its staging committed) is cut before it reaches the server.
        void proxy.arm({ kind: 'cut-after-bytes', trigger: (sql) => sql.includes('purge_staged'), bytes: 0 });
      }
      return r;
    };
    const worker = new TransferService({
      journal: workerJournal,
      transfers: [t],
      directApply: false,
      connect: connect(proxied),
    });
    const staged = async () =>
      (await env.target.query(`select count(*)::int as n from keel_transfer.stg_${table}`)).rows[0].n as number;
    const registry = async () =>
      (
        await env.target.query(`select batch_id::text as id from keel_transfer.staged where transfer_name = $1`, [
          t.name,
        ])
      ).rows.map((r: { id: string }) => r.id);

    const first = await worker.createBatch(t.name);
    const v = await worker.run(first.batchId);
    expect(abandoned).toBe(true);
    expect(v.state).toBe('failed');
    expect(v.attempts).toBe(0);
    expect(proxy.armed).toBe(false); // the cut fired
    expect(await batchEvents(env, first.batchId)).toContain('purge_error');
    // Left behind: the failed batch's rows and its registry row (no completion row: no purge_staged takes them).
    expect(await staged()).toBe(30);
    expect(await registry()).toEqual([first.batchId]);

    // The next batch is staged (live, not applied yet): maintenance must keep it.
    const next = await operator.createBatch(t.name);
    expect((await operator.stage(next.batchId)).state).toBe('staged');
    expect(await staged()).toBe(60);
    // Two maintenance passes at once (two instances of the timer): the failed batch's rows go, once, and nothing else.
    const [m1, m2] = await Promise.all([operator.purgeTerminalStaging(), worker.purgeTerminalStaging()]);
    expect(m1.errors + m2.errors).toBe(0);
    expect([...m1.purged, ...m2.purged].every((id) => id === first.batchId)).toBe(true);
    expect(await registry()).toEqual([next.batchId]);
    expect(await staged()).toBe(30);
    const rows = await env.target.query(`select distinct keel_batch_id::text as id from keel_transfer.stg_${table}`);
    expect(rows.rows).toEqual([{ id: next.batchId }]);
    // Idempotent: another pass finds nothing to do.
    expect(await operator.purgeTerminalStaging()).toEqual({ purged: [], errors: 0 });

    // The live batch applies, and its own purge empties the table; the window covered exactly once.
    expect((await operator.apply(next.batchId)).state).toBe('committed');
    expect(await staged()).toBe(0);
    expect(await registry()).toEqual([]);
    const last = await operator.createBatch(t.name);
    expect((await operator.run(last.batchId)).state).toBe('committed');
    expect(await laneProblems(env, table, 60)).toEqual([]);
    await operator.close();
    await worker.close();
  });
});

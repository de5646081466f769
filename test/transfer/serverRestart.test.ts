// The whole server (target, journal and source) restarted in crash mode (pg_ctl restart -m immediate: every backend
// killed, crash recovery from the WAL) at a random moment of a batch's staging or apply, several times; then the
// production loop (maintenance's reconcile, the message redelivered) must converge: the batch committed exactly
// once, journal = target, target = source. Opt-in: it needs a server of its own that it may restart, named by
// KEEL_TEST_RESTART_PGDATA (its data directory; pg_ctl from KEEL_TEST_RESTART_PGBIN, run as postgres through
// runuser), with the tests pointed at it through KEEL_TEST_PG_URL. Skipped otherwise.
import { spawn } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createJournalPool, PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { pgTransferPoolConfig } from '../../shared/transfer/timeouts.js';
import { seededRandom } from '../support/seededRandom.js';
import {
  createLane,
  FAULT_TEST_TIMEOUTS,
  laneProblems,
  LANE_WRITES_DDL,
  laneTransfer,
  setupDatabases,
  type Env,
} from './helpers.js';

const PGDATA = process.env.KEEL_TEST_RESTART_PGDATA;
const PGBIN = process.env.KEEL_TEST_RESTART_PGBIN ?? '/usr/lib/postgresql/15/bin';
const RUNS = Number(process.env.KEEL_TEST_RESTART_RUNS ?? 6);
const ROWS = 300;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// pg_ctl's postmaster inherits stdio: ignored, and the exit of pg_ctl itself awaited (not its pipes' close).
async function restart(): Promise<void> {
  const child = spawn(
    'runuser',
    [
      '-u',
      'postgres',
      '--',
      `${PGBIN}/pg_ctl`,
      '-D',
      PGDATA!,
      '-m',
      'immediate',
      '-w',
      '-l',
      `${PGDATA}/../restart.log`,
      'restart',
    ],
    { stdio: 'ignore' },
  );
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`pg_ctl restart exited ${code}`))));
    child.once('error', reject);
  });
}

describe.skipIf(!PGDATA)('the server restarted in crash mode mid-batch', () => {
  let env: Env;
  let owner: PostgresTransferJournal;
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown) => unhandled.push(e);
  beforeAll(async () => {
    env = await setupDatabases('srv_restart');
    for (const p of [env.source, env.target, env.control]) p.on('error', () => undefined);
    await env.target.query(LANE_WRITES_DDL);
    owner = new PostgresTransferJournal(env.control);
    process.on('uncaughtException', onUnhandled);
    process.on('unhandledRejection', onUnhandled);
  });
  afterAll(async () => {
    process.off('uncaughtException', onUnhandled);
    process.off('unhandledRejection', onUnhandled);
    await env?.close().catch(() => undefined);
  });

  it('staged and direct apply: restarted during the staging or the apply, then converged exactly once', async () => {
    const rnd = seededRandom('serverRestart');
    const problems: string[] = [];
    for (let i = 0; i < RUNS; i++) {
      const flow = i % 2 === 0 ? 'staged' : 'direct';
      const table = `sr_${i}`;
      await createLane(env, table, ROWS);
      const target = new pg.Pool({
        ...pgTransferPoolConfig(env.targetUrl, FAULT_TEST_TIMEOUTS, 3),
        options: '-c keel_test.write_delay=0.004',
      });
      const source = new pg.Pool(pgTransferPoolConfig(env.sourceUrl, FAULT_TEST_TIMEOUTS, 3));
      const jp = createJournalPool(env.controlUrl, { max: 3, log: () => undefined });
      for (const p of [target, source]) p.on('error', () => undefined);
      const svc = new TransferService({
        journal: new PostgresTransferJournal(jp),
        transfers: [laneTransfer(table, { batchSize: ROWS, chunkSize: 50, reconcileWaitMs: 200 })],
        directApply: flow === 'direct',
        onClose: async () => {
          await Promise.all([target.end(), source.end(), jp.end()]).catch(() => undefined);
        },
        connect: (tc) => ({
          source: new PostgresTransferSource(tc, source),
          target: new PostgresTransferTarget(tc, target),
        }),
      });
      const b = await svc.createBatch(table);
      const delay = rnd.int(50, 1500);
      const running = svc.run(b.batchId).then(
        (v) => `${v.state}`,
        (e: Error) => `threw ${e.message}`,
      );
      const t0 = Date.now();
      await sleep(delay);
      await restart();
      const t1 = Date.now();
      const first = await running;
      const t2 = Date.now();
      // Recovery: maintenance's reconcile and the redelivered message, until committed (bounded).
      let v: BatchView | null = null;
      for (let k = 0; k < 60; k++) {
        try {
          await svc.reconcileStale(0, 10);
          v = (await svc.getBatch(b.batchId))!;
          if (v.state === 'committed' || v.state === 'failed') break;
          if (v.state === 'extracting') await svc.stage(b.batchId);
          else if (v.state === 'staged') await svc.apply(b.batchId);
          else await sleep(100);
        } catch {
          await sleep(200);
        }
      }
      v = await svc.getBatch(b.batchId);
      const t3 = Date.now();
      await svc.purgeTerminalStaging().catch(() => undefined);
      console.log(`restart ${t1 - t0} ms, first run ended ${t2 - t1} ms later, recovery ${t3 - t2} ms`);
      const label = `${flow} run ${i} (restart after ${delay} ms; first run: ${first})`;
      console.log(`${label}: ${v?.state} attempts ${v?.attempts}`);
      if (v?.state !== 'committed') problems.push(`${label}: ${v?.state} (${v?.lastErrorCode}: ${v?.lastError})`);
      for (const p of await laneProblems(env, table, ROWS)) problems.push(`${label}: ${p}`);
      await svc.close();
    }
    expect(problems).toEqual([]);
    expect(unhandled).toEqual([]);
    void owner;
  }, 600_000);
});

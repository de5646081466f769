// Fault injection on the JOURNAL's connection (control database): a TCP proxy between Keel's journal pool and
// the control database cuts the connection while a journal statement is on its way or running (at a random
// byte, or a few ms in), or lets the statement commit and swallows its reply. Fault points: the batch insert,
// the manifest/staged/applying transitions, the transition right after the target committed, a read, and the
// journal write of reconcile's verdict.
// After each run, recovery does what production does (the timer resumes an open batch, maintenance or the
// operator reconciles), and then: no crash (no unhandled error or rejection), no hang (every step bounded),
// the journal agrees with the target's completion rows, and the target holds the source window exactly once.
// Seeded: the seed is printed; KEEL_TEST_SEED=<seed> replays a run sequence. KEEL_JOURNAL_FAULT_RUNS sets runs.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy, type FaultPlan } from '../support/faultProxy.js';
import { createJournalPool, PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { seededRandom } from '../support/seededRandom.js';
import {
  assertExactlyOnce,
  insertSourceRows,
  ordersTransfer,
  setupDatabases,
  TARGET_DDL,
  ORDERS_DDL,
  type Env,
} from './helpers.js';
import { within } from '../support/until.js';

const RUNS = Math.max(1, Number(process.env.KEEL_JOURNAL_FAULT_RUNS ?? 49));
const NAME = 'orders_jfaults';
const STEP_MS = 20_000; // one step (create, run, reconcile) never takes longer: otherwise it is a hang
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Statements of a journal call. The patterns also match the journal's earlier table SQL (a transaction per call
// on a checked-out client), so that this test shows what that version did under the same faults.
const INSERT = /keel\.transfer_batch_insert\(|^insert into keel\.transfer_batches/;
const TRANSITION =
  /keel\.transfer_batch_transition\(|^select state from keel\.transfer_batches where batch_id = \$1 for update/;
const GET =
  /keel\.transfer_batch_get\(|^select batch_id::text as batch_id[\s\S]*from keel\.transfer_batches where batch_id = \$1$/;

// reconcile_verdict: the applying transition commits and its reply is lost (the apply never ran), then the
// journal write of reconcile's verdict is cut.
type Point = 'insert' | 'manifest' | 'staged' | 'applying' | 'after_target_commit' | 'read' | 'reconcile_verdict';
const POINTS: Point[] = [
  'insert',
  'manifest',
  'staged',
  'applying',
  'after_target_commit',
  'read',
  'reconcile_verdict',
];
// Transition number (counted from the arming, before createBatch) of each transition point.
const NTH: Partial<Record<Point, number>> = {
  manifest: 1,
  staged: 2,
  applying: 3,
  after_target_commit: 4,
  reconcile_verdict: 3,
};

const bounded = <T>(p: Promise<T>, what: string): Promise<T> => within(p, STEP_MS, what);

describe('journal connection faults (TCP proxy between Keel and the control database)', () => {
  let env: Env;
  let proxy: FaultProxy;
  const pools: pg.Pool[] = [];
  const services: TransferService[] = [];
  const unhandled: string[] = [];
  const onUnhandled = (err: unknown) =>
    unhandled.push(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
  const poolErrors: string[] = [];

  beforeAll(async () => {
    process.on('uncaughtException', onUnhandled);
    process.on('unhandledRejection', onUnhandled);
    env = await setupDatabases('tr_jfaults');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, RUNS * 90 + 100);
    const u = new URL(env.controlUrl);
    proxy = await FaultProxy.start(u.hostname, Number(u.port));
    // Two journal pools through the proxy: one whose server sessions notice a vanished client mid-statement and
    // roll back, one whose sessions finish (and commit) the statement anyway. Short timeouts bound every call.
    for (const options of ['-c client_connection_check_interval=10', '']) {
      const pool = createJournalPool(proxy.urlFor(env.controlUrl), {
        max: 4,
        connectTimeoutMs: 3_000,
        statementTimeoutMs: 5_000,
        queryTimeoutMs: 8_000,
        idleInTransactionTimeoutMs: 5_000,
        log: (m, err) => poolErrors.push(`${m}: ${err.message}`),
        ...(options ? { options } : {}),
      });
      pools.push(pool);
      const t = ordersTransfer(NAME, { reconcileWaitMs: 100 });
      services.push(
        new TransferService({
          journal: new PostgresTransferJournal(pool),
          transfers: [t],
          connect: (tc) => ({
            source: new PostgresTransferSource(tc, env.source),
            target: new PostgresTransferTarget(tc, env.target),
          }),
        }),
      );
    }
  });
  afterAll(async () => {
    process.off('uncaughtException', onUnhandled);
    process.off('unhandledRejection', onUnhandled);
    for (const p of pools) await p.end().catch(() => undefined);
    await proxy?.close();
    await env?.close();
  });

  it(
    `cuts inside journal calls and right after the target commits: ${RUNS} seeded runs converge`,
    { timeout: 240_000 },
    async () => {
      const rand = seededRandom(`journal faults (${RUNS} runs)`);
      const SEED = rand.seed;
      const int = rand.int;
      const owner = new PostgresTransferJournal(env.control); // the test's own view of the journal, not through the proxy
      const stats = {
        fired: 0,
        byPoint: {} as Record<string, number>,
        byKind: {} as Record<string, number>,
        firstStepThrew: 0,
        recoverySteps: 0,
        reconciledCommitted: 0,
        maxRecoverySteps: 0,
      };
      const started = Date.now();

      for (let run = 0; run < RUNS; run++) {
        const point = POINTS[run % POINTS.length]!;
        const svc = services[int(0, 1)]!;
        const batchSize = int(20, 90);
        (svc as unknown as { transfers: Map<string, { batchSize: number }> }).transfers.get(NAME)!.batchSize =
          batchSize;
        const randomPlan = (trigger: (s: string) => boolean): FaultPlan => {
          const kindRoll = int(0, 2);
          return kindRoll === 0
            ? { kind: 'cut-after-bytes', trigger, bytes: int(0, 120) }
            : kindRoll === 1
              ? { kind: 'cut-after-ms', trigger, delayMs: int(0, 4) }
              : { kind: 'drop-reply', trigger, holdMs: int(0, 3) };
        };
        let n = 0;
        const trigger =
          point === 'insert'
            ? (s: string) => INSERT.test(s)
            : point === 'read'
              ? (s: string) => GET.test(s) && ++n === 1
              : (s: string) => TRANSITION.test(s) && ++n === NTH[point]!;
        const plan: FaultPlan =
          point === 'reconcile_verdict' ? { kind: 'drop-reply', trigger, holdMs: 0 } : randomPlan(trigger);
        let m = 0;
        const verdictPlan = point === 'reconcile_verdict' ? randomPlan((s) => TRANSITION.test(s) && ++m === 1) : null;
        const label = `run ${run} (seed ${SEED}): ${verdictPlan ? `${verdictPlan.kind} at ${point}` : `${plan.kind} at ${point}`}`;
        let fired = false;
        const armed = proxy.arm(plan).then(() => (fired = true));

        // The step that meets the fault: create (start) and run the batch, as the ops API and the queue steps do.
        let batchId: string | null = null;
        let view: BatchView | null = null;
        try {
          view = await bounded(svc.createBatch(NAME), `${label}: createBatch`);
          batchId = view.batchId;
          view = await bounded(svc.run(batchId), `${label}: run`);
        } catch (err) {
          if ((err as Error).message.startsWith('HANG')) throw err;
          stats.firstStepThrew++;
        }
        proxy.disarm();
        await Promise.race([armed, sleep(20)]);
        const count = (kind: FaultPlan['kind']) => {
          stats.fired++;
          stats.byPoint[point] = (stats.byPoint[point] ?? 0) + 1;
          stats.byKind[kind] = (stats.byKind[kind] ?? 0) + 1;
        };
        if (fired && !verdictPlan) count(plan.kind);
        if (verdictPlan) {
          // The first fault left the journal at 'applying' although nothing was applied.
          expect(fired, label).toBe(true);
          expect(view?.state, label).toBe('applying');
        }

        // Recovery, as production does it: an open batch of the transfer is resumed (same id), an apply with an
        // unknown outcome is reconciled; only when no batch is open is a new one created.
        let steps = 0;
        for (; steps < 30 && view?.state !== 'committed'; steps++) {
          try {
            if (!batchId || !view) {
              const { open } = await bounded(owner.lastForTransfer(NAME), `${label}: lastForTransfer`);
              if (open) {
                batchId = open.batchId;
                view = (await svc.getBatch(open.batchId))!;
              } else {
                view = await bounded(svc.createBatch(NAME), `${label}: recreate`);
                batchId = view.batchId;
              }
            }
            if (view.state === 'failed') throw new Error(`${label}: batch ${batchId} failed: ${view.lastError}`);
            if (view.state === 'applying' || view.state === 'unresolved') {
              if (verdictPlan && steps === 0) {
                let verdictFired = false;
                const armedVerdict = proxy.arm(verdictPlan).then(() => (verdictFired = true));
                try {
                  view = await bounded(svc.reconcile(batchId), `${label}: reconcile (cut)`);
                } finally {
                  proxy.disarm();
                  await Promise.race([armedVerdict, sleep(20)]);
                  if (verdictFired) count(verdictPlan.kind);
                }
                continue;
              }
              view = await bounded(svc.reconcile(batchId), `${label}: reconcile`);
              if (view.state === 'unresolved') await sleep(50);
            } else if (view.state !== 'committed') {
              view = await bounded(svc.run(batchId), `${label}: resume`);
            }
          } catch (err) {
            if ((err as Error).message.startsWith('HANG') || (err as Error).message.includes('failed:')) throw err;
            view = null; // a recovery step failed: look again
            await sleep(20);
          }
        }
        stats.recoverySteps += steps;
        stats.maxRecoverySteps = Math.max(stats.maxRecoverySteps, steps);
        expect(view?.state, `${label}: ${view?.lastError}`).toBe('committed');
        const rec = (await owner.get(batchId!))!;
        expect(rec.appliedCount, label).toBe(rec.rowCount);
        expect(rec.stagedChecksum, label).toBe(rec.checksum);
        const events = (await owner.events(batchId!)).map((e) => e.event);
        if (events.includes('reconciled_committed')) stats.reconciledCommitted++;
        // The target applied the batch once, and says what the journal says.
        const c = await env.target.query(
          `select row_count::int as n, checksum from keel_transfer.completions where batch_id = $1 and state = 'committed'`,
          [batchId],
        );
        expect(c.rows, label).toEqual([{ n: rec.rowCount, checksum: rec.checksum }]);
        expect(unhandled, label).toEqual([]);
      }

      // The journal agrees with the target over every batch: committed there iff committed here; nothing open.
      const all = await owner.list({ transfer: NAME, limit: 1000 });
      expect(
        all.filter((b) => b.state !== 'committed' && b.state !== 'failed').map((b) => `${b.batchId}:${b.state}`),
      ).toEqual([]);
      const committedJournal = all
        .filter((b) => b.state === 'committed')
        .map((b) => b.batchId)
        .sort();
      const committedTarget = (
        await env.target.query(
          `select batch_id::text as id from keel_transfer.completions where state = 'committed' and transfer_name = $1 order by 1`,
          [NAME],
        )
      ).rows.map((r) => r.id);
      expect(committedTarget).toEqual(committedJournal);
      expect(committedJournal).toHaveLength(RUNS);
      // Windows chain without gaps: target rows equal the source window exactly once.
      const covered = Math.max(...all.filter((b) => b.state === 'committed').map((b) => Number(b.boundaryHigh)));
      const r = await assertExactlyOnce(env, covered);
      expect(r.target).toBe(covered);
      expect(r.source).toBe(covered);
      expect(r.maxWrites).toBe(1);
      expect(unhandled).toEqual([]);
      expect(stats.fired).toBeGreaterThanOrEqual(Math.ceil(RUNS * 0.8));
      console.log(
        `journal faults: seed ${SEED}, ${RUNS} runs in ${Math.round((Date.now() - started) / 1000)} s, ${stats.fired} faults fired`,
        JSON.stringify(stats.byPoint),
        JSON.stringify(stats.byKind),
        `first step threw ${stats.firstStepThrew}, recovery steps ${stats.recoverySteps} (max ${stats.maxRecoverySteps}), reconciled_committed ${stats.reconciledCommitted}, ` +
          `0 inconsistencies, ${unhandled.length} unhandled errors, 0 hangs; pool errors logged: ${poolErrors.length}`,
      );
    },
  );
});

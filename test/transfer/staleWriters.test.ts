// Stale writers and leftovers of the transfer journal and target:
// - reconcile reads a batch, asks the target, and notes what it found without moving the batch (a staged batch
//   still not applied; no answer for a batch that is not applying): that note is fenced on the batch's version, so
//   an error another run noted meanwhile, or a move it made, is never replaced by the stale record (before, the
//   "touch" rewrote the last error it had read, and "reconcile could not reach a verdict" replaced a newer error);
// - the target's staging registry (keel_transfer.staged) keeps rows of open batches only: each purge removes the
//   batch's own registry row and those of every batch that can never be applied again (before, it grew by one row
//   per staged batch, forever).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { Adapters } from '../../shared/transfer/types.js';
import { createLane, LANE_WRITES_DDL, laneProblems, laneTransfer, setupDatabases, type Env } from './helpers.js';

describe('stale writers and the staging registry', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_stale');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // A service whose target runs `hooks.reconcile` around each reconcile call and `hooks.purge` instead of a purge.
  function service(t: TransferConfig, hooks: { reconcile?: () => Promise<void>; purgeFails?: Set<string> } = {}) {
    const journal = new PostgresTransferJournal(env.control);
    const svc = new TransferService({
      journal,
      transfers: [t],
      directApply: false, // the staged flow: the registry is written by every staging
      connect: (tc): Adapters => {
        const target = new PostgresTransferTarget(tc, env.target);
        const reconcile = target.reconcile.bind(target);
        target.reconcile = async (...a) => {
          const r = await reconcile(...a);
          await hooks.reconcile?.();
          return r;
        };
        const purge = target.purgeStaged.bind(target);
        target.purgeStaged = async (id) => {
          if (hooks.purgeFails?.has(id)) throw new Error('purge cut (test)');
          return purge(id);
        };
        return { source: new PostgresTransferSource(tc, env.source), target };
      },
    });
    return { svc, journal };
  }

  it("reconcile's note of a staged batch keeps an error another run noted meanwhile", async () => {
    await createLane(env, 'stale_note', 20);
    const t = laneTransfer('stale_note', { batchSize: 20 });
    let racer: (() => Promise<void>) | undefined;
    const { svc, journal } = service(t, { reconcile: () => racer?.() ?? Promise.resolve() });
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    // While reconcile asks the target, an apply of another process fails and notes its error.
    racer = async () => {
      racer = undefined;
      await journal.note(
        b.batchId,
        'apply_error',
        { code: 'target_busy' },
        { lastError: 'newer', lastErrorCode: 'target_busy' },
      );
    };
    const v = await svc.reconcile(b.batchId);
    expect(v.state).toBe('staged');
    const rec = (await journal.get(b.batchId))!;
    expect([rec.lastError, rec.lastErrorCode]).toEqual(['newer', 'target_busy']);
    const ev = (await journal.events(b.batchId)).filter((e) => e.event === 'reconciled_not_applied');
    expect(ev.at(-1)?.detail).toMatchObject({ stale: true, version: rec.version });
    // Not raced: the note is written (and raises the version).
    await svc.reconcile(b.batchId);
    const after = (await journal.get(b.batchId))!;
    expect(after.version).toBe(rec.version + 1);
    expect(after.lastError).toBe('newer');
    expect((await svc.run(b.batchId)).state).toBe('committed');
    expect(await laneProblems(env, 'stale_note', 20)).toEqual([]);
    await svc.close();
  });

  it('a reconcile that reaches no verdict does not replace an error noted, or a move made, meanwhile', async () => {
    await createLane(env, 'stale_err', 20);
    const t = laneTransfer('stale_err', { batchSize: 20 });
    let racer: (() => Promise<void>) | undefined;
    const { svc, journal } = service(t, {
      reconcile: async () => {
        const r = racer;
        racer = undefined;
        if (r) {
          await r();
          throw new Error('target unreachable (test)');
        }
      },
    });
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    racer = () =>
      journal
        .note(b.batchId, 'apply_error', {}, { lastError: 'newer', lastErrorCode: 'target_busy' })
        .then(() => undefined);
    await svc.reconcile(b.batchId);
    expect((await journal.get(b.batchId))!.lastError).toBe('newer');
    // Committed by another run while reconcile asked: the committed batch keeps no reconcile error.
    const other = service(t);
    racer = async () => {
      expect((await other.svc.apply(b.batchId)).state).toBe('committed');
    };
    await svc.reconcile(b.batchId);
    const rec = (await journal.get(b.batchId))!;
    expect([rec.state, rec.lastError, rec.lastErrorCode]).toEqual(['committed', null, null]);
    await other.svc.close();
    await svc.close();
  });

  it('the staging registry holds only open batches, over many batches, abandons and a failed purge', async () => {
    const rows = 160;
    await createLane(env, 'reg_bound', rows);
    const t = laneTransfer('reg_bound', { batchSize: 8, chunkSize: 4 });
    const purgeFails = new Set<string>();
    const { svc } = service(t, { purgeFails });
    const registry = async () =>
      (
        await env.target.query<{ n: number }>(
          `select count(*)::int as n from keel_transfer.staged where transfer_name = $1`,
          [t.name],
        )
      ).rows[0]!.n;
    let batches = 0;
    for (;;) {
      const v = await svc.tryCreateBatch(t.name);
      if (!v) break;
      batches++;
      if (batches % 7 === 3) {
        // Staged, then abandoned (final fence): its rows and registry row go with the purge after the failure.
        expect((await svc.stage(v.batchId)).state).toBe('staged');
        expect(await registry()).toBe(1);
        expect((await svc.abandon(v.batchId, 'test')).state).toBe('failed');
        expect(await registry()).toBe(0);
        const again = (await svc.tryCreateBatch(t.name))!;
        expect((await svc.run(again.batchId)).state).toBe('committed');
      } else {
        if (batches % 7 === 5) purgeFails.add(v.batchId); // its purge fails: the next purge sweeps its row
        expect((await svc.run(v.batchId)).state).toBe('committed');
      }
      expect(await registry()).toBeLessThanOrEqual(purgeFails.has(v.batchId) ? 1 : 0);
    }
    expect(batches).toBeGreaterThanOrEqual(rows / 8);
    expect(await registry()).toBe(0);
    expect((await env.target.query(`select count(*)::int as n from keel_transfer.stg_reg_bound`)).rows[0].n).toBe(0);
    expect(await laneProblems(env, 'reg_bound', rows)).toEqual([]);
    await svc.close();
  });
});

// The journal itself refuses what two instances (two Function hosts: separate services, separate pools) could
// otherwise both do between their checks and their inserts: a second replay of a range whose replay is open, and a
// batch created after a pause returned. Each race is forced: both instances pass the service's own checks before
// either reaches the journal's insert, so only the insert procedure (under the transfer's lock) can decide.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { NewBatch, TransferJournal } from '../../shared/transfer/journal.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createLane, LANE_WRITES_DDL, laneTransfer, setupDatabases, type Env } from './helpers.js';

const ROUNDS = 8;

// Resolves once `n` callers arrived (or after `ms`, so that a caller refused before it arrives cannot hang the test).
function barrier(n: number, ms = 5_000): () => Promise<void> {
  let arrived = 0;
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return () => {
    if (++arrived >= n) open();
    return Promise.race([opened, new Promise<void>((r) => setTimeout(r, ms))]);
  };
}

describe('journal races between two instances', () => {
  let env: Env;
  const pools: pg.Pool[] = [];
  beforeAll(async () => {
    env = await setupDatabases('tr_jraces');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    for (const p of pools) await p.end().catch(() => undefined);
    await env?.close();
  });

  // An instance: its own control pool and journal (whose insert the test can hold), its own service.
  function instance(t: TransferConfig): {
    svc: TransferService;
    journal: PostgresTransferJournal;
    beforeInsert: { hook: ((b: NewBatch) => Promise<void>) | null };
  } {
    const control = new pg.Pool({ connectionString: env.controlUrl, max: 3 });
    control.on('error', poolErrorLogger('postgres', 'transfer', 'test control pool'));
    pools.push(control);
    const journal = new PostgresTransferJournal(control);
    const beforeInsert: { hook: ((b: NewBatch) => Promise<void>) | null } = { hook: null };
    const insert = journal.insertBatch.bind(journal);
    journal.insertBatch = async (b) => {
      await beforeInsert.hook?.(b);
      return insert(b);
    };
    const svc = new TransferService({
      journal,
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    return { svc, journal, beforeInsert };
  }

  const failOpen = async (j: TransferJournal, batchId: string) =>
    expect(await j.transition(batchId, ['extracting'], 'failed', { stamp: 'failed_at' }, 'test_closed')).not.toBeNull();

  it('two instances replaying the same range at once create one batch; the other gets open_batch_exists', async () => {
    const table = 'jr_replay';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 10 });
    const a = instance(t);
    const b = instance(t);
    for (let i = 0; i < 2; i++) {
      const v = await a.svc.createBatch(t.name);
      expect((await a.svc.run(v.batchId)).state).toBe('committed');
    }
    for (let round = 0; round < ROUNDS; round++) {
      // Both pass the service's check for an open replay, then insert together.
      const together = barrier(2);
      a.beforeInsert.hook = b.beforeInsert.hook = () => together();
      const results = await Promise.allSettled([
        a.svc.replay(t.name, '10', '20', false),
        b.svc.replay(t.name, '10', '20', false),
      ]);
      a.beforeInsert.hook = b.beforeInsert.hook = null;
      const created = results.filter((r) => r.status === 'fulfilled');
      const refused = results.filter((r) => r.status === 'rejected');
      expect(created).toHaveLength(1);
      expect(refused).toHaveLength(1);
      const batch = (created[0] as PromiseFulfilledResult<Awaited<ReturnType<TransferService['replay']>>>).value.batch!;
      const err = (refused[0] as PromiseRejectedResult).reason;
      expect(isTransferError(err, 'open_batch_exists')).toBe(true);
      expect((err as { detail?: { batchId?: string } }).detail?.batchId).toBe(batch.batchId);
      // Exactly one open replay batch of the range in the journal.
      const open = (await a.journal.list({ state: 'extracting', limit: 100 })).filter((x) =>
        x.transferName.startsWith(`${t.name}@replay-`),
      );
      expect(open.map((x) => x.batchId)).toEqual([batch.batchId]);
      await failOpen(a.journal, batch.batchId); // closed: the next round may replay the range again
    }
    await a.svc.close();
    await b.svc.close();
  });

  it('a pause that returned is never followed by a new batch of a start that checked before it', async () => {
    const table = 'jr_pause';
    await createLane(env, table, 10);
    const t = laneTransfer(table, { batchSize: 10 });
    const starter = instance(t);
    const operator = instance(t);
    const batchesOf = async () =>
      (await operator.journal.list({ transfer: t.name, limit: 100 })).map((x) => x.batchId).sort();

    for (let round = 0; round < ROUNDS; round++) {
      // The scheduled start has checked the pause (not paused) and reaches its insert only after the operator's
      // pause returned: the insert must be refused.
      let paused: Promise<unknown> | null = null;
      starter.beforeInsert.hook = async () => {
        paused = operator.svc.pauseTransfer(t.name, 'race', 'op');
        await paused;
      };
      const start = starter.svc.tryCreateBatch(t.name);
      const created = await start;
      starter.beforeInsert.hook = null;
      expect(paused).not.toBeNull();
      expect(created).toBeNull();
      expect(await batchesOf()).toEqual([]);
      await expect(starter.svc.createBatch(t.name)).rejects.toMatchObject({ code: 'transfer_paused' });
      await operator.svc.resumeTransfer(t.name, 'op');
    }

    // Unforced: pause and start at once, each round. Whatever the order, no batch appears after the pause returned.
    for (let round = 0; round < ROUNDS; round++) {
      const start = starter.svc.tryCreateBatch(t.name);
      await new Promise((r) => setTimeout(r, round * 3));
      await operator.svc.pauseTransfer(t.name, 'race', 'op');
      const atPause = await batchesOf();
      const created = await start;
      expect(await batchesOf()).toEqual(atPause);
      if (created) {
        expect(atPause).toContain(created.batchId);
        await failOpen(operator.journal, created.batchId);
      }
      await operator.svc.resumeTransfer(t.name, 'op');
    }
    await starter.svc.close();
    await operator.svc.close();
  });
});

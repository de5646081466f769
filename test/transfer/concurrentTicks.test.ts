// Two (or four) schedule ticks create a batch for the same transfer at once (the timer fired on two instances, a
// start racing the timer): exactly one batch is created per round, the others get "nothing to do" (null) without an
// error, the windows chain with no overlap and no gap, every batch id is distinct, and the target holds the source
// once. The manifest-first path and the one-read row path (no manifest at creation) alike.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import {
  createLane,
  LANE_WRITES_DDL,
  laneProblems,
  laneTransfer,
  setupDatabases,
  sqlServerShapedSource,
  type Env,
} from './helpers.js';

const TICKS = 4;
const ROUNDS = 5;

describe('schedule ticks creating batches for one transfer at once', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_ticks');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  for (const oneRead of [false, true]) {
    it(`${oneRead ? 'one-read row path' : 'manifest first'}: one batch per round, windows chained, ids distinct`, async () => {
      const table = oneRead ? 'ticks_one' : 'ticks_two';
      const rows = 20 * ROUNDS;
      await createLane(env, table, rows);
      const t = laneTransfer(table, { batchSize: 20, chunkSize: 10 });
      const services = Array.from(
        { length: TICKS },
        () =>
          new TransferService({
            journal: new PostgresTransferJournal(env.control),
            transfers: [t],
            connect: (tc) => {
              const s = new PostgresTransferSource(tc, env.source);
              return {
                source: oneRead ? sqlServerShapedSource(s, { oneRead: true }) : s,
                target: new PostgresTransferTarget(tc, env.target),
              };
            },
          }),
      );
      const created: BatchView[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const got = await Promise.all(services.map((s) => s.tryCreateBatch(t.name)));
        const made = got.filter((v): v is BatchView => v !== null);
        expect(made.length, `round ${round}`).toBe(1);
        created.push(made[0]!);
        // Every tick runs the open batch (as the stage step each would post): it commits once.
        const ends = await Promise.all(services.map((s) => s.run(made[0]!.batchId)));
        // Each run ends committed, or met another run of the batch (its apply in progress, its claim or staging
        // held past a bounded wait: retryable); none fails it. A retry, as the queue would make, commits it.
        for (const v of ends) expect(v.state, `round ${round}: ${v.lastError}`).not.toBe('failed');
        let end = await services[0]!.run(made[0]!.batchId);
        for (let retry = 0; retry < 3 && end.state !== 'committed'; retry++)
          end = await services[0]!.run(made[0]!.batchId);
        expect(end.state, `round ${round}: ${end.lastError}`).toBe('committed');
      }
      expect(new Set(created.map((v) => v.batchId)).size).toBe(ROUNDS);
      for (let i = 1; i < created.length; i++)
        expect(created[i]!.boundary.low, `window ${i}`).toBe(created[i - 1]!.boundary.high);
      expect(created[0]!.boundary.low).toBeNull();
      expect(await Promise.all(services.map((s) => s.tryCreateBatch(t.name)))).toEqual(Array(TICKS).fill(null));
      expect(await laneProblems(env, table, rows)).toEqual([]);
      const n = await env.control.query(
        `select count(*)::int as n from keel.transfer_batches where transfer_name = $1 and state = 'committed'`,
        [t.name],
      );
      expect(n.rows[0].n).toBe(ROUNDS);
      for (const s of services) await s.close();
    });
  }
});

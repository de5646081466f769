// Maintenance's purge of leftover staging reads the target's staging registry a page (20 ids) per transfer and pass.
// Registry rows it must keep -- open batches, and ids this journal does not know (another app's batches on a shared
// target) -- must not hide the rows behind them: with more of them than a page ahead (by id, and older), the rows of
// failed and committed batches further on are purged within a bounded number of passes, and the others are kept.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createLane, LANE_WRITES_DDL, laneTransfer, setupDatabases, type Env } from './helpers.js';

// Ids in a chosen order: prefix (8 hex digits) then a counter.
const id = (prefix: string, n: number) => `${prefix}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;

describe('maintenance purge of leftover staging', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_stg_cursor');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  it('reaches terminal batches behind more than a page of open and foreign registry rows', async () => {
    const table = 'cursor_lane';
    await createLane(env, table, 10);
    const t = laneTransfer(table, { batchSize: 10 });
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
    // One real batch: prepare creates the staging table, and its own purge empties the registry.
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');

    const register = async (ids: string[], ageSeconds: number) => {
      for (const b of ids)
        await env.target.query(
          `insert into keel_transfer.staged (batch_id, transfer_name, state, expected_count, expected_checksum, started_at, staged_at)
           values ($1, $2, 'staged', 0, 'x', now() - make_interval(secs => $3), now())`,
          [b, t.name, ageSeconds],
        );
    };
    const journalled = async (b: string, chain: string, fail: boolean) => {
      await journal.insertBatch({
        batchId: b,
        transferName: chain,
        boundaryKind: 'key',
        boundaryLow: null,
        boundaryHigh: b,
        schemaHash: 'h',
        schemaColumns: [],
      });
      if (fail)
        expect(await journal.transition(b, ['extracting'], 'failed', { stamp: 'failed_at' }, 'failed')).not.toBeNull();
    };
    // 25 foreign ids and 12 open batches (each a chain of its own), first by id and oldest; then 7 failed batches.
    const foreign = Array.from({ length: 25 }, (_, i) => id('00000000', i + 1));
    const open = Array.from({ length: 12 }, (_, i) => id('00000001', i + 1));
    const terminal = Array.from({ length: 7 }, (_, i) => id('fffffff0', i + 1));
    for (const [i, b] of open.entries()) await journalled(b, `${t.name}@replay-open${i}`, false);
    for (const [i, b] of terminal.entries()) await journalled(b, `${t.name}@replay-done${i}`, true);
    await register(foreign, 3600);
    await register(open, 1800);
    await register(terminal, 60);
    const registry = async () =>
      (
        await env.target.query<{ id: string }>(
          `select batch_id::text as id from keel_transfer.staged where transfer_name = $1 order by batch_id`,
          [t.name],
        )
      ).rows.map((r) => r.id);

    // 44 rows at 20 a pass: every row is read within 3 passes.
    const purged: string[] = [];
    for (let pass = 0; pass < 3; pass++) {
      const r = await svc.purgeTerminalStaging();
      expect(r.errors).toBe(0);
      purged.push(...r.purged);
    }
    expect(purged.sort()).toEqual(terminal);
    expect(await registry()).toEqual([...foreign, ...open]);
    // Open batches are untouched in the journal too, and further passes (wrapping around) purge nothing more.
    for (const b of open) expect((await journal.get(b))?.state).toBe('extracting');
    for (let pass = 0; pass < 3; pass++) expect(await svc.purgeTerminalStaging()).toEqual({ purged: [], errors: 0 });
    expect(await registry()).toEqual([...foreign, ...open]);
    await svc.close();
  });
});

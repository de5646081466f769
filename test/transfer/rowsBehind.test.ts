// Rows behind (issue 26): the service counts the rows past the last committed window through the source's rowsAfter,
// up to a cap; transferStates reuses a count for the same bound, answers null (never an error) when the count
// fails, and does not wait longer than rowsBehindWaitMs for a slow source (the count goes on and is reused).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSourceRows, ordersTransfer, setupDatabases, TARGET_DDL, ORDERS_DDL, type Env } from './helpers.js';
import { TransferService } from '../../shared/transfer/service.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

describe('rows behind', () => {
  let env: Env;
  let svc: TransferService;
  const t = ordersTransfer('orders_behind', { batchSize: 10 });
  // The source's rowsAfter, instrumented: calls counted, and held or failed on demand.
  let calls = 0;
  let gate: Promise<void> | null = null;
  let failWith: Error | null = null;

  beforeAll(async () => {
    env = await setupDatabases('tr_behind');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 25);
    svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => {
        const source = new PostgresTransferSource(tc, env.source);
        const rowsAfter = source.rowsAfter.bind(source);
        source.rowsAfter = async (low, cap) => {
          calls++;
          if (gate) await gate;
          if (failWith) throw failWith;
          return rowsAfter(low, cap);
        };
        return { source, target: new PostgresTransferTarget(tc, env.target) };
      },
    });
  });
  afterAll(async () => {
    await svc?.close();
    await env?.close();
  });

  const behind = async (
    opts: { rowsBehindCap?: number; rowsBehindMaxAgeMs?: number; rowsBehindWaitMs?: number } = {},
  ) => (await svc.transferStates(Date.now(), { rowsBehindCap: 1000, ...opts }))[0]!.rowsBehind;

  it('counts past the last commit, up to the cap; not counted without a cap', async () => {
    expect(await behind()).toMatchObject({ rows: 25, capped: false });
    expect(await svc.rowsBehind(t.name, 20)).toMatchObject({ rows: 20, capped: true });
    expect((await svc.transferStates())[0]!.rowsBehind).toBeNull(); // no cap given: not counted
    const b = await svc.createBatch(t.name);
    expect((await svc.run(b.batchId)).state).toBe('committed');
    expect(await behind()).toMatchObject({ rows: 15, capped: false }); // the open batch's rows count too
  });

  it('reuses a count for the same bound within the max age, and counts again once the bound moved', async () => {
    calls = 0;
    // The count of the test above (same bound, same cap) is reused, also after two more rows arrived.
    expect(await behind({ rowsBehindMaxAgeMs: 60_000 })).toMatchObject({ rows: 15 });
    await insertSourceRows(env.source, 26, 27);
    expect(await behind({ rowsBehindMaxAgeMs: 60_000 })).toMatchObject({ rows: 15 });
    expect(calls).toBe(0);
    expect(await behind()).toMatchObject({ rows: 17 }); // max age 0: counted again
    expect(calls).toBe(1);
    const b = await svc.createBatch(t.name);
    expect((await svc.run(b.batchId)).state).toBe('committed');
    expect(await behind({ rowsBehindMaxAgeMs: 60_000 })).toMatchObject({ rows: 7 }); // a new bound: counted
    expect(calls).toBe(2);
  });

  it('a failing count is null, not an error; a slow one is null at once and reused when it ends', async () => {
    failWith = new Error('source unreachable (test)');
    expect(await behind()).toBeNull();
    failWith = null;
    let open!: () => void;
    gate = new Promise<void>((resolve) => (open = resolve));
    calls = 0;
    // (cap 999: no count of this cap to reuse yet)
    expect(await behind({ rowsBehindCap: 999, rowsBehindWaitMs: 20, rowsBehindMaxAgeMs: 60_000 })).toBeNull();
    expect(calls).toBe(1);
    gate = null;
    open();
    // The held count finishes in the background and is kept: later answers reuse it without asking again.
    let later = null;
    for (let i = 0; i < 200 && later === null; i++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      later = await behind({ rowsBehindCap: 999, rowsBehindWaitMs: 20, rowsBehindMaxAgeMs: 60_000 });
    }
    expect(later).toMatchObject({ rows: 7 });
    expect(calls).toBe(1);
  });
});

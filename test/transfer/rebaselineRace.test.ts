// A re-baseline racing the transfer's own chain on another instance. The re-baseline reads the last committed window,
// then inserts its batch with low = REBASELINE_MARK + that window's high. A window another instance created and
// committed in between (the timer's, a catch-up step's: its low is the same committed high) is not refused by the
// journal's window indexes -- the two lows differ by the mark -- so the chain forked: two committed windows after
// the same one, the re-baseline's version possibly below the other's high (windows overlapping, the next one chained
// from whichever was created last). The re-baseline now reads the chain again once its batch exists (no other batch
// can be created or committed while it is open) and releases it when the chain moved on: 'window_taken', nothing
// forked; asked again, it follows the new last window.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import type { TransferJournal } from '../../shared/transfer/journal.js';
import { TransferService } from '../../shared/transfer/service.js';
import { REBASELINE_MARK } from '../../shared/transfer/changes.js';
import { insertSourceRows, ordersTransfer, ORDERS_DDL, setupDatabases, type Env } from './helpers.js';

const NAME = 'orders_rb';

describe('a re-baseline racing a window of the same transfer on another instance', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_rebaseline_race');
    await migratePostgresChangeCapture(env.source);
    await env.source.query(ORDERS_DDL);
    await insertSourceRows(env.source, 1, 20);
    await env.source.query(`select keel_changes.enable('public.orders', array['id'])`);
    await env.target.query(ORDERS_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  const t = ordersTransfer(NAME, { boundary: { kind: 'changes' }, batchSize: 1000 });
  // `afterLast`: run once, right after the first answer of the journal's lastForTransfer (the other instance's turn).
  function instance(afterLast?: () => Promise<void>): TransferService {
    const real = new PostgresTransferJournal(env.control);
    let hook = afterLast;
    const journal = new Proxy(real, {
      get(target, prop, receiver) {
        if (prop === 'lastForTransfer')
          return async (name: string) => {
            const r = await target.lastForTransfer(name);
            const h = hook;
            hook = undefined;
            if (h) await h();
            return r;
          };
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    }) as TransferJournal;
    return new TransferService({
      journal,
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
  }

  it('the re-baseline is refused (window_taken) instead of forking the chain; asked again, it follows the new window', async () => {
    const b = instance();
    expect((await b.run((await b.createBatch(NAME)).batchId)).state).toBe('committed'); // the first baseline
    const first = (await b.listBatches({ transfer: NAME, limit: 10 }))[0]!;

    // A changes B's window while A's re-baseline is between its read of the chain and its insert.
    const a = instance(async () => {
      await env.source.query(`update public.orders set note = 'changed' where id = 3`);
      await env.source.query(`delete from public.orders where id = 4`);
      const w = await b.createBatch(NAME);
      expect(w.boundary.low).toBe(first.boundary.high);
      expect((await b.run(w.batchId)).state).toBe('committed');
      // A change after it: the re-baseline's version is past that window's high (else the high index refused it).
      await env.source.query(`update public.orders set note = 'again' where id = 5`);
    });
    const refused = await a.rebaseline(NAME).catch((e: unknown) => e);
    expect(isTransferError(refused, 'window_taken'), String(refused)).toBe(true);

    // The chain: no two live windows after one; the refused batch (if one was inserted) failed, nothing staged.
    const live = (await b.listBatches({ transfer: NAME, limit: 10 })).filter((x) => x.state !== 'failed');
    expect(live.map((x) => x.state)).toEqual(['committed', 'committed']);
    const second = live[0]!;
    expect(second.boundary.low).toBe(first.boundary.high);

    // Asked again, the re-baseline follows the new last window and mirrors the table.
    const rb = await a.rebaseline(NAME);
    expect(rb.boundary.low).toBe(`${REBASELINE_MARK}${second.boundary.high}`);
    expect((await a.run(rb.batchId)).state).toBe('committed');
    const q = `select count(*)::int as n, md5(string_agg(o::text, '|' order by id)) as h from public.orders o`;
    const [src, tgt] = [(await env.source.query(q)).rows[0], (await env.target.query(q)).rows[0]];
    expect(tgt).toEqual(src);
    expect(src.n).toBe(19);
    await a.close();
    await b.close();
  });
});

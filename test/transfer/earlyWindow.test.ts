// The next window asked of the source early (service.ts earlyWindow, docs/transfer.md "The next window, asked
// early"): a createBatch that follows one of this service asks the source for the window after the high it chose
// beside its journal reads, and uses that answer only when the journal's last committed high is exactly that high.
// Checked here: one window question a batch in a chain, and when the journal says otherwise (another process
// committed the next window meanwhile, or the batch did not commit) the window follows the journal's high: no
// window skipped or repeated.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  insertSourceRows,
  ordersTransfer,
  setupDatabases,
  ORDERS_DDL,
  TARGET_DDL,
  type Env,
} from './helpers.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import type { SourceSchema, Window } from '../../shared/transfer/types.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

// What happened, in order: a window question sent to the source, the journal's answer to lastForTransfer.
type Step = 'window asked' | 'journal answered';

// The PostgreSQL source, with every window question it was asked (low) and its answer (high, or null).
class CountingSource extends PostgresTransferSource {
  readonly asked: { low: string | null; high: string | null }[] = [];
  steps: Step[] = [];
  override async nextWindow(
    low: string | null,
    maxRows: number,
    opts: { baselineWindows?: boolean; schema?: SourceSchema } = {},
  ): Promise<Window | null> {
    this.steps.push('window asked');
    const w = await super.nextWindow(low, maxRows, opts);
    this.asked.push({ low, high: w?.high ?? null });
    return w;
  }
}

describe('the next window, asked early', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_early');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // directApply off: no read ahead (which asks the source for the next window beside a direct apply), so every
  // window question here is createBatch's.
  function service(t: TransferConfig): { svc: TransferService; source: () => CountingSource } {
    let source: CountingSource | undefined;
    const journal = new PostgresTransferJournal(env.control);
    const last = journal.lastForTransfer.bind(journal);
    journal.lastForTransfer = async (name) => {
      const r = await last(name);
      source?.steps.push('journal answered');
      return r;
    };
    const svc = new TransferService({
      journal,
      transfers: [t],
      directApply: false,
      connect: (tc) => {
        source = new CountingSource(tc, env.source);
        return { source, target: new PostgresTransferTarget(tc, env.target) };
      },
    });
    return { svc, source: () => source! };
  }

  const reset = async (rows: number) => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, rows);
  };

  it('asks once a batch in a chain, the window after the high it chose', async () => {
    await reset(700);
    const t = ordersTransfer('orders_early_chain', { batchSize: 200 });
    const { svc, source } = service(t);
    const bounds: (string | null)[][] = [];
    let asked = 0;
    for (let i = 0; ; i++) {
      if (i > 0) source().steps = [];
      const b = await svc.tryCreateBatch(t.name);
      // One question a createBatch: the first after the journal's reads; every later one early (sent before the
      // journal answered), for the high the batch before chose, and not asked again after the journal confirmed it.
      expect(source().asked.length - asked).toBe(1);
      if (i > 0) expect(source().steps).toEqual(['window asked', 'journal answered']);
      expect(source().asked.at(-1)!.low).toBe(bounds.at(-1)?.[1] ?? null);
      asked = source().asked.length;
      if (!b) break;
      bounds.push([b.boundary.low, b.boundary.high]);
      expect((await svc.run(b.batchId)).state).toBe('committed');
    }
    expect(bounds).toEqual([
      [null, '200'],
      ['200', '400'],
      ['400', '600'],
      ['600', '700'],
    ]);
    expect((await assertExactlyOnce(env)).target).toBe(700);
    await svc.close();
  });

  it('another process committed the next window meanwhile: the window follows the journal, none repeated', async () => {
    await reset(600);
    const t = ordersTransfer('orders_early_other', { batchSize: 200 });
    const a = service(t);
    const b = service(t);
    const first = await a.svc.createBatch(t.name);
    expect((await a.svc.run(first.batchId)).state).toBe('committed');
    // Another process takes (200, 400] and commits it; this service remembers 200 as the high it chose.
    const other = await b.svc.createBatch(t.name);
    expect(other.boundary).toMatchObject({ low: '200', high: '400' });
    expect((await b.svc.run(other.batchId)).state).toBe('committed');
    const next = await a.svc.createBatch(t.name);
    // Asked early for the window after 200, which the journal's last committed high (400) overrules: asked afresh.
    expect(next.boundary).toMatchObject({ low: '400', high: '600' });
    expect(a.source().asked.some((q) => q.low === '400')).toBe(true);
    expect((await a.svc.run(next.batchId)).state).toBe('committed');
    expect(await a.svc.tryCreateBatch(t.name)).toBeNull();
    const r = await assertExactlyOnce(env);
    expect(r.target).toBe(600);
    expect(r.maxWrites).toBe(1);
    await a.svc.close();
    await b.svc.close();
  });

  it('the batch it chose did not commit (abandoned): the same window is chosen again, none skipped', async () => {
    await reset(600);
    const t = ordersTransfer('orders_early_abandoned', { batchSize: 200 });
    const { svc, source } = service(t);
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    const second = await svc.createBatch(t.name);
    expect(second.boundary).toMatchObject({ low: '200', high: '400' });
    expect((await svc.abandon(second.batchId, 'test: the operator gave it up')).state).toBe('failed');
    const before = source().asked.length;
    const third = await svc.createBatch(t.name);
    // Asked early for the window after 400 (the high this service chose last); the journal's last committed high is
    // 200, so the window was asked afresh from there.
    expect(third.boundary).toMatchObject({ low: '200', high: '400' });
    expect(
      source()
        .asked.slice(before)
        .map((q) => q.low),
    ).toEqual(expect.arrayContaining(['400', '200']));
    expect((await svc.run(third.batchId)).state).toBe('committed');
    for (;;) {
      const b = await svc.tryCreateBatch(t.name);
      if (!b) break;
      expect((await svc.run(b.batchId)).state).toBe('committed');
    }
    const r = await assertExactlyOnce(env);
    expect(r.target).toBe(600);
    expect(r.maxWrites).toBe(1);
    await svc.close();
  });
});

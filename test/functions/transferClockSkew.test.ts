// Clock skew between the hosts and the journal's server (SQL Server in production: its clock stamps every batch).
// Two decisions compared a journal stamp with the host's clock: maintenance's "no progress for
// KEEL_TRANSFER_STALE_MS" before it re-posts a batch, and catch-up's time budget (KEEL_TRANSFER_CATCHUP_MS since the
// chain's first batch was created). A host an hour behind the journal never re-posted a stalled batch (until the
// skew had passed too), and ended every chain after its first window when an hour ahead of it; a host behind it
// never ended a chain on time. Both are now decided on the journal's clock alone: maintenance re-posts a batch
// whose progress is no newer than the `updated_at` its stale read found (the journal said: untouched for
// KEEL_TRANSFER_STALE_MS), and catch-up measures from the chain's first batch's creation to this commit's
// `committed_at`. The host's clock is shifted with a spy on Date.now around each step.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { maintenance } from '../../functions/maintenance.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { context, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const STALE_MS = 1000;
const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const realNow = Date.now.bind(Date);

const fx = useItemsTransfer({
  label: 'fn_clock_skew',
  batchSize: 10,
  env: {
    KEEL_TRANSFER_STALE_MS: String(STALE_MS),
    KEEL_TRANSFER_CATCHUP_MS: '600000', // 10 minutes
    KEEL_TRANSFER_DIRECT_APPLY: 'false', // a staged batch too (maintenance reconciles it before re-posting)
  },
});

type Sent = { queue: string; message: Record<string, unknown> & { batchId: string } };
const takeAll = () => fx.t.queues.sent.splice(0) as Sent[];
const rows = async () => (await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n as number;
// Runs fn on a host whose clock is offsetMs off the journal's (the same server's, here).
async function skewed<T>(offsetMs: number, fn: () => Promise<T>): Promise<T> {
  const spy = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offsetMs);
  try {
    return await fn();
  } finally {
    spy.mockRestore();
  }
}

afterEach(() => vi.restoreAllMocks());

describe('clock skew between a host and the journal', () => {
  it('maintenance on a host an hour behind the journal re-posts stalled batches (extracting and staged)', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(1, 5) n`);
    const started = await fx.call('POST', 'transfers/items/start', {});
    const batchId = started.body.batch.batchId as string;
    takeAll(); // the stage message, lost
    await sleep(STALE_MS + 200);
    const ctx = context('maintenance');
    await skewed(-HOUR, () => maintenance(timer, ctx));
    const first = takeAll();
    expect(first.map((m) => [m.queue, m.message.batchId])).toEqual([['keel-transfer-stage', batchId]]);
    // Staged, its apply message lost: maintenance reconciles it and re-posts it to the apply queue.
    await transferStage(first[0]!.message, context('transferStage'));
    expect((await fx.t.rt.transfers!.getBatch(batchId))!.state).toBe('staged');
    takeAll(); // the apply message, lost
    await sleep(STALE_MS + 200);
    await skewed(-HOUR, () => maintenance(timer, context('maintenance')));
    const second = takeAll();
    expect(second.map((m) => [m.queue, m.message.batchId])).toEqual([['keel-transfer-apply', batchId]]);
    await transferApply(second[0]!.message, context('transferApply'));
    expect(await fx.t.rt.transfers!.getBatch(batchId)).toMatchObject({ state: 'committed', appliedCount: 5 });
    expect(await rows()).toBe(5);
  });

  it('a batch the journal holds untouched for less than the stale age is not re-posted by a host an hour ahead of it', async () => {
    // Untouched for less than KEEL_TRANSFER_STALE_MS by the journal's clock: nothing, however far ahead the host.
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(6, 8) n`);
    const started = await fx.call('POST', 'transfers/items/start', {});
    takeAll();
    await skewed(HOUR, () => maintenance(timer, context('maintenance')));
    expect(takeAll()).toEqual([]);
    await transferStage({ batchId: started.body.batch.batchId }, context('transferStage'));
    await transferApply(takeAll()[0]!.message, context('transferApply'));
    expect(await rows()).toBe(8);
  });

  it('catch-up: a host two hours ahead of the journal goes on; one two hours behind ends a chain at its budget', async () => {
    await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(9, 38) n`);
    const r = await fx.call('POST', 'transfers/items/start', {}); // (8, 18]
    const take = () => takeAll()[0]!;
    await transferStage(take().message, context('transferStage'));
    // Ahead: the chain has run for seconds by the journal's clock, far under its budget: (18, 28] is created.
    await skewed(2 * HOUR, () => transferApply(take().message, context('transferApply')));
    const next = take();
    expect(next).toMatchObject({ queue: 'keel-transfer-stage', message: { chainRows: 10 } });
    expect(next.message.chainStartedAt).toBe(Date.parse(r.body.batch.createdAt));
    await transferStage(next.message, context('transferStage'));
    const apply = take();
    // Behind: the chain's first batch was created 11 minutes ago by the journal's clock (budget 10): it ends here,
    // although the host's clock says it has not started yet.
    const chainStartedAt =
      Date.parse((await fx.t.rt.transfers!.getBatch(next.message.batchId))!.createdAt) - 11 * 60_000;
    await skewed(-2 * HOUR, () => transferApply({ ...apply.message, chainStartedAt }, context('transferApply')));
    expect(takeAll()).toEqual([]);
    expect(await rows()).toBe(28);
  });
});

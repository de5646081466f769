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
import { realNow, skewed } from '../support/skewedClock.js';
import { maintenance } from '../../functions/maintenance.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { context, timer } from './support.js';
import { ITEMS_DDL, useItemsTransfer } from './itemsTransfer.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { telemetry } from '../../shared/telemetry/index.js';
import { runTransferSchedule } from '../../shared/app/transferSchedule.js';
import { reconcileTelemetry } from '../../shared/app/telemetryHooks.js';
import type { BatchView } from '../../shared/transfer/view.js';

const STALE_MS = 1000;
const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// The transfer the timer runs: its own daily schedule at an occurrence 12 hours from now (never due during the test
// but for its first batch, whatever the time of day the test runs).
const inTwelveHours = new Date(realNow() + 12 * HOUR);
const CLOCK_SCHEDULE = `0 ${inTwelveHours.getUTCMinutes()} ${inTwelveHours.getUTCHours()} * * *`;
const CLOCK_DDL = `create table public.clock (id bigint primary key, name text not null)`;

const fx = useItemsTransfer({
  label: 'fn_clock_skew',
  batchSize: 10,
  sourceDdl: [ITEMS_DDL, CLOCK_DDL],
  moreTransfers: (items) => [
    {
      ...items,
      name: 'clock',
      source: { ...items.source, table: 'public.clock' },
      target: { ...items.target, table: 'public.clock' },
      batchSize: 10,
      schedule: CLOCK_SCHEDULE,
    },
  ],
  env: {
    KEEL_SCHEDULED_TRANSFERS: 'clock',
    KEEL_TRANSFER_ROWS_BEHIND_CAP: '0',
    KEEL_TRANSFER_STALE_MS: String(STALE_MS),
    KEEL_TRANSFER_CATCHUP_MS: '600000', // 10 minutes
    KEEL_TRANSFER_DIRECT_APPLY: 'false', // a staged batch too (maintenance reconciles it before re-posting)
  },
});

type Sent = { queue: string; message: Record<string, unknown> & { batchId: string } };
const takeAll = () => fx.t.queues.sent.splice(0) as Sent[];
const rows = async () => (await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n as number;

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

  it('the transfer timer: stalled test, schedule, freshness gauge and secondsSinceCommit do not move with the host clock', async () => {
    const log = context('transferTimer');
    const tick = async (offsetMs: number) => (await skewed(offsetMs, () => runTransferSchedule(fx.t.rt, log)))[0]!;
    await fx.source.query(`insert into public.clock select n, 'clock-' || n from generate_series(1, 5) n`);
    // Its first batch (no batch yet: due), its stage message lost.
    expect(await tick(-3 * HOUR)).toMatchObject({ transfer: 'clock', action: 'created' });
    takeAll();
    // Untouched for more than KEEL_TRANSFER_STALE_MS by the journal's clock: a host three hours behind it resumes it
    // (before: not for three more hours).
    await sleep(STALE_MS + 200);
    expect(await tick(-3 * HOUR)).toMatchObject({ action: 'resumed' });
    await fx.pump();
    expect((await fx.target.query(`select count(*)::int as n from public.clock`)).rows[0].n).toBe(5);
    // New rows, and the schedule's next occurrence twelve hours away by the journal's clock: not due, for a host a
    // day ahead of the journal too (before: due, a batch created). The freshness it reports: behind since the commit,
    // which on the host's clock (the gauge's) is seconds ago, whichever way the host is off.
    await fx.source.query(`insert into public.clock select n, 'clock-' || n from generate_series(6, 8) n`);
    const fresh = vi.spyOn(telemetry, 'transferFreshness');
    for (const offset of [24 * HOUR, -24 * HOUR, 3 * HOUR, -3 * HOUR]) {
      fresh.mockClear();
      const hostNow = realNow() + offset;
      expect(await tick(offset)).toMatchObject({ transfer: 'clock', action: 'not_due' });
      const report = fresh.mock.calls.at(-1)![0];
      expect(report.transfer).toBe('clock');
      const age = hostNow - report.behindSince!;
      expect(age).toBeGreaterThanOrEqual(-5_000);
      expect(age).toBeLessThan(120_000);
      // GET /transfers: seconds since the commit, on the journal's clock.
      const listed = await skewed(offset, () => fx.call('GET', 'transfers'));
      const clock = listed.body.items.find((x: { name: string }) => x.name === 'clock');
      expect(clock.secondsSinceCommit).toBeGreaterThanOrEqual(0);
      expect(clock.secondsSinceCommit).toBeLessThan(120);
    }
    expect(takeAll()).toEqual([]);
    // The timer's function too (its default clock): nothing due.
    await skewed(24 * HOUR, () => transferTimer(timer, context('transferTimer')));
    expect(takeAll()).toEqual([]);
  });

  it("maintenance's reconcile telemetry: how long a batch has been unresolved, on the journal's clock", async () => {
    // (Before: the host's clock minus the journal's applyStartedAt, an hour off for a host an hour off.)
    const reported = vi.spyOn(telemetry, 'reconcileOutcome');
    const journalNow = realNow();
    const view = {
      transfer: 'items',
      batchId: 'batch-skew',
      state: 'unresolved',
      applyStartedAt: new Date(journalNow - 600_000).toISOString(),
    } as BatchView;
    for (const offset of [HOUR, -HOUR]) {
      reported.mockClear();
      await skewed(offset, async () => reconcileTelemetry(view, journalNow));
      expect(reported.mock.calls).toEqual([
        [{ transfer: 'items', outcome: 'unresolved', batchId: 'batch-skew', unresolvedForMs: 600_000 }],
      ]);
    }
  });
});

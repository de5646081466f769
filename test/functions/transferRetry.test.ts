// Retries that happen (issue 26, item 2): an apply that fails with a retryable error (a foreign key violation on
// the target: the parent row is not there yet) is retried with backoff by the apply step itself, and a batch whose
// retry message was lost is resumed by maintenance and the timer, although maintenance's reconcile keeps
// refreshing its updated_at. The functions are called through their real entry points in production order:
// timer -> stage -> apply, maintenance every pass; the queue is the recorder of test/functions/support.ts, and a
// delayed message is delivered only once its delay has passed.
import { describe, expect, it } from 'vitest';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { transferTimer } from '../../functions/transferTimer.js';
import { maintenance } from '../../functions/maintenance.js';
import { context, timer } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const BASE_MS = 1000;
const MAX_MS = 4000;
const STALE_MS = 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const fx = useItemsTransfer({
  label: 'fn_retry',
  sourceDdl: [`create table public.items (id bigint primary key, parent_id bigint not null, name text not null)`],
  targetDdl: [
    `create table public.parents (id bigint primary key)`,
    `create table public.items (id bigint primary key, parent_id bigint not null references public.parents(id), name text not null)`,
  ],
  columns: ['id', 'parent_id', 'name'],
  env: {
    KEEL_SCHEDULED_TRANSFERS: '*',
    KEEL_TRANSFER_STALE_MS: String(STALE_MS),
    KEEL_TRANSFER_RETRY_BASE_MS: String(BASE_MS),
    KEEL_TRANSFER_RETRY_MAX_MS: String(MAX_MS),
    KEEL_TRANSFER_DIRECT_APPLY: 'false', // the apply step's retries (the staged flow)
  },
});

type Sent = {
  queue: string;
  message: { batchId: string; retry?: number; afterAttempt?: number };
  delaySeconds: number;
};
function takeAll(): Sent[] {
  return fx.t.queues.sent.splice(0) as Sent[];
}
async function deliver(m: Sent): Promise<void> {
  if (m.queue === 'keel-transfer-stage') await transferStage(m.message, context('transferStage'));
  else await transferApply(m.message, context('transferApply'));
}
async function batch(id: string) {
  return (await fx.t.rt.transfers!.getBatch(id))!;
}

describe('retries of a failed apply', () => {
  it('the apply step retries a foreign-key failure with backoff; committed within the backoff once the parent exists', async () => {
    await fx.source.query(`insert into public.items select n, 1 + n % 5, 'item-' || n from generate_series(1, 50) n`);
    await fx.target.query(`insert into public.parents values (1), (2), (3), (4)`); // parent 5 is missing

    await transferTimer(timer, context('transferTimer'));
    const [created] = takeAll();
    expect(created).toMatchObject({ queue: 'keel-transfer-stage', delaySeconds: 0 });
    const batchId = created!.message.batchId;
    await deliver(created!);
    const [applyMsg] = takeAll();
    expect(applyMsg).toMatchObject({ queue: 'keel-transfer-apply', message: { batchId } });

    // Attempt 1 fails on the foreign key; the batch is known not applied and still staged; the step re-posts it.
    await deliver(applyMsg!);
    expect(await batch(batchId)).toMatchObject({ state: 'staged', attempts: 1, lastErrorCode: '23503' });
    const [retry1, ...rest1] = takeAll();
    expect(rest1).toEqual([]);
    expect(retry1).toEqual({
      queue: 'keel-transfer-apply',
      message: { batchId, retry: 1, afterAttempt: 1 },
      delaySeconds: BASE_MS / 1000,
    });

    // Maintenance runs meanwhile (as it does every minute) and reconciles the staged batch: updated_at moves.
    await sleep(STALE_MS + 100);
    const before = await batch(batchId);
    await maintenance(timer, context('maintenance'));
    const afterMaint = await batch(batchId);
    expect(afterMaint.state).toBe('staged');
    expect(Date.parse(afterMaint.updatedAt)).toBeGreaterThan(Date.parse(before.updatedAt));
    // It also re-posts it (no progress for KEEL_TRANSFER_STALE_MS), tagged with the attempt it follows.
    const fromMaint = takeAll();
    expect(fromMaint).toEqual([
      { queue: 'keel-transfer-apply', message: { batchId, afterAttempt: 1 }, delaySeconds: 0 },
    ]);

    // The retry arrives while the parent is still missing: attempt 2 fails; the next retry waits twice as long.
    await deliver(retry1!);
    expect(await batch(batchId)).toMatchObject({ state: 'staged', attempts: 2 });
    const [retry2] = takeAll();
    expect(retry2).toEqual({
      queue: 'keel-transfer-apply',
      message: { batchId, retry: 2, afterAttempt: 2 },
      delaySeconds: (2 * BASE_MS) / 1000,
    });
    // Maintenance's message was overtaken by attempt 2: dropped, nothing applied, nothing posted.
    await deliver(fromMaint[0]!);
    expect(await batch(batchId)).toMatchObject({ state: 'staged', attempts: 2 });
    expect(takeAll()).toEqual([]);

    // The fault clears; the pending retry commits the batch when its delay has passed.
    await fx.target.query(`insert into public.parents values (5)`);
    const cleared = Date.now();
    await sleep(retry2!.delaySeconds * 1000);
    await deliver(retry2!);
    const done = await batch(batchId);
    expect(done).toMatchObject({ state: 'committed', appliedCount: 50, attempts: 3 });
    expect(Date.parse(done.committedAt!) - cleared).toBeLessThan(MAX_MS + 1000);
    expect((await fx.target.query(`select count(*)::int as n from public.items`)).rows[0].n).toBe(50);
    expect(takeAll()).toEqual([]);
  });

  it('a lost retry message: maintenance and the timer resume the batch by its last progress, not updated_at', async () => {
    await fx.source.query(`insert into public.items select n, 6, 'item-' || n from generate_series(51, 60) n`);
    await transferTimer(timer, context('transferTimer'));
    const [created] = takeAll();
    const batchId = created!.message.batchId;
    await deliver(created!);
    await deliver(takeAll()[0]!); // apply: parent 6 missing
    expect(await batch(batchId)).toMatchObject({ state: 'staged', attempts: 1, lastErrorCode: '23503' });
    expect(takeAll()).toHaveLength(1); // the retry message, lost here

    await fx.target.query(`insert into public.parents values (6)`);
    // Maintenance runs every pass and refreshes updated_at each time it reconciles; under the old rule (untouched
    // for KEEL_TRANSFER_STALE_MS) the timer would never see the batch as stale.
    await sleep(STALE_MS + 100);
    await maintenance(timer, context('maintenance'));
    const fromMaint = takeAll();
    expect(fromMaint).toEqual([
      { queue: 'keel-transfer-apply', message: { batchId, afterAttempt: 1 }, delaySeconds: 0 },
    ]);
    const touched = await batch(batchId);
    expect(Date.now() - Date.parse(touched.updatedAt)).toBeLessThan(STALE_MS);
    // The timer fires right after (both at second 0): it resumes the batch too.
    const ctx = context('transferTimer');
    await transferTimer(timer, ctx);
    const fromTimer = takeAll();
    expect(fromTimer).toEqual([
      { queue: 'keel-transfer-apply', message: { batchId, afterAttempt: 1 }, delaySeconds: 0 },
    ]);
    expect(ctx.logs.map((l) => l.text).join('\n')).toContain('"action":"resumed"');
    // Both messages are delivered: one applies, the other finds attempt 2 done and is dropped.
    await deliver(fromTimer[0]!);
    await deliver(fromMaint[0]!);
    expect(await batch(batchId)).toMatchObject({ state: 'committed', appliedCount: 10, attempts: 2 });
    expect(takeAll()).toEqual([]);
  });
});

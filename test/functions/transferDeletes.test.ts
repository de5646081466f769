// Deletes through the ops routes (docs/transfer.md "Deletes"): a changes transfer whose next window expired at the
// source is started (409 changes_expired, telling the operator to re-baseline), re-baselined with
// POST /transfers/{name}/rebaseline (operator only) and moved through the real queue steps, its mirror deleting what
// the lost changes deleted; a key transfer with keyCompare apply reports and deletes the keys gone at the source with
// POST /transfers/{name}/compare-keys.
import { describe, expect, it, vi } from 'vitest';
import { telemetry } from '../../shared/telemetry/index.js';
import { READER } from './support.js';
import { ITEMS_DDL, keyCompareTransfer, useItemsTransfer } from './itemsTransfer.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { keyCompareDue, runTransferSchedule } from '../../shared/app/transferSchedule.js';

const THINGS_DDL = ITEMS_DDL.replace('public.items', 'public.things');
const KC_DDL = ITEMS_DDL.replace('public.items', 'public.kc');
const BL_DDL = ITEMS_DDL.replace('public.items', 'public.bl');
const KR_DDL = ITEMS_DDL.replace('public.items', 'public.kr');

const fx = useItemsTransfer({
  label: 'fn_deletes',
  sourceDdl: [ITEMS_DDL, THINGS_DDL, KC_DDL, BL_DDL, KR_DDL],
  batchSize: 10,
  seed: async (source) => {
    await migratePostgresChangeCapture(source);
    await source.query(`insert into public.things select n, 'thing-' || n from generate_series(1, 20) n`);
    await source.query(`select keel_changes.enable('public.things', array['id'])`);
    await source.query(`insert into public.kc select n, 'kc-' || n from generate_series(1, 20) n`);
    await source.query(`insert into public.bl select n, 'bl-' || n from generate_series(1, 55) n`);
    await source.query(`insert into public.kr select n, 'kr-' || n from generate_series(1, 20) n`);
    await source.query(`select keel_changes.enable('public.bl', array['id'])`);
  },
  moreTransfers: (items) => [
    {
      ...items,
      name: 'things',
      source: { ...items.source, table: 'public.things' },
      target: { ...items.target, table: 'public.things' },
      boundary: { kind: 'changes' },
    },
    keyCompareTransfer(items, 'kc'),
    {
      ...items,
      name: 'bl',
      source: { ...items.source, table: 'public.bl' },
      target: { ...items.target, table: 'public.bl' },
      boundary: { kind: 'changes' },
      batchSize: 10,
    },
    // key-set comparisons run by the timer (02:30 UTC): one reports only, the other deletes
    keyCompareTransfer(items, 'kr', 'report'),
  ],
});
const { call, pump } = fx;
const count = async (table: string) =>
  (await fx.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n as number;

describe('deletes through the ops routes', () => {
  it('an expired changes transfer answers 409 changes_expired; the re-baseline mirrors the table', async () => {
    expect((await call('POST', 'transfers/things/start', {})).status).toBe(202);
    await pump();
    expect(await count('things')).toBe(20);
    await fx.source.query(`delete from public.things where id <= 3`);
    await fx.source.query(`select keel_changes.current_version('public.things')`);
    await fx.source.query(
      `select keel_changes.retain('public.things', (select current_version from keel_changes.tracked where source_table = 'public.things'::regclass))`,
    );
    const expired = await call('POST', 'transfers/things/start', {});
    expect(expired.status).toBe(409);
    expect(expired.body.code).toBe('changes_expired');
    expect(expired.body.message).toMatch(/rebaseline/);
    expect((await call('POST', 'transfers/things/rebaseline', {}, { 'x-ms-client-principal': READER })).status).toBe(
      403,
    );
    const rb = await call('POST', 'transfers/things/rebaseline', {});
    expect(rb.status).toBe(202);
    expect(rb.body.batch.boundary.low).toMatch(/^rebaseline@\d+$/);
    await pump();
    expect((await call('GET', `transfers/batches/${rb.body.batch.batchId}`)).body).toMatchObject({
      state: 'committed',
    });
    expect(await count('things')).toBe(17);
    // nothing moved since: no batch
    expect((await call('POST', 'transfers/things/rebaseline', {})).body).toMatchObject({ started: false });
    // and the chain goes on from the re-baseline
    await fx.source.query(`delete from public.things where id = 10`);
    expect((await call('POST', 'transfers/things/start', {})).status).toBe(202);
    await pump();
    expect(await count('things')).toBe(16);
  });

  it('compare-keys reports the keys gone at the source, then deletes them', async () => {
    await call('POST', 'transfers/kc/start', {});
    await pump(); // catch-up: (,10], (10,20]
    expect(await count('kc')).toBe(20);
    await fx.source.query(`delete from public.kc where id in (5, 15)`);
    const report = await call('POST', 'transfers/kc/compare-keys', {});
    expect(report).toMatchObject({ status: 200, body: { goneAtSource: 2, deleted: 0 } });
    expect(await count('kc')).toBe(20);
    const applied = await call('POST', 'transfers/kc/compare-keys', { apply: true });
    expect(applied.body).toMatchObject({ goneAtSource: 2, deleted: 2 });
    expect(await count('kc')).toBe(18);
    // a transfer without keyCompare: 409
    expect((await call('POST', 'transfers/items/compare-keys', {})).status).toBe(409);
  });

  it('a windowed baseline: its version expiring mid-way is a start_failed alert and a 409; the re-baseline runs to its end and on into the change windows after one call', async () => {
    const startFailed = vi.spyOn(telemetry, 'transferStartFailed');
    const first = await call('POST', 'transfers/bl/start', {});
    expect(first.status).toBe(202);
    expect(first.body.batch.boundary).toMatchObject({ low: null, high: expect.stringMatching(/^baseline@\d+:10$/) });
    // Retention passes the baseline's version before its second window: the chain stops at catch-up, alerting.
    await fx.source.query(`delete from public.bl where id = 50`);
    await fx.source.query(`select keel_changes.current_version('public.bl')`);
    await fx.source.query(
      `select keel_changes.retain('public.bl', (select current_version from keel_changes.tracked where source_table = 'public.bl'::regclass))`,
    );
    await pump();
    expect(await count('bl')).toBe(10);
    expect(startFailed.mock.calls.map((c) => c[0])).toEqual([
      {
        transfer: 'bl',
        source: 'catchup',
        code: 'changes_expired',
        message: expect.stringMatching(/baseline in progress.*Re-baseline/),
      },
    ]);
    const expired = await call('POST', 'transfers/bl/start', {});
    expect(expired).toMatchObject({ status: 409, body: { code: 'changes_expired' } });

    // The preview says what a re-baseline would do and creates nothing (operator only, like the re-baseline).
    const before = (await call('GET', 'transfers/batches?transfer=bl&limit=100')).body.items.length;
    const preview = await call('POST', 'transfers/bl/rebaseline', { preview: true });
    expect(preview).toMatchObject({
      status: 200,
      body: { preview: true, possible: true, windowed: true, openBatch: null, paused: false },
    });
    expect(preview.body.after).toMatch(/^baseline@\d+:10$/);
    expect(preview.body.effect).toMatch(/key windows of up to 10 rows.*mirror/);
    expect((await call('GET', 'transfers/batches?transfer=bl&limit=100')).body.items.length).toBe(before);
    expect(
      (await call('POST', 'transfers/bl/rebaseline', { preview: true }, { 'x-ms-client-principal': READER })).status,
    ).toBe(403);
    expect((await call('POST', 'transfers/kc/rebaseline', { preview: true })).status).toBe(409); // not a changes transfer

    // The re-baseline: one call, then the queue steps alone run every key window and the first change window.
    const rb = await call('POST', 'transfers/bl/rebaseline', {});
    expect(rb.status).toBe(202);
    expect(rb.body.batch.boundary.low).toMatch(/^rebaseline@baseline@\d+:10$/);
    await fx.source.query(`delete from public.bl where id = 42`); // during the re-baseline, in a later key window
    await fx.source.query(`insert into public.bl values (500, 'bl-500')`); // past the last key
    // while its first window is open, the preview says a re-baseline is refused
    expect((await call('POST', 'transfers/bl/rebaseline', { preview: true })).body).toMatchObject({
      possible: false,
      openBatch: { batchId: rb.body.batch.batchId },
      effect: expect.stringMatching(/^Refused: .* has an open batch/),
    });
    await pump();
    expect(await count('bl')).toBe(54); // 1..55 without 42 and 50, and 500
    const batches = (await call('GET', 'transfers/batches?transfer=bl&state=committed&limit=100')).body.items as {
      boundary: { low: string | null; high: string };
    }[];
    const chain = batches.reverse().slice(1); // oldest first, after the first baseline's one window
    expect(chain[0]!.boundary.low).toBe(rb.body.batch.boundary.low);
    for (let i = 1; i < chain.length; i++) expect(chain[i]!.boundary.low).toBe(chain[i - 1]!.boundary.high);
    const version = /^baseline@(\d+):/.exec(rb.body.batch.boundary.high)![1];
    const lastKeyWindow = chain.findIndex((b) => b.boundary.high === version);
    expect(lastKeyWindow).toBe(5); // 53 rows in windows of 10
    expect(chain.length).toBe(7); // and the first change window, from the version captured before the first
    expect(chain[6]!.boundary.low).toBe(version);
  });

  it('keyCompareSchedule: the timer tick after its occurrence compares, reports a keys_gone event, and deletes only with keyCompare apply', async () => {
    // due: an occurrence in (the timer's previous tick, now] (KEEL_TRANSFER_SCHEDULE hourly here)
    expect(keyCompareDue('0 30 2 * * *', '0 0 * * * *', new Date('2026-12-03T03:00:00.200Z'))).toBe(true);
    expect(keyCompareDue('0 30 2 * * *', '0 0 * * * *', new Date('2026-12-03T02:00:00.200Z'))).toBe(false);
    expect(keyCompareDue('0 30 2 * * *', '0 0 * * * *', new Date('2026-12-03T04:00:00.200Z'))).toBe(false);
    for (const name of ['kr', 'kc']) {
      expect((await call('POST', `transfers/${name}/start`, {})).status).toBeLessThan(300);
      await pump();
    }
    expect(await count('kr')).toBe(20);
    await fx.source.query(`delete from public.kr where id in (4, 14)`);
    await fx.source.query(`delete from public.kc where id = 8`);
    const keysGone = vi.spyOn(telemetry, 'transferKeysGone');
    const log = { info: () => undefined, warn: vi.fn(), error: vi.fn(), debug: () => undefined } as never;
    await runTransferSchedule(fx.t.rt, log, new Date('2026-12-03T04:00:00.200Z')); // not due: nothing compared
    expect(keysGone).not.toHaveBeenCalled();
    await runTransferSchedule(fx.t.rt, log, new Date('2026-12-03T03:00:00.200Z'));
    expect(keysGone.mock.calls.map((c) => c[0]).sort((a, b) => a.transfer.localeCompare(b.transfer))).toEqual([
      { transfer: 'kc', windows: 2, goneAtSource: 1, deleted: 1, applied: true },
      { transfer: 'kr', windows: 2, goneAtSource: 2, deleted: 0, applied: false },
    ]);
    expect(await count('kr')).toBe(20); // reported, not deleted
    expect(await count('kc')).toBe(17); // 5 and 15 earlier, 8 now
    // a paused transfer is not compared
    keysGone.mockClear();
    expect((await call('POST', 'transfers/kr/pause', {})).status).toBe(200);
    await runTransferSchedule(fx.t.rt, log, new Date('2026-12-04T03:00:00.200Z'));
    expect(keysGone.mock.calls.map((c) => c[0].transfer)).toEqual(['kc']);
  });
});

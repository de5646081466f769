// Deletes through the ops routes (docs/transfer.md "Deletes"): a changes transfer whose next window expired at the
// source is started (409 changes_expired, telling the operator to re-baseline), re-baselined with
// POST /transfers/{name}/rebaseline (operator only) and moved through the real queue steps, its mirror deleting what
// the lost changes deleted; a key transfer with keyCompare apply reports and deletes the keys gone at the source with
// POST /transfers/{name}/compare-keys.
import { describe, expect, it } from 'vitest';
import { READER } from './support.js';
import { ITEMS_DDL, useItemsTransfer } from './itemsTransfer.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';

const THINGS_DDL = ITEMS_DDL.replace('public.items', 'public.things');
const KC_DDL = ITEMS_DDL.replace('public.items', 'public.kc');

const fx = useItemsTransfer({
  label: 'fn_deletes',
  sourceDdl: [ITEMS_DDL, THINGS_DDL, KC_DDL],
  batchSize: 10,
  seed: async (source) => {
    await migratePostgresChangeCapture(source);
    await source.query(`insert into public.things select n, 'thing-' || n from generate_series(1, 20) n`);
    await source.query(`select keel_changes.enable('public.things', array['id'])`);
    await source.query(`insert into public.kc select n, 'kc-' || n from generate_series(1, 20) n`);
  },
  moreTransfers: (items) => [
    {
      ...items,
      name: 'things',
      source: { ...items.source, table: 'public.things' },
      target: { ...items.target, table: 'public.things' },
      boundary: { kind: 'changes' },
    },
    {
      ...items,
      name: 'kc',
      source: { ...items.source, table: 'public.kc' },
      target: { ...items.target, table: 'public.kc' },
      batchSize: 10,
      keyCompare: 'apply',
    },
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
      `select keel_changes.retain('public.things', (select current_version from keel_changes.tracked))`,
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
});

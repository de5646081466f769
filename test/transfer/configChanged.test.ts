// A transfer's configuration changed between the stage and the apply of a running backfill's batch (a redeploy with
// another column mapping or key): the staged batch can never be applied as it was staged. Its apply releases it
// like any terminal failure -- target_incompatible (or schema_drift) recorded, the final fence written, the window
// released -- instead of throwing before anything was recorded (the step failing at every retry while the batch
// stayed staged for good). The next batch then covers the window under the new configuration (after
// acceptSchemaHash, as for any drift), every row written once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import { createLane, LANE_WRITES_DDL, laneProblems, laneTransfer, setupDatabases, type Env } from './helpers.js';

const ALL = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'];
const cols = (names: string[]) => names.map((c) => ({ source: c, target: c }));

describe('configuration changed between the stage and the apply of a batch', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_cfg');
    await migratePostgresChangeCapture(env.source);
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  const service = (t: TransferConfig) =>
    new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });

  it('a mapped column dropped from the mapping: the staged batch fails (target_incompatible), its window is covered again', async () => {
    await createLane(env, 'cfg_cols', 30);
    const v1 = laneTransfer('cfg_cols', { batchSize: 10, columns: cols(ALL) });
    const a = service(v1);
    expect((await a.run((await a.createBatch(v1.name)).batchId)).state).toBe('committed');
    const open = await a.createBatch(v1.name);
    expect((await a.stage(open.batchId)).state).toBe('staged');
    await a.close();

    // Redeployed without `note` (the target column keeps what it had).
    const v2 = laneTransfer('cfg_cols', { batchSize: 10, columns: cols(ALL.filter((c) => c !== 'note')) });
    const b = service(v2);
    const after = await b.apply(open.batchId);
    // (The target refuses first: its staging table holds the batch's rows in the old mapping's columns.)
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
    expect(after.lastError).toMatch(/another column mapping/);
    // The window is released; the next start asks for the drift to be accepted, as for any drift.
    const refused = await b.createBatch(v2.name).catch((e: unknown) => e);
    expect(isTransferError(refused, 'schema_drift')).toBe(true);
    const hash = (refused as { detail: { current: string } }).detail.current;
    await b.close();

    const v3 = laneTransfer('cfg_cols', {
      batchSize: 10,
      columns: cols(ALL.filter((c) => c !== 'note')),
      acceptSchemaHash: hash,
    });
    const c = service(v3);
    for (let n = 0; n < 2; n++) {
      const next = await c.createBatch(v3.name);
      if (n === 0) expect([next.boundary.low, next.boundary.high]).toEqual([open.boundary.low, open.boundary.high]);
      expect((await c.run(next.batchId)).state).toBe('committed');
    }
    // Every row once (the rows after the change without `note`, which is no longer mapped).
    const q = await env.target.query(
      `select count(*)::int as n, count(note)::int as notes, (select max(writes) from public.lane_writes where tbl = 'cfg_cols')::int as w from public.cfg_cols`,
    );
    expect(q.rows[0]).toEqual({ n: 30, notes: 8, w: 1 }); // rows 1..10: every 5th note is null
    await c.close();
  });

  it('a key without a unique index on the target: the staged batch fails with target_incompatible', async () => {
    await createLane(env, 'cfg_key', 20);
    const v1 = laneTransfer('cfg_key', { batchSize: 10 });
    const a = service(v1);
    const open = await a.createBatch(v1.name);
    expect((await a.stage(open.batchId)).state).toBe('staged');
    await a.close();
    const v2 = laneTransfer('cfg_key', { batchSize: 10, keyColumns: ['customer'] });
    const b = service(v2);
    const after = await b.run(open.batchId);
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'target_incompatible']);
    expect(after.lastError).toMatch(/customer/);
    await b.close();
    // Back to the old key: the window is covered by a new batch.
    const c = service(v1);
    for (let n = 0; n < 2; n++) expect((await c.run((await c.createBatch(v1.name)).batchId)).state).toBe('committed');
    expect(await laneProblems(env, 'cfg_key', 20)).toEqual([]);
    await c.close();
  });

  // The stage checked the batch's keys under the key columns of its time; the apply merges on today's. Staged rows
  // twice under the new key made the apply fail with the target's unique violation (or MERGE's 21000 when the
  // target held the key already) at every retry, the batch staged for good. Refused once for good instead.
  it.each([
    ['the target holds none of the keys (a unique violation)', false],
    ['the target holds one of them (MERGE meets a row twice)', true],
  ])('the key columns changed to ones the staged rows repeat, %s: duplicate_keys, window released', async (_, held) => {
    const table = held ? 'cfg_rekey_held' : 'cfg_rekey';
    await env.source.query(`create table public.${table} (id bigint primary key, code text not null, v text)`);
    await env.target.query(`create table public.${table} (id bigint, code text not null, v text)`);
    await env.target.query(`create unique index on public.${table} (id)`);
    await env.source.query(
      `insert into public.${table} select n, 'c' || (n % 3), 'v' || n from generate_series(1, 12) n`,
    );
    const transfer = (keyColumns: string[]) =>
      laneTransfer(table, { batchSize: 6, keyColumns, columns: cols(['id', 'code', 'v']) });
    const a = service(transfer(['id']));
    const open = await a.createBatch(table);
    expect((await a.stage(open.batchId)).state).toBe('staged');
    await a.close();

    // Redeployed keyed on code, with the unique index it needs on the target.
    if (held) await env.target.query(`insert into public.${table} values (100, 'c1', 'old')`);
    await env.target.query(`create unique index on public.${table} (code)`);
    const b = service(transfer(['code']));
    const after = await b.apply(open.batchId);
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'duplicate_keys']);
    expect(after.lastError).toMatch(/\(c1\)/);
    // Nothing of the batch applied; the released window's next batch is refused at its stage the same way.
    expect((await env.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(held ? 1 : 0);
    const next = await b.run((await b.createBatch(table)).batchId);
    expect([next.boundary.low, next.boundary.high, next.state, next.lastErrorCode]).toEqual([
      open.boundary.low,
      open.boundary.high,
      'failed',
      'duplicate_keys',
    ]);
    await b.close();
  });
  // A NULL part of the new key raises nothing at the apply: the merge matches no target row and inserts it beside
  // the others (the unique index lets NULLs repeat), so nothing failed to catch. The batch's recorded schema says it
  // was staged under other key columns: its staged keys are asked before the apply, and the NULL refused for good.
  it('the key columns changed to ones a staged row has NULL (none repeated): duplicate_keys naming them, nothing applied', async () => {
    const table = 'cfg_rekey_null';
    await env.source.query(`create table public.${table} (id bigint primary key, code text, v text)`);
    await env.target.query(`create table public.${table} (id bigint, code text, v text)`);
    await env.target.query(`create unique index on public.${table} (id)`);
    await env.source.query(
      `insert into public.${table} select n, case when n = 4 then null else 'c' || n end, 'v' || n from generate_series(1, 6) n`,
    );
    const transfer = (keyColumns: string[]) =>
      laneTransfer(table, { batchSize: 6, keyColumns, columns: cols(['id', 'code', 'v']) });
    const a = service(transfer(['id']));
    const open = await a.createBatch(table);
    expect((await a.stage(open.batchId)).state).toBe('staged');
    await a.close();

    await env.target.query(`create unique index on public.${table} (code)`);
    const b = service(transfer(['code']));
    const after = await b.apply(open.batchId);
    expect([after.state, after.lastErrorCode]).toEqual(['failed', 'duplicate_keys']);
    expect(after.lastError).toMatch(/key columns \(code\) \(\(NULL\)\)/);
    expect((await env.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(0);
    // Fixed at the source: the released window is covered again under the new key, every row once.
    await env.source.query(`update public.${table} set code = 'c4' where id = 4`);
    const next = await b.run((await b.createBatch(table)).batchId);
    expect([next.boundary.low, next.boundary.high, next.state]).toEqual([
      open.boundary.low,
      open.boundary.high,
      'committed',
    ]);
    const q = `select count(*)::int as n, count(code)::int as codes from public.${table}`;
    expect((await env.target.query(q)).rows[0]).toEqual({ n: 6, codes: 6 });
    await b.close();
  });

  // Nor can it change column within its kind: the last committed high is a value of the old column, and read as a
  // bound of the new one the next windows skip or repeat rows (here: a position column counting down from 1000,
  // after "10" every row again). The batch's recorded schema says which column its window is over.
  it('boundary column changed within its kind: the open batch fails schema_drift, starts and replays are refused naming boundary.column', async () => {
    const table = 'cfg_bcol';
    for (const db of [env.source, env.target])
      await db.query(`create table public.${table} (id bigint primary key, pos bigint not null, v text)`);
    await env.source.query(`insert into public.${table} select n, 1000 - n, 'v' || n from generate_series(1, 30) n`);
    const transfer = (column: string) =>
      laneTransfer(table, {
        batchSize: 10,
        keyColumns: ['id'],
        boundary: { kind: 'key', column },
        columns: cols(['id', 'pos', 'v']),
      });
    const a = service(transfer('id'));
    expect((await a.run((await a.createBatch(table)).batchId)).state).toBe('committed');
    const open = await a.createBatch(table); // (10, 20] over id, not staged yet
    await a.close();

    const b = service(transfer('pos'));
    const old = await b.run(open.batchId);
    expect([old.state, old.lastErrorCode]).toEqual(['failed', 'schema_drift']);
    expect(old.lastError).toMatch(/over boundary\.column id; the transfer now reads windows over pos/);
    const refused = await b.createBatch(table).catch((e: unknown) => e);
    expect(isTransferError(refused, 'invalid_state'), String(refused)).toBe(true);
    expect((refused as Error).message).toMatch(
      /boundary\.column id, but boundary\.column is now pos.*back to id.*new name/,
    );
    expect((refused as { detail: unknown }).detail).toMatchObject({
      field: 'boundary.column',
      recorded: 'id',
      current: 'pos',
    });
    const replay = await b.replay(table, null, '10', true).catch((e: unknown) => e);
    expect(isTransferError(replay, 'invalid_state'), String(replay)).toBe(true);
    await b.close();

    // Set back: the chain goes on after 10, every row once.
    const c = service(transfer('id'));
    for (let n = 0; n < 2; n++) expect((await c.run((await c.createBatch(table)).batchId)).state).toBe('committed');
    const q = `select count(*)::int as n, md5(string_agg(t::text, '|' order by id)) as h from public.${table} t`;
    expect((await env.target.query(q)).rows[0]).toEqual((await env.source.query(q)).rows[0]);
    await c.close();
  });

  // A window chain cannot change kind: the next window's low is the last committed high, read as a bound of the new
  // kind (a key read as a change version: "no rows after 20" until the source's version passed 20, then the changes
  // up to it skipped, with the key rows never sent). Refused, naming the way out; the open batch of the old kind
  // fails at its stage (its bounds would select other rows); a changes transfer is re-baselined.
  it('boundary kind changed, key to changes: the old batch fails, starts are refused, a re-baseline takes over', async () => {
    await createLane(env, 'cfg_kind', 30);
    await env.source.query(`select keel_changes.enable('public.cfg_kind', array['id'])`);
    const a = service(laneTransfer('cfg_kind', { batchSize: 10 }));
    expect((await a.run((await a.createBatch('cfg_kind')).batchId)).state).toBe('committed');
    const open = await a.createBatch('cfg_kind'); // (10, 20], not staged yet
    await a.close();
    await env.source.query(`update public.cfg_kind set note = 'changed' where id = 5`);

    const b = service(laneTransfer('cfg_kind', { batchSize: 10, boundary: { kind: 'changes' } }));
    const old = await b.run(open.batchId);
    expect([old.state, old.lastErrorCode]).toEqual(['failed', 'schema_drift']);
    const refused = await b.createBatch('cfg_kind').catch((e: unknown) => e);
    expect(isTransferError(refused, 'invalid_state'), String(refused)).toBe(true);
    expect((refused as Error).message).toMatch(/key window.*re-baseline/);
    const rb = await b.rebaseline('cfg_kind');
    expect(rb.boundary.low).toBe('rebaseline@10');
    for (let v = await b.run(rb.batchId), n = 0; ; n++) {
      expect(v.state).toBe('committed');
      const next = await b.tryCreateBatch('cfg_kind'); // the windowed baseline's next key windows
      if (!next || n > 10) break;
      v = await b.run(next.batchId);
    }
    const q = `select count(*)::int as n, md5(string_agg(t::text, '|' order by id)) as h from (select id, customer, amount, placed_at, flag, note, payload from public.cfg_kind) t`;
    expect((await env.target.query(q)).rows[0]).toEqual((await env.source.query(q)).rows[0]);
    await b.close();

    // Back to key windows: the last window is a change window now; no re-baseline for a key transfer.
    const c = service(laneTransfer('cfg_kind', { batchSize: 10 }));
    const back = await c.createBatch('cfg_kind').catch((e: unknown) => e);
    expect(isTransferError(back, 'invalid_state'), String(back)).toBe(true);
    expect((back as Error).message).toMatch(/changes window.*new name/);
    await c.close();
  });
});

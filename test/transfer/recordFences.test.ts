// Fences of the journal's record against writers that read it before someone else moved on:
// - a key comparison's deletes (keyCompare 'apply') and a replay staged from the source before the delete: the
//   replay's apply refuses once a comparison deleted keys in its range after the replay was created (its staged rows
//   may hold a row the source deleted: applied, it would come back), and a comparison leaves alone a window whose
//   replay apply is under way;
// - reconcile's move is fenced on the batch version it read: an apply started by another run meanwhile is not
//   moved back by the stale verdict;
// - a batch recorded before the schema flags (key, boundary) were: its missing flags are unknown, so its staged keys
//   are asked before the apply, and an unmapped boundary column is derived from the record's order;
// - the batch list is newest first by the journal's seq, whatever the stamps say;
// - replay chains are named by a sequence the journal issues, not the host's milliseconds.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { Adapters } from '../../shared/transfer/types.js';
import { createLane, LANE_WRITES_DDL, laneTransfer, makeService, setupDatabases, type Env } from './helpers.js';

const cols = (names: string[]) => names.map((c) => ({ source: c, target: c }));

describe('fences of the batch record', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_fence');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  async function commitAll(svc: TransferService, name: string): Promise<string[]> {
    const highs: string[] = [];
    for (let b = await svc.tryCreateBatch(name); b; b = await svc.tryCreateBatch(name)) {
      expect((await svc.run(b.batchId)).state).toBe('committed');
      highs.push(b.boundary.high);
    }
    return highs;
  }
  const has = async (table: string, id: number) =>
    (await env.target.query(`select count(*)::int as n from public.${table} where id = $1`, [id])).rows[0].n === 1;

  it('a replay staged before a key comparison deleted a key in its range: its apply refuses, the key stays deleted', async () => {
    const table = 'rf_kc';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 10, keyCompare: 'apply' });
    const svc = makeService(env, [t]);
    try {
      expect(await commitAll(svc, t.name)).toEqual(['10', '20']);
      // The operator replays (10, 20]: staged with row 15 as the source had it.
      const replay = (await svc.replay(t.name, '10', '20', false)).batch!;
      expect((await svc.stage(replay.batchId)).state).toBe('staged');
      // Row 15 is deleted at the source; the comparison deletes it on the target.
      await env.source.query(`delete from public.${table} where id = 15`);
      const report = await svc.compareKeys(t.name, { apply: true });
      expect(report.deleted).toBe(1);
      expect(await has(table, 15)).toBe(false);
      // The replay's staged row 15 is older than that delete: applied, it would bring the row back.
      const after = await svc.apply(replay.batchId);
      expect([after.state, after.lastErrorCode]).toEqual(['failed', 'invalid_state']);
      expect(after.lastError).toMatch(/key comparison deleted keys in its range.*replay the range again/);
      expect(await has(table, 15)).toBe(false);
      // Replayed again, from the source as it is now.
      const again = (await svc.replay(t.name, '10', '20', false)).batch!;
      expect((await svc.run(again.batchId)).state).toBe('committed');
      expect(await has(table, 15)).toBe(false);
      expect(await has(table, 16)).toBe(true);
    } finally {
      await svc.close();
    }
  });

  it("a key comparison leaves alone a window whose replay's apply is under way; the next one deletes", async () => {
    const table = 'rf_kc2';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 10, keyCompare: 'apply' });
    const svc = makeService(env, [t]);
    const journal = new PostgresTransferJournal(env.control);
    try {
      await commitAll(svc, t.name);
      const replay = (await svc.replay(t.name, '10', '20', false)).batch!;
      expect((await svc.stage(replay.batchId)).state).toBe('staged');
      // Its apply is on its way (counted, the call not answered yet).
      const started = await journal.transition(
        replay.batchId,
        ['staged'],
        'applying',
        { incrementAttempts: true },
        'apply_started',
      );
      expect(started?.state).toBe('applying');
      await env.source.query(`delete from public.${table} where id in (5, 15)`);
      const report = await svc.compareKeys(t.name, { apply: true });
      expect(report.windows.map((w) => [w.high, w.goneAtSource, w.deleted, w.deferredBy ?? null])).toEqual([
        ['10', 1, 1, null],
        ['20', 1, 0, replay.batchId],
      ]);
      expect(await has(table, 15)).toBe(true);
      // The apply's outcome is read from the target (not applied), and it goes on: nothing newer deleted in its
      // range, so it commits; the next comparison deletes row 15.
      expect((await svc.apply(replay.batchId)).state).toBe('committed');
      expect((await svc.compareKeys(t.name, { apply: true })).deleted).toBe(1);
      expect(await has(table, 15)).toBe(false);
    } finally {
      await journal.close();
      await svc.close();
    }
  });

  it("reconcile's verdict is not written over an apply another run started after reconcile read the batch", async () => {
    const table = 'rf_rec';
    await createLane(env, table, 10);
    const t = laneTransfer(table, { batchSize: 10 });
    const journal = new PostgresTransferJournal(env.control);
    let interleave: (() => Promise<void>) | null = null;
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect: (tc): Adapters => {
        const target = new PostgresTransferTarget(tc, env.target);
        const reconcile = target.reconcile.bind(target);
        target.reconcile = async (...a) => {
          const r = await reconcile(...a);
          const run = interleave;
          interleave = null;
          await run?.();
          return r;
        };
        return { source: new PostgresTransferSource(tc, env.source), target };
      },
    });
    try {
      const b = await svc.createBatch(t.name);
      expect((await svc.stage(b.batchId)).state).toBe('staged');
      // Attempt 1 was counted and its call never answered.
      await journal.transition(b.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
      // While reconcile asks the target about attempt 1, another run reconciles too and starts attempt 2.
      interleave = async () => {
        await journal.transition(
          b.batchId,
          ['applying'],
          'staged',
          { targetReconcileToken: null },
          'reconciled_not_applied',
        );
        await journal.transition(b.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
      };
      const r = await svc.reconcile(b.batchId);
      // The stale verdict (fenced through attempt 1) must not move attempt 2's batch back to staged.
      expect([r.state, r.attempts]).toEqual(['applying', 2]);
      const events = (await journal.events(b.batchId)).map((e) => e.event);
      expect(events.filter((e) => e === 'reconciled_not_applied')).toHaveLength(2); // the rival's, and the stale one noted
      const stale = (await journal.events(b.batchId)).at(-1)!;
      expect(stale.detail).toMatchObject({ stale: true });
      // Attempt 2 then goes its way: reconciled (not applied) and applied.
      expect((await svc.apply(b.batchId)).state).toBe('committed');
    } finally {
      await journal.close();
      await svc.close();
    }
  });

  // A journal from before the flags: strip them from a batch's recorded schema as an older version recorded it.
  const stripFlags = (batchId: string) =>
    env.control.query(
      `update keel.transfer_batches set schema_columns = (select jsonb_agg(c - 'key' - 'boundary' order by n)
         from jsonb_array_elements(schema_columns) with ordinality as e(c, n)) where batch_id = $1`,
      [batchId],
    );

  it('a batch recorded before the key flags, its key columns changed to ones a staged row has NULL: refused, nothing applied', async () => {
    const table = 'rf_oldkeys';
    await env.source.query(`create table public.${table} (id bigint primary key, code text, v text)`);
    await env.target.query(`create table public.${table} (id bigint, code text, v text)`);
    await env.target.query(`create unique index on public.${table} (id)`);
    await env.source.query(
      `insert into public.${table} select n, case when n = 4 then null else 'c' || n end, 'v' || n from generate_series(1, 6) n`,
    );
    const transfer = (keyColumns: string[]) =>
      laneTransfer(table, { batchSize: 6, keyColumns, columns: cols(['id', 'code', 'v']) });
    const a = makeService(env, [transfer(['id'])]);
    const open = await a.createBatch(table);
    expect((await a.stage(open.batchId)).state).toBe('staged');
    await a.close();
    await stripFlags(open.batchId);

    await env.target.query(`create unique index on public.${table} (code)`);
    const b = makeService(env, [transfer(['code'])]);
    try {
      const after = await b.apply(open.batchId);
      expect([after.state, after.lastErrorCode]).toEqual(['failed', 'duplicate_keys']);
      expect(after.lastError).toMatch(/\(\(NULL\)\)/);
      expect((await env.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(0);
    } finally {
      await b.close();
    }
    // Unchanged keys: an old batch is applied as before (its staged keys asked, none refused).
    const table2 = 'rf_oldkeys_same';
    await createLane(env, table2, 10);
    const c = makeService(env, [laneTransfer(table2, { batchSize: 10 })]);
    try {
      const ok = await c.createBatch(table2);
      expect((await c.stage(ok.batchId)).state).toBe('staged');
      await stripFlags(ok.batchId);
      expect((await c.apply(ok.batchId)).state).toBe('committed');
    } finally {
      await c.close();
    }
  });

  it('a committed batch recorded before the boundary flag, over an unmapped column: a move of boundary.column is still found', async () => {
    const table = 'rf_oldbound';
    await env.source.query(`create table public.${table} (id bigint primary key, pos bigint not null, v text)`);
    await env.target.query(`create table public.${table} (id bigint primary key, v text)`);
    await env.source.query(`insert into public.${table} select n, n * 10, 'v' || n from generate_series(1, 20) n`);
    const transfer = (column: string, over: Partial<TransferConfig> = {}) =>
      laneTransfer(table, {
        batchSize: 10,
        keyColumns: ['id'],
        boundary: { kind: 'key', column },
        columns: cols(['id', 'v']),
        ...over,
      });
    const a = makeService(env, [transfer('pos')]); // pos: the boundary, not mapped (last in the record)
    const first = await a.createBatch(table);
    expect((await a.run(first.batchId)).state).toBe('committed');
    expect(first.boundary.high).toBe('100');
    await a.close();
    await stripFlags(first.batchId);

    // Now over id (mapped): the committed high 100 is a pos value; read as an id, ids 11..20 would be skipped
    // ("no rows after 100"). The record's last column, pos, is mapped by nothing now: it was the boundary column.
    const b = makeService(env, [transfer('id')]);
    try {
      const refused = await b.createBatch(table).catch((e: unknown) => e);
      expect(isTransferError(refused, 'invalid_state'), String(refused)).toBe(true);
      expect((refused as Error).message).toMatch(
        new RegExp(
          `boundary\\.column pos, but boundary\\.column is now id.*batch ${first.batchId} was journalled before the boundary column was recorded`,
        ),
      );
    } finally {
      await b.close();
    }
    // Unchanged (pos still the boundary): the chain goes on, every row once.
    const c = makeService(env, [transfer('pos')]);
    try {
      await commitAll(c, table);
      expect((await env.target.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(20);
    } finally {
      await c.close();
    }
  });

  it('the batch list is newest first by seq, whatever created_at says (a journal clock stepped back)', async () => {
    const journal = new PostgresTransferJournal(env.control);
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const b = await journal.insertBatch({
          batchId: crypto.randomUUID(),
          transferName: 'rf_list',
          boundaryKind: 'key',
          boundaryLow: i === 0 ? null : String(i * 10),
          boundaryHigh: String((i + 1) * 10),
          schemaHash: 'h'.repeat(64),
          schemaColumns: [],
        });
        ids.push(b.batchId);
        await journal.transition(b.batchId, ['extracting'], 'failed', {}, 'failed');
      }
      // The clock stepped back an hour before the last insert.
      await env.control.query(
        `update keel.transfer_batches set created_at = created_at - interval '1 hour' where batch_id = $1`,
        [ids[2]],
      );
      const listed = await journal.list({ transfer: 'rf_list', limit: 10 });
      expect(listed.map((b) => b.batchId)).toEqual([...ids].reverse());
      const page = await journal.list({ transfer: 'rf_list', limit: 10, afterId: ids[2] });
      expect(page.map((b) => b.batchId)).toEqual([ids[1], ids[0]]);
    } finally {
      await journal.close();
    }
  });

  it('two replays in the same host millisecond (or after the host clock stepped back) each get a chain of their own', async () => {
    const table = 'rf_names';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 10 });
    const svc = makeService(env, [t]);
    try {
      await commitAll(svc, t.name);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(new Date('2030-01-01T00:00:00.000Z'));
      const r1 = (await svc.replay(t.name, null, '10', false)).batch!;
      const r2 = (await svc.replay(t.name, '10', '20', false)).batch!; // the same millisecond
      vi.setSystemTime(new Date('2029-12-31T23:00:00.000Z')); // stepped back
      expect((await svc.run(r1.batchId)).state).toBe('committed');
      const r3 = (await svc.replay(t.name, null, '10', false)).batch!;
      vi.useRealTimers();
      const names = [r1, r2, r3].map((r) => r.transfer);
      expect(new Set(names).size).toBe(3);
      for (const n of names) expect(n).toMatch(new RegExp(`^${table}@replay-\\d+$`));
      // In the order the journal created them.
      const seqs = names.map((n) => BigInt(n.slice(n.lastIndexOf('-') + 1)));
      expect(seqs[0]! < seqs[1]! && seqs[1]! < seqs[2]!).toBe(true);
      for (const r of [r2, r3]) expect((await svc.run(r.batchId)).state).toBe('committed');
    } finally {
      vi.useRealTimers();
      await svc.close();
    }
  });
});

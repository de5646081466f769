// Change windows (boundary kind 'changes', docs/transfer.md "Deletes") on the twin: PostgreSQL source with the
// change-capture table of sql/postgres/source, PostgreSQL target. Deletes travel as key + operation, are applied in
// the apply transaction, and the checksums cover the operation; an expired window fails and a re-baseline mirrors.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  insertSourceRows,
  makeService,
  ordersTransfer,
  ORDERS_DDL,
  setupDatabases,
  TARGET_DDL,
  type Env,
} from './helpers.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { isTransferError, TransferError } from '../../shared/transfer/errors.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import type { CanonicalRow } from '../../shared/transfer/checksum.js';
import { OP_COLUMN } from '../../shared/transfer/changes.js';

const NAME = 'orders_chg';

function changesTransfer(overrides: Parameters<typeof ordersTransfer>[1] = {}): TransferConfig {
  return ordersTransfer(NAME, { boundary: { kind: 'changes' }, batchSize: 1000, ...overrides });
}

// Runs every window the source has until nothing is new; returns the batches committed.
async function drain(svc: TransferService, name = NAME): Promise<BatchView[]> {
  const done: BatchView[] = [];
  for (let i = 0; i < 200; i++) {
    const b = await svc.tryCreateBatch(name);
    if (!b) return done;
    const v = await svc.run(b.batchId);
    expect(v.state, `${v.batchId}: ${v.lastError}`).toBe('committed');
    done.push(v);
  }
  throw new Error('the source never ran dry');
}

async function rowPath(env: Env, transfers: TransferConfig[]): Promise<TransferService> {
  // The canonical-row path (what a SQL Server source and an Oracle target use): the source without its bulk stream.
  return new TransferService({
    journal: new PostgresTransferJournal(env.control),
    transfers,
    connect: (t) => {
      const s = new PostgresTransferSource(t, env.source);
      return {
        source: {
          engine: s.engine,
          readSchema: () => s.readSchema(),
          nextWindow: (l, n) => s.nextWindow(l, n),
          manifest: (w, sc, a) => s.manifest(w, sc, a),
          checksumAlgorithms: async () => ['keel-v1'] as const,
          streamRows: (w, sc, c) => s.streamRows(w, sc, c),
          close: () => s.close(),
        },
        target: new PostgresTransferTarget(t, env.target),
      };
    },
  });
}

describe('change windows: deletes on the twin (PostgreSQL change capture -> PostgreSQL)', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_changes');
    await migratePostgresChangeCapture(env.source);
  });
  afterAll(async () => {
    await env?.close();
  });

  async function freshTables(rows: number): Promise<void> {
    await env.source.query(`select keel_changes.disable(to_regclass('public.orders'))`);
    await env.source.query(`drop table if exists public.orders`);
    await env.target.query(
      `drop table if exists public.orders, public.write_counts; drop function if exists public.count_write`,
    );
    await env.source.query(ORDERS_DDL);
    // rows before change capture: only a baseline can carry them
    await insertSourceRows(env.source, 1, rows);
    await env.source.query(`select keel_changes.enable('public.orders', array['id'])`);
    await env.target.query(TARGET_DDL);
    await env.control.query(`delete from keel.transfer_batches where transfer_name like $1`, [`${NAME}%`]);
    await env.target.query(`truncate keel_transfer.completions`);
  }

  it(
    'baseline, then inserts, updates and deletes in version windows, COPY and row paths',
    { timeout: 60_000 },
    async () => {
      for (const path of ['copy', 'rows'] as const) {
        await freshTables(120);
        const t = changesTransfer({ batchSize: 7 });
        const svc = path === 'copy' ? makeService(env, [t]) : await rowPath(env, [t]);
        try {
          // The baseline: the whole table at the version captured before it. On the COPY path (a target that
          // mirrors key ranges) it runs in key windows of batchSize rows, the last one ending at that version; the
          // canonical-row wrapper below passes no window options, so there it is one window.
          const first = await drain(svc);
          if (path === 'copy') {
            expect(first.map((b) => b.boundary.low)).toEqual([
              null,
              ...Array.from({ length: 17 }, (_, i) => `baseline@0:${7 * (i + 1)}`),
            ]);
            expect(first.at(-1)!.boundary.high).toBe('0');
            expect(first.map((b) => b.appliedCount)).toEqual([...Array(17).fill(7), 1]);
          } else {
            expect(first.map((b) => b.boundary.low)).toEqual([null]);
            expect(first[0]!.appliedCount).toBe(120);
          }
          await assertExactlyOnce(env);

          // Changes: deletes, updates, inserts, a key deleted and inserted again, an update that moves a key, and
          // a row inserted and deleted between two windows.
          // Each statement stamped at once (its own version), so that the windows split between them.
          const stamped = async (sql: string) => {
            await env.source.query(sql);
            await env.source.query(`select keel_changes.current_version('public.orders')`);
          };
          await stamped(`delete from public.orders where id between 10 and 19`);
          await stamped(`update public.orders set customer = 'changed ' || id, amount = null where id % 11 = 0`);
          await insertSourceRows(env.source, 121, 140);
          await stamped(`delete from public.orders where id = 30`);
          await insertSourceRows(env.source, 30, 30);
          await stamped(`update public.orders set id = 1000 where id = 40`);
          await insertSourceRows(env.source, 500, 500);
          await stamped(`delete from public.orders where id = 500`);
          const windows = await drain(svc);
          expect(windows.length).toBeGreaterThan(2); // batchSize 7: several windows (a version is never split)
          for (const w of windows) expect(w.boundary.kind).toBe('changes');
          // windows chain over the versions
          for (let i = 1; i < windows.length; i++) expect(windows[i]!.boundary.low).toBe(windows[i - 1]!.boundary.high);
          const r = await assertExactlyOnce(env);
          expect(r.source).toBe(120 - 10 + 20 - 1 + 1); // 10 deleted, 20 inserted, 40 moved to 1000
          expect(r.target).toBe(r.source);
          // Every applied delete is in the journal and on the completion rows.
          const ids = windows.map((w) => w.batchId);
          const c = await env.target.query(
            `select coalesce(sum(deleted_count), 0)::int as d from keel_transfer.completions where batch_id = any($1::uuid[])`,
            [ids],
          );
          // 10..19 and 40 (moved to 1000); 30 was inserted again (its latest change: an upsert); 500 never reached it
          expect(c.rows[0].d).toBe(11);
          const again = await drain(svc);
          expect(again).toEqual([]); // nothing new
        } finally {
          await svc.close();
        }
      }
    },
  );

  it('a delete and a re-insert of the same key in one window is one upsert; deleted on the target exactly once', async () => {
    await freshTables(20);
    const svc = makeService(env, [changesTransfer()]);
    try {
      await drain(svc);
      await env.source.query(`delete from public.orders where id in (3, 4)`);
      await insertSourceRows(env.source, 3, 3);
      const [w] = await drain(svc);
      expect(w!.rowCount).toBe(2); // key 3 (U: it exists again), key 4 (D)
      const ev = await svc.getBatch(w!.batchId);
      expect(ev!.events.find((e) => e.event === 'applied')?.detail).toMatchObject({ rowCount: 2, deleted: 1 });
      await assertExactlyOnce(env);
      // a deleted key absent from the target (already gone) deletes nothing and still commits
      await env.target.query(`delete from public.orders where id = 5`);
      await env.source.query(`delete from public.orders where id = 5`);
      const [w2] = await drain(svc);
      expect((await svc.getBatch(w2!.batchId))!.events.find((e) => e.event === 'applied')?.detail).toMatchObject({
        rowCount: 1,
        deleted: 0,
      });
      await assertExactlyOnce(env);
    } finally {
      await svc.close();
    }
  });

  it('the checksum covers the operation: a delete staged as an upsert, or dropped, is refused', async () => {
    await freshTables(30);
    const t = changesTransfer();
    const svc = makeService(env, [t]);
    const source = new PostgresTransferSource(t, env.source);
    const target = new PostgresTransferTarget(t, env.target);
    try {
      await drain(svc);
      const high0 = (await env.source.query(`select current_version::text as v from keel_changes.tracked`)).rows[0].v;
      await env.source.query(`delete from public.orders where id in (7, 8)`);
      await env.source.query(`update public.orders set note = 'n' where id = 9`);
      const w = (await source.nextWindow(high0, 100))!;
      expect(w).toMatchObject({ kind: 'changes', low: high0 });
      const schema = await source.readSchema();
      await target.prepare(schema);
      for (const algorithm of ['keel-v1', 'keel-pg2'] as const) {
        const manifest = await source.manifest(w, schema, algorithm);
        expect(manifest.rowCount).toBe(3);
        const rows: CanonicalRow[] = [];
        for await (const chunk of source.streamRows(w, schema, 10)) rows.push(...chunk);
        const op = rows.map((r) => r[r.length - 1]).sort();
        expect(op).toEqual(['D', 'D', 'U']);
        // a delete row holds its key and NULLs
        const del = rows.find((r) => r[r.length - 1] === 'D')!;
        expect(del.slice(1, -1).every((v) => v === null)).toBe(true);
        const tampered = [
          rows.map((r) => (r[0] === '7' ? [...r.slice(0, -1), 'U'] : r)), // the delete as an upsert
          rows.filter((r) => r[0] !== '8'), // a delete dropped
        ];
        for (const [i, feedRows] of tampered.entries()) {
          const err = await target
            .stage(
              { batchId: `00000000-0000-4000-8000-00000000000${i}`, transfer: NAME, manifest, schema, changes: 'ops' },
              {
                kind: 'rows',
                rows: (async function* () {
                  yield feedRows;
                })(),
              },
            )
            .catch((e: unknown) => e);
          expect(isTransferError(err, 'manifest_mismatch'), String(err)).toBe(true);
        }
      }
      expect(OP_COLUMN).toBe('keel_op');
    } finally {
      await svc.close();
      await source.close();
      await target.close();
    }
  });

  it('an expired version fails the window (terminal, clear), and a re-baseline mirrors the table', async () => {
    await freshTables(40);
    const svc = makeService(env, [changesTransfer()]);
    try {
      await drain(svc);
      // A batch created while its window was valid; retention removes its changes before it is staged.
      await env.source.query(`delete from public.orders where id between 1 and 5`);
      const b = await svc.createBatch(NAME);
      expect(b.rowCount).toBe(5);
      await env.source.query(`delete from public.orders where id between 6 and 8`);
      await env.source.query(`select keel_changes.current_version('public.orders')`); // stamps the deletes of 6..8
      await env.source.query(
        `select keel_changes.retain('public.orders', (select current_version from keel_changes.tracked))`,
      );
      const failed = await svc.run(b.batchId);
      expect(failed.state).toBe('failed');
      expect(failed.lastErrorCode).toBe('changes_expired');
      expect(failed.lastError).toMatch(/min valid version/);
      expect(failed.lastError).toMatch(/Re-baseline/);
      // Its window is released, and no new window can start from the last committed version either.
      const err = await svc.createBatch(NAME).catch((e: unknown) => e);
      expect(isTransferError(err, 'changes_expired'), String(err)).toBe(true);
      expect((err as TransferError).message).toMatch(/rebaseline/);
      // Nothing of the lost deletes reached the target.
      expect((await env.target.query(`select count(*)::int as n from public.orders`)).rows[0].n).toBe(40);

      // The re-baseline: every row as it is now, applied as a mirror (rows gone at the source are deleted).
      const rb = await svc.rebaseline(NAME);
      expect(rb.boundary.low).toMatch(/^rebaseline@\d+$/);
      const done = await svc.run(rb.batchId);
      expect(done.state, done.lastError ?? '').toBe('committed');
      const r = await assertExactlyOnce(env);
      expect(r.target).toBe(32);
      const c = await env.target.query(
        `select deleted_count::int as d from keel_transfer.completions where batch_id = $1`,
        [rb.batchId],
      );
      expect(c.rows[0].d).toBe(8);
      // and the chain goes on from the re-baseline's version
      await env.source.query(`delete from public.orders where id = 20`);
      const [next] = await drain(svc);
      expect(next!.boundary.low).toBe(done.boundary.high);
      await assertExactlyOnce(env);
      // a truncate invalidates every version so far (as Change Tracking does)
      await env.source.query(`truncate public.orders`);
      const err2 = await svc.createBatch(NAME).catch((e: unknown) => e);
      expect(isTransferError(err2, 'changes_expired'), String(err2)).toBe(true);
      await svc.run((await svc.rebaseline(NAME)).batchId);
      expect((await env.target.query(`select count(*)::int as n from public.orders`)).rows[0].n).toBe(0);
    } finally {
      await svc.close();
    }
  });

  it('a committed delete window run again (same id) is a no-op that says so; replay is refused', async () => {
    await freshTables(10);
    const svc = makeService(env, [changesTransfer()]);
    try {
      await drain(svc);
      await env.source.query(`delete from public.orders where id in (1, 2)`);
      const [w] = await drain(svc);
      await insertSourceRows(env.source, 1, 1); // back at the source: the old window must not delete it again
      const again = await svc.run(w!.batchId);
      expect(again.state).toBe('committed');
      const t = new PostgresTransferTarget(changesTransfer(), env.target);
      const b = (await svc.getBatch(w!.batchId))!;
      await t.prepare({ columns: b.schemaColumns, hash: b.schemaHash });
      const res = await t.apply(
        {
          batchId: w!.batchId,
          transfer: NAME,
          manifest: { rowCount: b.rowCount!, checksum: b.checksum! },
          schema: { columns: b.schemaColumns, hash: b.schemaHash },
          changes: 'ops',
        },
        { attempt: b.attempts + 1 },
      );
      expect(res).toMatchObject({ outcome: 'already_committed', rowCount: 2, deleted: 2 });
      await t.close();
      expect((await env.target.query(`select count(*)::int as n from public.orders`)).rows[0].n).toBe(8);
      const err = await svc.replay(NAME, null, w!.boundary.high, true).catch((e: unknown) => e);
      expect(isTransferError(err, 'invalid_range'), String(err)).toBe(true);
    } finally {
      await svc.close();
    }
  });

  it("least privilege: the table's writers need nothing on the change table; the source login reads with SELECT + EXECUTE", async () => {
    await freshTables(10);
    await env.source.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = 'chg_writer') then create role chg_writer nologin; end if;
        if not exists (select 1 from pg_roles where rolname = 'chg_reader') then create role chg_reader nologin; end if;
      end $$;
      grant usage on schema public to chg_writer, chg_reader;
      grant select, insert, update, delete on public.orders to chg_writer;
      grant select on public.orders, public.orders_changes to chg_reader;
      grant usage on schema keel_changes to chg_reader;
      grant select on keel_changes.tracked to chg_reader;
      grant execute on function keel_changes.current_version(regclass) to chg_reader;`);
    const c = await env.source.connect();
    try {
      await c.query(`set role chg_writer`);
      await c.query(`delete from public.orders where id in (1, 2)`);
      await c.query(`update public.orders set note = 'w' where id = 3`);
      // (and it could not write the change table itself)
      const denied = await c
        .query(`insert into public.orders_changes (op, id) values ('D', 5)`)
        .catch((e: unknown) => e);
      expect((denied as { code?: string }).code).toBe('42501');
      await c.query(`reset role`);
    } finally {
      c.release();
    }
    const reader = new pg.Pool({ connectionString: env.sourceUrl, max: 2, options: '-c role=chg_reader' });
    expect((await reader.query(`select current_user as u`)).rows[0].u).toBe('chg_reader');
    const t = changesTransfer();
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, reader),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    try {
      await drain(svc); // the baseline
      expect((await env.target.query(`select count(*)::int as n from public.orders`)).rows[0].n).toBe(8);
      const c2 = await env.source.connect();
      await c2.query(`set role chg_writer; delete from public.orders where id = 4; reset role`);
      c2.release();
      const [w] = await drain(svc);
      expect(w!.rowCount).toBe(1);
      await assertExactlyOnce(env);
    } finally {
      await svc.close();
      await reader.end();
    }
  });

  it('a source table without change capture is refused with the fix', async () => {
    await freshTables(3);
    await env.source.query(`select keel_changes.disable('public.orders')`);
    const svc = makeService(env, [changesTransfer()]);
    try {
      const err = await svc.createBatch(NAME).catch((e: unknown) => e);
      expect(isTransferError(err, 'changes_not_enabled'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/keel_changes\.enable/);
    } finally {
      await svc.close();
    }
  });

  it('rows behind: before the baseline the rows of the table, after it the changes past its version, capped', async () => {
    await freshTables(20);
    const t = changesTransfer();
    const source = new PostgresTransferSource(t, env.source);
    const svc = makeService(env, [t]);
    try {
      expect(await source.rowsAfter(null, 1000)).toBe(20);
      expect(await source.rowsAfter(null, 5)).toBe(5);
      const [baseline] = await drain(svc);
      const high = baseline!.boundary.high;
      expect(await source.rowsAfter(high, 1000)).toBe(0);
      await env.source.query(`delete from public.orders where id between 1 and 3`);
      await insertSourceRows(env.source, 21, 24);
      expect(await source.rowsAfter(high, 1000)).toBe(7); // recorded, not yet stamped, still counted
      expect(await source.rowsAfter(high, 2)).toBe(2);
      await drain(svc);
      const last = (await svc.listBatches({ transfer: NAME, limit: 1 }))[0]!;
      expect(await source.rowsAfter(last.boundary.high, 1000)).toBe(0);
    } finally {
      await svc.close();
    }
  });
});

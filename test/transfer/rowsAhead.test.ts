// The next window's rows read ahead on the row path (docs/transfer.md, "The next window's rows, ahead"): with one
// source read, while a full window's rows are checked and committed, the service reads the next window's rows into
// memory (as COPY text, or as rows with a bytes column), and the stage of the batch createBatch then creates for
// exactly that window writes them as its one read -- the journal's flow unchanged (manifest after the rows). Checked
// here: every window read once and committed with the source's own keel-v1 manifest, both ways of holding the rows;
// a batch staged by another service (no rows in its memory) reads the window itself; a window other than the one read
// ahead (rows arrived after a short window) is read afresh; readAhead off reads nothing ahead.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertExactlyOnce,
  batchEvents,
  insertSourceRows,
  ordersTransfer,
  setupDatabases,
  ORDERS_DDL,
  TARGET_DDL,
  type Env,
} from './helpers.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import type { SourceAdapter, Window } from '../../shared/transfer/types.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

describe('the next window rows, read ahead (row path, one source read)', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_rowsahead');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // The PostgreSQL source offered as a row source with a snapshot read (no COPY passthrough, keel-v1), every
  // streamRows call listed by its window.
  function service(t: TransferConfig, readAhead?: boolean): { svc: TransferService; reads: Window[] } {
    const reads: Window[] = [];
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: true,
      ...(readAhead === undefined ? {} : { readAhead }),
      connect: (tc) => {
        const s = new PostgresTransferSource(tc, env.source);
        const source: SourceAdapter = {
          engine: 'postgres',
          readSchema: () => s.readSchema(),
          nextWindow: (low, max) => s.nextWindow(low, max),
          manifest: (w, schema, algorithm) => s.manifest(w, schema, algorithm),
          checksumAlgorithms: async () => ['keel-v1'],
          streamRows: (w, schema, n, facts) => {
            reads.push(w);
            return s.streamRows(w, schema, n, facts);
          },
          readsSnapshot: () => s.readsSnapshot(),
          close: () => s.close(),
        };
        return { source, target: new PostgresTransferTarget(tc, env.target) };
      },
    });
    return { svc, reads };
  }

  // noPayload: the source's payload column is left null (a transfer without it leaves it null on the target).
  const reset = async (rows: number, noPayload = true) => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, rows);
    if (noPayload) await env.source.query('update public.orders set payload = null');
  };
  const manifestDetail = async (batchId: string) =>
    (
      await env.control.query(
        `select detail from keel.transfer_batch_events where batch_id = $1 and event = 'manifest_recorded'`,
        [batchId],
      )
    ).rows.map((r) => r.detail as Record<string, unknown>);
  // The keel-v1 manifest the source's server computes for the window.
  const sourceManifest = async (t: TransferConfig, w: Window) => {
    const s = new PostgresTransferSource(t, env.source);
    return s.manifest(w, await s.readSchema(), 'keel-v1');
  };
  const waitFor = async (cond: () => boolean) => {
    for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(cond()).toBe(true);
  };
  const noPayload = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note'].map((c) => ({ source: c, target: c }));

  for (const held of ['COPY text', 'rows (a bytes column)'] as const) {
    it(`a chain of full windows: each read once, committed directly with the source's manifest, rows held as ${held}`, async () => {
      await reset(1000, held === 'COPY text');
      const t = ordersTransfer(`orders_rows_ahead_${held === 'COPY text' ? 'text' : 'rows'}`, {
        batchSize: 250,
        chunkSize: 40,
        ...(held === 'COPY text' ? { columns: noPayload } : {}),
      });
      const { svc, reads } = service(t);
      const ids: string[] = [];
      for (;;) {
        const b = await svc.tryCreateBatch(t.name);
        if (!b) break;
        expect(b.rowCount).toBeNull(); // one source read: the manifest comes with the rows, ahead or not
        ids.push(b.batchId);
        const v = await svc.run(b.batchId);
        expect(v.state, `${v.lastError}`).toBe('committed');
        expect(v.attempts).toBe(1);
        const m = await sourceManifest(t, { kind: 'key', low: v.boundary.low, high: v.boundary.high });
        expect({ n: v.appliedCount, checksum: v.checksum }).toEqual({ n: m.rowCount, checksum: m.checksum });
        // The journal's one-read flow, nothing staged and no fallback.
        expect(await batchEvents(env, v.batchId)).toEqual(['created', 'manifest_recorded', 'apply_started', 'applied']);
        expect((await manifestDetail(v.batchId))[0]?.oneRead).toBe(true);
      }
      expect(ids).toHaveLength(4);
      // One read a window: the first by its stage, the others ahead; the last full window's read ahead found nothing
      // after it (the chain ends with nothing to transfer).
      expect(reads.map((w) => w.high)).toEqual(['250', '500', '750', '1000']);
      expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
      await svc.close();
    });
  }

  it('a batch staged by another service reads its window itself; a window other than the one read ahead is read afresh', async () => {
    await reset(600);
    const t = ordersTransfer('orders_rows_ahead_elsewhere', { batchSize: 200, chunkSize: 50, columns: noPayload });
    const { svc, reads } = service(t);
    const other = service(t);
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    // The second window's rows were read ahead while the first was checked; its batch is run by another service.
    const second = await svc.createBatch(t.name);
    await waitFor(() => reads.length === 2);
    expect(reads.map((w) => w.high)).toEqual(['200', '400']);
    const v = await other.svc.run(second.batchId);
    expect(v.state, `${v.lastError}`).toBe('committed');
    // Its own read, then (400, 600] read ahead after it.
    await waitFor(() => other.reads.length === 2);
    expect(other.reads.map((w) => w.high)).toEqual(['400', '600']);
    // The third window's rows were read ahead by the other service; rows arrive, so this service's next window is
    // not a full one of 200 after a short one: its rows are read when its batch runs.
    await insertSourceRows(env.source, 601, 650);
    await env.source.query('update public.orders set payload = null where id > 600');
    const third = await svc.createBatch(t.name);
    expect(third.boundary).toMatchObject({ low: '400', high: '600' });
    expect((await svc.run(third.batchId)).state).toBe('committed');
    // Read by its stage; then the window after it, (600, 650], read ahead (the third window was full).
    await waitFor(() => reads.length === 4);
    expect(reads.map((w) => w.high)).toEqual(['200', '400', '600', '650']);
    // The other service read (400, 600] ahead when it ran the second batch; its createBatch now chooses (600, 650]:
    // those rows are not this window's, and its stage reads the window itself.
    const fourth = await other.svc.createBatch(t.name);
    expect(fourth.boundary).toMatchObject({ low: '600', high: '650' });
    expect((await other.svc.run(fourth.batchId)).state).toBe('committed');
    expect(other.reads.map((w) => w.high)).toEqual(['400', '600', '650']);
    expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
    await svc.close();
    await other.svc.close();
  });

  it('readAhead off: each window read by its own stage only', async () => {
    await reset(500);
    const t = ordersTransfer('orders_rows_ahead_off', { batchSize: 250, chunkSize: 50, columns: noPayload });
    const { svc, reads } = service(t, false);
    for (let i = 0; i < 2; i++) {
      const b = await svc.createBatch(t.name);
      expect((await svc.run(b.batchId)).state).toBe('committed');
      expect(reads.map((w) => w.high)).toEqual(i === 0 ? ['250'] : ['250', '500']);
    }
    expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
    await svc.close();
  });
});

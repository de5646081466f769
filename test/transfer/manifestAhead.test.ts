// The next window's manifest, read ahead (docs/transfer.md, "The next window's manifest, ahead"): while a full
// window's rows move (the bulk direct apply), the service reads the next window's manifest from the source on one
// process, and the next createBatch records it when it chooses exactly that window. Checked here: it is used (and
// equals a fresh read), a source read is not repeated for it, a window whose rows changed after it was read is still
// refused by the target's check and then moved with a fresh manifest, a schema change in between discards it, and a
// read ahead that fails only costs the read afresh; with readAhead off nothing is read ahead; with 'afterCopy' the
// manifest is read only once the COPY has sent its last row, and never waits on a COPY that did not open.
import { Transform } from 'node:stream';
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
import { algorithmOf, type ChecksumAlgorithm } from '../../shared/transfer/checksum.js';
import type { BulkEncoding, BulkStream, Manifest, SourceSchema, Window } from '../../shared/transfer/types.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

// The PostgreSQL source, with every manifest it read (window, whether ahead, result) listed once it is done; with
// failAhead, a read ahead fails instead.
class CountingSource extends PostgresTransferSource {
  readonly manifests: { w: Window; ahead: boolean; m: Manifest }[] = [];
  failAhead = false;
  copiesEnded = 0; // bulk reads whose last row was read
  endedAtAhead: number[] = []; // copiesEnded when each manifest read ahead started
  copyTailMs = 0; // each bulk read's end comes this much after its last row (a COPY long enough to overlap)
  override async bulkOut(w: Window, schema: SourceSchema, encoding: BulkEncoding): Promise<BulkStream> {
    const s = await super.bulkOut(w, schema, encoding);
    let open = true;
    const ended = () => {
      if (open) this.copiesEnded++;
      open = false;
    };
    const tail = this.copyTailMs;
    const stream = new Transform({
      transform: (chunk, _enc, cb) => cb(null, chunk),
      flush: (cb) => setTimeout(() => (ended(), cb()), tail),
    });
    s.stream.once('error', (e) => (ended(), stream.destroy(e)));
    s.stream.pipe(stream);
    return { ...s, stream };
  }
  override async manifest(
    w: Window,
    schema: SourceSchema,
    algorithm: ChecksumAlgorithm,
    opts: { ahead?: boolean } = {},
  ): Promise<Manifest> {
    if (opts.ahead && this.failAhead) throw new Error('the source went away (test)');
    if (opts.ahead) this.endedAtAhead.push(this.copiesEnded);
    const m = await super.manifest(w, schema, algorithm, opts);
    this.manifests.push({ w, ahead: opts.ahead === true, m });
    return m;
  }
}

describe('the next window manifest, read ahead', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_ahead');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  function service(
    t: TransferConfig,
    readAhead?: boolean | 'afterCopy',
  ): {
    svc: TransferService;
    source: () => CountingSource;
    logged: { event: string; fields: Record<string, unknown> }[];
  } {
    let source: CountingSource | undefined;
    const logged: { event: string; fields: Record<string, unknown> }[] = [];
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: true,
      ...(readAhead === undefined ? {} : { readAhead }),
      log: (event, fields) => logged.push({ event, fields }),
      connect: (tc) => {
        source = new CountingSource(tc, env.source);
        return { source, target: new PostgresTransferTarget(tc, env.target) };
      },
    });
    return { svc, source: () => source!, logged };
  }

  const manifestEvents = async (batchId: string) =>
    (
      await env.control.query(
        `select detail from keel.transfer_batch_events where batch_id = $1 and event = 'manifest_recorded'`,
        [batchId],
      )
    ).rows.map((r) => r.detail as Record<string, unknown>);

  const waitFor = async (cond: () => boolean) => {
    for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(cond()).toBe(true);
  };

  const reset = async (rows: number) => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, rows);
  };

  it('records the manifest read beside the previous apply, one source read a window, equal to a fresh read', async () => {
    await reset(1000);
    const t = ordersTransfer('orders_ahead', { batchSize: 250 });
    const { svc, source } = service(t);
    const ids: string[] = [];
    for (;;) {
      const b = await svc.tryCreateBatch(t.name);
      if (!b) break;
      ids.push(b.batchId);
      const v = await svc.run(b.batchId);
      expect(v.state).toBe('committed');
      expect(v.appliedCount).toBe(250);
    }
    expect(ids).toHaveLength(4);
    // The first window's manifest is read by createBatch; every later one was read while the window before it
    // moved, and recorded as it was read.
    for (const [i, id] of ids.entries())
      expect((await manifestEvents(id)).map((d) => d.readAhead === true)).toEqual([i > 0]);
    // One read a window: the last full window's read ahead found nothing after it and read nothing.
    expect(source().manifests.map((x) => [x.w.high, x.ahead])).toEqual([
      ['250', false],
      ['500', true],
      ['750', true],
      ['1000', true],
    ]);
    for (const { w, m } of [...source().manifests]) {
      const fresh = await source().manifest(w, await source().readSchema(), algorithmOf(m.checksum));
      expect(m).toEqual(fresh);
    }
    expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
    await svc.close();
  });

  it('a window changed after its manifest was read ahead is refused by the check, then moved with a fresh one', async () => {
    await reset(400);
    const t = ordersTransfer('orders_ahead_changed', { batchSize: 200 });
    const { svc, source } = service(t);
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    // The second window's manifest was read while the first moved; then a row of that window changes.
    await waitFor(() => source().manifests.some((x) => x.w.low === '200'));
    await env.source.query(`update public.orders set note = 'changed after the manifest' where id = 300`);
    const second = await svc.createBatch(t.name);
    expect((await manifestEvents(second.batchId))[0]?.readAhead).toBe(true);
    const v = await svc.run(second.batchId);
    // Not applied with the stale manifest: the direct attempt found the rows different (nothing committed) and the
    // staging check refused them; the window is released.
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('manifest_mismatch');
    const third = await svc.createBatch(t.name);
    expect(third.boundary).toEqual(second.boundary);
    expect((await manifestEvents(third.batchId))[0]?.readAhead).toBeUndefined();
    expect((await svc.run(third.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(400);
    const note = await env.target.query(`select note from public.orders where id = 300`);
    expect(note.rows[0].note).toBe('changed after the manifest');
    await svc.close();
  });

  it('discards it when the source schema changed in between (the drift is still found)', async () => {
    await reset(400);
    const t = ordersTransfer('orders_ahead_drift', { batchSize: 200 });
    const { svc, source } = service(t);
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    await waitFor(() => source().manifests.some((x) => x.w.low === '200'));
    await env.source.query('alter table public.orders alter column note type text');
    try {
      await expect(svc.createBatch(t.name)).rejects.toMatchObject({ code: 'schema_drift' });
    } finally {
      await env.source.query('alter table public.orders alter column note type varchar(200)');
    }
    // Back to the recorded schema: the next batch reads its manifest afresh (the one read ahead was taken away).
    const second = await svc.createBatch(t.name);
    expect((await manifestEvents(second.batchId))[0]?.readAhead).toBeUndefined();
    expect((await svc.run(second.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(400);
    await svc.close();
  });

  it('discards it when the next window is not the one read ahead (rows arrived after a short last window)', async () => {
    await reset(300);
    const t = ordersTransfer('orders_ahead_grown', { batchSize: 200 });
    const { svc, source } = service(t);
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    // Read ahead: (200, 300], the source's last key then. Rows arrive: the next window is (200, 400].
    await waitFor(() => source().manifests.some((x) => x.w.low === '200'));
    await insertSourceRows(env.source, 301, 450);
    const second = await svc.createBatch(t.name);
    expect(second.boundary).toMatchObject({ low: '200', high: '400' });
    expect((await manifestEvents(second.batchId))[0]?.readAhead).toBeUndefined();
    expect(second.rowCount).toBe(200);
    expect((await svc.run(second.batchId)).state).toBe('committed');
    // The (200, 400] window was full: (400, 450] was read ahead meanwhile, and is taken as it is.
    const third = await svc.createBatch(t.name);
    expect((await manifestEvents(third.batchId))[0]?.readAhead).toBe(true);
    expect((await svc.run(third.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(450);
    await svc.close();
  });

  it('a read ahead that fails is logged and leaves the next batch to read its manifest afresh', async () => {
    await reset(400);
    const t = ordersTransfer('orders_ahead_fails', { batchSize: 200 });
    const { svc, source, logged } = service(t);
    const first = await svc.createBatch(t.name);
    source().failAhead = true;
    expect((await svc.run(first.batchId)).state).toBe('committed');
    const second = await svc.createBatch(t.name);
    expect(logged.map((l) => l.event)).toContain('transfer.manifest_ahead_error');
    expect((await manifestEvents(second.batchId))[0]?.readAhead).toBeUndefined();
    expect(second.rowCount).toBe(200);
    expect((await svc.run(second.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(400);
    await svc.close();
  });

  it('readAhead off: every createBatch reads its own manifest after the commit before it, none is read ahead', async () => {
    await reset(600);
    const t = ordersTransfer('orders_ahead_off', { batchSize: 200 });
    const { svc, source } = service(t, false);
    const ids: string[] = [];
    for (;;) {
      const b = await svc.tryCreateBatch(t.name);
      if (!b) break;
      ids.push(b.batchId);
      expect((await svc.run(b.batchId)).state).toBe('committed');
    }
    expect(ids).toHaveLength(3);
    for (const id of ids) expect((await manifestEvents(id)).map((d) => d.readAhead === true)).toEqual([false]);
    expect(source().manifests.map((x) => [x.w.high, x.ahead])).toEqual([
      ['200', false],
      ['400', false],
      ['600', false],
    ]);
    expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
    await svc.close();
  });

  it("readAhead 'afterCopy': each manifest read ahead starts after the COPY's last row and is recorded as before", async () => {
    await reset(800);
    const t = ordersTransfer('orders_ahead_after', { batchSize: 200 });
    const { svc, source } = service(t, 'afterCopy');
    const ids: string[] = [];
    for (;;) {
      const b = await svc.tryCreateBatch(t.name);
      if (!b) break;
      source().copyTailMs = 150; // each COPY ends 150 ms after its rows: long after its claim
      ids.push(b.batchId);
      expect((await svc.run(b.batchId)).state).toBe('committed');
    }
    expect(ids).toHaveLength(4);
    for (const [i, id] of ids.entries())
      expect((await manifestEvents(id)).map((d) => d.readAhead === true)).toEqual([i > 0]);
    expect(source().manifests.map((x) => [x.w.high, x.ahead])).toEqual([
      ['200', false],
      ['400', true],
      ['600', true],
      ['800', true],
    ]);
    // The manifest of window i + 1 started once window i's COPY had ended (beside the COPY it would start at
    // window i's claim, with i - 1 ended).
    expect(source().endedAtAhead).toEqual([1, 2, 3]);
    expect((await assertExactlyOnce(env)).maxWrites).toBe(1);
    await svc.close();
  });

  it("readAhead 'afterCopy': a direct apply that never opens its COPY (rows of the window on the target) does not hold the read ahead", async () => {
    await reset(400);
    // A row of the first window already on the target: the claimed direct apply is not eligible (nothing copied),
    // the batch is staged and merged instead; the second window's manifest is still read ahead and used.
    await env.target.query(
      `insert into public.orders (id, customer, amount, placed_at, flag) values (1, 'stale', 0, now(), false)`,
    );
    const t = ordersTransfer('orders_ahead_after_staged', { batchSize: 200 });
    const { svc, source } = service(t, 'afterCopy');
    const first = await svc.createBatch(t.name);
    expect((await svc.run(first.batchId)).state).toBe('committed');
    await waitFor(() => source().manifests.some((x) => x.w.low === '200' && x.ahead));
    const second = await svc.createBatch(t.name);
    expect((await manifestEvents(second.batchId))[0]?.readAhead).toBe(true);
    expect((await svc.run(second.batchId)).state).toBe('committed');
    expect((await assertExactlyOnce(env)).target).toBe(400);
    await svc.close();
  });
});

// One source read (docs/transfer.md "One source read"): on the row path, with a source that reads a window in one
// snapshot, the manifest is computed from the very rows that stream into the staging and recorded when they end,
// instead of by a separate read of the window before them. The target still verifies the staged rows against the
// recorded manifest on its own server before its staging commits.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import {
  assertExactlyOnce,
  insertSourceRows,
  ordersTransfer,
  setupDatabases,
  TARGET_DDL,
  ORDERS_DDL,
  type Env,
} from './helpers.js';
import { COPY_TEXT, type CanonicalChunk } from '../../shared/transfer/checksum.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import type { Manifest, SourceAdapter, StreamFacts, TargetAdapter } from '../../shared/transfer/types.js';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';

describe('transfer row path: one source read', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_oneread');
    await env.source.query(ORDERS_DDL);
    // The same rows without a primary key: nothing proves its keys unique.
    await env.source.query(`create table public.orders_nokey (like public.orders)`);
    await env.target.query(TARGET_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // The row path (no COPY passthrough, keel-v1) with the source's snapshot read; counts the separate manifest reads.
  function service(
    t: TransferConfig,
    opts: {
      oneRead?: boolean;
      target?: (real: PostgresTransferTarget) => TargetAdapter;
      afterRows?: () => Promise<void>; // once a window's rows have all been read, before the read ends
    } = {},
  ) {
    const manifestReads = { n: 0 };
    const svc = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => {
        const s = new PostgresTransferSource(tc, env.source);
        const source: SourceAdapter = {
          engine: 'postgres',
          readSchema: () => s.readSchema(),
          nextWindow: (low, max) => s.nextWindow(low, max),
          manifest: (w, schema, algorithm) => {
            manifestReads.n++;
            return s.manifest(w, schema, algorithm);
          },
          checksumAlgorithms: async () => ['keel-v1'],
          streamRows: async function* (w, schema, n, facts) {
            yield* s.streamRows(w, schema, n, facts);
            await opts.afterRows?.();
          },
          ...(opts.oneRead !== false ? { readsSnapshot: () => s.readsSnapshot() } : {}),
          close: () => s.close(),
        };
        const real = new PostgresTransferTarget(tc, env.target);
        return { source, target: opts.target ? opts.target(real) : real };
      },
    });
    return { svc, manifestReads };
  }

  it('records no manifest at creation, checksums the staged rows once, and the manifest equals the source server’s', async () => {
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, 250);
    const t = ordersTransfer('orders_oneread', { batchSize: 100, chunkSize: 30 });
    const { svc, manifestReads } = service(t);
    const direct = new PostgresTransferSource(t, env.source);
    const schema = await direct.readSchema();
    let batches = 0;
    for (;;) {
      const created = await svc.tryCreateBatch(t.name);
      if (!created) break;
      expect(created.state).toBe('extracting');
      expect(created.rowCount).toBeNull(); // left to the stage: no read of the window yet
      const v = await svc.run(created.batchId);
      expect(v.state).toBe('committed');
      // The manifest recorded from the streamed rows is the one the source server computes for the window.
      const w = { kind: 'key' as const, low: v.boundary.low, high: v.boundary.high };
      expect(await direct.manifest(w, schema, 'keel-v1')).toEqual({ rowCount: v.rowCount, checksum: v.checksum });
      expect(v.stagedChecksum).toBe(v.checksum);
      const events = await env.control.query<{ event: string; one_read: string | null }>(
        `select event, detail->>'oneRead' as one_read from keel.transfer_batch_events where batch_id = $1 order by event_id`,
        [v.batchId],
      );
      const names = events.rows.map((e) => e.event);
      expect(names.indexOf('manifest_recorded')).toBeGreaterThanOrEqual(0);
      expect(names.indexOf('manifest_recorded')).toBeLessThan(names.indexOf('staged'));
      expect(events.rows.find((e) => e.event === 'manifest_recorded')?.one_read).toBe('true');
      batches++;
    }
    expect(batches).toBe(3);
    expect(manifestReads.n).toBe(0); // never a second read of a window
    await assertExactlyOnce(env);
    await svc.close();
  });

  it('without a snapshot read the source is read twice, as before (manifest first)', async () => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, 120);
    const t = ordersTransfer('orders_tworeads', { batchSize: 1000, chunkSize: 30 });
    const { svc, manifestReads } = service(t, { oneRead: false });
    const created = await svc.createBatch(t.name);
    expect(created.rowCount).toBe(120);
    expect((await svc.run(created.batchId)).state).toBe('committed');
    expect(manifestReads.n).toBe(1);
    await assertExactlyOnce(env);
    await svc.close();
  });

  it('a manifest recorded by a run that failed after the rows is kept: the next run verifies against it', async () => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, 80);
    const t = ordersTransfer('orders_oneread_kept', { batchSize: 1000, chunkSize: 25 });
    // First run: the target fails once the manifest is recorded, before anything is staged.
    let failOnce = true;
    const { svc } = service(t, {
      target: (real) =>
        Object.assign(Object.create(real) as PostgresTransferTarget, {
          stageStreamed: async (
            req: Parameters<NonNullable<TargetAdapter['stageStreamed']>>[0],
            feed: Parameters<NonNullable<TargetAdapter['stageStreamed']>>[1],
            manifest: Promise<Manifest>,
          ) => {
            if (!failOnce) return real.stageStreamed!(req, feed, manifest);
            failOnce = false;
            for await (const chunk of feed.rows) void chunk;
            await manifest;
            throw new Error('target lost after the rows');
          },
        }),
    });
    const created = await svc.createBatch(t.name);
    expect(created.rowCount).toBeNull();
    await expect(svc.stage(created.batchId)).rejects.toThrow('target lost after the rows');
    const after = (await svc.getBatch(created.batchId))!;
    expect(after.state).toBe('extracting');
    expect(after.rowCount).toBe(80); // recorded from the rows of the failed run
    // The window changes before the retry: the retry reads it again, and the target refuses what no longer matches.
    await env.source.query(`update public.orders set note = 'changed' where id = 7`);
    const retried = await svc.run(created.batchId);
    expect(retried.state).toBe('failed');
    expect(retried.lastErrorCode).toBe('manifest_mismatch');
    expect((await env.target.query('select count(*)::int as n from public.orders')).rows[0].n).toBe(0);
    // The window was released: a new batch reads it as it is now.
    const again = await svc.createBatch(t.name);
    expect((await svc.run(again.batchId)).state).toBe('committed');
    await assertExactlyOnce(env);
    await svc.close();
  });

  // Two runs of one batch at once (a duplicate message), the source changed between their reads: the run that
  // recorded its manifest first owns the batch. The other run's rows are not that manifest, so staged they could only
  // fail verification (manifest_mismatch, terminal: the batch failed, the window re-covered by a new batch) -- and it
  // could get there first, the first run recording its manifest and then being slower to open its staging. It stops
  // instead (retryable); the batch keeps the recorded manifest and is staged against it.
  it('a duplicate run that read the window before a change stops when the other run recorded its manifest first: the batch is not failed', async () => {
    await env.source.query('truncate public.orders');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, 60);
    const t = ordersTransfer('orders_oneread_dup', { batchSize: 1000, chunkSize: 25 });
    const journal = new PostgresTransferJournal(env.control);
    const direct = new PostgresTransferSource(t, env.source);
    let batchId = '';
    let other: Manifest | null = null;
    const { svc } = service(t, {
      // The other run: its read comes after a change of the window, and it records its manifest first.
      afterRows: async () => {
        if (other) return;
        await env.source.query(`update public.orders set note = 'changed' where id = 7`);
        const b = (await journal.get(batchId))!;
        const w = { kind: b.boundaryKind, low: b.boundaryLow, high: b.boundaryHigh };
        other = await direct.manifest(w, await direct.readSchema(), 'keel-v1');
        await journal.transition(
          batchId,
          ['extracting'],
          'extracting',
          { rowCount: other.rowCount, checksum: other.checksum, stamp: 'extracted_at' },
          'manifest_recorded',
          { ...other, oneRead: true },
        );
      },
    });
    const created = await svc.createBatch(t.name);
    batchId = created.batchId;
    expect(created.rowCount).toBeNull();
    await expect(svc.stage(batchId)).rejects.toMatchObject({ code: 'invalid_state' });
    const after = (await svc.getBatch(batchId))!;
    expect([after.state, after.rowCount, after.checksum]).toEqual(['extracting', other!.rowCount, other!.checksum]);
    expect((await env.target.query('select count(*)::int as n from public.orders')).rows[0].n).toBe(0);
    // Its next run reads the window as it is now: the recorded manifest's rows.
    expect((await svc.run(batchId)).state).toBe('committed');
    await assertExactlyOnce(env);
    await direct.close();
    await svc.close();
  });

  it('each chunk carries its rows as the COPY text a PostgreSQL target writes unchanged (COPY_TEXT), split exactly at the chunk', async () => {
    await env.source.query('truncate public.orders, public.orders_nokey');
    await insertSourceRows(env.source, 1, 3000);
    // Every character COPY escapes, quotes, a multi-byte character, an empty string and NULL, in rows of every chunk.
    await env.source.query(
      `update public.orders set note = case id % 5 when 0 then E'a\\tb\\nc\\rd\\\\e\\bf\\fg\\vh "q" ,()' when 1 then 'Zoë ✓' when 2 then '' when 3 then null else note end`,
    );
    const t = ordersTransfer('orders_text', { batchSize: 5000, chunkSize: 7 });
    const s = new PostgresTransferSource(t, env.source);
    const escapes: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };
    const field = (f: string) => (f === '\\N' ? null : f.replace(/\\(.)/gs, (_m, c: string) => escapes[c] ?? c));
    let rows = 0;
    for await (const chunk of s.streamRows({ kind: 'key', low: null, high: '3000' }, await s.readSchema(), 7)) {
      const text = (chunk as CanonicalChunk)[COPY_TEXT];
      expect(text).toBeDefined();
      const lines = text!.toString('utf8').split('\n');
      expect(lines.pop()).toBe(''); // whole lines only
      expect(lines.map((l) => l.split('\t').map(field))).toEqual([...chunk]);
      rows += chunk.length;
    }
    expect(rows).toBe(3000);
  });

  it('a window read to its end commits its snapshot once: no second end (no "no transaction in progress" warning); an abandoned read leaves no session in its transaction', async () => {
    await env.source.query('truncate public.orders, public.orders_nokey');
    await insertSourceRows(env.source, 1, 30);
    const pool = new pg.Pool({ connectionString: env.sourceUrl, max: 1 });
    const notices: string[] = [];
    pool.on('connect', (c) => c.on('notice', (n) => notices.push(String(n.message))));
    try {
      const t = ordersTransfer('orders_end', { batchSize: 5000, chunkSize: 10 });
      const s = new PostgresTransferSource(t, pool);
      const schema = await s.readSchema();
      let rows = 0;
      for await (const chunk of s.streamRows({ kind: 'key', low: null, high: '30' }, schema, 10)) rows += chunk.length;
      expect(rows).toBe(30);
      // Abandoned with its rows taken, before the generator ended its read: the pool's next session is not in it.
      for await (const chunk of s.streamRows({ kind: 'key', low: null, high: '30' }, schema, 30)) {
        expect(chunk.length).toBe(30);
        break;
      }
      const state = await pool.query<{ s: string }>(
        `select coalesce(current_setting('transaction_isolation'), '') as s`,
      );
      expect(state.rows[0]!.s).toBe('read committed'); // the pooled session is out of the read's transaction
      expect(notices).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('keys are proved unique from the source table’s primary key in the read’s snapshot, else scanned on the target', async () => {
    await env.source.query('truncate public.orders, public.orders_nokey');
    await env.target.query('truncate public.orders, public.write_counts');
    await insertSourceRows(env.source, 1, 40);
    await env.source.query(`insert into public.orders_nokey select * from public.orders`);
    const t = ordersTransfer('orders_keys', { batchSize: 1000, chunkSize: 10 });
    const nokey = ordersTransfer('orders_nokey', {
      batchSize: 1000,
      chunkSize: 10,
      source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: 'public.orders_nokey' },
    });
    const w = { kind: 'key' as const, low: null, high: '40' };
    const proved = async (tc: TransferConfig) => {
      const s = new PostgresTransferSource(tc, env.source);
      const facts: StreamFacts = {};
      let rows = 0;
      for await (const chunk of s.streamRows(w, await s.readSchema(), 10, facts)) rows += chunk.length;
      expect(rows).toBe(40);
      return facts.keysUnique;
    };
    expect(await proved(t)).toBe(true);
    expect(await proved(nokey)).toBe(false);
    // Without the proof the target's scan runs: a key twice in the window fails the batch, nothing is applied.
    await env.source.query(`insert into public.orders_nokey select * from public.orders where id = 5`);
    const { svc } = service(nokey);
    const created = await svc.createBatch(nokey.name);
    const v = await svc.run(created.batchId);
    expect(v.state).toBe('failed');
    expect(v.lastErrorCode).toBe('duplicate_keys');
    expect((await env.target.query('select count(*)::int as n from public.orders')).rows[0].n).toBe(0);
    await svc.close();
  });
});

// Transfer sources and targets whose database a DBA set to a default_transaction_isolation of SERIALIZABLE or
// REPEATABLE READ (ALTER DATABASE … SET). The target's functions (claim, fence, staging registry) and the source's
// change-capture stamp wait for a lock and then re-read the row or the changes another transaction committed
// meanwhile: READ COMMITTED does that; under the database's stronger default their snapshot predates the wait and
// the same call failed with 40001 "could not serialize access due to concurrent update" (a reconcile racing an apply
// read an error instead of 'committed'; a change window's version stamp racing another stamp failed). The transfer
// pools now ask for READ COMMITTED as they connect, as the job store's and the journal's do (readCommitted.ts); the
// reads that need one snapshot name REPEATABLE READ themselves (the source's change windows and one-read streams).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferEndpoints } from '../../shared/engines/postgres/transferEndpoints.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { DEFAULT_TRANSFER_TIMEOUTS } from '../../shared/transfer/timeouts.js';
import type { StageRequest } from '../../shared/transfer/types.js';
import { withClient } from '../../dev/pgAdmin.js';
import { until, within } from '../support/until.js';
import { insertSourceRows, ordersTransfer, ORDERS_DDL, setupDatabases, type Env } from './helpers.js';

const BATCH = '7a3e5c1e-0d6b-4f43-9b1e-3f7d8e2a1c01';

describe('a source and a target whose database default isolation is SERIALIZABLE / REPEATABLE READ', () => {
  let env: Env;
  let endpoints: PostgresTransferEndpoints;
  const t = ordersTransfer('orders_iso', { boundary: { kind: 'changes' } });

  beforeAll(async () => {
    env = await setupDatabases('tr_iso');
    await migratePostgresChangeCapture(env.source);
    await env.source.query(ORDERS_DDL);
    await env.source.query(`select keel_changes.enable('public.orders', array['id'])`);
    await env.target.query(ORDERS_DDL);
    for (const [url, level] of [
      [env.sourceUrl, 'repeatable read'],
      [env.targetUrl, 'serializable'],
    ] as const) {
      const db = decodeURIComponent(new URL(url).pathname.slice(1));
      await withClient(url, (c) => c.query(`alter database "${db}" set default_transaction_isolation = '${level}'`));
    }
    endpoints = new PostgresTransferEndpoints({
      env: { TEST_SOURCE: env.sourceUrl, TEST_TARGET: env.targetUrl },
      timeouts: DEFAULT_TRANSFER_TIMEOUTS,
      poolSize: 2,
    });
  });

  afterAll(async () => {
    await endpoints?.close();
    await env?.close();
  });

  // A session of `url` waits for a lock (the call under test), seen from another session; or the call already ended
  // (its error is then the test's failure, not a timeout here).
  async function waitsForLock(url: string, exceptPid: number, call: Promise<unknown>): Promise<void> {
    let settled = false;
    call.then(
      () => (settled = true),
      () => (settled = true),
    );
    await withClient(url, (c) =>
      until(
        'the call waits for the lock',
        async () => {
          const r = await c.query(
            `select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and pid <> $1`,
            [exceptPid],
          );
          return settled || r.rowCount! > 0;
        },
        30_000,
      ),
    );
  }

  it("a reconcile behind an apply in flight waits for it and reads 'committed'", async () => {
    const target = await endpoints.target(t);
    const apply = new pg.Client({ connectionString: env.targetUrl });
    await apply.connect();
    try {
      // An apply in flight: its completion row claimed, not committed yet.
      await apply.query('begin isolation level read committed');
      await apply.query(`select keel_transfer.claim_batch($1, $2, 1)`, [BATCH, t.name]);
      const pid = (await apply.query<{ p: number }>('select pg_backend_pid() as p')).rows[0]!.p;
      const verdict = target.reconcile({ batchId: BATCH } as StageRequest, 20_000, 1, null); // (a PostgreSQL target reads only the id)
      verdict.catch(() => undefined); // awaited below
      await waitsForLock(env.targetUrl, pid, verdict);
      await apply.query(
        `update keel_transfer.completions set state = 'committed', row_count = 3, checksum = 'c' where batch_id = $1`,
        [BATCH],
      );
      await apply.query('commit');
      expect(await within(verdict, 20_000, 'the reconcile')).toMatchObject({ outcome: 'committed', rowCount: 3 });
    } finally {
      await apply.end();
    }
  });

  it("a change window's version stamp behind another stamp waits for it and goes on", async () => {
    const source = await endpoints.source(t);
    await source.readSchema();
    // The baseline's version, then changes that the next stamp gives a version to.
    const baseline = await source.nextWindow(null, 1000);
    expect(baseline?.kind).toBe('changes');
    await insertSourceRows(env.source, 1, 20);
    const other = new pg.Client({ connectionString: env.sourceUrl });
    await other.connect();
    try {
      // Another stamp (a rival process's window) holds the stamp's lock, the new changes stamped, not committed yet.
      await other.query('begin isolation level read committed');
      const stamped = (
        await other.query<{ v: string }>(`select keel_changes.current_version('public.orders')::text as v`)
      ).rows[0]!.v;
      const pid = (await other.query<{ p: number }>('select pg_backend_pid() as p')).rows[0]!.p;
      const next = source.nextWindow(baseline!.high, 1000);
      next.catch(() => undefined); // awaited below
      await waitsForLock(env.sourceUrl, pid, next);
      await other.query('commit');
      const w = await within(next, 20_000, 'the next window');
      expect(w).toMatchObject({ kind: 'changes', low: baseline!.high, high: stamped });
    } finally {
      await other.end();
    }
  });

  it("the databases' defaults stand; a baseline still reads its window in one snapshot", async () => {
    const level = `select current_setting('transaction_isolation') as v`;
    // the databases' defaults, as a plain session sees them
    expect((await withClient(env.targetUrl, (c) => c.query<{ v: string }>(level))).rows[0]!.v).toBe('serializable');
    expect((await withClient(env.sourceUrl, (c) => c.query<{ v: string }>(level))).rows[0]!.v).toBe('repeatable read');
    const source = await endpoints.source(t);
    const w = await source.nextWindow(null, 1000);
    let rows = 0;
    for await (const chunk of source.streamRows(w!, await source.readSchema(), 100)) rows += chunk.length;
    expect(rows).toBe(20);
  });
});

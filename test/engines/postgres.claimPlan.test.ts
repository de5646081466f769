// A one-queue claim (the processor's usual claim) on a short queue keeps its cached plans: keel._pick_due's
// skip-locked pick of a single queue is by a scalar key, like its probes. Over unnest(p_queues) it got a custom plan
// on every call, since a custom plan knows the array's length and always looks cheaper than the generic one (an empty
// claim of a wake-up herd, beside a job another worker holds, cost 3x an empty queue's: bench/README runs 300-309). A generic plan shows the priority level as a parameter ($n); a custom one, this call's value. Read with
// auto_explain (nested statements, JSON, at NOTICE level). Also: what that pick takes, across priority levels, beside
// rows another transaction holds, and past delayed and expired jobs. A plan and order check, not a timing test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { createTestDatabase } from '../support/pg.js';
import { planLoggingClient, type PlanLoggingClient } from '../support/planLog.js';

describe('postgres: a one-queue claim keeps its plans', () => {
  let url: string;
  let admin: pg.Client;
  let other: pg.Client;
  let logging: PlanLoggingClient<unknown>;

  beforeAll(async () => {
    url = await createTestDatabase('claimplan');
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await migratePostgres(pool);
    } finally {
      await pool.end();
    }
    logging = await planLoggingClient(url, 'keel-claim-plan');
    admin = logging.client;
    other = new pg.Client({ connectionString: url, application_name: 'keel-claim-plan-holder' });
    other.on('error', () => undefined);
    await other.connect();
  });
  afterAll(async () => {
    await other?.end();
    await admin?.end();
  });

  const q = async (sql: string, params: unknown[] = []) => (await admin.query(sql, params)).rows;
  const enqueue = (c: pg.Client, queue: string, jobs: Record<string, unknown>[]) =>
    c.query(`select job_ids::text[] as ids from keel.enqueue_many($1::jsonb)`, [
      JSON.stringify(jobs.map((j) => ({ queue, type: 't', ...j }))),
    ]);
  const claim = async (queue: string, limit: number) =>
    (
      await q(`select job_id::text as id from keel.claim_and_start('w', array[$1::text], $2::integer, 60)`, [
        queue,
        limit,
      ])
    ).map((r: { id: string }) => r.id);

  it('the skip-locked pick of one queue runs a generic plan once the cache has settled', async () => {
    const queue = 'claim-plan-queue';
    await enqueue(
      admin,
      queue,
      Array.from({ length: 200 }, () => ({})),
    );
    await q(`analyze keel.jobs_hot`); // statistics that count these rows, as autovacuum's would (not the empty table's)
    // PostgreSQL tries custom plans for a cached statement's first 5 executions in a session, then keeps the generic
    // one if it is not costlier on average; a statement it plans anew each call never gets there.
    for (let i = 0; i < 8; i++) expect(await claim(queue, 5)).toHaveLength(5);
    await q(`set auto_explain.log_verbose = on`);
    const { result, plans } = await logging.explained(() => claim(queue, 5));
    await q(`set auto_explain.log_verbose = off`);
    expect(result).toHaveLength(5);
    const pick = plans.filter((p) => /for update of h skip locked/i.test(p['Query Text']));
    expect(pick.length, 'the skip-locked pick was logged').toBeGreaterThan(0);
    // Generic: the queue a parameter; custom: the values of this call (VERBOSE shows them, initplans' too).
    for (const p of pick) expect(JSON.stringify(p.Plan)).not.toContain(queue);
  });

  // The case the short queue above does not reach: statistics taken while the table was large and the claimed queue
  // was not in it (a new queue, or a backlog enqueued since the last analyze). A custom plan then estimates the
  // queue's due rows at ~1 and the claim's LIMIT as given, the generic one the LIMIT at 10 % of an average queue's
  // rows, so PostgreSQL planned the pick anew on every call (bench/README runs 1040-1059: ~2x the pick's execution
  // in a claim of 20). With its values read through scalar subqueries, no plan knows them: the custom plans cost
  // what the generic one does, and the cache keeps it. In VERBOSE output a custom plan shows this call's values (the
  // queue's name) where the generic one shows parameters.
  it('the pick keeps its generic plan when the statistics do not know the claimed queue', async () => {
    const queue = 'claim-plan-unknown';
    await enqueue(
      admin,
      'claim-plan-big',
      Array.from({ length: 5_000 }, () => ({})),
    );
    await q(`analyze keel.jobs_hot`);
    await enqueue(
      admin,
      queue,
      Array.from({ length: 300 }, () => ({})),
    );
    const session = await planLoggingClient(url, 'keel-claim-plan-unknown');
    try {
      const claimOn = async (limit: number) =>
        (
          await session.client.query(
            `select job_id::text as id from keel.claim_and_start('w', array[$1::text], $2::integer, 60)`,
            [queue, limit],
          )
        ).rows as { id: string }[];
      for (let i = 0; i < 8; i++) expect(await claimOn(20)).toHaveLength(20);
      await session.client.query(`set auto_explain.log_verbose = on`);
      const { result, plans } = await session.explained(() => claimOn(20));
      expect(result).toHaveLength(20);
      const pick = plans.filter((p) => /for update of h skip locked/i.test(p['Query Text']));
      expect(pick.length, 'the skip-locked pick was logged').toBeGreaterThan(0);
      for (const p of pick) expect(JSON.stringify(p.Plan)).not.toContain(queue);
    } finally {
      await session.client.end();
    }
  });

  it('takes the due rows of one queue in claim order across priority levels, skipping held, delayed and expired rows', async () => {
    const queue = 'claim-plan-order';
    const ids = async (jobs: Record<string, unknown>[]) =>
      ((await enqueue(admin, queue, jobs)).rows[0] as { ids: string[] }).ids;
    const low = await ids([{ priority: 0 }, { priority: 0 }, { priority: 0 }]);
    const high = await ids([{ priority: 5 }, { priority: 5 }, { priority: 5 }]);
    await ids([{ priority: 9, delayMs: 3_600_000 }]); // not due: never taken, nor does its level stop the walk
    const [expired] = await ids([{ priority: 5 }]);
    await q(`update keel.jobs_hot set expires_at = now() - interval '1 second' where id = $1`, [expired]);
    // Another worker's claim holds the oldest job of each level, uncommitted: skipped, not waited for.
    await other.query('begin');
    const held = (
      await other.query(`select id::text from keel.jobs_hot where id = any($1::bigint[]) order by id for update`, [
        [high[0], low[0]],
      ])
    ).rows.map((r: { id: string }) => r.id);
    expect(held).toEqual([low[0], high[0]]);
    try {
      expect(await claim(queue, 3)).toEqual([high[1], high[2], low[1]]);
      expect(await claim(queue, 10)).toEqual([low[2]]);
      expect(await claim(queue, 10)).toEqual([]);
    } finally {
      await other.query('rollback');
    }
    expect(await claim(queue, 10)).toEqual([high[0], low[0]]);
  });

  // Several workers claiming from one queue head leave the index entries of the rows they claimed behind them, and a
  // scan may mark those dead only once no transaction older than the claim runs: each claim's level probe walks them
  // (a heap visit each). The pick starts where the probe found the level's first pending row instead of walking them
  // a second time (bench/README runs 800-819). Counted as the index entries this backend's scans of
  // jobs_hot_pending_due returned within one claim's transaction, with the claimed rows' entries kept unkillable by a
  // snapshot another session holds. A count, not a timing.
  it("a claim's pick does not walk again the claimed rows' entries its level probe walked", async () => {
    const queue = 'claim-plan-dead-head';
    const backlog = 1_500;
    const claimed = 1_000;
    const ids = (
      (
        await enqueue(
          admin,
          queue,
          Array.from({ length: backlog }, () => ({})),
        )
      ).rows[0] as { ids: string[] }
    ).ids;
    const counter = new pg.Client({ connectionString: url, application_name: 'keel-claim-plan-count' });
    counter.on('error', () => undefined);
    await counter.connect();
    await other.query('begin isolation level repeatable read');
    try {
      await other.query('select 1'); // the snapshot, older than every claim below
      expect(await claim(queue, claimed)).toEqual(ids.slice(0, claimed));
      await counter.query('begin');
      const next = (
        await counter.query(`select job_id::text as id from keel.claim_and_start('w', array[$1::text], 10, 60)`, [
          queue,
        ])
      ).rows.map((r: { id: string }) => r.id);
      const read = Number(
        (await counter.query(`select pg_stat_get_xact_tuples_returned('keel.jobs_hot_pending_due'::regclass) as n`))
          .rows[0].n,
      );
      await counter.query('commit');
      expect(next).toEqual(ids.slice(claimed, claimed + 10));
      // The probe returns the 1,000 entries of claimed rows and the first pending one; the pick its 10 rows (and the
      // entries it finds locked or gone). Walking the claimed rows again: ~2,000.
      expect(read).toBeGreaterThanOrEqual(claimed);
      expect(read).toBeLessThan(claimed + 100);
    } finally {
      await other.query('rollback');
      await counter.end();
    }
  });
});

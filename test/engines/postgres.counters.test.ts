// PostgreSQL read counters per backend (V006), and the tallies (stats_summary, metric_buckets: V014): each backend
// writes only its own slot (its pid), so no two sessions ever wait for one counter row; zombie rescue folds the rows
// of exited backends into slot 0, and the sums stay exact.
// And stats() reading jobs_hot_pending_due one priority level at a time.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';

describe('postgres read counters per backend', () => {
  const h = new PostgresHarness();
  let store: PostgresJobStore;
  let admin: pg.Client;

  beforeAll(async () => {
    store = await h.createStore({ poolSize: 4 });
    admin = await h.connectOwner();
  });
  afterAll(async () => {
    await h.close();
  });

  const slotsOf = async (queue: string) =>
    (await admin.query('select slot from keel.hot_counts where queue = $1 order by slot', [queue])).rows.map(
      (r) => r.slot as number,
    );

  const tallySlotsOf = async (queue: string) => ({
    summary: (
      await admin.query('select slot from keel.stats_summary where queue = $1 order by slot', [queue])
    ).rows.map((r) => r.slot as number),
    buckets: (
      await admin.query('select slot from keel.metric_buckets where queue = $1 order by slot', [queue])
    ).rows.map((r) => r.slot as number),
  });

  it('every backend counts in a slot of its own; rescue folds the slots of exited backends into slot 0, sums unchanged', async () => {
    const queue = `slots-${Date.now()}`;
    // Three short-lived stores: three pools whose backends exit when the stores close.
    const pids = new Set<number>();
    for (let i = 0; i < 3; i++) {
      const s = await h.createStore({ poolSize: 1 });
      await s.enqueueMany(Array.from({ length: 5 }, () => ({ queue, type: 't' })));
      const jobs = await s.claimAndStart({ workerId: `w${i}`, queues: [queue], limit: 2, leaseSeconds: 60 });
      expect(jobs).toHaveLength(2);
      await s.completeMany(jobs.slice(0, 1).map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
      await s.close();
    }
    for (const slot of await slotsOf(queue)) pids.add(slot);
    expect(pids.size).toBe(3);
    expect(pids.has(0)).toBe(false);
    const truth = await h.hotTruth(queue);
    expect(truth).toMatchObject({ pending: 9, processing: 3 });

    // The backends are gone once pg_stat_activity no longer lists them.
    for (let i = 0; i < 50; i++) {
      const { rows } = await admin.query('select count(*)::int as n from pg_stat_activity where pid = any($1)', [
        [...pids],
      ]);
      if (rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // The tallies (V014): each backend's success in a stats_summary and a metric_buckets row of its own.
    expect(await tallySlotsOf(queue)).toEqual({
      summary: [...pids].sort((a, b) => a - b),
      buckets: [...pids].sort((a, b) => a - b),
    });
    await store.rescueZombies(100);
    expect(await slotsOf(queue)).toEqual([0]);
    expect(await tallySlotsOf(queue)).toEqual({ summary: [0], buckets: [0] });
    const stats = (await store.stats()).find((s) => s.queue === queue)!;
    expect(stats).toMatchObject({
      pending: truth.pending,
      fetched: truth.fetched,
      processing: truth.processing,
      succeeded: 3,
    });
    const buckets = (await admin.query('select * from keel.metrics(60, $1)', [queue])).rows;
    expect(buckets.map((b) => [b.outcome, Number(b.count)])).toEqual([['succeeded', 3]]);
  });

  it('metric rows of past minutes fold into slot 0 even while their backend lives; metrics() sums a bucket over slots', async () => {
    const queue = `fold-past-${Date.now()}`;
    const { rows: me } = await admin.query('select pg_backend_pid() as pid');
    const live = me[0].pid as number;
    // Two rows of one past minute (a live backend's and slot 0's) and one of this minute (the live backend's).
    await admin.query(
      `insert into keel.metric_buckets (bucket_start, queue, outcome, reason, slot, count, total_duration_ms, max_duration_ms)
       values (date_trunc('minute', now()) - interval '2 minutes', $1, 'succeeded', '', $2, 2, 10, 7),
              (date_trunc('minute', now()) - interval '2 minutes', $1, 'succeeded', '', 0, 3, 30, 20),
              (date_trunc('minute', now()), $1, 'succeeded', '', $2, 4, 8, 2)`,
      [queue, live],
    );
    const read = async () =>
      (await admin.query('select * from keel.metrics(60, $1)', [queue])).rows.map((b) => [
        Number(b.count),
        Number(b.total_duration_ms),
        Number(b.max_duration_ms),
      ]);
    expect(await read()).toEqual([
      [5, 40, 20],
      [4, 8, 2],
    ]);
    await store.rescueZombies(100);
    const { rows } = await admin.query(
      `select (bucket_start < date_trunc('minute', now())) as past, slot, count::int from keel.metric_buckets
       where queue = $1 order by bucket_start, slot`,
      [queue],
    );
    expect(rows).toEqual([
      { past: true, slot: 0, count: 5 },
      { past: false, slot: live, count: 4 },
    ]);
    expect(await read()).toEqual([
      [5, 40, 20],
      [4, 8, 2],
    ]);
  });

  // complete_many counts a batch of successes per queue in the statement that archives them (its two upserts inline),
  // and a batch that also dead-letters a cancelled job or settles a flow's children through the one per-job tally.
  it('complete_many counts exactly on both of its paths: successes only, and successes with a cancel and a parent', async () => {
    const stamp = Date.now();
    const [qa, qb] = [`tally-a-${stamp}`, `tally-b-${stamp}`];
    const counters = async (queue: string) => {
      const { rows } = await admin.query(
        `select coalesce((select sum(succeeded) from keel.stats_summary where queue = $1), 0)::int as succeeded,
                coalesce((select sum(failed) from keel.stats_summary where queue = $1), 0)::int as failed,
                coalesce((select sum(cancelled) from keel.stats_summary where queue = $1), 0)::int as cancelled,
                (select coalesce(sum(count), 0) from keel.metric_buckets where queue = $1 and outcome = 'succeeded')::int as ok_bucket,
                (select coalesce(sum(count), 0) from keel.metric_buckets where queue = $1 and outcome = 'failed' and reason = 'cancelled')::int as cancelled_bucket,
                (select count(*) from keel.jobs_archive where queue = $1)::int as archived,
                (select count(*) from keel.jobs_dlq where queue = $1)::int as dlq`,
        [queue],
      );
      return rows[0] as Record<string, number>;
    };
    const claimAll = async (queue: string, n: number) => {
      const jobs = await store.claimAndStart({ workerId: 'tally', queues: [queue], limit: n, leaseSeconds: 60 });
      expect(jobs).toHaveLength(n);
      return jobs;
    };
    const refs = (jobs: { id: string; leaseId: string }[]) => jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId }));

    // Successes only, two queues in one batch.
    await store.enqueueMany([
      ...Array.from({ length: 3 }, () => ({ queue: qa, type: 't' })),
      ...Array.from({ length: 2 }, () => ({ queue: qb, type: 't' })),
    ]);
    const first = [...(await claimAll(qa, 3)), ...(await claimAll(qb, 2))];
    const r1 = await store.completeMany(refs(first));
    expect(r1.every((r) => r.status === 'ok')).toBe(true);
    expect(await counters(qa)).toMatchObject({ succeeded: 3, failed: 0, ok_bucket: 3, archived: 3 });
    expect(await counters(qb)).toMatchObject({ succeeded: 2, failed: 0, ok_bucket: 2, archived: 2 });

    // Successes, one job cancelled while it ran (dead-lettered 'cancelled') and one parent whose child waits.
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue: qa, type: 't' })));
    const second = await claimAll(qa, 3);
    const [child] = await store.enqueueMany([{ queue: qb, type: 't', after: [second[2]!.id] }]);
    expect(await store.cancel(second[0]!.id)).toBeDefined();
    const r2 = await store.completeMany(refs(second));
    expect(r2.map((r) => r.status)).toEqual(['cancelled', 'ok', 'ok']);
    expect(await counters(qa)).toMatchObject({
      succeeded: 5,
      failed: 1,
      cancelled: 1,
      ok_bucket: 5,
      cancelled_bucket: 1,
      archived: 5,
      dlq: 1,
    });
    // The parent succeeded in the same transaction: its child is due now.
    const [released] = await claimAll(qb, 1);
    expect(released!.id).toBe(child!.id);
  });

  // complete_many and start_many move the rows _lock_owned locked by their tuple ids and check they moved as many rows
  // as they locked: a pair sent twice locks one row version twice and must still move (and count) the job once.
  it('a lease pair sent twice to complete_many or start_many moves its job once, counted once', async () => {
    const queue = `twice-${Date.now()}`;
    await store.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 't' })));
    const [a, b] = await store.claimAndStart({ workerId: 'twice', queues: [queue], limit: 2, leaseSeconds: 60 });
    const pair = (j: { id: string; leaseId: string }) => ({ jobId: j.id, leaseId: j.leaseId });
    const done = await store.completeMany([pair(a!), pair(a!), pair(b!)]);
    expect(done.map((r) => r.status)).toEqual(['ok', 'ok', 'ok']);
    const { rows } = await admin.query(
      `select (select sum(succeeded) from keel.stats_summary where queue = $1)::int as succeeded,
              (select count(*) from keel.jobs_archive where queue = $1)::int as archived`,
      [queue],
    );
    expect(rows[0]).toEqual({ succeeded: 2, archived: 2 });

    const [c] = await store.claimNext({ workerId: 'twice', queues: [queue], limit: 1, leaseSeconds: 60 });
    const started = await store.startMany([pair(c!), pair(c!)]);
    expect(started.map((r) => r.status)).toEqual(['ok', 'ok']);
    expect(await store.getJob(c!.id)).toMatchObject({ location: 'hot', state: 'processing', attempts: 1 });
  });
  it('stats reads due and the oldest due job across priority levels, and says inexact past 64 levels', async () => {
    const queue = `levels-${Date.now()}`;
    const hourAgo = new Date(Date.now() - 3600_000);
    const later = new Date(Date.now() + 3600_000);
    await store.enqueueMany([
      { queue, type: 't', priority: 5 },
      { queue, type: 't', priority: 1, runAt: hourAgo },
      { queue, type: 't', priority: -3, runAt: later },
      { queue, type: 't', priority: -3 },
    ]);
    let s = (await store.stats()).find((x) => x.queue === queue)!;
    expect(s).toMatchObject({ pending: 4, due: 3, dueExact: true });
    expect(s.oldestDueAgeMs!).toBeGreaterThanOrEqual(3_500_000);

    const many = `levels-many-${Date.now()}`;
    await store.enqueueMany(Array.from({ length: 70 }, (_, i) => ({ queue: many, type: 't', priority: i })));
    s = (await store.stats()).find((x) => x.queue === many)!;
    expect(s).toMatchObject({ pending: 70, due: 64, dueExact: false });
  });
});

// The archive keeps one time index, (queue, finished_at) (V031): a purge and a count with no queue walk it queue by
// queue (keel._archive_queues). Their answers over several queues, and their plans: index reads, never the table.
// The DLQ's purge deletes its chosen rows by key too.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { PostgresHarness } from './postgres.harness.js';
import type { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';

describe('postgres archive readers over every queue', () => {
  const h = new PostgresHarness();
  let store: PostgresJobStore;
  let admin: pg.Client;

  beforeAll(async () => {
    store = await h.createStore({ poolSize: 2 });
    admin = await h.connectOwner();
  });
  afterAll(async () => {
    await h.close();
  });

  const archiveOf = async (queue: string, n: number) => {
    await store.enqueueMany(Array.from({ length: n }, () => ({ queue, type: 't' })));
    const jobs = await store.claimAndStart({ workerId: 'w', queues: [queue], limit: n, leaseSeconds: 60 });
    const moved = await store.completeMany(jobs.map((j) => ({ jobId: j.id, leaseId: j.leaseId })));
    expect(moved.every((m) => m.status === 'ok')).toBe(true);
  };
  const backdate = (queue: string, hours: number) =>
    admin.query(
      `update keel.jobs_archive set finished_at = finished_at - make_interval(hours => $2) where queue = $1`,
      [queue, hours],
    );
  // The plans of every statement a call runs (auto_explain, nested statements), in a transaction rolled back.
  const plan = async (sql: string) => {
    await admin.query('begin');
    try {
      await admin.query(`load 'auto_explain'`);
      await admin.query(
        `set local auto_explain.log_min_duration = 0; set local auto_explain.log_nested_statements = on;
         set local auto_explain.log_level = notice; set local client_min_messages = notice`,
      );
      const notices: string[] = [];
      const onNotice = (n: { message?: string }) => notices.push(n.message ?? '');
      admin.on('notice', onNotice);
      await admin.query(sql);
      admin.off('notice', onNotice);
      return notices.join('\n');
    } finally {
      await admin.query('rollback');
    }
  };

  it('count and purge with no queue see every queue, oldest first, and leave the newer rows', async () => {
    await archiveOf('arch-a', 3);
    await archiveOf('arch-b', 4);
    await archiveOf('arch-c', 2);
    await backdate('arch-a', 5);
    await backdate('arch-b', 3);
    const queues = (await admin.query('select q from keel._archive_queues() q')).rows.map((r) => r.q as string);
    expect(queues).toEqual(['arch-a', 'arch-b', 'arch-c']);

    const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
    expect(await store.countJobs({ location: 'archive', to: twoHoursAgo, cap: 100 })).toMatchObject({
      matched: 7,
      exact: true,
    });
    expect(await store.countJobs({ location: 'archive', to: twoHoursAgo, cap: 5 })).toMatchObject({
      matched: 5,
      exact: false,
    });
    expect(
      await store.countJobs({
        location: 'archive',
        from: new Date(Date.now() - 4 * 3600_000),
        to: twoHoursAgo,
        cap: 100,
      }),
    ).toMatchObject({ matched: 4, exact: true });

    // The oldest first across queues: the first batch of 3 is arch-a's.
    expect(await store.purge('archive', null, twoHoursAgo, 3)).toBe(3);
    expect(await h.countRows('archive', 'arch-a')).toBe(0);
    expect(await h.countRows('archive', 'arch-b')).toBe(4);
    expect(await store.purge('archive', null, twoHoursAgo, 3)).toBe(3);
    expect(await store.purge('archive', null, twoHoursAgo, 3)).toBe(1);
    expect(await store.purge('archive', null, twoHoursAgo, 3)).toBe(0);
    expect(await h.countRows('archive', 'arch-b')).toBe(0);
    expect(await h.countRows('archive', 'arch-c')).toBe(2);
    expect((await admin.query('select q from keel._archive_queues() q')).rows.map((r) => r.q)).toEqual(['arch-c']);
  });

  it('with 20k archived jobs and fresh statistics the readers are index reads', async () => {
    await admin.query(`
      insert into keel.jobs_archive (id, queue, type, payload, priority, attempts, tags, created_at, finished_at, duration_ms)
      select 1000000 + g, 'bulk-' || (g % 4), 't', '{}', 0, 1, '{}', now(), now() - make_interval(secs => g), 1
      from generate_series(1, 20000) g`);
    await admin.query('analyze keel.jobs_archive');
    const count = await plan(
      `select * from keel.count_jobs('archive', null, null, null, null, null, now() - interval '3 hours', now(), 100000)`,
    );
    const purge = await plan(`select keel.purge('archive', null, now() - interval '1 hour', 1000)`);
    for (const text of [count, purge]) {
      expect(text).toContain('jobs_archive_queue_finished');
      expect(text).not.toMatch(/Seq Scan on jobs_archive/);
    }
  });

  it('with 20k dead-lettered jobs the DLQ purge deletes the rows it chose by key, never scanning the table', async () => {
    await admin.query(`
      insert into keel.jobs_dlq (id, queue, type, payload, priority, attempts, tags, created_at, failed_at, reason)
      select 2000000 + g, 'dead-' || (g % 4), 't', '{}', 0, 1, '{}', now(), now() - make_interval(secs => g), 'fatal'
      from generate_series(1, 20000) g`);
    await admin.query('analyze keel.jobs_dlq');
    const before = Number((await admin.query(`select count(*) from keel.jobs_dlq`)).rows[0].count);
    const plans: string[] = [];
    for (const queue of [null, 'dead-1'])
      plans.push(
        await plan(
          `select keel.purge('dlq', ${queue === null ? 'null' : `'${queue}'`}, now() - interval '1 hour', 1000)`,
        ),
      );
    for (const text of plans) {
      expect(text).toMatch(/Index Scan using jobs_dlq_pkey on jobs_dlq/); // the delete's probe by key
      expect(text).not.toMatch(/Seq Scan on jobs_dlq/);
    }
    // and it deletes what it chose: the oldest 1,000 older than an hour, then 1,000 of queue dead-1
    expect(await store.purge('dlq', null, new Date(Date.now() - 3_600_000), 1000)).toBe(1000);
    expect(await store.purge('dlq', 'dead-1', new Date(Date.now() - 3_600_000), 1000)).toBe(1000);
    const left = await admin.query(
      `select count(*)::int n, count(*) filter (where queue = 'dead-1')::int d1 from keel.jobs_dlq where id > 2000000`,
    );
    expect(left.rows[0].n).toBe(before - 2000);
    const newest = await admin.query(`select max(id)::int m from keel.jobs_dlq where id > 2000000`);
    expect(newest.rows[0].m).toBe(2000000 + 19000); // the oldest (failed g seconds ago, g 19,001–20,000) went first
  });
});

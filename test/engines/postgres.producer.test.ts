// Transactional enqueue from another application (issue 25): a producer's login in keel_producer calls
// keel.enqueue_many inside its own transaction, next to its own writes. Rolled back: no job, no wake-up; committed:
// the job is there, workers are woken at commit, and the app claims it. The role may call nothing else, and
// enqueue_many validates its input as the HTTP API does, naming the field.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { withLogin } from '../../dev/pgAdmin.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

const PRODUCER = { user: 'keel_producer_test', password: 'keel-producer-test' };
const ENQUEUE = 'select job_ids, duplicates from keel.enqueue_many($1::jsonb)';

describe('PostgreSQL producers: keel.enqueue_many in the caller transaction, role keel_producer', () => {
  let ownerUrl: string;
  let store: PostgresJobStore;
  let owner: pg.Client;
  let producer: pg.Client;
  let listener: pg.Client;
  const wakeups: string[] = [];

  beforeAll(async () => {
    ownerUrl = await createTestDatabase('producer');
    store = await PostgresJobStore.connect(appUrl(ownerUrl), { poolSize: 2, migrateUrl: ownerUrl });
    owner = new pg.Client({ connectionString: ownerUrl, connectionTimeoutMillis: 10_000 });
    await owner.connect();
    // A producer login (cluster-wide, so made idempotently) and a table of the producer's own.
    await owner.query(
      `do $$ begin create role ${PRODUCER.user} login; exception when duplicate_object or unique_violation then null; end $$`,
    );
    await owner.query(`alter role ${PRODUCER.user} with login nosuperuser password '${PRODUCER.password}'`);
    await owner.query(`grant keel_producer to ${PRODUCER.user}`);
    await owner.query(`create table public.orders (id integer primary key, amount integer not null)`);
    await owner.query(`grant select, insert on public.orders to ${PRODUCER.user}`);
    producer = new pg.Client({
      connectionString: withLogin(ownerUrl, PRODUCER.user, PRODUCER.password),
      connectionTimeoutMillis: 10_000,
    });
    listener = new pg.Client({ connectionString: ownerUrl, connectionTimeoutMillis: 10_000 });
    for (const c of [owner, producer, listener]) c.on('error', () => undefined); // a query's rejection reports it
    await Promise.all([producer.connect(), listener.connect()]);
    listener.on('notification', (n) => wakeups.push(n.payload ?? ''));
    await listener.query('listen keel_jobs');
  });
  afterAll(async () => {
    await store?.close();
    await Promise.all([producer?.end(), listener?.end()]);
    await owner?.end();
  });

  const hotCount = async (queue: string) =>
    Number((await owner.query('select count(*) as n from keel.jobs_hot where queue = $1', [queue])).rows[0].n);
  // A notification sent at a commit reaches the listener shortly after; a round trip on its connection flushes it.
  const settle = async () => {
    await new Promise((r) => setTimeout(r, 50));
    await listener.query('select 1');
  };

  it('logs in as keel_producer only: not a member of keel_executor', async () => {
    const { rows } = await producer.query(
      `select pg_has_role(current_user, 'keel_producer', 'member') as producer,
              pg_has_role(current_user, 'keel_executor', 'member') as executor`,
    );
    expect(rows[0]).toEqual({ producer: true, executor: false });
  });

  it('enqueues nothing when the producer transaction rolls back, and wakes nobody', async () => {
    const queue = 'orders-rollback';
    await producer.query('begin');
    await producer.query('insert into public.orders (id, amount) values (1, 100)');
    const { rows } = await producer.query(ENQUEUE, [
      JSON.stringify([{ queue, type: 'charge', payload: { order: 1 } }]),
    ]);
    expect(rows[0].job_ids).toHaveLength(1);
    await producer.query('rollback');
    await settle();
    expect(await hotCount(queue)).toBe(0);
    expect((await owner.query('select count(*)::int as n from public.orders')).rows[0].n).toBe(0);
    expect(wakeups).not.toContain(queue);
  });

  it('enqueues with the producer commit: woken at commit, then claimed by the app', async () => {
    const queue = 'orders-commit';
    await producer.query('begin');
    await producer.query('insert into public.orders (id, amount) values (2, 250)');
    const { rows } = await producer.query(ENQUEUE, [
      JSON.stringify([{ queue, type: 'charge', payload: { order: 2 }, idempotencyKey: 'charge-2' }]),
    ]);
    const id = String(rows[0].job_ids[0]);
    await settle();
    expect(wakeups).not.toContain(queue); // NOTIFY is transactional: nothing before the commit
    expect(await hotCount(queue)).toBe(0); // and nobody else sees the job yet
    await producer.query('commit');
    await settle();
    expect(wakeups).toContain(queue);
    const [claimed] = await store.claimNext({ workerId: 'w1', queues: [queue], limit: 5 });
    expect(claimed).toMatchObject({ id, queue, type: 'charge', payload: { order: 2 }, idempotencyKey: 'charge-2' });
  });

  it('refuses every other function, table and sequence to the producer', async () => {
    const denied = async (sql: string, params: unknown[] = []) => {
      const err = await producer.query(sql, params).then(
        () => null,
        (e: Error & { code?: string }) => e,
      );
      expect(err, sql).not.toBeNull();
      expect(err!.code, `${sql}: ${err!.message}`).toBe('42501');
    };
    await denied(`select * from keel.claim_next('w', array['orders-commit'], 1, 60)`);
    await denied(`select * from keel.claim_and_start('w', array['orders-commit'], 1, 60)`);
    await denied(`select * from keel.get_job(1)`);
    await denied(`select * from keel.stats()`);
    await denied(`select * from keel.cancel(1)`);
    await denied(`select * from keel.purge('dlq', null, now(), 10)`);
    await denied(`select * from keel.fire_schedule('s', null, now(), '[]'::jsonb)`);
    await denied(`select * from keel._enqueue('[]'::jsonb, true)`);
    await denied(`select 1 from keel.jobs_hot limit 1`);
    await denied(`select nextval('keel.job_id_seq')`);
    // Every function of the schema but enqueue_many is closed to it (whichever migration made it).
    const { rows } = await owner.query(
      `select p.oid::regprocedure::text as sig from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'keel' and has_function_privilege($1, p.oid, 'execute') order by 1`,
      [PRODUCER.user],
    );
    expect(rows.map((r) => r.sig)).toEqual(['keel.enqueue_many(jsonb)']);
  });

  it('validates each job as the API does, naming the field, and enqueues nothing from a refused batch', async () => {
    const queue = 'orders-invalid';
    const ok = { queue, type: 'charge' };
    const cases: [unknown[], RegExp][] = [
      [[ok, { queue: 'bad queue!', type: 'charge' }], /^jobs\[1\]\.queue: must be a name/],
      [[{ queue, type: '' }], /^jobs\[0\]\.type: /],
      [[{ ...ok, priority: 1.5 }], /^jobs\[0\]\.priority: must be an integer/],
      [[{ ...ok, priority: 2_000_000 }], /^jobs\[0\]\.priority: /],
      [[{ ...ok, delayMs: -1 }], /^jobs\[0\]\.delayMs: /],
      [[{ ...ok, maxAttempts: 0 }], /^jobs\[0\]\.maxAttempts: /],
      [[{ ...ok, runAt: 'tomorrow' }], /^jobs\[0\]\.runAt: must be an ISO 8601/],
      [[{ ...ok, runAt: '2031-01-01T00:00:00' }], /^jobs\[0\]\.runAt: /], // no offset: ambiguous
      [[{ ...ok, runAt: '2031-01-01T00:00:00Z', delayMs: 5 }], /^jobs\[0\]\.runAt: give delayMs or runAt, not both/],
      [[{ ...ok, tags: ['a', 7] }], /^jobs\[0\]\.tags: /],
      [[{ ...ok, tags: Array.from({ length: 17 }, (_, i) => `t${i}`) }], /^jobs\[0\]\.tags: /],
      [[{ ...ok, idempotencyKey: 'k'.repeat(201) }], /^jobs\[0\]\.idempotencyKey: /],
      [
        [{ ...ok, idempotencyKey: 'schedule:nightly:2031-01-01T00:00:00.000Z' }],
        /^jobs\[0\]\.idempotencyKey: keys starting with "schedule:" are reserved/,
      ],
      [
        [{ ...ok, payload: { big: 'x'.repeat(300 * 1024) } }],
        /^jobs\[0\]\.payload: is \d+ bytes of JSON; the limit is 262144/,
      ],
      [[{ ...ok, colour: 'red' }], /^jobs\[0\]\.colour: is not a job field/],
      [[{ ...ok, after: 'x' }], /^jobs\[0\]\.after: must be an array/],
      [[ok, { ...ok, after: [{ index: 1 }] }], /^jobs\[1\]\.after\[0\]: \{"index": 1\} must name an earlier job/],
      [[ok, { ...ok, after: [true] }], /^jobs\[1\]\.after\[0\]: must be a job id or/],
      [[ok, { ...ok, after: ['999999999999'] }], /^jobs\[1\]\.after\[0\]: job 999999999999 does not exist/],
      [[ok, { ...ok, after: [{ index: 0 }], onFailure: 'maybe' }], /^jobs\[1\]\.onFailure: must be skip, run or/],
      [[{ ...ok, onFailure: 'run' }], /^jobs\[0\]\.onFailure: applies only to a job with parents/],
      [[ok, 'not a job'], /^jobs\[1\]: must be a JSON object/],
    ];
    for (const [jobs, message] of cases) {
      const err = await producer.query(ENQUEUE, [JSON.stringify(jobs)]).then(
        () => null,
        (e: Error & { code?: string }) => e,
      );
      expect(err, JSON.stringify(jobs).slice(0, 200)).not.toBeNull();
      expect(err!.code).toBe('22023');
      expect(err!.message).toMatch(message);
    }
    const tooMany = await producer.query(ENQUEUE, [JSON.stringify(Array.from({ length: 20_001 }, () => ok))]).then(
      () => null,
      (e: Error) => e,
    );
    expect(tooMany?.message).toMatch(/at most 20000 jobs/);
    expect(await hotCount(queue)).toBe(0);
    // Every field the API takes, valid: accepted.
    const { rows } = await producer.query(ENQUEUE, [
      JSON.stringify([
        {
          queue,
          type: 'charge',
          payload: { order: 3 },
          priority: -5,
          runAt: '2031-01-01T00:00:00.000+02:00',
          tags: ['billing'],
          idempotencyKey: 'charge-3',
          maxAttempts: 3,
          expiresAt: '2032-01-01T00:00:00Z',
        },
        { queue, type: 'charge', delayMs: 1000 },
        { queue, type: 'receipt', after: [{ index: 1 }], onFailure: 'run' },
      ]),
    ]);
    expect(rows[0].duplicates).toEqual([false, false, false]);
    expect(await hotCount(queue)).toBe(3);
  });

  it('refuses "schedule:" keys to the app\'s own login too: only fire_schedule writes them', async () => {
    const app = new pg.Client({ connectionString: appUrl(ownerUrl), connectionTimeoutMillis: 10_000 });
    app.on('error', () => undefined);
    await app.connect();
    try {
      const jobs = [
        { queue: 'orders-reserved', type: 'charge' },
        { queue: 'orders-reserved', type: 'charge', idempotencyKey: 'schedule:nightly:2031-01-01T00:00:00.000Z' },
      ];
      await expect(app.query(ENQUEUE, [JSON.stringify(jobs)])).rejects.toMatchObject({
        code: '22023',
        message: expect.stringMatching(/^jobs\[1\]\.idempotencyKey: keys starting with "schedule:" are reserved/),
      });
      const fired = await app.query(`select status from keel.fire_schedule('nightly', null, now(), $1::jsonb)`, [
        JSON.stringify([jobs[1]]),
      ]);
      expect(fired.rows[0].status).toBe('fired');
      expect(await hotCount('orders-reserved')).toBe(1);
    } finally {
      await app.end();
    }
  });

  it('answers a key held with another payload with 23505 naming the key (the SQL form of the 409)', async () => {
    const queue = 'orders-conflict';
    const job = (payload: unknown) => JSON.stringify([{ queue, type: 'charge', payload, idempotencyKey: 'charge-9' }]);
    const first = await producer.query(ENQUEUE, [job({ amount: 1 })]);
    const again = await producer.query(ENQUEUE, [job({ amount: 1 })]);
    expect(again.rows[0]).toEqual({ job_ids: first.rows[0].job_ids, duplicates: [true] });
    const err = await producer.query(ENQUEUE, [job({ amount: 1000 })]).then(
      () => null,
      (e: Error & { code?: string; constraint?: string; detail?: string }) => e,
    );
    expect(err).toMatchObject({ code: '23505', constraint: 'jobs_hot_idempotency_scope' });
    expect(err!.message).toMatch(/^jobs\[0\]\.idempotencyKey: "charge-9" is held by a hot job/);
    expect(JSON.parse(err!.detail!)).toEqual({ index: 0, queue, type: 'charge', idempotencyKey: 'charge-9' });
    expect(await hotCount(queue)).toBe(1);
  });
});

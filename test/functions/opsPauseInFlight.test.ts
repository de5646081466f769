// POST /queues/{name}/pause against a claim in flight on a queue without max_concurrency: a claim held open on a
// second connection (it read "not paused" and started a job, uncommitted) while the pause runs. The pause must not
// answer before that claim has committed, and then counts its job in inFlight; no claim after it takes a job. A job
// the held two-step claim fetched still starts after the answer (it is one of inFlight).
// The same barrier for a limit set on a queue that had none (PATCH maxConcurrency): a claim in flight that read "no
// limit" counted nothing and took up to its batch; the change must not answer before it has committed, so no claim
// takes a job past the limit once the answer is out.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ops } from '../../functions/ops.js';
import { context, createTestRuntime, jsonOf, request, until, type TestRuntime } from './support.js';

let t: TestRuntime;

beforeAll(async () => {
  t = await createTestRuntime('fn_pause');
});

afterAll(async () => {
  await t?.close();
});

async function call(method: string, path: string, body?: unknown) {
  const res = await ops(request(method, path, { operator: true, ...(body !== undefined ? { body } : {}) }), context());
  return { status: res.status ?? 200, body: jsonOf(res) };
}

async function enqueue(q: string, n: number) {
  for (let i = 0; i < n; i++) {
    const r = await call('POST', 'jobs', { queue: q, type: 'demo.echo', payload: { message: String(i) } });
    expect(r.status).toBe(201);
  }
}

// Sends an operator's queue change while a claim holds the queue's barrier on another connection. seen: 'waiting' once
// the change's backend waits for the barrier's advisory lock (update_queue), 'answered' if it answered first (the
// defect); reply: its answer, once the claim has committed.
async function changeBehindClaim(method: string, path: string, body?: unknown) {
  let answered = false;
  const reply = call(method, path, body).finally(() => {
    answered = true;
  });
  const seen = await until(
    'the queue change waiting for the claim in flight (or answering)',
    async () => {
      if (answered) return 'answered';
      const { rows } = await t.pool.query(
        `select 1 from pg_stat_activity where wait_event_type = 'Lock' and wait_event = 'advisory'
           and query like '%update_queue%'`,
      );
      return rows.length > 0 ? 'waiting' : undefined;
    },
    20_000,
  );
  return { seen, reply, answered: () => answered };
}

describe('ops: pause and a claim in flight', () => {
  it.each(['claim_and_start', 'claim_next'])(
    'pause returns only after a %s that read "not paused" has committed, and counts its job in flight',
    async (fn) => {
      const q = `pause-inflight-${fn}`;
      await enqueue(q, 3);
      const claimer = new pg.Client({ connectionString: t.url });
      await claimer.connect();
      try {
        await claimer.query('begin');
        const claimed = await claimer.query(`select * from keel.${fn}('w-held', array[$1], 1, 60)`, [q]);
        expect(claimed.rowCount).toBe(1);

        // The pause's backend waits for the claim's lock; an answer before that is the defect (the held claim's job
        // starts after the operator was told the queue is paused).
        const { seen, reply: pause, answered } = await changeBehindClaim('POST', `queues/${q}/pause`);
        expect(seen).toBe('waiting');
        expect(answered()).toBe(false);
        await claimer.query('commit');
        const r = await pause;
        expect(r.status).toBe(200);
        expect(r.body).toMatchObject({ name: q, paused: true, inFlight: 1 });
        if (fn === 'claim_next') {
          // Claimed before the pause, started after its answer: it runs (the claim is the pause's barrier, not the
          // start), and it is the job inFlight counted. docs/operations.md: inFlight, not the answer, says when the
          // queue's handlers are done.
          const [job] = claimed.rows as { job_id: string; lease_id: string }[];
          const started = await t.rt.store.start({ jobId: String(job!.job_id), leaseId: job!.lease_id });
          expect(started).toMatchObject({ status: 'ok', attempt: 1 });
          const stats = (await t.rt.store.stats()).find((x) => x.queue === q)!;
          expect(stats).toMatchObject({ fetched: 0, processing: 1 });
        }
        // After the answer, no claim of the queue takes a job (by queue, several queues, or by id).
        const after = await claimer.query(`select * from keel.claim_and_start('w2', array[$1], 10, 60)`, [q]);
        expect(after.rowCount).toBe(0);
        const several = await claimer.query(`select * from keel.claim_next('w2', array[$1, 'other'], 10, 60)`, [q]);
        expect(several.rowCount).toBe(0);
        const { rows } = await t.pool.query(
          `select id::text from keel.jobs_hot where queue = $1 and state = 'pending' order by id limit 1`,
          [q],
        );
        const byId = await claimer.query(`select * from keel.claim_by_id($1, 'w2', 60)`, [rows[0].id]);
        expect(byId.rowCount).toBe(0);
      } finally {
        await claimer.query('rollback').catch(() => undefined);
        await claimer.end();
      }
    },
  );

  it.each(['claim_and_start', 'claim_next'])(
    'a limit set on an unlimited queue answers only after a %s that read "no limit" has committed',
    async (fn) => {
      const q = `limit-inflight-${fn}`;
      await enqueue(q, 4);
      const claimer = new pg.Client({ connectionString: t.url });
      await claimer.connect();
      try {
        await claimer.query('begin');
        // Three jobs at once: the queue has no limit as this claim reads it.
        const claimed = await claimer.query(`select * from keel.${fn}('w-held', array[$1], 3, 60)`, [q]);
        expect(claimed.rowCount).toBe(3);

        // Answered while the claim is uncommitted: once it commits, three jobs run under a limit of 1 that was
        // already in force (the defect); the change must wait for the claim's barrier lock as a pause does.
        const { seen, reply: patch } = await changeBehindClaim('PATCH', `queues/${q}`, { maxConcurrency: 1 });
        expect(seen).toBe('waiting');
        await claimer.query('commit');
        const r = await patch;
        expect(r.status).toBe(200);
        expect(r.body).toMatchObject({ name: q, maxConcurrency: 1 });
        // The held claim's jobs were taken before the change; no claim after it takes one more (3 >= 1).
        const after = await claimer.query(`select * from keel.claim_and_start('w2', array[$1], 10, 60)`, [q]);
        expect(after.rowCount).toBe(0);
        const several = await claimer.query(`select * from keel.claim_next('w2', array[$1, 'other'], 10, 60)`, [q]);
        expect(several.rowCount).toBe(0);
      } finally {
        await claimer.query('rollback').catch(() => undefined);
        await claimer.end();
      }
    },
  );

  it('a claim that comes while a pause waits reads the pause: it takes nothing', async () => {
    const q = 'pause-behind';
    await enqueue(q, 2);
    const first = new pg.Client({ connectionString: t.url });
    const late = new pg.Client({ connectionString: t.url });
    await first.connect();
    await late.connect();
    try {
      await first.query('begin');
      expect((await first.query(`select * from keel.claim_and_start('w1', array[$1], 1, 60)`, [q])).rowCount).toBe(1);
      const { seen, reply: pause } = await changeBehindClaim('POST', `queues/${q}/pause`);
      expect(seen).toBe('waiting');
      // Queued behind the pause's lock request: it reads the settings only once the pause has committed.
      const second = late.query(`select * from keel.claim_and_start('w2', array[$1], 1, 60)`, [q]);
      await until(
        'the late claim queued behind the pause',
        async () =>
          (
            await t.pool.query(
              `select 1 from pg_stat_activity where wait_event = 'advisory' and query like '%claim_and_start(''w2''%'`,
            )
          ).rowCount! > 0 || undefined,
        20_000,
      );
      await first.query('commit');
      expect((await pause).body).toMatchObject({ paused: true, inFlight: 1 });
      expect((await second).rowCount).toBe(0);
    } finally {
      await first.query('rollback').catch(() => undefined);
      await first.end();
      await late.end();
    }
  });
});

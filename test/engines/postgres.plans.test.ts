// The plan guard (issue 22): every hot-path function, at a 20,000-job backlog, must plan every statement it runs
// (nested ones and triggers included) without a disabled node and below jit_above_cost, so that no server JIT-compiles
// Keel's statements whatever its `jit` setting. On a stock server (jit = on) a function that set enable_* = off paid
// 200-450 ms of JIT compilation per call for a 0.2 ms query: the disabled node's cost (~1e10 before PostgreSQL 18)
// is far above jit_above_cost (100,000). Plans are read with auto_explain (nested statements, JSON, at NOTICE level)
// on the admin connection, with statistics both stale (analysed while the table was empty) and fresh.
// This is a plan check, not a timing test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { createTestDatabase } from '../support/pg.js';
import { planLoggingClient, type LoggedPlan as PlanLog, type PlanLoggingClient } from '../support/planLog.js';

const BACKLOG = 20_000;
const JIT_ABOVE_COST = 100_000; // PostgreSQL's default; the guard holds whatever the server's own setting is

interface PlanNode {
  'Node Type': string;
  'Total Cost': number;
  Disabled?: boolean;
  'Disabled Nodes'?: number;
  Plans?: PlanNode[];
}
type LoggedPlan = PlanLog<PlanNode>;

// What a plan must not carry: a JIT section, a disabled node (PostgreSQL 18 marks them), a cost past the JIT threshold.
function problems(p: LoggedPlan): string[] {
  const found: string[] = [];
  if (p.JIT) found.push('JIT-compiled');
  const walk = (n: PlanNode) => {
    if (n.Disabled || (n['Disabled Nodes'] ?? 0) > 0) found.push(`disabled ${n['Node Type']} node`);
    n.Plans?.forEach(walk);
  };
  walk(p.Plan);
  if (p.Plan['Total Cost'] >= JIT_ABOVE_COST) found.push(`cost ${p.Plan['Total Cost']} >= ${JIT_ABOVE_COST}`);
  return found;
}

describe('postgres plans: no JIT, no disabled node, at a 20k backlog', () => {
  let url: string;
  let admin: pg.Client;
  let explainedBy: PlanLoggingClient<PlanNode>['explained'];

  beforeAll(async () => {
    url = await createTestDatabase('plans');
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await migratePostgres(pool);
    } finally {
      await pool.end();
    }
    const logging = await planLoggingClient<PlanNode>(url, 'keel-plan-guard');
    admin = logging.client;
    explainedBy = logging.explained;
  });
  afterAll(async () => admin?.end());

  const q = async (sql: string, params: unknown[] = []) => (await admin.query(sql, params)).rows;

  // Every statement each call runs, nested and trigger statements included.
  const explained = <T>(fn: () => Promise<T>) => explainedBy(fn);

  const enqueue = (queue: string, n: number, delayMs = 0) =>
    q(
      `select cardinality(job_ids) as n from keel.enqueue_many(
         (select jsonb_agg(jsonb_build_object('queue', $1::text, 'type', 't', 'delayMs', $3::bigint, 'payload', jsonb_build_object('i', g)))
          from generate_series(1, $2::int) g))`,
      [queue, n, delayMs],
    );

  // Calls every hot-path function once (each with real work to do) and returns every plan they ran.
  async function callHotPath(queue: string): Promise<{ fn: string; plans: LoggedPlan[] }[]> {
    const out: { fn: string; plans: LoggedPlan[] }[] = [];
    const run = async <T>(fn: string, call: () => Promise<T>): Promise<T> => {
      const { result, plans } = await explained(call);
      expect(plans.length, `${fn}: auto_explain logged no plan`).toBeGreaterThan(0);
      out.push({ fn, plans });
      return result;
    };
    await run('enqueue_many (100 jobs)', () => enqueue(queue, 100));
    await run('enqueue_many (1 job)', () => enqueue(queue, 1));
    const claimed = await run('claim_next', () =>
      q(`select job_id::text, lease_id::text from keel.claim_next('w', array[$1], 20, 60)`, [queue]),
    );
    expect(claimed).toHaveLength(20);
    const leases = (rows: { job_id: string; lease_id: string }[]) =>
      JSON.stringify(rows.map((r) => ({ jobId: Number(r.job_id), leaseId: r.lease_id })));
    await run('start_many', () => q(`select * from keel.start_many($1::jsonb)`, [leases(claimed)]));
    const started = await run('claim_and_start', () =>
      q(`select job_id::text, lease_id::text from keel.claim_and_start('w', array[$1], 20, 60)`, [queue]),
    );
    expect(started).toHaveLength(20);
    await run('heartbeat', () => q(`select * from keel.heartbeat($1, $2)`, [started[0]!.job_id, started[0]!.lease_id]));
    await run('heartbeat_many', () =>
      q(`select * from keel.heartbeat_many($1::jsonb)`, [leases(started.slice(0, 10))]),
    );
    await run('complete_many', () => q(`select * from keel.complete_many($1::jsonb)`, [leases(started.slice(4))]));
    await run('retry', () =>
      q(`select keel.retry($1, $2, now(), 'boom')`, [claimed[0]!.job_id, claimed[0]!.lease_id]).then(() => undefined),
    );
    await run('fail', () => q(`select keel.fail($1, $2, 'fatal', 'boom')`, [claimed[1]!.job_id, claimed[1]!.lease_id]));
    await run('interrupt', () =>
      q(`select keel.interrupt($1, $2, 'stop')`, [claimed[2]!.job_id, claimed[2]!.lease_id]),
    );
    await run('cancel (processing)', () => q(`select keel.cancel($1)`, [claimed[3]!.job_id]));
    const [one] = await q(`select job_id::text, lease_id::text from keel.claim_next('w', array[$1], 1, 60)`, [queue]);
    await run('release', () => q(`select keel.release($1, $2)`, [one.job_id, one.lease_id]));
    const [pendingId, otherPendingId] = await q(
      `select id::text from keel.jobs_hot where queue = $1 and state = 'pending' order by id limit 2`,
      [queue],
    );
    await run('claim_by_id', () => q(`select * from keel.claim_by_id($1, 'w', 60)`, [pendingId.id]));
    await run('cancel (pending)', () => q(`select keel.cancel($1)`, [otherPendingId.id]));
    const toCancel = await q(
      `select id::text from keel.jobs_hot where queue = $1 and state = 'pending' order by id desc limit 50`,
      [queue],
    );
    await run('cancel_many (50 pending, 1 processing)', () =>
      q(`select * from keel.cancel_many($1::bigint[])`, [[...toCancel.map((r) => r.id), started[0]!.job_id]]),
    );
    await q(`update keel.jobs_hot set heartbeat_at = now() - interval '1 hour' where id = any($1::bigint[])`, [
      started.slice(1, 4).map((r) => r.job_id),
    ]);
    await run('rescue_zombies', () => q(`select * from keel.rescue_zombies(500, null)`));
    await run('stats', () => q(`select * from keel.stats()`));
    const dead = await q(`select id::text from keel.jobs_dlq where queue = $1`, [queue]);
    expect(dead.length).toBeGreaterThan(0);
    await run('resurrect', () => q(`select * from keel.resurrect($1::bigint[])`, [dead.map((d) => d.id)]));
    await run('get_job', () => q(`select * from keel.get_job($1)`, [pendingId.id]));
    await run('search_jobs (hot)', () =>
      q(
        `select * from keel.search_jobs('hot', $1, null, null, 'pending', null, null, null, null, null, null, 50, null, null, false)`,
        [queue],
      ),
    );
    await run('search_jobs (hot, oldest first, by priority)', () =>
      q(
        `select * from keel.search_jobs('hot', $1, null, null, null, null, null, null, null, null, null, 50, 0, null, true)`,
        [queue],
      ),
    );
    // The console's reads (issue 30): a preview's bounded count at its real cap, the lease holders, the DLQ groups.
    await run('count_jobs (hot)', () =>
      q(`select * from keel.count_jobs('hot', $1, null, null, 'pending', null, null, null, 100000)`, [queue]),
    );
    await run('count_jobs (dlq)', () =>
      q(`select * from keel.count_jobs('dlq', $1, null, null, null, 'fatal', null, now(), 100000)`, [queue]),
    );
    await run('list_workers', () => q(`select * from keel.list_workers()`));
    // The worker registry (V012): a processor's refresh, and maintenance's prune.
    await run('register_worker', () =>
      q(`select keel.register_worker('plan-w', 'h', null, 1, '0.1.0', null, null, 32, now(), 0)`),
    );
    await run('prune_workers', () => q(`select keel.prune_workers(now() - interval '1 hour')`));
    await run('dlq_groups', () => q(`select * from keel.dlq_groups($1, 0, 50, 100000)`, [queue]));
    await run('dlq_groups (all queues)', () => q(`select * from keel.dlq_groups(null, 0, 50, 100000)`));
    // Flows (issue 29): a parent with 50 children and a fan-in job, in one call; its completion releasing the
    // children; another such parent's failure cascading to its children and their fan-in job; the edges read back;
    // the failed parent resurrected with the children it dead-lettered.
    const flowDocs = JSON.stringify([
      { queue, type: 'parent' },
      ...Array.from({ length: 50 }, () => ({ queue, type: 'child', after: [{ index: 0 }] })),
      { queue, type: 'fan-in', after: Array.from({ length: 50 }, (_, i) => ({ index: i + 1 })) },
    ]);
    const flowIds = async (): Promise<string[]> =>
      (await q(`select job_ids::text[] as ids from keel.enqueue_many($1::jsonb)`, [flowDocs]))[0].ids;
    const runParent = async (id: string) => {
      const [p] = await q(`select job_id::text, lease_id::text from keel.claim_by_id($1, 'w', 60)`, [id]);
      expect(p, `flow parent ${id} claimed`).toBeTruthy();
      await q(`select * from keel.start_many($1::jsonb)`, [leases([p])]);
      return p as { job_id: string; lease_id: string };
    };
    const ok = await run('enqueue_many (a flow of 52 jobs)', flowIds);
    const okParent = await runParent(ok[0]!);
    await run('complete_many (a parent of 50)', () =>
      q(`select * from keel.complete_many($1::jsonb)`, [leases([okParent])]),
    );
    const bad = await flowIds();
    const badParent = await runParent(bad[0]!);
    await run('fail (a parent of 50, cascading)', () =>
      q(`select keel.fail($1, $2, 'fatal', 'boom')`, [badParent.job_id, badParent.lease_id]),
    );
    await run('job_links', () => q(`select * from keel.job_links($1)`, [ok[0]]));
    await run('resurrect (a flow parent)', () => q(`select * from keel.resurrect($1::bigint[])`, [[bad[0]]]));
    return out;
  }

  function failures(calls: { fn: string; plans: LoggedPlan[] }[]): string[] {
    return calls.flatMap(({ fn, plans }) =>
      plans.flatMap((p) => {
        const found = problems(p);
        return found.length
          ? [`${fn}: ${found.join(', ')} in: ${p['Query Text'].replace(/\s+/g, ' ').slice(0, 160)}`]
          : [];
      }),
    );
  }

  it('no Keel function sets a planner option', async () => {
    const rows = await q(
      `select p.oid::regprocedure::text as fn, array_to_string(p.proconfig, ', ') as config
       from pg_proc p where p.pronamespace = 'keel'::regnamespace
         and exists (select 1 from unnest(p.proconfig) c where c ~ '^(enable_|jit|random_page_cost|seq_page_cost|cpu_)')`,
    );
    expect(rows).toEqual([]);
  });

  it('stale statistics (analysed empty): every hot-path statement plans under the JIT threshold', async () => {
    await q('analyze keel.jobs_hot');
    // The backlog itself goes in with one 20,000-job enqueue: its statements are checked too.
    const bulk = await explained(() => enqueue('plans-stale', BACKLOG));
    expect(failures([{ fn: 'enqueue_many (20,000 jobs)', plans: bulk.plans }])).toEqual([]);
    expect(failures(await callHotPath('plans-stale'))).toEqual([]);
  });

  it('fresh statistics, with 20k due and 20k delayed jobs: the same', async () => {
    await enqueue('plans-fresh', BACKLOG, 86_400_000);
    await enqueue('plans-fresh', BACKLOG);
    await q('analyze keel.jobs_hot');
    expect(failures(await callHotPath('plans-fresh'))).toEqual([]);
  });

  it('the guard sees what it guards against: a disabled node and a cost past the threshold are reported', async () => {
    const { plans } = await explained(async () => {
      await q('set enable_seqscan = off');
      try {
        return await q(`select count(*) from keel.jobs_hot where payload::text like '%x%'`);
      } finally {
        await q('reset enable_seqscan');
      }
    });
    expect(plans.flatMap(problems).join('; ')).toMatch(/disabled|cost/);
  });
});

// Least privilege on the PostgreSQL twin, as keel_executor on SQL Server: the application's login may execute Keel's
// public functions and nothing else — no table, sequence or ledger access, no internal "_" function — and every
// public function is SECURITY DEFINER with a pinned search_path, owned by the schema owner that ran the migrations.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

describe('PostgreSQL least privilege (keel_executor)', () => {
  let ownerUrl: string;
  let store: PostgresJobStore;
  let app: pg.Client;
  let owner: pg.Client;

  beforeAll(async () => {
    ownerUrl = await createTestDatabase('privileges');
    store = await PostgresJobStore.connect(appUrl(ownerUrl), { poolSize: 2, migrateUrl: ownerUrl });
    app = new pg.Client({ connectionString: appUrl(ownerUrl) });
    owner = new pg.Client({ connectionString: ownerUrl });
    await Promise.all([app.connect(), owner.connect()]);
  });
  afterAll(async () => {
    await store?.close();
    await app?.end();
    await owner?.end();
  });

  const denied = async (sql: string, params: unknown[] = []) => {
    const err = await app.query(sql, params).then(
      () => null,
      (e: Error & { code?: string }) => e,
    );
    expect(err, sql).not.toBeNull();
    expect(err!.code, `${sql}: ${err!.message}`).toBe('42501'); // insufficient_privilege
    return err!;
  };

  it('logs the store in as a member of keel_executor, not as the owner', async () => {
    const { rows } = await app.query(
      `select current_user as me, pg_has_role(current_user, 'keel_executor', 'member') as member,
              (select rolsuper from pg_roles where rolname = current_user) as super`,
    );
    expect(rows[0]).toEqual({ me: 'keel_app_test', member: true, super: false });
    const job = await store.enqueue({ queue: 'priv', type: 't', payload: { a: 1 } });
    expect((await store.getJob(job.id))?.queue).toBe('priv');
  });

  it('refuses every table, sequence and the migration ledger to the application', async () => {
    for (const table of [
      'jobs_hot',
      'jobs_archive',
      'jobs_dlq',
      'stats_summary',
      'metric_buckets',
      'queues',
      'schema_migrations',
      'ops_audit',
      'workers',
    ]) {
      await denied(`select 1 from keel.${table} limit 1`);
    }
    await denied(`update keel.jobs_hot set state = 'pending'`);
    await denied(`delete from keel.jobs_dlq`);
    const { rows: seqs } = await owner.query(
      `select sequence_name from information_schema.sequences where sequence_schema = 'keel'`,
    );
    for (const s of seqs) await denied(`select nextval('keel.${s.sequence_name}')`);
  });

  it('the ops audit trail: the application adds and reads rows through the functions only; it cannot rewrite or delete one', async () => {
    const id = await store.recordAudit({
      principalId: 'oid-1',
      principalName: 'ada',
      tenantId: null,
      appId: null,
      authMethod: 'principal',
      channel: 'console',
      role: 'operator',
      requiredRole: 'operator',
      httpMethod: 'POST',
      action: 'purge',
      target: null,
      summary: null,
      outcome: 'started',
      status: null,
      reason: null,
      affected: null,
      requestId: null,
      clientIp: null,
    });
    await denied(`update keel.ops_audit set outcome = 'ok', principal_name = 'someone else' where id = $1`, [id]);
    await denied(`delete from keel.ops_audit where id = $1`, [id]);
    await denied(`insert into keel.ops_audit (auth_method, channel, required_role, http_method, action, outcome)
                  values ('none', 'key', 'reader', 'POST', 'forged', 'ok')`);
    await denied(`truncate keel.ops_audit`);
    // Finishing is once only: a finished row cannot be rewritten through the function either.
    expect(await store.finishAudit(id, 'ok', 200, null, 3)).toBe(true);
    expect(await store.finishAudit(id, 'failed', 500, 'rewritten', 0)).toBe(false);
    const { rows } = await owner.query(`select outcome, affected, principal_name from keel.ops_audit where id = $1`, [
      id,
    ]);
    expect(rows[0]).toEqual({ outcome: 'ok', affected: '3', principal_name: 'ada' });
  });

  it('the worker registry: the application writes its row through the functions only', async () => {
    const startedAt = new Date();
    const w = {
      workerId: 'priv-w',
      host: 'h',
      instanceId: null,
      pid: 1,
      appVersion: '1.0.0',
      buildId: null,
      queues: null,
      concurrency: 1,
      startedAt,
      jobsDone: 0,
    };
    await store.registerWorker(w);
    await denied(`update keel.workers set app_version = 'forged' where worker_id = 'priv-w'`);
    await denied(`insert into keel.workers (worker_id, host, pid, app_version, concurrency, started_at, last_seen_at)
                  values ('forged', 'h', 1, 'x', 1, now(), now())`);
    await denied(`delete from keel.workers`);
    expect((await store.listWorkers()).find((x) => x.workerId === 'priv-w')?.registration?.appVersion).toBe('1.0.0');
    expect(await store.pruneWorkers(new Date(Date.now() - 3_600_000))).toBe(0);
    expect(await store.deregisterWorker('priv-w')).toBe(true);
  });

  it('refuses the internal functions: a job cannot be dead-lettered without its lease', async () => {
    const job = await store.enqueue({ queue: 'priv', type: 't', payload: {} });
    const err = await denied(
      `select keel._dead_letter(array[$1::bigint], null, array['pending'], 'fatal', 'by hand')`,
      [job.id],
    );
    expect(err.message).toMatch(/permission denied for function _dead_letter/);
    expect((await store.getJob(job.id))?.location).toBe('hot');
  });

  it('grants exactly the public functions, each SECURITY DEFINER with a pinned search_path and owned by the migration owner', async () => {
    const { rows } = await owner.query(
      `select p.proname as name, p.prosecdef as definer, p.proconfig as config, pg_get_userbyid(p.proowner) as owner,
              has_function_privilege('keel_executor', p.oid, 'execute') as executable,
              has_function_privilege('public', p.oid, 'execute') as public_executable
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'keel' and p.prokind = 'f' order by p.proname`,
    );
    const me = (await owner.query('select current_user as u')).rows[0].u;
    const internal = rows.filter((r) => r.name.startsWith('_'));
    const external = rows.filter((r) => !r.name.startsWith('_'));
    expect(internal.map((r) => r.name)).toEqual(
      expect.arrayContaining(['_dead_letter', '_claim_candidates', '_claim_best']),
    );
    expect(external.map((r) => r.name)).toEqual(
      expect.arrayContaining(['claim_next', 'claim_and_start', 'complete_many', 'get_job', 'enqueue_many']),
    );
    for (const r of internal)
      expect({ name: r.name, executable: r.executable, public: r.public_executable }).toEqual({
        name: r.name,
        executable: false,
        public: false,
      });
    for (const r of external) {
      expect({
        name: r.name,
        executable: r.executable,
        public: r.public_executable,
        definer: r.definer,
        owner: r.owner,
        // Besides the pinned search_path, a function may only turn planner methods off (see complete_many).
        config: (r.config as string[]).filter((c) => !/^enable_[a-z]+=off$/.test(c)),
      }).toEqual({
        name: r.name,
        executable: true,
        public: false,
        definer: true,
        owner: me,
        config: ['search_path=pg_catalog, pg_temp'],
      });
    }
  });

  it('refuses to start, naming the fix, for a login outside keel_executor and for a database without the schema', async () => {
    await owner.query(
      `do $$ begin create role keel_outsider_test login password 'outsider'; exception when duplicate_object then null; end $$`,
    );
    const outsider = new URL(ownerUrl);
    outsider.username = 'keel_outsider_test';
    outsider.password = 'outsider';
    await expect(PostgresJobStore.connect(outsider.toString(), { poolSize: 1, migrate: false })).rejects.toThrow(
      /KEEL_PG_URL: login keel_outsider_test may not execute the keel functions; grant it the role: GRANT keel_executor TO keel_outsider_test/,
    );
    const empty = await createTestDatabase('privileges_empty');
    await expect(PostgresJobStore.connect(appUrl(empty), { poolSize: 1, migrate: false })).rejects.toThrow(
      /KEEL_PG_URL: the keel schema is not installed in this database; run npm run migrate as its owner, or set KEEL_PG_MIGRATE_URL/,
    );
  });

  it('covers functions added by a later migration run without a grant of their own', async () => {
    await owner.query(`create function keel.later_public() returns int language sql as 'select 1'`);
    await owner.query(`create function keel._later_internal() returns int language sql as 'select 2'`);
    await denied('select keel.later_public()'); // no EXECUTE for PUBLIC by default in schema keel
    const { PostgresJobStore: S } = await import('../../shared/engines/postgres/jobStore.js');
    const again = await S.connect(appUrl(ownerUrl), { poolSize: 1, migrateUrl: ownerUrl }); // nothing to apply; roles script runs
    await again.close();
    expect((await app.query('select keel.later_public() as v')).rows[0].v).toBe(1);
    await denied('select keel._later_internal()');
  });
});

// EngineHarness for PostgreSQL: a fresh database per store on the run's server (test/support/globalSetup.ts).
import pg from 'pg';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import type { EngineHarness, PillarTable, StatsRow, BucketTotals, HotTruth } from '../contract/harness.js';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { databaseOf, watchDeadlocks, type DeadlockWatch } from '../support/deadlocks.js';

const TABLE: Record<PillarTable, string> = { hot: 'keel.jobs_hot', archive: 'keel.jobs_archive', dlq: 'keel.jobs_dlq' };
const FINISHED: Record<'archive' | 'dlq' | 'metrics', [string, string]> = {
  archive: ['keel.jobs_archive', 'finished_at'],
  dlq: ['keel.jobs_dlq', 'failed_at'],
  metrics: ['keel.metric_buckets', 'bucket_start'],
};
const BACKDATE_FIELDS = new Set(['run_at', 'lease_expires_at', 'heartbeat_at', 'expires_at', 'started_at']);

export class PostgresHarness implements EngineHarness {
  readonly engine = 'postgres';
  private admin: pg.Client | undefined;
  private stores: PostgresJobStore[] = [];
  private extraClients: pg.Client[] = [];
  private deadlockWatch: DeadlockWatch | undefined;
  url = '';

  async createStore(opts: { poolSize?: number } = {}): Promise<PostgresJobStore> {
    if (!this.url) {
      this.url = await createTestDatabase('contract');
      // The harness's own inspection client runs none of Keel's moves: the deadlock check need not wait for it.
      this.deadlockWatch = await watchDeadlocks([databaseOf(this.url)], { ignoreApplicationNames: ['keel-harness'] });
      // Migrated as the owner; the store itself logs in as the least-privilege application role.
      const store = await PostgresJobStore.connect(appUrl(this.url), {
        poolSize: opts.poolSize ?? 10,
        migrateUrl: this.url,
      });
      this.admin = new pg.Client({ connectionString: this.url, application_name: 'keel-harness' });
      this.admin.on('error', poolErrorLogger('postgres', 'control', 'contract harness admin client'));
      await this.admin.connect();
      this.stores.push(store);
      return store;
    }
    const store = await PostgresJobStore.connect(appUrl(this.url), { poolSize: opts.poolSize ?? 10, migrate: false });
    this.stores.push(store);
    return store;
  }

  private async q(sql: string, params: unknown[] = []) {
    return (await this.admin!.query(sql, params)).rows;
  }

  async countRows(table: PillarTable, queue?: string): Promise<number> {
    const rows = await this.q(`select count(*)::int as n from ${TABLE[table]} where $1::text is null or queue = $1`, [
      queue ?? null,
    ]);
    return rows[0].n;
  }

  async ids(table: PillarTable): Promise<string[]> {
    return (await this.q(`select id from ${TABLE[table]} order by id`)).map((r) => String(r.id));
  }

  async hotTruth(queue: string): Promise<HotTruth> {
    const [r] = await this.q(
      `select count(*) filter (where state = 'pending')::int as pending,
              count(*) filter (where state = 'pending' and run_at <= now())::int as due,
              count(*) filter (where state = 'fetched')::int as fetched,
              count(*) filter (where state = 'processing')::int as processing,
              (select count(*) from keel.jobs_dlq d where d.queue = $1)::int as dlq
       from keel.jobs_hot where queue = $1`,
      [queue],
    );
    return { pending: r.pending, due: r.due, fetched: r.fetched, processing: r.processing, dlq: r.dlq };
  }

  async statsRow(queue: string): Promise<StatsRow> {
    // summed over the backends' slots (V014)
    const [r] = await this.q(
      `select sum(succeeded) as succeeded, sum(failed) as failed, sum(retried) as retried, sum(cancelled) as cancelled,
              sum(zombie) as zombie, sum(resurrected) as resurrected
       from keel.stats_summary where queue = $1`,
      [queue],
    );
    const n = (v: unknown) => Number(v ?? 0);
    return {
      succeeded: n(r?.succeeded),
      failed: n(r?.failed),
      retried: n(r?.retried),
      cancelled: n(r?.cancelled),
      zombie: n(r?.zombie),
      resurrected: n(r?.resurrected),
    };
  }

  async bucketTotals(queue: string, outcome: 'succeeded' | 'failed', reason?: string): Promise<BucketTotals> {
    const [r] = await this.q(
      `select coalesce(sum(count), 0)::bigint as c, coalesce(sum(total_duration_ms), 0)::bigint as d
       from keel.metric_buckets where queue = $1 and outcome = $2 and ($3::text is null or reason = $3)`,
      [queue, outcome, reason ?? null],
    );
    return { count: Number(r.c), totalDurationMs: Number(r.d) };
  }

  async backdate(jobId: string, field: string, secondsAgo: number): Promise<void> {
    if (!BACKDATE_FIELDS.has(field)) throw new Error(`cannot backdate ${field}`);
    await this.q(`update keel.jobs_hot set ${field} = now() - make_interval(secs => $2) where id = $1`, [
      jobId,
      secondsAgo,
    ]);
  }

  async backdateFinished(table: 'archive' | 'dlq' | 'metrics', secondsAgo: number): Promise<void> {
    const [t, col] = FINISHED[table];
    await this.q(`update ${t} set ${col} = ${col} - make_interval(secs => $1)`, [secondsAgo]);
  }

  async backdateAudit(ids: string[], secondsAgo: number): Promise<void> {
    await this.q(`update keel.ops_audit set at = at - make_interval(secs => $1) where id = any($2::bigint[])`, [
      secondsAgo,
      ids,
    ]);
  }

  async breakInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void> {
    await this.q(`create or replace function keel.test_refuse_insert() returns trigger language plpgsql as
      $$ begin raise exception 'test: inserts into % are refused', tg_table_name; end $$`);
    await this.q(
      `create trigger test_refuse_insert before insert on keel.jobs_${table} for each row execute function keel.test_refuse_insert()`,
    );
  }

  async restoreInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void> {
    await this.q(`drop trigger if exists test_refuse_insert on keel.jobs_${table}`);
  }

  async killStoreConnections(): Promise<void> {
    await this.q(
      `select pg_terminate_backend(pid) from pg_stat_activity
       where datname = current_database() and pid <> pg_backend_pid() and application_name = 'keel'`,
    );
  }

  async deadlocks(): Promise<string[]> {
    return (await this.deadlockWatch?.findings()) ?? [];
  }

  // A test's own owner connection to the harness's database (after createStore), for reads and setups a contract
  // call does not offer; closed with the harness.
  async connectOwner(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: this.url });
    c.on('error', () => undefined); // a test that kills backends may kill this one; its next query fails loudly
    await c.connect();
    this.extraClients.push(c);
    return c;
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.extraClients.map((c) => c.end()));
    await Promise.allSettled(this.stores.map((s) => s.close()));
    await this.admin?.end().catch(() => undefined);
  }
}

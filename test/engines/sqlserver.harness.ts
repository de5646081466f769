// EngineHarness for SQL Server: a fresh database per harness on the server at KEEL_TEST_MSSQL_URL
// (mssql://user:pass@host:1433/db; the login must be able to CREATE DATABASE and, for the least-privilege run,
// CREATE LOGIN). The database gets READ_COMMITTED_SNAPSHOT ON like Azure SQL, is migrated with the real runner,
// and the store under test logs in as a login whose only right is the keel_executor role (EXECUTE on schema
// keel), so the contract suite also proves that the procedures need no table rights.
import sql from 'mssql';
import { randomBytes } from 'node:crypto';
import type { EngineHarness, PillarTable, StatsRow, BucketTotals, HotTruth } from '../contract/harness.js';
import { SqlServerJobStore, migrateSqlServerJobs } from '../../shared/engines/sqlserver/jobStore.js';
import { parseSqlServerConnection, SqlServerPool, type SqlServerTarget } from '../../shared/engines/sqlserver/pool.js';

const TABLE: Record<PillarTable, string> = { hot: 'keel.JobsHot', archive: 'keel.JobsArchive', dlq: 'keel.JobsDLQ' };
const TRIGGER_TABLE: Record<'archive' | 'dlq' | 'hot', string> = {
  hot: 'JobsHot',
  archive: 'JobsArchive',
  dlq: 'JobsDLQ',
};
const FINISHED: Record<'archive' | 'dlq' | 'metrics', [string, string]> = {
  archive: ['keel.JobsArchive', 'FinishedAt'],
  dlq: ['keel.JobsDLQ', 'FailedAt'],
  metrics: ['keel.MetricBuckets', 'BucketStart'],
};
// Whitelist: the contract's snake_case field -> JobsHot column.
const BACKDATE_COLUMN: Record<string, string> = {
  run_at: 'RunAt',
  lease_expires_at: 'LeaseExpiresAt',
  heartbeat_at: 'HeartbeatAt',
  expires_at: 'ExpiresAt',
  started_at: 'StartedAt',
};

export function mssqlTestUrl(): string | undefined {
  const url = process.env.KEEL_TEST_MSSQL_URL;
  return url && url.trim() ? url.trim() : undefined;
}

export class SqlServerHarness implements EngineHarness {
  readonly engine = 'sqlserver';
  private admin: SqlServerPool | undefined; // the test database, as the admin login
  private stores: SqlServerJobStore[] = [];
  private storeTarget: SqlServerTarget | undefined;
  database = '';
  private login = '';

  constructor(private readonly url: string) {}

  private serverTarget(database: string): SqlServerTarget {
    return { ...parseSqlServerConnection(this.url), database };
  }

  private async master<T>(fn: (pool: sql.ConnectionPool) => Promise<T>): Promise<T> {
    const pool = SqlServerPool.create(this.serverTarget('master'), { max: 1, applicationName: 'keel-harness' });
    try {
      return await fn(await pool.get());
    } finally {
      await pool.close();
    }
  }

  private async setup(): Promise<void> {
    const suffix = randomBytes(4).toString('hex');
    this.database = `keel_contract_${suffix}`; // [a-z0-9_] only: safe to put in DDL
    await this.master(async (m) => {
      await m.request().batch(`CREATE DATABASE [${this.database}]`);
      await m
        .request()
        .batch(`ALTER DATABASE [${this.database}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE`);
    });
    this.admin = SqlServerPool.create(this.serverTarget(this.database), { max: 4, applicationName: 'keel-harness' });
    const admin = await this.admin.get();
    await migrateSqlServerJobs(admin);

    // The store's own login: keel_executor only. Falls back to the admin login when the server refuses logins.
    const base = this.serverTarget(this.database);
    try {
      this.login = `keel_app_${suffix}`;
      const password = `Kx9!${randomBytes(12).toString('hex')}`; // hex only after the prefix: safe in a literal
      await this.master((m) =>
        m.request().batch(`CREATE LOGIN [${this.login}] WITH PASSWORD = N'${password}', CHECK_POLICY = OFF`),
      );
      await admin
        .request()
        .batch(
          `CREATE USER [${this.login}] FOR LOGIN [${this.login}]; ALTER ROLE keel_executor ADD MEMBER [${this.login}];`,
        );
      this.storeTarget = { ...base, user: this.login, password, entra: false };
    } catch (err) {
      // CI (the GitHub workflow) must test as keel_executor: a server that refuses the login fails the run there.
      if (process.env.CI)
        throw new Error(`sqlserver harness: could not create the keel_executor login: ${(err as Error).message}`, {
          cause: err,
        });
      console.warn(
        `sqlserver harness: running the store as the admin login (could not create a keel_executor login: ${(err as Error).message})`,
      );
      // The login may exist already (CREATE USER or ALTER ROLE failed after it): do not leave it on the server.
      const login = this.login;
      await this.master((m) => m.request().batch(`IF SUSER_ID(N'${login}') IS NOT NULL DROP LOGIN [${login}]`)).catch(
        () => undefined,
      );
      this.login = '';
      this.storeTarget = base;
    }
  }

  // The store's connection (the keel_executor login), for tests that call procedures directly as the application.
  async storeConnection(): Promise<SqlServerTarget> {
    if (!this.admin) await this.setup();
    return this.storeTarget!;
  }

  get usesExecutorLogin(): boolean {
    return this.login !== '';
  }

  async createStore(opts: { poolSize?: number } = {}): Promise<SqlServerJobStore> {
    if (!this.admin) await this.setup();
    const store = await SqlServerJobStore.connect(toUrl(this.storeTarget!), {
      poolSize: opts.poolSize ?? 10,
      migrate: false,
      applicationName: 'keel',
    });
    this.stores.push(store);
    return store;
  }

  private async q<T extends Record<string, unknown>>(
    text: string,
    params: Record<string, [Parameters<sql.Request['input']>[1], unknown]> = {},
  ): Promise<T[]> {
    const request = (await this.admin!.get()).request();
    for (const [name, [type, value]] of Object.entries(params)) request.input(name, type, value);
    return (await request.query<T>(text)).recordset ?? [];
  }

  async countRows(table: PillarTable, queue?: string): Promise<number> {
    const [r] = await this.q<{ n: number }>(
      `SELECT COUNT(*) AS n FROM ${TABLE[table]} WHERE @Queue IS NULL OR Queue = @Queue`,
      { Queue: [sql.NVarChar(128), queue ?? null] },
    );
    return Number(r!.n);
  }

  async ids(table: PillarTable): Promise<string[]> {
    return (await this.q<{ Id: string }>(`SELECT Id FROM ${TABLE[table]} ORDER BY Id`)).map((r) => String(r.Id));
  }

  async hotTruth(queue: string): Promise<HotTruth> {
    const [r] = await this.q<Record<string, unknown>>(
      `SELECT SUM(IIF(State = 'pending', 1, 0)) AS Pending,
              SUM(IIF(State = 'pending' AND RunAt <= SYSUTCDATETIME(), 1, 0)) AS Due,
              SUM(IIF(State = 'fetched', 1, 0)) AS Fetched, SUM(IIF(State = 'processing', 1, 0)) AS Processing,
              (SELECT COUNT(*) FROM keel.JobsDLQ AS d WHERE d.Queue = @Queue) AS Dlq
       FROM keel.JobsHot WHERE Queue = @Queue`,
      { Queue: [sql.NVarChar(128), queue] },
    );
    const n = (v: unknown) => Number(v ?? 0);
    return {
      pending: n(r?.Pending),
      due: n(r?.Due),
      fetched: n(r?.Fetched),
      processing: n(r?.Processing),
      dlq: n(r?.Dlq),
    };
  }

  async statsRow(queue: string): Promise<StatsRow> {
    // summed over the sessions' slots (V013)
    const [r] = await this.q<Record<string, unknown>>(
      `SELECT SUM(Succeeded) AS Succeeded, SUM(Failed) AS Failed, SUM(Retried) AS Retried, SUM(Cancelled) AS Cancelled,
              SUM(Zombie) AS Zombie, SUM(Resurrected) AS Resurrected
       FROM keel.StatsSummary WHERE Queue = @Queue`,
      { Queue: [sql.NVarChar(128), queue] },
    );
    const n = (v: unknown) => Number(v ?? 0);
    return {
      succeeded: n(r?.Succeeded),
      failed: n(r?.Failed),
      retried: n(r?.Retried),
      cancelled: n(r?.Cancelled),
      zombie: n(r?.Zombie),
      resurrected: n(r?.Resurrected),
    };
  }

  async bucketTotals(queue: string, outcome: 'succeeded' | 'failed', reason?: string): Promise<BucketTotals> {
    const [r] = await this.q<{ c: string | number; d: string | number }>(
      `SELECT ISNULL(SUM([Count]), 0) AS c, ISNULL(SUM(TotalDurationMs), 0) AS d FROM keel.MetricBuckets
       WHERE Queue = @Queue AND Outcome = @Outcome AND (@Reason IS NULL OR Reason = @Reason)`,
      {
        Queue: [sql.NVarChar(128), queue],
        Outcome: [sql.VarChar(10), outcome],
        Reason: [sql.VarChar(16), reason ?? null],
      },
    );
    return { count: Number(r!.c), totalDurationMs: Number(r!.d) };
  }

  async backdate(jobId: string, field: string, secondsAgo: number): Promise<void> {
    const column = BACKDATE_COLUMN[field];
    if (!column) throw new Error(`cannot backdate ${field}`);
    await this.q(`UPDATE keel.JobsHot SET ${column} = DATEADD(millisecond, -@Ms, SYSUTCDATETIME()) WHERE Id = @Id`, {
      Ms: [sql.Int, Math.round(secondsAgo * 1000)],
      Id: [sql.BigInt, jobId],
    });
  }

  async backdateFinished(table: 'archive' | 'dlq' | 'metrics', secondsAgo: number): Promise<void> {
    const [t, col] = FINISHED[table];
    await this.q(`UPDATE ${t} SET ${col} = DATEADD(second, -@S, ${col})`, { S: [sql.Int, Math.round(secondsAgo)] });
  }

  async backdateAudit(ids: string[], secondsAgo: number): Promise<void> {
    await this.q(
      `UPDATE keel.OpsAudit SET At = DATEADD(second, -@S, At) WHERE Id IN (SELECT CONVERT(bigint, value) FROM OPENJSON(@Ids))`,
      { S: [sql.Int, Math.round(secondsAgo)], Ids: [sql.NVarChar(sql.MAX), JSON.stringify(ids)] },
    );
  }

  async breakInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void> {
    const t = TRIGGER_TABLE[table];
    const request = (await this.admin!.get()).request();
    await request.batch(
      `CREATE OR ALTER TRIGGER keel.TestRefuseInsert_${t} ON keel.${t} AFTER INSERT AS
       BEGIN
         SET NOCOUNT ON;
         THROW 50999, N'test: inserts into keel.${t} are refused', 1;
       END`,
    );
  }

  async restoreInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void> {
    const t = TRIGGER_TABLE[table];
    await this.q(`DROP TRIGGER IF EXISTS keel.TestRefuseInsert_${t}`);
  }

  async killStoreConnections(): Promise<void> {
    await this.q(`
      DECLARE @Spid int, @Sql nvarchar(50);
      DECLARE s CURSOR LOCAL FAST_FORWARD FOR
        SELECT session_id FROM sys.dm_exec_sessions
        WHERE database_id = DB_ID() AND program_name = N'keel' AND session_id <> @@SPID;
      OPEN s;
      FETCH NEXT FROM s INTO @Spid;
      WHILE @@FETCH_STATUS = 0
      BEGIN
        SET @Sql = N'KILL ' + CONVERT(nvarchar(12), @Spid);
        BEGIN TRY EXEC (@Sql); END TRY BEGIN CATCH END CATCH;
        FETCH NEXT FROM s INTO @Spid;
      END;
      CLOSE s; DEALLOCATE s;`);
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.stores.map((s) => s.close()));
    await this.admin?.close().catch(() => undefined);
    if (!this.database) return;
    await this.master(async (m) => {
      await m.request().batch(
        `IF DB_ID(N'${this.database}') IS NOT NULL
         BEGIN
           ALTER DATABASE [${this.database}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE;
           DROP DATABASE [${this.database}];
         END`,
      );
      if (this.login) await m.request().batch(`IF SUSER_ID(N'${this.login}') IS NOT NULL DROP LOGIN [${this.login}]`);
    }).catch((err) => console.warn(`sqlserver harness: cleanup of ${this.database} failed: ${(err as Error).message}`));
  }
}

// An mssql:// URL for a target (credentials URL-encoded), so the store connects exactly as production code does.
export function toUrl(t: SqlServerTarget): string {
  const auth = t.user ? `${encodeURIComponent(t.user)}:${encodeURIComponent(t.password ?? '')}@` : '';
  const q = new URLSearchParams({
    encrypt: String(t.encrypt),
    trustServerCertificate: String(t.trustServerCertificate),
  });
  return `mssql://${auth}${t.server.includes(':') ? `[${t.server}]` : t.server}:${t.port}/${encodeURIComponent(t.database)}?${q}`;
}

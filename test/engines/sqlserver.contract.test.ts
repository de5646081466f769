// SQL Server engine: the shared job store contract suite against a real server (KEEL_TEST_MSSQL_URL), the migration
// runner against that server, and the engine's server-independent pieces (connection parsing, GO splitting,
// transient-error policy) which always run.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { defineJobStoreContract } from '../contract/jobStoreContract.js';
import { SqlServerHarness, mssqlTestUrl, toUrl } from './sqlserver.harness.js';
import { parseSqlServerConnection, SqlServerPool } from '../../shared/engines/sqlserver/pool.js';
import {
  migrateSqlServer,
  readSqlServerMigrations,
  readSqlServerRepeatables,
  splitBatches,
} from '../../shared/engines/sqlserver/migrate.js';
import { SQLSERVER_SQL_DIR, SqlServerJobStore } from '../../shared/engines/sqlserver/jobStore.js';
import {
  backoffDelay,
  isOutcomeUnknown,
  isRolledBackSqlError,
  isTransientSqlError,
  withSqlRetry,
} from '../../shared/engines/sqlserver/retry.js';

const url = mssqlTestUrl();
const SKIP_REASON = 'set KEEL_TEST_MSSQL_URL (mssql://user:pass@host:1433/db) to run';

if (url) {
  describe('job store contract: sqlserver', () => {
    defineJobStoreContract(() => new SqlServerHarness(url));
  });

  describe('sqlserver migrations', () => {
    it('applies every migration once (concurrent runners serialised by the applock); re-running is a no-op; edits are refused', async () => {
      const h = new SqlServerHarness(url);
      try {
        await h.createStore({ poolSize: 1 }); // creates and migrates a fresh database
        const pools = Array.from({ length: 3 }, () =>
          SqlServerPool.create(
            { ...parseSqlServerConnection(url), database: h.database },
            { max: 1, applicationName: 'keel-migrate-test' },
          ),
        );
        try {
          const files = [
            ...(await readSqlServerMigrations(SQLSERVER_SQL_DIR)),
            ...(await readSqlServerRepeatables(SQLSERVER_SQL_DIR)),
          ];
          const again = await Promise.all(
            pools.map(async (p) => migrateSqlServer(await p.get(), { dir: SQLSERVER_SQL_DIR })),
          );
          for (const r of again) expect(r).toEqual({ applied: [], alreadyApplied: files.length });

          const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-mssql-mig-'));
          await writeFile(
            path.join(dir, 'V900__one.sql'),
            'CREATE TABLE dbo.MigOne (Id int);\nGO\nINSERT dbo.MigOne VALUES (1);\n',
          );
          const first = await Promise.all(pools.map(async (p) => migrateSqlServer(await p.get(), { dir })));
          expect(first.reduce((n, r) => n + r.applied.length, 0)).toBe(1);
          await writeFile(path.join(dir, 'V900__one.sql'), 'CREATE TABLE dbo.MigOne (Id bigint);\n');
          await expect(migrateSqlServer(await pools[0]!.get(), { dir })).rejects.toThrow(
            /V900__one\.sql changed after it was applied/,
          );
          await writeFile(
            path.join(dir, 'V900__one.sql'),
            'CREATE TABLE dbo.MigOne (Id int);\nGO\nINSERT dbo.MigOne VALUES (1);\n',
          );
          await writeFile(path.join(dir, 'V901__bad.sql'), 'CREATE TABLE dbo.MigTwo (Id int);\nGO\nSELECT 1/0;\n');
          await expect(migrateSqlServer(await pools[0]!.get(), { dir })).rejects.toThrow(
            /V901__bad\.sql failed in batch 2/,
          );
          const r = await (await pools[0]!.get()).request().query(`SELECT OBJECT_ID(N'dbo.MigTwo') AS t`);
          expect(r.recordset[0].t).toBeNull();
        } finally {
          await Promise.all(pools.map((p) => p.close()));
        }
      } finally {
        await h.close();
      }
    });
  });

  describe('sqlserver least privilege and required settings', () => {
    it('the application login (keel_executor) cannot execute the internal procedures: no dead-lettering without a lease', async () => {
      const h = new SqlServerHarness(url);
      try {
        const store = await h.createStore({ poolSize: 1 });
        expect(h.usesExecutorLogin).toBe(true);
        const job = await store.enqueue({ queue: 'priv', type: 't', payload: {} });
        const app = SqlServerPool.create(await h.storeConnection(), { max: 1, applicationName: 'keel-priv-test' });
        try {
          const pool = await app.get();
          for (const proc of ['keel.DeadLetter', 'keel.ApplyCounters']) {
            const err = await pool
              .request()
              .execute(proc)
              .then(
                () => null,
                (e: { number?: number; originalError?: { info?: { number?: number } } }) => e,
              );
            expect(err, proc).not.toBeNull();
            expect(err!.number ?? err!.originalError?.info?.number, proc).toBe(229); // EXECUTE permission denied
          }
          expect((await store.getJob(job.id))?.location).toBe('hot');
        } finally {
          await app.close();
        }
      } finally {
        await h.close();
      }
    });

    it('the application login (keel_executor) changes audit rows only through the audit procedures', async () => {
      const h = new SqlServerHarness(url);
      try {
        const store = await h.createStore({ poolSize: 1 });
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
        const app = SqlServerPool.create(await h.storeConnection(), { max: 1, applicationName: 'keel-priv-test' });
        try {
          const pool = await app.get();
          for (const text of [
            `UPDATE keel.OpsAudit SET PrincipalName = N'someone else' WHERE Id = ${Number(id)}`,
            `DELETE FROM keel.OpsAudit WHERE Id = ${Number(id)}`,
            `INSERT keel.OpsAudit (AuthMethod, Channel, RequiredRole, HttpMethod, Action, Outcome) VALUES ('none', 'key', 'reader', 'POST', N'forged', 'ok')`,
          ]) {
            const err = await pool
              .request()
              .query(text)
              .then(
                () => null,
                (e: { number?: number; originalError?: { info?: { number?: number } } }) => e,
              );
            expect(err, text).not.toBeNull();
            expect(err!.number ?? err!.originalError?.info?.number, text).toBe(229); // permission denied
          }
        } finally {
          await app.close();
        }
        expect(await store.finishAudit(id, 'ok', 200, null, 3)).toBe(true);
        expect(await store.finishAudit(id, 'failed', 500, 'rewritten', 0)).toBe(false);
        expect((await store.searchAudit({ action: 'purge', limit: 5 })).items[0]).toMatchObject({
          id,
          outcome: 'ok',
          affected: 3,
          principalName: 'ada',
        });
      } finally {
        await h.close();
      }
    });

    it('EnqueueMany refuses a queue, type or key longer than its column (50046, naming job and field): OPENJSON would cut it', async () => {
      const h = new SqlServerHarness(url);
      try {
        await h.createStore({ poolSize: 1 });
        const app = SqlServerPool.create(await h.storeConnection(), { max: 1, applicationName: 'keel-width-test' });
        try {
          const pool = await app.get();
          const job = { queue: 'w', type: 't', payload: {} };
          for (const [field, jobs] of [
            [
              'jobs[1].idempotencyKey',
              [
                { ...job, idempotencyKey: 'k' },
                { ...job, idempotencyKey: 'k'.repeat(401) },
              ],
            ],
            ['jobs[0].queue', [{ ...job, queue: 'q'.repeat(129) }]],
            ['jobs[0].type', [{ ...job, type: 't'.repeat(257) }]],
          ] as const) {
            const err = await pool
              .request()
              .input('Jobs', JSON.stringify(jobs))
              .execute('keel.EnqueueMany')
              .then(
                () => null,
                (e: { number?: number; message?: string; originalError?: { info?: { number?: number } } }) => e,
              );
            expect(err, field).not.toBeNull();
            expect(err!.number ?? err!.originalError?.info?.number, field).toBe(50046);
            expect(err!.message, field).toContain(field);
          }
          const n = await pool.request().query('SELECT COUNT(*) AS n FROM keel.JobsHot');
          expect(n.recordset[0].n).toBe(0); // nothing of a refused batch written
        } finally {
          await app.close();
        }
      } finally {
        await h.close();
      }
    });

    it('refuses to start on a database without READ_COMMITTED_SNAPSHOT, naming the setting and the fix', async () => {
      const db = `keel_nrcsi_${Date.now().toString(36)}`;
      const master = SqlServerPool.create({ ...parseSqlServerConnection(url), database: 'master' }, { max: 1 });
      try {
        await (await master.get()).request().batch(`CREATE DATABASE [${db}]`); // SQL Server's default: RCSI OFF
        const target = { ...parseSqlServerConnection(url), database: db };
        await expect(SqlServerJobStore.connect(toUrl(target), { poolSize: 1, migrate: true })).rejects.toThrow(
          /READ_COMMITTED_SNAPSHOT OFF[\s\S]*ALTER DATABASE \[keel_nrcsi_\w+\] SET READ_COMMITTED_SNAPSHOT ON/,
        );
      } finally {
        await (
          await master.get()
        )
          .request()
          .batch(`ALTER DATABASE [${db}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE [${db}]`)
          .catch(() => undefined);
        await master.close();
      }
    });
  });
} else {
  describe.skip(`SQL Server contract suite skipped: ${SKIP_REASON}`, () => {
    it('runs the job store contract suite and the migration runner against a real SQL Server', () => undefined);
  });
}

describe('sqlserver engine (no server needed)', () => {
  it("EnqueueJobs reads queue, type and idempotencyKey one character wider than JobsHot's columns, and refuses what overflows", () => {
    // OPENJSON ... WITH (x nvarchar(n)) cuts a longer string to n characters without an error: two keys alike in their
    // first 400 characters would be one job. Read one wider, and refuse (the case above runs it on a server).
    const sqlDir = path.join(import.meta.dirname, '../../sql/sqlserver');
    const v001 = readFileSync(path.join(sqlDir, 'V001__jobs_schema.sql'), 'utf8');
    const hot = v001.slice(v001.indexOf('CREATE TABLE keel.JobsHot'));
    const enqueue = readFileSync(path.join(sqlDir, 'R__020_enqueue_claim.sql'), 'utf8');
    const body = enqueue.slice(enqueue.indexOf('CREATE OR ALTER PROCEDURE keel.EnqueueJobs'));
    for (const [column, field] of [
      ['Queue', 'queue'],
      ['Type', 'type'],
      ['IdempotencyKey', 'idempotencyKey'],
    ]) {
      const width = Number(new RegExp(`\\b${column}\\s+nvarchar\\((\\d+)\\)`).exec(hot)![1]);
      const read = Number(new RegExp(`\\b${field}\\s+nvarchar\\((\\d+)\\)\\s+'\\$\\.${field}'`).exec(body)![1]);
      expect(read, field).toBe(width + 1);
      expect(body, field).toContain(`DATALENGTH(${column}) > ${2 * width}`);
    }
    expect(body).toMatch(/THROW 50046, @Msg/);
  });

  it('parses mssql:// URLs and ADO connection strings, SQL login or Microsoft Entra ID', () => {
    expect(parseSqlServerConnection('mssql://sa:p%40ss@localhost:1433/keel')).toMatchObject({
      server: 'localhost',
      port: 1433,
      database: 'keel',
      user: 'sa',
      password: 'p@ss',
      entra: false,
      encrypt: true,
      trustServerCertificate: true,
    });
    expect(parseSqlServerConnection('mssql://db.example.net/keel?clientId=abc')).toMatchObject({
      server: 'db.example.net',
      database: 'keel',
      entra: true,
      managedIdentityClientId: 'abc',
      trustServerCertificate: false,
    });
    expect(
      parseSqlServerConnection(
        'Server=tcp:srv.database.windows.net,1433;Initial Catalog=keel;Authentication=Active Directory Default;Encrypt=True',
      ),
    ).toMatchObject({ server: 'srv.database.windows.net', port: 1433, database: 'keel', entra: true, encrypt: true });
    expect(parseSqlServerConnection('Server=localhost,14333;Database=keel;User Id=app;Password=pw')).toMatchObject({
      server: 'localhost',
      port: 14333,
      user: 'app',
      password: 'pw',
      entra: false,
    });
    expect(() => parseSqlServerConnection('mssql://localhost:1433/')).toThrow(/database is missing/);
    expect(() => parseSqlServerConnection('Server=x;Database=y;Authentication=Active Directory Password')).toThrow(
      /not supported/,
    );
  });

  it('splits scripts on GO lines only', () => {
    expect(splitBatches("SELECT 1;\nGO\n  go  -- next\nSELECT 'GO';\r\nGO\n")).toEqual(['SELECT 1;', "SELECT 'GO';"]);
    expect(() => splitBatches('SELECT 1;\nGO 5\n')).toThrow(/GO <count>/);
  });

  it('reads the SQL Server migrations: versioned tables, repeatable procedures, admin/ is not a migration', async () => {
    const files = await readSqlServerMigrations(SQLSERVER_SQL_DIR);
    const logic = await readSqlServerRepeatables(SQLSERVER_SQL_DIR);
    expect(files.length).toBeGreaterThan(0);
    expect(logic.map((r) => r.file).at(-1)).toBe('R__900_executor_role.sql'); // grants after every procedure exists
    for (const f of [...files.filter((m) => m.version < 20), ...logic]) {
      expect(f.batches.length).toBeGreaterThan(0);
      expect(f.batches[0]).toMatch(/SET QUOTED_IDENTIFIER ON/);
    }
    for (const r of logic) {
      // Schema stays versioned; a procedure's own temp table (#KeelCountDeltas) is not schema.
      for (const b of r.batches) expect(b).not.toMatch(/^\s*CREATE\s+(?:TABLE\s+(?!#)|(?:TYPE|INDEX|SEQUENCE)\b)/im);
    }
    expect([...files, ...logic].some((f) => f.file.includes('create-identity-user'))).toBe(false);
  });

  it('retries transient errors only where re-running is harmless', async () => {
    const deadlock = Object.assign(new Error('deadlock victim'), { number: 1205 });
    const busy = Object.assign(new Error('service busy'), { number: 40501 });
    const lost = Object.assign(new Error('socket hang up'), { code: 'ESOCKET' });
    const wrapped = Object.assign(new Error('request failed'), { originalError: { number: 40613 } });
    const fatal = Object.assign(new Error('constraint'), { number: 547 });
    expect([deadlock, busy, lost, wrapped].every(isTransientSqlError)).toBe(true);
    expect(isTransientSqlError(fatal)).toBe(false);
    expect(isRolledBackSqlError(deadlock)).toBe(true);
    expect(isOutcomeUnknown(lost)).toBe(true);
    expect(isOutcomeUnknown(deadlock)).toBe(false);

    const noSleep = { sleep: async () => undefined, attempts: 4 };
    const failing = (errors: unknown[]) => {
      let calls = 0;
      const op = async () => {
        const e = errors[calls++];
        if (e) throw e;
        return calls;
      };
      return { op, calls: () => calls };
    };
    const safeLost = failing([lost, busy]);
    expect(await withSqlRetry('safe', safeLost.op, noSleep)).toBe(3);
    const onceLost = failing([lost]);
    await expect(withSqlRetry('once', onceLost.op, noSleep)).rejects.toBe(lost);
    expect(onceLost.calls()).toBe(1); // a lost reply to a claim or a move is never re-sent
    const onceDeadlock = failing([deadlock, deadlock]);
    expect(await withSqlRetry('once', onceDeadlock.op, noSleep)).toBe(3);
    const never = failing([fatal]);
    await expect(withSqlRetry('safe', never.op, noSleep)).rejects.toBe(fatal);
    const exhausted = failing([busy, busy, busy, busy, busy]);
    await expect(withSqlRetry('safe', exhausted.op, noSleep)).rejects.toBe(busy);
    expect(exhausted.calls()).toBe(4);
    expect(backoffDelay(1, 100, 3000, () => 0.999)).toBeLessThan(100);
    expect(backoffDelay(10, 100, 3000, () => 0.999)).toBeLessThan(3000);
    expect(backoffDelay(3, 100, 3000, () => 0)).toBe(0);
  });
});

// Migrations for SQL Server / Azure SQL: versioned files V<number>__<name>.sql at the top of the folder (sub-folders
// such as admin/ are not migrations), then repeatable logic scripts R__<name>.sql (`CREATE OR ALTER` procedures,
// grants) re-applied whenever their checksum changed. Files are split into batches on lines that hold only GO, each
// applied in its own transaction and recorded in keel.SchemaMigrations / keel.SchemaRepeatables with a SHA-256. The whole run holds an
// exclusive session applock (sp_getapplock), so two instances never migrate at once. Re-running is a no-op; a file
// changed after it was applied is an error (add a new migration instead).
import sql from 'mssql';
import { poolErrorLogger } from '../poolErrors.js';
import { pendingMigrations, pendingRepeatables, readMigrationFiles, readRepeatableFiles } from '../migrationFiles.js';

export interface SqlServerMigration {
  version: number;
  name: string;
  file: string;
  batches: string[];
  checksum: string;
}

export interface SqlServerMigrateOptions {
  dir: string;
  lockResource?: string; // default 'keel:migrate'
  lockTimeoutMs?: number; // how long to wait for another migrating instance (default 10 min)
  log?: (line: string) => void;
}

export interface SqlServerMigrateResult {
  applied: string[];
  alreadyApplied: number;
}

const GO_LINE = /^[ \t]*GO[ \t]*(?:--.*)?$/i;

// Splits a script into batches on GO lines (as sqlcmd and SSMS do). "GO <count>" is not supported.
export function splitBatches(script: string): string[] {
  const batches: string[] = [];
  let current: string[] = [];
  for (const line of script.replace(/\r\n?/g, '\n').split('\n')) {
    if (GO_LINE.test(line)) {
      if (current.join('\n').trim()) batches.push(current.join('\n'));
      current = [];
    } else {
      if (/^[ \t]*GO[ \t]+\d+/i.test(line)) throw new Error(`"GO <count>" is not supported: ${line.trim()}`);
      current.push(line);
    }
  }
  if (current.join('\n').trim()) batches.push(current.join('\n'));
  return batches;
}

export interface SqlServerRepeatable {
  name: string;
  file: string;
  batches: string[];
  checksum: string;
}

export async function readSqlServerRepeatables(dir: string): Promise<SqlServerRepeatable[]> {
  return (await readRepeatableFiles(dir)).map((r) => ({
    name: r.name,
    file: r.file,
    batches: splitBatches(r.text),
    checksum: r.checksum,
  }));
}

export async function readSqlServerMigrations(dir: string): Promise<SqlServerMigration[]> {
  return (await readMigrationFiles(dir)).map((m) => ({
    version: m.version,
    name: m.name,
    file: m.file,
    batches: splitBatches(m.text),
    checksum: m.checksum,
  }));
}

const LEDGER_DDL = `
IF SCHEMA_ID(N'keel') IS NULL EXEC (N'CREATE SCHEMA keel AUTHORIZATION dbo');
IF OBJECT_ID(N'keel.SchemaMigrations', N'U') IS NULL
  CREATE TABLE keel.SchemaMigrations (
    Version   int NOT NULL CONSTRAINT PK_SchemaMigrations PRIMARY KEY,
    Name      nvarchar(200) NOT NULL,
    Checksum  char(64) NOT NULL,
    AppliedAt datetime2(3) NOT NULL CONSTRAINT DF_SchemaMigrations_AppliedAt DEFAULT (SYSUTCDATETIME())
  );
IF OBJECT_ID(N'keel.SchemaRepeatables', N'U') IS NULL
  CREATE TABLE keel.SchemaRepeatables (
    Name      nvarchar(200) NOT NULL CONSTRAINT PK_SchemaRepeatables PRIMARY KEY,
    Checksum  char(64) NOT NULL,
    AppliedAt datetime2(3) NOT NULL CONSTRAINT DF_SchemaRepeatables_AppliedAt DEFAULT (SYSUTCDATETIME())
  );`;

// Applies the pending migrations of opts.dir. `pool` supplies the connection settings; the run uses its own
// one-connection pool so that the session applock, the ledger reads and every migration share one session.
export async function migrateSqlServer(
  pool: sql.ConnectionPool,
  opts: SqlServerMigrateOptions,
): Promise<SqlServerMigrateResult> {
  const migrations = await readSqlServerMigrations(opts.dir);
  const repeatables = await readSqlServerRepeatables(opts.dir);
  const resource = opts.lockResource ?? 'keel:migrate';
  const lockTimeoutMs = opts.lockTimeoutMs ?? 600_000;
  const base = (pool as unknown as { config: sql.config }).config;
  const session = new sql.ConnectionPool({
    ...base,
    requestTimeout: Math.max(base.requestTimeout ?? 0, lockTimeoutMs + 60_000),
    pool: { max: 1, min: 0, idleTimeoutMillis: 3_600_000 },
  });
  // The migration's own session: a failure also surfaces on the statement that was running.
  session.on('error', poolErrorLogger('sqlserver', 'migration', 'migration session', opts.log ?? console.warn));
  await session.connect();
  const applied: string[] = [];
  let locked = false;
  try {
    const lock = await session
      .request()
      .input('Resource', sql.NVarChar(255), resource)
      .input('Timeout', sql.Int, lockTimeoutMs)
      .query<{ rc: number; spid: number }>(
        `DECLARE @rc int;
         EXEC @rc = sys.sp_getapplock @Resource = @Resource, @LockMode = 'Exclusive', @LockOwner = 'Session',
                                      @LockTimeout = @Timeout, @DbPrincipal = 'public';
         SELECT @rc AS rc, @@SPID AS spid;`,
      );
    const rc = lock.recordset[0]?.rc ?? -999;
    if (rc < 0) throw new Error(`could not take the migration lock ${resource} (sp_getapplock returned ${rc})`);
    locked = true;
    const spid = lock.recordset[0]!.spid;

    await session.request().batch(LEDGER_DDL);
    const done = new Map<number, string>();
    const rows = await session
      .request()
      .query<{ Version: number; Checksum: string }>('SELECT Version, Checksum FROM keel.SchemaMigrations');
    for (const r of rows.recordset) done.set(Number(r.Version), String(r.Checksum).trim());

    // One file, one transaction: its batches and its ledger row commit together or not at all.
    const applyFile = async (file: string, batches: string[], record: (req: sql.Request) => Promise<unknown>) => {
      // Still the session that holds the lock? (A dropped connection releases a session applock.)
      const still = await session
        .request()
        .input('Resource', sql.NVarChar(255), resource)
        .query<{ mode: string; spid: number }>(
          `SELECT APPLOCK_MODE('public', @Resource, 'Session') AS mode, @@SPID AS spid`,
        );
      if (still.recordset[0]?.spid !== spid || still.recordset[0]?.mode !== 'Exclusive') {
        throw new Error('lost the migration session (and its lock); run the migration again');
      }
      const tx = new sql.Transaction(session);
      await tx.begin();
      let batchNo = 0;
      try {
        for (const batch of batches) {
          batchNo++;
          await new sql.Request(tx).batch(batch);
        }
        await record(new sql.Request(tx));
        await tx.commit();
        applied.push(file);
        opts.log?.(`applied ${file}`);
      } catch (err) {
        await tx.rollback().catch(() => undefined);
        throw new Error(`migration ${file} failed in batch ${batchNo}: ${(err as Error).message}`, { cause: err });
      }
    };
    for (const m of pendingMigrations(migrations, done)) {
      await applyFile(m.file, m.batches, (req) =>
        req
          .input('Version', sql.Int, m.version)
          .input('Name', sql.NVarChar(200), m.name)
          .input('Checksum', sql.Char(64), m.checksum)
          .query('INSERT keel.SchemaMigrations (Version, Name, Checksum) VALUES (@Version, @Name, @Checksum)'),
      );
    }
    const doneRepeatable = new Map<string, string>();
    const repeatableRows = await session
      .request()
      .query<{ Name: string; Checksum: string }>('SELECT Name, Checksum FROM keel.SchemaRepeatables');
    for (const r of repeatableRows.recordset) doneRepeatable.set(String(r.Name), String(r.Checksum).trim());
    for (const r of pendingRepeatables(repeatables, doneRepeatable, applied.length > 0)) {
      await applyFile(r.file, r.batches, (req) =>
        req
          .input('Name', sql.NVarChar(200), r.name)
          .input('Checksum', sql.Char(64), r.checksum)
          .query(
            `UPDATE keel.SchemaRepeatables SET Checksum = @Checksum, AppliedAt = SYSUTCDATETIME() WHERE Name = @Name;
             IF @@ROWCOUNT = 0 INSERT keel.SchemaRepeatables (Name, Checksum) VALUES (@Name, @Checksum);`,
          ),
      );
    }
    return { applied, alreadyApplied: migrations.length + repeatables.length - applied.length };
  } finally {
    if (locked) {
      await session
        .request()
        .input('Resource', sql.NVarChar(255), resource)
        .query(`EXEC sys.sp_releaseapplock @Resource = @Resource, @LockOwner = 'Session', @DbPrincipal = 'public'`)
        .catch(() => undefined);
    }
    await session.close().catch(() => undefined);
  }
}

// What the job store needs of its SQL Server database, checked once when the store connects so that a missing
// setting stops the app at startup with a message that names it, instead of surfacing later as wrong answers:
// - READ_COMMITTED_SNAPSHOT ON (the Azure SQL default; not SQL Server's). keel.GetJob reads JobsHot, JobsArchive and
//   JobsDLQ in one UNION ALL statement; under locking READ COMMITTED each branch reads at its own moment, so a job
//   that moves concurrently (Hot -> Archive) can be returned twice or not at all. Row versioning makes every
//   statement read one committed snapshot. The READPAST claim hints carry READCOMMITTEDLOCK for this setting.
// - compatibility level 130 or higher (OPENJSON in the procedures).
// - the login may EXECUTE the keel procedures (a member of keel_executor: sql/sqlserver/R__900_executor_role.sql, admin/).
import type sql from 'mssql';

export interface SqlServerDatabaseFacts {
  database: string;
  readCommittedSnapshot: boolean;
  compatibilityLevel: number;
  canExecute: boolean; // EXECUTE on keel.GetJob, as a sample of the schema-wide grant
  login: string;
}

// Every unmet requirement, each as one sentence that says what to do; empty when the database is fit.
export function sqlServerSettingProblems(f: SqlServerDatabaseFacts): string[] {
  const problems: string[] = [];
  if (!f.readCommittedSnapshot) {
    problems.push(
      `database ${f.database} has READ_COMMITTED_SNAPSHOT OFF: Keel needs it ON (keel.GetJob and the ops reads must see one ` +
        `committed snapshot per statement). Run: ALTER DATABASE [${f.database}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE; ` +
        `(Azure SQL Database has it ON by default; see docs/sqlserver.md)`,
    );
  }
  if (f.compatibilityLevel < 130) {
    problems.push(
      `database ${f.database} is at compatibility level ${f.compatibilityLevel}: Keel needs 130 or higher (OPENJSON)`,
    );
  }
  if (!f.canExecute) {
    problems.push(
      `login ${f.login} may not EXECUTE the keel procedures in ${f.database}: make its database user a member of keel_executor ` +
        `(sql/sqlserver/admin/create-identity-user.sql), after installing the schema with npm run migrate`,
    );
  }
  return problems;
}

export class SqlServerSettingsError extends Error {
  constructor(readonly problems: string[]) {
    super(`the SQL Server database is not ready for Keel (KEEL_SQL_CONNECTION):\n- ${problems.join('\n- ')}`);
    this.name = 'SqlServerSettingsError';
  }
}

// Reads the facts as the application's own login: sys.databases always shows the current database's row, and
// HAS_PERMS_BY_NAME and SUSER_SNAME need no permission.
export async function readSqlServerDatabaseFacts(pool: sql.ConnectionPool): Promise<SqlServerDatabaseFacts> {
  const r = await pool.request().query(
    `SELECT DB_NAME() AS db, d.is_read_committed_snapshot_on AS rcsi, d.compatibility_level AS compat,
            HAS_PERMS_BY_NAME(N'keel.GetJob', N'OBJECT', N'EXECUTE') AS can_exec, SUSER_SNAME() AS login
     FROM sys.databases AS d WHERE d.database_id = DB_ID()`,
  );
  const row = r.recordset[0] as { db: string; rcsi: boolean; compat: number; can_exec: number | null; login: string };
  return {
    database: row.db,
    readCommittedSnapshot: Boolean(row.rcsi),
    compatibilityLevel: Number(row.compat),
    canExecute: row.can_exec === 1,
    login: row.login,
  };
}

export async function assertSqlServerReady(pool: sql.ConnectionPool): Promise<void> {
  const problems = sqlServerSettingProblems(await readSqlServerDatabaseFacts(pool));
  if (problems.length > 0) throw new SqlServerSettingsError(problems);
}

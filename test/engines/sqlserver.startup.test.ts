// The SQL Server store's startup check (shared/engines/sqlserver/startupCheck.ts), server-independent part: which
// database facts stop the app, and that each message names the setting and the fix. The check against a real
// database (RCSI OFF refused at connect) is in sqlserver.contract.test.ts and runs where KEEL_TEST_MSSQL_URL is set.
import { describe, expect, it } from 'vitest';
import {
  SqlServerSettingsError,
  sqlServerSettingProblems,
  type SqlServerDatabaseFacts,
} from '../../shared/engines/sqlserver/startupCheck.js';

const fit: SqlServerDatabaseFacts = {
  database: 'keel',
  readCommittedSnapshot: true,
  compatibilityLevel: 160,
  canExecute: true,
  login: 'keel-func',
};

describe('SQL Server startup check', () => {
  it('accepts a database with READ_COMMITTED_SNAPSHOT ON, level 130+, and EXECUTE for the login', () => {
    expect(sqlServerSettingProblems(fit)).toEqual([]);
    expect(sqlServerSettingProblems({ ...fit, compatibilityLevel: 130 })).toEqual([]);
  });

  it('refuses READ_COMMITTED_SNAPSHOT OFF with the ALTER DATABASE that fixes it', () => {
    const [p, ...rest] = sqlServerSettingProblems({ ...fit, readCommittedSnapshot: false });
    expect(rest).toEqual([]);
    expect(p).toMatch(/database keel has READ_COMMITTED_SNAPSHOT OFF/);
    expect(p).toMatch(/ALTER DATABASE \[keel\] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE/);
  });

  it('refuses an old compatibility level and a login outside keel_executor, all problems at once', () => {
    const problems = sqlServerSettingProblems({
      ...fit,
      readCommittedSnapshot: false,
      compatibilityLevel: 120,
      canExecute: false,
    });
    expect(problems).toHaveLength(3);
    expect(problems[1]).toMatch(/compatibility level 120: Keel needs 130 or higher/);
    expect(problems[2]).toMatch(/login keel-func may not EXECUTE the keel procedures in keel: .*keel_executor/);
    expect(new SqlServerSettingsError(problems).message).toMatch(
      /^the SQL Server database is not ready for Keel \(KEEL_SQL_CONNECTION\):\n- /,
    );
  });
});

// The T-SQL parse gate (tools/tsql-parse-gate, TSql160Parser = SQL Server 2022) reports every syntax error as
// file:line:column and fails, then every break of its rules (OUTPUT without INTO on a triggered table, a transaction
// without XACT_ABORT, a bare READPAST, spliced SQL); a clean folder passes with a summary. Needs the .NET SDK on PATH.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtemp, mkdir, writeFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const hasDotnet = spawnSync('dotnet', ['--version'], { encoding: 'utf8' }).status === 0;

function gate(folder: string) {
  const r = spawnSync('dotnet', ['run', '--project', 'tools/tsql-parse-gate', '-c', 'Release', '--', folder], {
    cwd: root,
    encoding: 'utf8',
    env: {
      ...process.env,
      DOTNET_NOLOGO: '1',
      DOTNET_CLI_TELEMETRY_OPTOUT: '1',
      DOTNET_SKIP_FIRST_TIME_EXPERIENCE: '1',
    },
    timeout: 300_000,
  });
  return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

describe.skipIf(!hasDotnet)(
  hasDotnet ? 'T-SQL parse gate' : 'T-SQL parse gate skipped: the dotnet SDK is not on PATH',
  () => {
    it('prints file:line:column for each error in any *.sql under the folder and exits 1; passes a clean folder', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-tsql-gate-'));
      try {
        await writeFile(
          path.join(dir, 'V001__good.sql'),
          'SET QUOTED_IDENTIFIER ON;\nGO\nCREATE OR ALTER PROCEDURE dbo.Ok @X INT AS\nBEGIN\n  SELECT @X AS X;\nEND;\nGO\n',
        );
        const clean = gate(dir);
        expect(clean.out).toMatch(/tsql-parse-gate: OK, 1 file\(s\), 2 batch\(es\)/);
        expect(clean.code).toBe(0);

        await mkdir(path.join(dir, 'admin'));
        await writeFile(
          path.join(dir, 'admin', 'broken.sql'),
          'SELECT 1;\nGO\nCREATE PROCEDURE dbo.Broken AS\nBEGIN\n  SELEC * FROM t WHERE;\nEND\nGO\n',
        );
        const broken = gate(dir);
        expect(broken.code).toBe(1);
        expect(broken.out).toMatch(/^\S*admin\/broken\.sql:5:3: Incorrect syntax near 'SELEC'/m);
        expect(broken.out).not.toMatch(/V001__good\.sql:\d+:\d+:/);
        expect(broken.out).toMatch(/tsql-parse-gate: \d+ error\(s\) in 2 file\(s\)/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 300_000);

    // The rules after the parse (tools/tsql-parse-gate/Program.cs): each one shown failing on a procedure that breaks
    // it, beside the same procedures written right, so a rule that finds nothing cannot pass unnoticed.
    it('fails OUTPUT without INTO on a triggered table, a transaction without XACT_ABORT, a bare READPAST, spliced SQL and an INSERT ... EXEC target that nests or rolls back', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-tsql-rules-'));
      const schema = [
        'SET QUOTED_IDENTIFIER ON;',
        'GO',
        'CREATE TABLE dbo.T (Id int NOT NULL PRIMARY KEY, State varchar(10) NOT NULL);',
        'GO',
        'CREATE OR ALTER TRIGGER dbo.T_Counted ON dbo.T AFTER UPDATE AS BEGIN SET NOCOUNT ON; END;',
        'GO',
        '',
      ].join('\n');
      const good = [
        'CREATE OR ALTER PROCEDURE dbo.Good @Id int AS',
        'BEGIN',
        '  SET XACT_ABORT ON;',
        '  DECLARE @Out TABLE (Id int NOT NULL);',
        '  BEGIN TRANSACTION;',
        "  UPDATE t SET State = 'x' OUTPUT inserted.Id INTO @Out (Id) FROM dbo.T AS t",
        '    WHERE t.Id = (SELECT TOP (1) Id FROM dbo.T WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK) ORDER BY Id);',
        '  COMMIT TRANSACTION;',
        '  SELECT Id FROM @Out;',
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.GoodPicks AS',
        'BEGIN',
        '  SET XACT_ABORT ON;',
        '  DECLARE @OwnTran bit = IIF(@@TRANCOUNT = 0, 1, 0);',
        '  BEGIN TRY',
        '    SELECT Id FROM dbo.T;',
        '  END TRY',
        '  BEGIN CATCH',
        '    IF @OwnTran = 1 AND @@TRANCOUNT > 0 ROLLBACK TRANSACTION;',
        '    THROW;',
        '  END CATCH;',
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.GoodCaller AS',
        'BEGIN',
        '  SET XACT_ABORT ON;',
        '  DECLARE @P TABLE (Id int NOT NULL);',
        '  INSERT @P (Id) EXEC dbo.GoodPicks;',
        'END;',
        'GO',
        '',
      ].join('\n');
      const bad = [
        'CREATE OR ALTER PROCEDURE dbo.OutputNoInto @Id int AS', // line 1
        'BEGIN',
        '  SET XACT_ABORT ON;',
        "  UPDATE t SET State = 'x' OUTPUT inserted.Id FROM dbo.T AS t WHERE t.Id = @Id;", // 4: output-into
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.NoXactAbort AS',
        'BEGIN',
        '  SET NOCOUNT ON;',
        '  BEGIN TRANSACTION;', // 10: xact-abort
        "  UPDATE dbo.T SET State = 'y';",
        '  COMMIT TRANSACTION;',
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.ReadPastAlone AS',
        'BEGIN',
        '  SELECT TOP (1) Id FROM dbo.T WITH (UPDLOCK, READPAST) ORDER BY Id;', // 17: readpast
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.Spliced @Name nvarchar(100) AS',
        'BEGIN',
        "  EXEC (N'SELECT Id FROM ' + @Name);", // 22: dynamic-sql
        "  EXEC sys.sp_executesql N'SELECT 1';", // 23: dynamic-sql
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.Picks AS', // run through INSERT ... EXEC by dbo.Caller
        'BEGIN',
        '  SET XACT_ABORT ON;',
        '  DECLARE @Inner TABLE (Id int NOT NULL);',
        '  INSERT @Inner (Id) EXEC dbo.Rows;', // 30: insert-exec (nested: error 8164)
        '  BEGIN TRY',
        '    SELECT Id FROM @Inner;',
        '  END TRY',
        '  BEGIN CATCH',
        '    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;', // 35: insert-exec (error 3915 in the caller)
        '    THROW;',
        '  END CATCH;',
        'END;',
        'GO',
        'CREATE OR ALTER PROCEDURE dbo.Caller AS',
        'BEGIN',
        '  SET XACT_ABORT ON;',
        '  DECLARE @P TABLE (Id int NOT NULL);',
        '  INSERT @P (Id) EXEC dbo.Picks;',
        'END;',
        'GO',
        '',
      ].join('\n');
      try {
        await writeFile(path.join(dir, 'V001__schema.sql'), schema);
        await writeFile(path.join(dir, 'R__010_good.sql'), good);
        const clean = gate(dir);
        expect(clean.out).toMatch(
          /rules output-into, xact-abort, readpast, dynamic-sql, insert-exec: OK \(1 triggered table\(s\), 1 INSERT \.\.\. EXEC target\(s\)\)/,
        );
        expect(clean.code).toBe(0);

        await writeFile(path.join(dir, 'R__020_bad.sql'), bad);
        const r = gate(dir);
        expect(r.code).toBe(1);
        const found = r.out
          .split('\n')
          .map((l) => /R__020_bad\.sql:(\d+):\d+: ([a-z-]+):/.exec(l))
          .filter((m) => m !== null)
          .map((m) => `${m[1]} ${m[2]}`);
        expect(found).toEqual([
          '4 output-into',
          '10 xact-abort',
          '17 readpast',
          '22 dynamic-sql',
          '23 dynamic-sql',
          '30 insert-exec',
          '35 insert-exec',
        ]);
        expect(r.out).toMatch(/OUTPUT without INTO on dbo\.T, which has trigger dbo\.T_Counted: .*error 334/);
        expect(r.out).not.toMatch(/R__010_good\.sql:\d+:\d+:/);
        expect(r.out).toMatch(/tsql-parse-gate: 7 rule violation\(s\) in 3 file\(s\)/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 300_000);

    it("passes the repository's SQL Server scripts (migrations and admin/)", () => {
      const r = gate('sql/sqlserver');
      expect(r.out).toMatch(/tsql-parse-gate: OK, \d+ file\(s\)/);
      // The rules ran over the real triggers: keel.JobsHot and keel.JobsDLQ (R__015_read_counters.sql).
      // keel.EnqueueJobs, keel.PickClaimable and keel.DeadLetter are run through INSERT ... EXEC.
      expect(r.out).toMatch(
        /rules output-into, xact-abort, readpast, dynamic-sql, insert-exec: OK \(2 triggered table\(s\), 3 INSERT \.\.\. EXEC target\(s\)\)/,
      );
      expect(r.code).toBe(0);
    }, 300_000);
  },
);

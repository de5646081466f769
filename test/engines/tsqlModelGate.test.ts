// The T-SQL model gate (tools/tsql-model-gate: DacFx TSqlModel for Sql160 and SqlAzure, then Validate) fails on what
// the parser cannot see — a column, a procedure or an index that does not exist — with file:line, reads V__ and R__
// files, models CREATE OR ALTER (which DacFx's AddObjects would otherwise drop silently) and IF/EXEC-wrapped DDL, and
// passes the repository's sql/sqlserver. (DacFx does not resolve an alias-qualified column in a query that also
// reads a table variable, so the wrong column here is in an UPDATE.) Needs the .NET SDK on PATH (and NuGet's Microsoft.SqlServer.DacFx).
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const hasDotnet = spawnSync('dotnet', ['--version'], { encoding: 'utf8' }).status === 0;

function gate(...args: string[]) {
  const r = spawnSync('dotnet', ['run', '--project', 'tools/tsql-model-gate', '-c', 'Release', '--', ...args], {
    cwd: root,
    encoding: 'utf8',
    env: {
      ...process.env,
      DOTNET_NOLOGO: '1',
      DOTNET_CLI_TELEMETRY_OPTOUT: '1',
      DOTNET_SKIP_FIRST_TIME_EXPERIENCE: '1',
    },
    timeout: 600_000,
  });
  return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

const SCHEMA = [
  'SET ANSI_NULLS ON;',
  'SET QUOTED_IDENTIFIER ON;',
  'GO',
  "IF SCHEMA_ID(N'app') IS NULL EXEC (N'CREATE SCHEMA app AUTHORIZATION dbo');",
  'GO',
  "IF OBJECT_ID(N'app.Items', N'U') IS NULL",
  'CREATE TABLE app.Items (Id bigint NOT NULL PRIMARY KEY, Name nvarchar(100) NOT NULL);',
  'GO',
  'CREATE NONCLUSTERED INDEX IX_Items_Name ON app.Items (Name);',
  'GO',
  'CREATE TYPE app.IdList AS TABLE (Id bigint NOT NULL PRIMARY KEY);',
  'GO',
  'CREATE PROCEDURE app.Caller AS SELECT 1 AS Old;', // replaced by the R__ file's CREATE OR ALTER
  'GO',
  '',
].join('\n');

function procs(column: string, proc: string, index: string): string {
  return [
    'CREATE OR ALTER PROCEDURE app.Touch @Ids app.IdList READONLY',
    'AS',
    'BEGIN',
    '  SET NOCOUNT ON;',
    `  UPDATE app.Items SET ${column} = N'touched' WHERE Id IN (SELECT x.Id FROM @Ids AS x);`, // line 5
    `  SELECT i.Id, i.Name FROM app.Items AS i WITH (INDEX(${index})) WHERE i.Id IN (SELECT x.Id FROM @Ids AS x);`, // line 6
    '  RETURN 0;',
    'END;',
    'GO',
    'CREATE OR ALTER PROCEDURE app.Caller',
    'AS',
    'BEGIN',
    '  DECLARE @Ids app.IdList;',
    `  EXEC ${proc} @Ids = @Ids;`, // line 14
    'END;',
    'GO',
    '',
  ].join('\n');
}

describe.skipIf(!hasDotnet)(
  hasDotnet ? 'T-SQL model gate' : 'T-SQL model gate skipped: the dotnet SDK is not on PATH',
  () => {
    it('passes clean V__ and R__ files (CREATE OR ALTER and IF/EXEC-guarded DDL modelled), and fails a wrong column, procedure and index hint with file:line', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-tsql-model-'));
      try {
        await writeFile(path.join(dir, 'V001__schema.sql'), SCHEMA);
        await writeFile(path.join(dir, 'R__procs.sql'), procs('Name', 'app.Touch', 'IX_Items_Name'));
        const clean = gate(dir);
        expect(clean.out).toMatch(
          /tsql-model-gate: OK, 2 file\(s\), 5 object\(s\) per model; Sql160: 1 table\(s\), 2 procedure\(s\); SqlAzure: 1 table\(s\), 2 procedure\(s\)/,
        );
        expect(clean.code).toBe(0);

        await writeFile(path.join(dir, 'R__procs.sql'), procs('Nmae', 'app.Tuoch', 'IX_Items_Nmae'));
        const broken = gate(dir);
        expect(broken.code).toBe(1);
        const lines = broken.out.split('\n');
        for (const platform of ['Sql160', 'SqlAzure']) {
          const at = (line: number, what: RegExp) =>
            expect(
              lines.some(
                (l) => new RegExp(`R__procs\\.sql:${line}: ${platform}: SQL7150[12]:`).test(l) && what.test(l),
              ),
              `${platform} line ${line} ${what}\n${broken.out}`,
            ).toBe(true);
          at(5, /\[app\]\.\[Items\]\.\[Nmae\]/); // wrong column
          at(6, /\[IX_Items_Nmae\]/); // wrong index hint
          at(14, /\[app\]\.\[Tuoch\]/); // wrong procedure
        }
        expect(broken.out).toMatch(/tsql-model-gate: \d+ problem\(s\) in 2 file\(s\)/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 900_000);

    it('takes CREATE INDEX ... WITH (DROP_EXISTING = ON) in a later migration as the index redefined, and checks the new definition', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-tsql-model-'));
      const redefine = (columns: string, dropExisting: boolean) =>
        [
          'SET ANSI_NULLS ON;',
          'SET QUOTED_IDENTIFIER ON;',
          'GO',
          `CREATE NONCLUSTERED INDEX IX_Items_Name ON app.Items (${columns})${dropExisting ? ' WITH (DROP_EXISTING = ON)' : ''};`,
          'GO',
          '',
        ].join('\n');
      try {
        await writeFile(path.join(dir, 'V001__schema.sql'), SCHEMA);
        await writeFile(path.join(dir, 'R__procs.sql'), procs('Name', 'app.Touch', 'IX_Items_Name'));
        await writeFile(path.join(dir, 'V002__index.sql'), redefine('Name, Id', true));
        const redefined = gate(dir);
        expect(redefined.out).toMatch(/tsql-model-gate: OK, 3 file\(s\)/);
        expect(redefined.code).toBe(0);
        // Without DROP_EXISTING the second CREATE is a second index of one name, as SQL Server would refuse it.
        await writeFile(path.join(dir, 'V002__index.sql'), redefine('Name, Id', false));
        const twice = gate(dir);
        expect(twice.code).toBe(1);
        expect(twice.out).toMatch(/SQL71508: .*IX_Items_Name/);
        // The redefinition itself is modelled: a column the table lacks fails.
        await writeFile(path.join(dir, 'V002__index.sql'), redefine('Name, Nmae', true));
        const wrong = gate(dir);
        expect(wrong.code).toBe(1);
        expect(wrong.out).toMatch(/\[Nmae\]/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 900_000);

    it('takes ALTER TABLE ... ADD <columns> in a later migration as part of the table: procedures may use them, a missing table fails', async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-tsql-model-'));
      const addColumn = (table: string) =>
        [
          'SET ANSI_NULLS ON;',
          'SET QUOTED_IDENTIFIER ON;',
          'GO',
          `ALTER TABLE ${table} ADD Note nvarchar(max) NULL CONSTRAINT CK_Items_Note CHECK (Note IS NULL OR ISJSON(Note) = 1);`,
          'GO',
          '',
        ].join('\n');
      try {
        await writeFile(path.join(dir, 'V001__schema.sql'), SCHEMA);
        await writeFile(path.join(dir, 'V002__note.sql'), addColumn('app.Items'));
        // The procedure writes the added column: it resolves only because the addition is modelled.
        await writeFile(path.join(dir, 'R__procs.sql'), procs('Note', 'app.Touch', 'IX_Items_Name'));
        const added = gate(dir);
        expect(added.out).toMatch(/tsql-model-gate: OK, 3 file\(s\)/);
        expect(added.code).toBe(0);
        await writeFile(path.join(dir, 'V002__note.sql'), addColumn('app.Itmes'));
        const missing = gate(dir);
        expect(missing.code).toBe(1);
        expect(missing.out).toMatch(
          /V002__note\.sql:4:1: ALTER TABLE app\.Itmes ADD \.\.\.: no script creates table app\.Itmes/,
        );
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 900_000);

    it("passes the repository's sql/sqlserver with only the allow-listed warnings", () => {
      const r = gate('sql/sqlserver', '--allow', 'sql/sqlserver/model-gate.allow');
      expect(r.out).toMatch(/tsql-model-gate: OK, \d+ file\(s\)/);
      expect(r.code).toBe(0);
    }, 900_000);
  },
);

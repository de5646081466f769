// The T-SQL parse gate (tools/tsql-parse-gate, TSql160Parser = SQL Server 2022) reports every syntax error as
// file:line:column and fails; a clean folder passes with a summary. Needs the .NET SDK on PATH.
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

    it("passes the repository's SQL Server scripts (migrations and admin/)", () => {
      const r = gate('sql/sqlserver');
      expect(r.out).toMatch(/tsql-parse-gate: OK, \d+ file\(s\)/);
      expect(r.code).toBe(0);
    }, 300_000);
  },
);

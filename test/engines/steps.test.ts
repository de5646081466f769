// The steps of "Adding an engine" (docs/architecture.md), checked for every engine in the registry: a descriptor
// folder and SQL, the contract suites its capabilities call for, the parity test, the telemetry driver, and a CI
// service for the test database its suites need.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ENGINES } from '../../shared/engines/registry.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

describe.each(ENGINES.map((e) => [e.name, e] as const))('engine %s follows the steps to add an engine', (name, e) => {
  const tests = readdirSync(path.join(root, 'test/engines')).filter((f) => f.startsWith(`${name}.`));

  it('has its folder with the descriptor, and its SQL', () => {
    expect(existsSync(path.join(root, `shared/engines/${name}/index.ts`))).toBe(true);
    expect(readdirSync(path.join(root, `sql/${name}`)).some((f) => f.endsWith('.sql'))).toBe(true);
  });

  it('runs every contract suite its capabilities call for', () => {
    const want: string[] = [];
    if (e.capabilities.jobStore) want.push(`${name}.harness.ts`, `${name}.contract.test.ts`, `${name}.chaos.test.ts`);
    if (e.capabilities.journal) want.push(`${name}.transferJournal.test.ts`);
    if (e.capabilities.transferSource) want.push(`${name}.transferSource.test.ts`);
    if (e.capabilities.transferTarget) want.push(`${name}.targetAdapter.test.ts`);
    if (e.capabilities.journal || e.capabilities.transferSource || e.capabilities.transferTarget)
      want.push(`${name}.transfer.harness.ts`);
    expect(want.filter((f) => !tests.includes(f))).toEqual([]);
  });

  it('has its typed procedure tables in the parity test: the job store, and the journal when it keeps one', () => {
    const parity = read('test/engines/parity.test.ts');
    if (e.capabilities.jobStore || e.capabilities.journal) expect(parity).toContain(`shared/engines/${name}/`);
    // The journal's table is one row of the parity test's table list, keyed by the engine's name.
    if (e.capabilities.journal) expect(parity).toMatch(new RegExp(`^\\s+${name}: JOURNAL_\\w+`, 'm'));
  });

  it('names a telemetry driver that is a production dependency', () => {
    const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> };
    const driver = e.telemetryDriver === 'tedious' ? 'mssql' : e.telemetryDriver; // mssql brings tedious
    expect(Object.keys(pkg.dependencies)).toContain(driver);
  });

  it('the CI workflow sets every test database URL its suites read', () => {
    const ci = read('.github/workflows/ci.yml');
    const urls = new Set(tests.flatMap((f) => read(`test/engines/${f}`).match(/KEEL_TEST_[A-Z0-9]+_URL/g) ?? []));
    expect([...urls].filter((u) => !new RegExp(`^\\s+${u}:`, 'm').test(ci))).toEqual([]);
  });
});

// "None of them branches on an engine's name" (shared/engines/descriptor.ts): outside shared/engines/, shipped code
// names no engine but in the two places that must (the default engine, and the folder that marks the SQL root).
describe('no engine name outside the engine folders', () => {
  it('shipped code outside shared/engines/ names an engine only as the default store and the SQL root marker', () => {
    const names = ENGINES.map((e) => e.name).join('|');
    const literal = new RegExp(`(['"\`])(${names})\\1`, 'g');
    const found: string[] = [];
    for (const dir of ['functions', 'shared', 'handlers']) {
      for (const f of readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })) {
        const file = path.join(dir, f);
        if (!file.endsWith('.ts') || file.endsWith('.test.ts') || file.startsWith('shared/engines/')) continue;
        for (const line of read(file).split('\n')) {
          if (literal.test(line)) found.push(`${file}: ${line.trim()}`);
          literal.lastIndex = 0;
        }
      }
    }
    expect(found).toEqual([
      "shared/config/settings.ts: KEEL_STORE_ENGINE: z.enum(enginesWith('jobStore')).optional().default('postgres'),",
      "shared/config/sqlDir.ts: if (existsSync(path.join(candidate, 'postgres'))) return candidate;",
    ]);
  });
});

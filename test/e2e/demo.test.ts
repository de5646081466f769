// `npm run demo -- --exit` (README's quickstart), end to end as a newcomer runs it: it boots the local host, drives
// every step over the ops API and must exit 0 with each step's outcome printed. Here on the run's PostgreSQL (the
// demo creates its two transfer databases there) instead of an embedded server, on free ports.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { demoDatabases } from '../../dev/demoTransfer.js';
import { withClient } from '../../dev/pgAdmin.js';
import { adminUrl, createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

it('npm run demo -- --exit: every step succeeds and the process exits 0', async () => {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-demo-'));
  // The owner's URL: the demo creates its source and target databases beside this one.
  const url = await createTestDatabase('e2e_demo');
  const control = new URL(url).pathname.slice(1);
  // Named after this run's control database, so the test server keeps no keel_demo_* of a previous run (whose target
  // rows would meet this run's first window) and the finally below drops exactly what this run made.
  const made = demoDatabases(control);
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', '--exit'], {
      cwd: ROOT,
      env: {
        ...process.env,
        KEEL_DATA_DIR: dataDir,
        KEEL_HTTP_PORT: '0',
        KEEL_AZURITE_PORT: '0',
        KEEL_PG_URL: url,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 170_000);
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    clearTimeout(timer);
    expect(code, output.slice(-4000)).toBe(0);
    expect(output).not.toMatch(/demo failed/);
    // The resurrect step resurrected what its preview listed, and the transfer committed.
    const preview = /preview: would resurrect (\[.*\])/.exec(output)?.[1];
    expect(preview, output.slice(-4000)).toBeDefined();
    expect(JSON.parse(preview!).length).toBeGreaterThan(0);
    expect(output).toContain(`resurrected ${preview}`);
    expect(output).toMatch(/batch [0-9a-f-]{36}: committed/);
    const present = await withClient(adminUrl(), async (c) =>
      (
        await c.query<{ datname: string }>('select datname from pg_database where datname = any($1) order by 1', [
          [made.source, made.target],
        ])
      ).rows.map((r) => r.datname),
    );
    expect(present).toEqual([made.source, made.target]);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
    await withClient(adminUrl(), async (c) => {
      for (const db of [made.source, made.target, control]) await c.query(`drop database if exists ${db} with (force)`); // names of [a-z0-9_] only (createTestDatabase)
    });
  }
}, 180_000);

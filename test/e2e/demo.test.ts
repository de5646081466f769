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

it('npm run demo: Ctrl+C during the walk stops the host gracefully, its running jobs handed back, not left processing', async () => {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-demo-int-'));
  const url = await createTestDatabase('e2e_demo_int');
  const control = new URL(url).pathname.slice(1);
  const made = demoDatabases(control);
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts'], {
      cwd: ROOT,
      env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_HTTP_PORT: '0', KEEL_AZURITE_PORT: '0', KEEL_PG_URL: url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    try {
      // Interrupted while a demo.slow job runs (3 s and 2 s of work): before, the process died at once and left it
      // 'processing' for zombie rescue.
      const running = () =>
        withClient(url, async (c) =>
          Number(
            (await c.query<{ n: string }>(`select count(*) as n from keel.jobs_hot where state = 'processing'`))
              .rows[0]!.n,
          ),
        );
      const deadline = Date.now() + 120_000;
      while ((await running().catch(() => 0)) === 0) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`no job ran:\n${output.slice(-4000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      child.kill('SIGINT');
      expect(await exited, output.slice(-4000)).toBe(0);
      expect(output).toMatch(/SIGINT: stopping the demo's local host/);
      expect(output).not.toMatch(/demo failed/);
      expect(await running()).toBe(0); // finished within the grace, or released (pending), none left processing
    } finally {
      clearTimeout(timer);
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
    await withClient(adminUrl(), async (c) => {
      for (const db of [made.source, made.target, control]) await c.query(`drop database if exists ${db} with (force)`); // names of [a-z0-9_] only (createTestDatabase)
    });
  }
}, 180_000);

// `npm start` stopped by a signal sent to npm alone (kill <pid>, a service manager, an IDE's stop button), not to the
// terminal's whole process group: npm passes SIGINT/SIGTERM on to its script's shell only, and Debian's sh passed
// neither on (SIGINT: nothing stopped; SIGTERM: npm exited and left node running with its ports). package.json's
// scripts `exec` node, and a host whose npm is gone (killed outright) stops itself (dev/parentWatch.ts). Either
// way the host stops the graceful way: the process is gone and its port is free.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dirs: string[] = [];

afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function waitFor(what: string, ok: () => boolean | Promise<boolean>, ms: number, output: () => string) {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`${what}:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startUnderNpm(label: string) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `keel-e2e-npm-${label}-`));
  dirs.push(dataDir);
  const url = await createTestDatabase(`e2e_npm_${label}`);
  // --ignore-scripts: no prestart (the console build); npm start still runs the start script itself.
  const npm = spawn('npm', ['start', '--ignore-scripts', '--silent'], {
    cwd: ROOT,
    env: {
      ...process.env,
      KEEL_PG_URL: url,
      KEEL_DATA_DIR: dataDir,
      KEEL_HTTP_PORT: '0',
      KEEL_AZURITE_PORT: '0',
      KEEL_MAINTENANCE_SCHEDULE: '0 0 0 1 1 *',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  npm.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  npm.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  await waitFor(
    'the host did not start',
    () => /KEEL_READY \{.*\}/.test(output) || npm.exitCode !== null,
    90_000,
    () => output,
  );
  const ready = JSON.parse(/KEEL_READY (\{.*\})/.exec(output)![1]!) as { baseUrl: string; pid: number };
  expect(ready.pid).not.toBe(npm.pid);
  expect((await fetch(`${ready.baseUrl}/api/health`)).status).toBe(200);
  return { npm, ready, url, dataDir, output: () => output };
}

async function expectStopped(host: Awaited<ReturnType<typeof startUnderNpm>>) {
  await waitFor('the host process is still running', () => !alive(host.ready.pid), 30_000, host.output);
  await expect(fetch(`${host.ready.baseUrl}/api/health`)).rejects.toThrow();
}

// Both hosts at once: a start is mostly waiting (modules, migrations), and the file stays within its time budget.
describe('npm start: a signal sent to npm alone', () => {
  it('SIGINT to npm, or npm killed outright (SIGKILL): the host stops gracefully and its port is free', async () => {
    const [int, killed] = await Promise.all([startUnderNpm('int'), startUnderNpm('kill')]);
    const npmExit = new Promise((resolve) => int.npm.once('exit', resolve));
    int.npm.kill('SIGINT');
    killed.npm.kill('SIGKILL');
    await Promise.all([expectStopped(int), expectStopped(killed)]);
    expect(int.output()).toMatch(/SIGINT: stopping/);
    expect(int.output()).toMatch(/\nstopped\n/);
    await npmExit;
    expect(killed.output()).toMatch(/the npm process that started this one \(\d+\) is gone: stopping as on SIGTERM/);
    // A signal, not a keypress: the way to stop at once is another SIGTERM, not "Ctrl+C again".
    expect(killed.output()).toMatch(/SIGTERM: stopping; .*\(send SIGTERM again to stop now\)/);
    expect(killed.output()).not.toMatch(/Ctrl\+C/);
    expect(int.output()).toMatch(/SIGINT: stopping; .*\(Ctrl\+C again to stop now\)/);
    expect(killed.output()).toMatch(/\nstopped\n/);
  }, 150_000);
});

// Ctrl+C, then npm gone during the grace period (killed, its terminal closed): the orphan watcher's SIGTERM came a
// second or more after the Ctrl+C, counted as a second Ctrl+C ("stopping now") and cut the grace short, leaving the
// running job 'processing' for zombie rescue. Once stopping, npm's going changes nothing.
describe('npm start: npm gone while the host stops', () => {
  it('the stop stays graceful: the running job is handed back, not cut short', async () => {
    const host = await startUnderNpm('grace');
    const pool = new pg.Pool({ connectionString: host.url, max: 1 });
    try {
      const key = (await readFile(path.join(host.dataDir, 'ops-key'), 'utf8')).trim();
      const res = await fetch(`${host.ready.baseUrl}/api/ops/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-functions-key': key },
        body: JSON.stringify({ queue: 'npm-gone', type: 'demo.slow', payload: { ms: 120_000 } }),
      });
      expect(res.status).toBe(201);
      const id = ((await res.json()) as { id: string }).id;
      const state = async () =>
        (await pool.query(`select state, attempts, last_error from keel.jobs_hot where id = $1`, [id])).rows[0] as
          { state: string; attempts: number; last_error: string | null } | undefined;
      await waitFor('the job did not start', async () => (await state())?.state === 'processing', 60_000, host.output);

      process.kill(host.ready.pid, 'SIGINT'); // the host stops: 5 s of grace for the running job
      await waitFor('no stop began', () => /SIGINT: stopping/.test(host.output()), 10_000, host.output);
      // More than a repeated keypress later (1 s), npm is killed; its watcher would notice within 0.5 s.
      await new Promise((r) => setTimeout(r, 1_500));
      host.npm.kill('SIGKILL');
      await waitFor('the host process is still running', () => !alive(host.ready.pid), 30_000, host.output);
      expect(host.output()).not.toMatch(/again: stopping now/);
      expect(host.output()).toMatch(/\nstopped\n/);
      expect(await state()).toMatchObject({
        state: 'pending',
        attempts: 0,
        last_error: 'interrupted by worker shutdown',
      });
    } finally {
      if (alive(host.ready.pid)) process.kill(host.ready.pid, 'SIGKILL');
      await pool.end();
    }
  }, 150_000);
});

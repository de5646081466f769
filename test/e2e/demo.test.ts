// `npm run demo -- --exit` (README's quickstart), end to end as a newcomer runs it: it boots the local host, drives
// every step over the ops API and must exit 0 with each step's outcome printed. Here on the run's PostgreSQL (the
// demo creates its two transfer databases there) instead of an embedded server, on free ports.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

it('npm run demo -- --exit: every step succeeds and the process exits 0', async () => {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-demo-'));
  // The owner's URL: the demo creates its source and target databases beside this one.
  const url = await createTestDatabase('e2e_demo');
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
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}, 180_000);

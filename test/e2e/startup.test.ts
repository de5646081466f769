// Start-up traps of the local host: an unreachable KEEL_PG_URL and a busy HTTP port stop the start with a message
// naming the setting (not a raw ECONNREFUSED / EADDRINUSE stack); an embedded PostgreSQL orphaned by a kill -9 of
// its host is reclaimed, and one that a live process owns is named with its PID.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { bootLocal, StartupError } from '../../dev/boot.js';
import { definitions } from '../../functions/definitions.js';
import { freePort, startEmbeddedPostgres } from '../../dev/embeddedPostgres.js';
import { createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dirs: string[] = [];
const tempDir = async (label: string) => {
  const d = await mkdtemp(path.join(os.tmpdir(), `keel-${label}-`));
  dirs.push(d);
  return d;
};

afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('local host start-up', () => {
  it('an unreachable KEEL_PG_URL stops the start with a message naming it and the fix', async () => {
    const port = await freePort();
    process.env.KEEL_PG_URL = `postgres://someone:secret@127.0.0.1:${port}/keel`;
    try {
      const err = await bootLocal({ definitions, dataDir: await tempDir('boot-refused'), log: () => undefined }).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StartupError);
      expect((err as Error).message).toMatch(
        new RegExp(
          `cannot reach PostgreSQL at 127\\.0\\.0\\.1:${port} \\(KEEL_PG_URL, from the environment\\).*remove KEEL_PG_URL`,
        ),
      );
    } finally {
      delete process.env.KEEL_PG_URL;
    }
  });

  it("npm start's default principal trust, refused in a hosting environment, stops the start before anything starts", async () => {
    // KEEL_TRUST_CLIENT_PRINCIPAL unset (the vitest config sets it: removed here), as a user who never set it runs it.
    const saved = { ...process.env };
    delete process.env.KEEL_TRUST_CLIENT_PRINCIPAL;
    process.env.KUBERNETES_SERVICE_HOST = '10.0.0.1';
    process.env.KEEL_AZURITE_PORT = '0';
    const dataDir = await tempDir('boot-trust');
    try {
      const err = await bootLocal({ definitions, dataDir, port: 0, log: () => undefined }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StartupError);
      expect((err as Error).message).toMatch(/by default \(KEEL_TRUST_CLIENT_PRINCIPAL=local\)/);
      expect((err as Error).message).toMatch(/Set KEEL_TRUST_CLIENT_PRINCIPAL to an empty value/);
      // Refused before the embedded server or Azurite started (the failed start had also printed the job store
      // pool's 57P01 as its server was stopped under it).
      expect(existsSync(path.join(dataDir, 'pg'))).toBe(false);
      expect(existsSync(path.join(dataDir, 'azurite'))).toBe(false);
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });

  it("local.settings.example.json's KEEL_PG_URL (the app's login on the embedded server) starts the embedded server", async () => {
    // README: copy the example to local.settings.json and npm start runs the server its KEEL_PG_URL names (for func
    // start beside it), instead of refusing it as unreachable. Here on a free port (KEEL_PG_PORT) instead of 54329.
    const example = JSON.parse(await readFile(path.join(ROOT, 'local.settings.example.json'), 'utf8')) as {
      Values: Record<string, string>;
    };
    // The demo types are the local host's (dev/boot.ts, on by default there); under func start the setting does
    // nothing, so the example must not suggest that it turns them on.
    expect(example.Values.KEEL_DEMO_HANDLERS).toBeUndefined();
    const port = await freePort();
    const url = new URL(example.Values.KEEL_PG_URL!);
    expect(url.port).toBe('54329');
    url.port = String(port);
    const saved = { ...process.env };
    Object.assign(process.env, { KEEL_PG_URL: url.toString(), KEEL_PG_PORT: String(port), KEEL_AZURITE_PORT: '0' });
    try {
      const keel = await bootLocal({
        definitions,
        dataDir: await tempDir('boot-example'),
        port: 0,
        log: () => undefined,
      });
      try {
        expect(keel.notes.join('\n')).toContain(`KEEL_PG_URL names the embedded server's own URL (port ${port})`);
        expect(new URL(keel.pgUrl).port).toBe(String(port));
        const res = await fetch(`${keel.baseUrl}/api/ops/health`, { headers: { 'x-functions-key': keel.opsKey } });
        expect(res.status).toBe(200);
      } finally {
        await keel.stop();
      }
    } finally {
      // bootLocal copies its settings into process.env: put it back as it was for the next tests.
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  }, 180_000);

  it('a busy PostgreSQL port: the embedded server starts on another one, and the start-up notes say so', async () => {
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', () => resolve()));
    const port = (busy.address() as net.AddressInfo).port;
    const saved = { ...process.env };
    delete process.env.KEEL_PG_URL;
    Object.assign(process.env, { KEEL_PG_PORT: String(port), KEEL_AZURITE_PORT: '0' });
    try {
      const keel = await bootLocal({
        definitions,
        dataDir: await tempDir('boot-pgport'),
        port: 0,
        log: () => undefined,
      });
      try {
        expect(new URL(keel.pgUrl).port).not.toBe(String(port));
        expect(keel.notes.join('\n')).toContain(`(port ${port} was taken: KEEL_PG_PORT)`);
      } finally {
        await keel.stop();
      }
    } finally {
      busy.close();
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  }, 180_000);

  it('a busy HTTP port stops the start naming the port and KEEL_HTTP_PORT', async () => {
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', () => resolve()));
    const port = (busy.address() as net.AddressInfo).port;
    const saved = { ...process.env };
    process.env.KEEL_PG_URL = await createTestDatabase('boot_port');
    process.env.KEEL_AZURITE_PORT = '0';
    try {
      const err = await bootLocal({
        definitions,
        dataDir: await tempDir('boot-port'),
        port,
        log: () => undefined,
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StartupError);
      expect((err as Error).message).toMatch(new RegExp(`HTTP port ${port} is in use \\(KEEL_HTTP_PORT\\)`));
    } finally {
      // bootLocal had copied its settings into process.env, AzureWebJobsStorage among them (the stopped Azurite's):
      // put it back as it was, or a later start in this file takes that for a real account (ECONNREFUSED).
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
      busy.close();
    }
  });

  // A host that starts the embedded server on <dataDir> and `port`, then is killed with SIGKILL (like kill -9 of npm
  // start): its server keeps running, holding the data dir and the port. Answers the orphan's PID.
  const orphanServer = async (dataDir: string, port: number): Promise<number> => {
    const script = `import { startEmbeddedPostgres } from './dev/embeddedPostgres.ts';
await startEmbeddedPostgres({ dataDir: ${JSON.stringify(dataDir)}, port: ${port}, persistent: true, fastUnsafe: true });
console.log('UP'); setInterval(() => undefined, 1000);`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    const deadline = Date.now() + 90_000;
    while (!out.includes('UP')) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`server did not start:\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const orphanPid = Number((await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await new Promise((r) => setTimeout(r, 300));
    expect(() => process.kill(orphanPid, 0)).not.toThrow(); // the orphan still runs
    return orphanPid;
  };

  it('reclaims an embedded PostgreSQL orphaned by kill -9 of its host; names the PID of one a live process owns', async () => {
    const dataDir = path.join(await tempDir('orphan'), 'pg');
    const orphanPid = await orphanServer(dataDir, await freePort());

    const logs: string[] = [];
    const server = await startEmbeddedPostgres({
      dataDir,
      persistent: true,
      fastUnsafe: true,
      log: (l) => logs.push(l),
    });
    try {
      expect(logs.join('')).toMatch(new RegExp(`left running by an earlier run \\(PID ${orphanPid}`));
      const c = new pg.Client({ connectionString: server.url });
      await c.connect();
      expect((await c.query('select 1 as one')).rows[0].one).toBe(1);
      await c.end();
      // Now a live process (this one) owns the server: a second start on the same data dir says who and what to do.
      const livePid = Number((await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
      await expect(startEmbeddedPostgres({ dataDir, persistent: true })).rejects.toThrow(
        new RegExp(`in use by a PostgreSQL server, PID ${livePid}.*kill -INT ${livePid}`),
      );
    } finally {
      await server.stop();
    }
    expect(existsSync(path.join(dataDir, 'postmaster.pid'))).toBe(false);
  }, 180_000);

  it("npm start after a kill -9 of the last one: the orphan is stopped first and its port (local.settings.json's URL) used again", async () => {
    // Before, the port was chosen while the orphan still held it: the start took a random port, and with
    // local.settings.json's URL (the embedded server's own, for func start beside it) it used the orphan as an
    // outside server (or refused it as unreachable with the app's login). Here KEEL_PG_PORT stands for 54329.
    const dataDir = await tempDir('boot-orphan');
    const port = await freePort();
    const orphanPid = await orphanServer(path.join(dataDir, 'pg'), port);
    const saved = { ...process.env };
    Object.assign(process.env, {
      KEEL_PG_URL: `postgres://keel_app:keel-app-local@127.0.0.1:${port}/keel`,
      KEEL_PG_PORT: String(port),
      KEEL_AZURITE_PORT: '0',
    });
    const logs: string[] = [];
    try {
      const keel = await bootLocal({ definitions, dataDir, port: 0, log: (l) => logs.push(l) });
      try {
        expect(logs.join('\n')).toMatch(new RegExp(`left running by an earlier run \\(PID ${orphanPid}, port ${port}`));
        expect(() => process.kill(orphanPid, 0)).toThrow();
        expect(keel.notes.join('\n')).toContain(`KEEL_PG_URL names the embedded server's own URL (port ${port})`);
        expect(new URL(keel.pgUrl).port).toBe(String(port));
        const res = await fetch(`${keel.baseUrl}/api/ops/health`, { headers: { 'x-functions-key': keel.opsKey } });
        expect(res.status).toBe(200);
      } finally {
        await keel.stop();
      }
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  }, 180_000);
});

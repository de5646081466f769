// Boots Keel locally: settings (local.settings.json Values, then the environment), embedded PostgreSQL under
// <data>/pg (kept across restarts), Azurite's queue service in-process under <data>/azurite, the ops key in
// <data>/ops-key, the runtime, and the local host serving functions/definitions.ts.
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { QueueServiceClient } from '@azure/storage-queue';
import { definitions } from '../../functions/definitions.js';
import { parseSettings, type Settings } from '../config/settings.js';
import { startEmbeddedPostgres, freePort, type EmbeddedServer } from '../engines/postgres/embedded.js';
import { startAzuriteQueue, type AzuriteQueue } from './azurite.js';
import { readHostConfig } from './hostJson.js';
import { startLocalHost, type RunningLocalHost } from './localHost.js';
import { PostgresWakeups } from '../engines/postgres/wakeups.js';
import { createRuntime, setRuntime, type Runtime } from './runtime.js';
import { prepareDemoTransfer } from './demoTransfer.js';
import { ensureExecutorLogin, withDatabase, withLogin } from '../engines/postgres/client.js';

// The local host's application login on its embedded server (loopback only, like the server's admin password).
const LOCAL_APP_LOGIN = { user: 'keel_app', password: 'keel-app-local' };

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface BootOptions {
  dataDir?: string; // default KEEL_DATA_DIR or <project>/.data
  port?: number; // default KEEL_HTTP_PORT or 7071 (0: any free port)
  demo?: boolean; // also create the demo transfer's two databases and configure it
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

function localSettingsValues(file: string): Record<string, string> {
  if (!existsSync(file)) return {};
  const raw = JSON.parse(readFileSync(file, 'utf8')) as { Values?: Record<string, unknown> };
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
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const r = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (r.rowCount === 0) await client.query(`create database ${name}`); // names here are fixed identifiers
  } finally {
    await client.end();
  }
}

export async function bootLocal(opts: BootOptions = {}): Promise<LocalKeel> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const env: Record<string, string | undefined> = { ...localSettingsValues(path.join(PROJECT_ROOT, 'local.settings.json')), ...process.env };
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

    // PostgreSQL: the given URL, or an embedded server whose data stays in <data>/pg.
    let pgServer: EmbeddedServer | undefined;
    if (!env.KEEL_PG_URL && (env.KEEL_STORE_ENGINE ?? 'postgres') === 'postgres') {
      // A stable port (54329) when free, so psql and `func start` can point at the same URL across restarts.
      const wanted = env.KEEL_PG_PORT !== undefined ? Number(env.KEEL_PG_PORT) : 54329;
      pgServer = await startEmbeddedPostgres({
        dataDir: path.join(dataDir, 'pg'),
        persistent: true,
        port: wanted > 0 && (await portIsFree(wanted)) ? wanted : await freePort(),
      });
      cleanups.push(() => pgServer!.stop());
      await ensureDatabase(pgServer.url, 'keel');
      // As in Azure: migrations run as the schema owner, the app logs in as keel_app, a member of keel_executor,
      // which may only execute Keel's public functions (sql/postgres/roles/keel_executor.sql).
      await ensureExecutorLogin(pgServer.url, LOCAL_APP_LOGIN.user, LOCAL_APP_LOGIN.password);
      env.KEEL_PG_MIGRATE_URL = pgServer.urlFor('keel');
      env.KEEL_PG_URL = withLogin(pgServer.urlFor('keel'), LOCAL_APP_LOGIN.user, LOCAL_APP_LOGIN.password);
      notes.push(`embedded PostgreSQL ${env.KEEL_PG_URL} (the app's login: EXECUTE on keel functions only; owner ${env.KEEL_PG_MIGRATE_URL}), data in ${pgServer.dataDir}`);
    }

    // Storage queues: a given connection string, or Azurite in-process (data in <data>/azurite).
    let azurite: AzuriteQueue | undefined;
    if (!env.AzureWebJobsStorage || env.AzureWebJobsStorage === 'UseDevelopmentStorage=true') {
      const wanted = env.KEEL_AZURITE_PORT !== undefined ? Number(env.KEEL_AZURITE_PORT) : 10001;
      const port = wanted === 0 || !(await portIsFree(wanted)) ? 0 : wanted;
      azurite = await startAzuriteQueue({ dir: path.join(dataDir, 'azurite'), port });
      cleanups.push(() => azurite!.stop());
      env.AzureWebJobsStorage = azurite.connectionString;
      notes.push(`Azurite queue service in-process on port ${azurite.port}, data in ${path.join(dataDir, 'azurite')}${port !== wanted ? ` (port ${wanted} was taken)` : ''}`);
    }

    if (opts.demo) {
      const adminUrl = pgServer ? pgServer.url : withDatabase(env.KEEL_PG_URL!, 'postgres');
      const demo = await prepareDemoTransfer(adminUrl, env);
      notes.push(demo);
    }

    env.KEEL_DEMO_HANDLERS ??= 'true';
    // Library code that reads process.env (transfer configuration, telemetry) sees the same settings.
    for (const [k, v] of Object.entries(env)) if (v !== undefined) process.env[k] = v;
    const settings = parseSettings(env);
    const runtime = await createRuntime(settings, { env });
    cleanups.push(() => runtime.close());
    setRuntime(runtime);
    cleanups.push(async () => setRuntime(undefined));

    // Enqueued jobs wake the dispatcher at once (LISTEN/NOTIFY); on SQL Server the timer and queue polling remain.
    let wakeups: PostgresWakeups | undefined;
    if (settings.KEEL_STORE_ENGINE === 'postgres' && settings.KEEL_PG_URL) {
      const source = new PostgresWakeups(settings.KEEL_PG_URL);
      wakeups = source;
      cleanups.push(() => source.close());
    }
    const hostConfig = readHostConfig(path.join(PROJECT_ROOT, 'host.json'));
    const port = opts.port ?? (env.KEEL_HTTP_PORT !== undefined ? Number(env.KEEL_HTTP_PORT) : 7071);
    const host = await startLocalHost({
      definitions,
      settings,
      hostConfig,
      queueService: QueueServiceClient.fromConnectionString(settings.AzureWebJobsStorage!),
      opsKey,
      port,
      hostname: env.KEEL_HTTP_HOST ?? '127.0.0.1',
      log,
      ...(wakeups ? { wakeups: { source: wakeups, timer: 'dispatcher' } } : {}),
    });
    cleanups.push(() => host.stop());
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

// SQL Server / Azure SQL connection pools: one mssql ConnectionPool per process and connection target, created on
// first use and reused by every invocation the Functions host runs in that process.
// Auth: SQL login (user/password in the connection string or URL) or Microsoft Entra ID through @azure/identity's
// DefaultAzureCredential (managed identity in Azure, developer login locally): the access token goes to tedious as
// 'azure-active-directory-access-token' and is replaced before it expires, so new connections always log in with
// a valid token (open connections stay logged in; a token only matters at login).
import sql from 'mssql';
import { DefaultAzureCredential, type AccessToken, type TokenCredential } from '@azure/identity';
import type { PoolRole } from '../../telemetry/index.js';
import { countPoolError } from '../poolErrors.js';

export const AZURE_SQL_SCOPE = 'https://database.windows.net/.default';
const REFRESH_MARGIN_MS = 5 * 60_000; // refresh a token this long before it expires

export interface SqlServerTarget {
  server: string;
  port: number;
  database: string;
  user?: string;
  password?: string;
  encrypt: boolean;
  trustServerCertificate: boolean;
  entra: boolean; // Microsoft Entra ID token auth instead of a SQL login
  managedIdentityClientId?: string; // user-assigned managed identity
}

export interface PoolOptions {
  max?: number; // connections in the pool (default 10)
  applicationName?: string; // shows as program_name on the server (default 'keel')
  requestTimeoutMs?: number; // default 30 s
  connectTimeoutMs?: number; // default 15 s
  credential?: TokenCredential; // overrides DefaultAzureCredential (tests, custom chains)
  onError?: (err: Error) => void; // connection errors the pool recovers from (default: logged with the pool's name)
  role?: PoolRole; // what the pool serves, for the keel.db.pool_errors counter (default 'control')
}

const truthy = (v: string | null | undefined, def: boolean) =>
  v === null || v === undefined || v === '' ? def : ['true', '1', 'yes'].includes(v.toLowerCase());
const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

// Accepts
//   mssql://user:password@host:1433/database?encrypt=true&trustServerCertificate=false   (SQL login)
//   mssql://host/database?authentication=entra[&clientId=<uami client id>]             (Entra ID)
//   ADO style: Server=tcp:host,1433;Database=db;User Id=...;Password=...;Encrypt=true
//   ADO style with Authentication=Active Directory Default | Active Directory Managed Identity (Entra ID; for a
//   user-assigned identity put its client id in User Id).
// trustServerCertificate defaults to true only for a loopback host (a local container's self-signed certificate).
export function parseSqlServerConnection(connection: string): SqlServerTarget {
  const text = connection.trim();
  if (/^(mssql|sqlserver):\/\//i.test(text)) {
    const u = new URL(text.replace(/^sqlserver:/i, 'mssql:'));
    const host = decodeURIComponent(u.hostname);
    const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
    if (!host) throw new Error('SQL Server URL: host is missing');
    if (!database) throw new Error('SQL Server URL: database is missing (mssql://host:1433/<database>)');
    const user = u.username ? decodeURIComponent(u.username) : undefined;
    const auth = (u.searchParams.get('authentication') ?? '').toLowerCase();
    const entra = auth === 'entra' || auth === 'azure-active-directory-default' || (!user && auth === '');
    return {
      server: host,
      port: u.port ? Number(u.port) : 1433,
      database,
      user: entra ? undefined : user,
      password: entra ? undefined : decodeURIComponent(u.password),
      encrypt: truthy(u.searchParams.get('encrypt'), true),
      trustServerCertificate: truthy(u.searchParams.get('trustServerCertificate'), LOOPBACK.has(host)),
      entra,
      managedIdentityClientId: u.searchParams.get('clientId') ?? undefined,
    };
  }

  // ADO-style key=value;... (keys case-insensitive; values may be quoted or braced).
  const entries = new Map<string, string>();
  for (const part of text.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim().toLowerCase().replace(/\s+/g, ' ');
    let value = part.slice(eq + 1).trim();
    if (/^(".*"|'.*'|\{.*\})$/.test(value)) value = value.slice(1, -1);
    entries.set(key, value);
  }
  const get = (...keys: string[]) => keys.map((k) => entries.get(k)).find((v) => v !== undefined);
  let server = get('server', 'data source', 'address', 'addr', 'network address') ?? '';
  server = server.replace(/^tcp:/i, '');
  let port = 1433;
  const comma = server.lastIndexOf(',');
  if (comma >= 0) {
    port = Number(server.slice(comma + 1).trim());
    server = server.slice(0, comma).trim();
  }
  const database = get('database', 'initial catalog') ?? '';
  if (!server) throw new Error('SQL Server connection string: Server is missing');
  if (!database) throw new Error('SQL Server connection string: Database is missing');
  const authentication = (get('authentication') ?? '').toLowerCase();
  const entra = authentication.startsWith('active directory');
  if (
    entra &&
    !['active directory default', 'active directory managed identity', 'active directory msi'].includes(authentication)
  ) {
    throw new Error(
      `SQL Server connection string: Authentication=${get('authentication')} is not supported; use Active Directory Default or Active Directory Managed Identity`,
    );
  }
  const user = get('user id', 'uid', 'user');
  return {
    server,
    port,
    database,
    user: entra ? undefined : user,
    password: entra ? undefined : get('password', 'pwd'),
    encrypt: truthy(get('encrypt'), true),
    trustServerCertificate: truthy(get('trustservercertificate', 'trust server certificate'), LOOPBACK.has(server)),
    entra,
    managedIdentityClientId: entra ? user : undefined,
  };
}

// Keeps a fresh Entra access token in the pool's config; tedious reads it whenever the pool opens a connection.
class EntraToken {
  private token: AccessToken | null = null;
  private inflight: Promise<void> | null = null;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly credential: TokenCredential,
    private readonly apply: (token: string) => void,
  ) {}

  private fresh(): boolean {
    return this.token !== null && this.token.expiresOnTimestamp - Date.now() > REFRESH_MARGIN_MS;
  }

  // Resolves when the config holds a token valid for at least REFRESH_MARGIN_MS.
  async ensure(): Promise<void> {
    if (this.fresh()) return;
    this.inflight ??= (async () => {
      try {
        const token = await this.credential.getToken(AZURE_SQL_SCOPE);
        if (!token) throw new Error(`no Microsoft Entra access token for ${AZURE_SQL_SCOPE}`);
        this.token = token;
        this.apply(token.token);
        this.schedule();
      } finally {
        this.inflight = null;
      }
    })();
    await this.inflight;
  }

  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    if (!this.token) return;
    const due = Math.max(1_000, this.token.expiresOnTimestamp - Date.now() - REFRESH_MARGIN_MS);
    // Background refresh so that a pool growing after an idle hour does not log in with a stale token.
    this.timer = setTimeout(() => void this.ensure().catch(() => undefined), due);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
  }
}

export class SqlServerPool {
  private connecting: Promise<sql.ConnectionPool> | null = null;

  private constructor(
    readonly pool: sql.ConnectionPool,
    private readonly token: EntraToken | null,
  ) {}

  static create(connection: string | SqlServerTarget, opts: PoolOptions = {}): SqlServerPool {
    const target = typeof connection === 'string' ? parseSqlServerConnection(connection) : connection;
    const config: sql.config = {
      server: target.server,
      port: target.port,
      database: target.database,
      connectionTimeout: opts.connectTimeoutMs ?? 15_000,
      requestTimeout: opts.requestTimeoutMs ?? 30_000,
      pool: { max: opts.max ?? 10, min: 0, idleTimeoutMillis: 30_000 },
      // mssql's default (true) runs `SELECT 1` on every pool acquire: a second round trip for every procedure call.
      // 'socket' checks the connection state and the socket instead; a connection that dies anyway fails its request
      // with ESOCKET / ECONNCLOSED, which retry.ts handles, and the pool 'error' handler below replaces it.
      validateConnection: 'socket',
      options: {
        encrypt: target.encrypt,
        trustServerCertificate: target.trustServerCertificate,
        appName: opts.applicationName ?? 'keel',
        useUTC: true,
        enableArithAbort: true,
      },
    };
    let token: EntraToken | null = null;
    if (target.entra) {
      const authentication = { type: 'azure-active-directory-access-token', options: { token: '' } };
      config.authentication = authentication as sql.config['authentication'];
      const credential =
        opts.credential ??
        new DefaultAzureCredential(
          target.managedIdentityClientId ? { managedIdentityClientId: target.managedIdentityClientId } : {},
        );
      token = new EntraToken(credential, (t) => {
        authentication.options.token = t;
      });
    } else {
      config.user = target.user;
      config.password = target.password;
    }
    const pool = new sql.ConnectionPool(config);
    // An idle connection that dies must not crash the process; the pool replaces it. Logged, never swallowed.
    const where = `${opts.applicationName ?? 'keel'} pool (${target.server}:${target.port}/${target.database})`;
    const report =
      opts.onError ??
      ((err: Error) => console.warn(`${where}: connection error, the pool replaces the connection: ${err.message}`));
    pool.on('error', (err: Error) => {
      countPoolError('sqlserver', opts.role ?? 'control');
      report(err);
    });
    return new SqlServerPool(pool, token);
  }

  // The connected pool, with a valid Entra token in its config when Entra auth is used.
  async get(): Promise<sql.ConnectionPool> {
    if (this.token) await this.token.ensure();
    if (this.pool.connected) return this.pool;
    this.connecting ??= this.pool.connect().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  async request(): Promise<sql.Request> {
    return (await this.get()).request();
  }

  async close(): Promise<void> {
    this.token?.stop();
    await this.pool.close();
  }
}

// One pool per process and target: Azure Functions keeps the worker process warm between invocations, so a pool
// created on the first invocation serves every later one.
const shared = new Map<string, SqlServerPool>();

export function sharedSqlServerPool(connection: string, opts: PoolOptions = {}): SqlServerPool {
  const key = `${connection}\u0000${opts.applicationName ?? 'keel'}`;
  let pool = shared.get(key);
  if (!pool) {
    pool = SqlServerPool.create(connection, opts);
    shared.set(key, pool);
  }
  return pool;
}

export async function closeSharedSqlServerPools(): Promise<void> {
  const pools = [...shared.values()];
  shared.clear();
  await Promise.allSettled(pools.map((p) => p.close()));
}

// PostgreSQL connection helpers for the tools around the app: the local host (dev/boot.ts), the tests, the benchmarks
// and the client package's tests. Never shipped: the app's own connections are its pools.
import pg from 'pg';

// The same server URL with another database.
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

// One short-lived connection for setup work, always closed. It connects within 10 s (config may say otherwise), and a
// connection the server drops fails the pending query instead of raising an unhandled 'error' event.
export async function withClient<T>(
  url: string,
  fn: (c: pg.Client) => Promise<T>,
  config: Omit<pg.ClientConfig, 'connectionString'> = {},
): Promise<T> {
  const c = new pg.Client({ connectionTimeoutMillis: 10_000, ...config, connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

// The same server URL with another login.
export function withLogin(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = encodeURIComponent(user);
  u.password = encodeURIComponent(password);
  return u.toString();
}

const ROLE_NAME = /^[a-z_][a-z0-9_]*$/;

// Makes (or updates) a login that is a member of keel_executor, the role that may only execute Keel's public
// functions (sql/postgres/roles/keel_executor.sql). Needs a connection that may create roles (the server's admin).
// Roles are cluster-wide: concurrent callers may race, and the loser's duplicate is ignored.
export async function ensureExecutorLogin(adminUrl: string, login: string, password: string): Promise<void> {
  if (!ROLE_NAME.test(login)) throw new Error(`login name "${login}" is not a plain identifier`);
  await withClient(adminUrl, async (c) => {
    for (const ddl of [`create role keel_executor nologin`, `create role ${login} login`]) {
      await c.query(`do $$ begin ${ddl}; exception when duplicate_object or unique_violation then null; end $$`);
    }
    // The password travels as a literal (utility statements take no bind parameters); quote_literal escapes it.
    const { rows } = await c.query('select quote_literal($1::text) as p', [password]);
    await c.query(`alter role ${login} with login inherit nosuperuser nocreatedb nocreaterole password ${rows[0].p}`);
    await c.query(`do $$ begin grant keel_executor to ${login}; exception when unique_violation then null; end $$`);
  });
}

// Small PostgreSQL helpers. Shipped and used by the transfer endpoints: serverVersionNum, pgChecksumAlgorithms,
// PG_COPY_FORMAT. The connection helpers (withDatabase, withClient, withLogin, ensureExecutorLogin) serve the local
// host, tests and benchmarks (and scripts).
import pg from 'pg';
import type { ChecksumAlgorithm } from '../../transfer/checksum.js';

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

// The server's version number (e.g. 180004), asked once per pool; a failed ask is asked again next time.
const versions = new WeakMap<pg.Pool, Promise<number>>();
export function serverVersionNum(pool: pg.Pool): Promise<number> {
  let v = versions.get(pool);
  if (!v) {
    v = pool.query(`select current_setting('server_version_num')::int as v`).then((r) => Number(r.rows[0].v));
    v.catch(() => versions.delete(pool));
    versions.set(pool, v);
  }
  return v;
}

// The checksums a PostgreSQL transfer source or target computes, preferred first: keel-pg2 needs PostgreSQL 14 or
// later (hash_record_extended), keel-pg1 any version, keel-v1 is what every engine computes. The service takes the
// source's first choice the target also lists, so a PostgreSQL pair uses keel-pg2 when both are 14 or later.
export async function pgChecksumAlgorithms(pool: pg.Pool): Promise<readonly ChecksumAlgorithm[]> {
  return (await serverVersionNum(pool)) >= 140000 ? ['keel-pg2', 'keel-pg1', 'keel-v1'] : ['keel-pg1', 'keel-v1'];
}

// The bulk stream format PostgreSQL sources produce and PostgreSQL targets read: COPY text or binary.
export const PG_COPY_FORMAT = 'postgres-copy';

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

// Small PostgreSQL helpers shared by the local host, tests and benchmarks.
import pg from 'pg';

// The same server URL with another database.
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

// One short-lived connection for setup work, always closed.
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
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

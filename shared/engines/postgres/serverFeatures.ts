// PostgreSQL server features the transfer endpoints ask of a pool: its version, the checksums it computes and the
// bulk stream format (shipped; the connection helpers for the local host, tests and benchmarks are in dev/pgAdmin.ts).
import type pg from 'pg';
import type { ChecksumAlgorithm } from '../../transfer/checksum.js';

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

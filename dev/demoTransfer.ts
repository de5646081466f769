// The demo transfer: two local databases on the same PostgreSQL server, a source table that gains 1,000 new
// orders each time the demo is prepared, an empty target table, and the transfer configured between them.
import pg from 'pg';
import { withClient, withDatabase } from './pgAdmin.js';

export const DEMO_TRANSFER = 'demo_orders';

// The demo's two databases are named after the control database (`keel` on the embedded server: keel_demo_source and
// keel_demo_target), so two apps (or test runs) with their own control databases on one server never share them: a
// second app's journal starting from an empty window would otherwise meet the first one's rows in the target.
export function demoDatabases(controlDatabase: string): { source: string; target: string } {
  const base = /^[a-z_][a-z0-9_]{0,49}$/.test(controlDatabase) ? controlDatabase : 'keel';
  return { source: `${base}_demo_source`, target: `${base}_demo_target` };
}

// Returns a line for the start banner. Sets KEEL_DEMO_SOURCE_URL, KEEL_DEMO_TARGET_URL and (unless transfers are
// configured already) KEEL_TRANSFERS in env.
export async function prepareDemoTransfer(
  adminUrl: string,
  controlDatabase: string,
  env: Record<string, string | undefined>,
): Promise<string> {
  const { source: SOURCE_DB, target: TARGET_DB } = demoDatabases(controlDatabase);
  await withClient(adminUrl, async (c) => {
    for (const db of [SOURCE_DB, TARGET_DB]) {
      const r = await c.query('select 1 from pg_database where datname = $1', [db]);
      if (r.rowCount === 0) await c.query(`create database ${pg.escapeIdentifier(db)}`);
    }
  });
  const sourceUrl = withDatabase(adminUrl, SOURCE_DB);
  const targetUrl = withDatabase(adminUrl, TARGET_DB);
  const added = await withClient(sourceUrl, async (c) => {
    await c.query(`create table if not exists public.demo_orders (
      id bigint primary key,
      customer text not null,
      amount numeric(12,2) not null,
      placed_at timestamptz not null)`);
    const r = await c.query(`insert into public.demo_orders (id, customer, amount, placed_at)
      select n, 'customer-' || (n % 97), round((n % 1000) * 1.37, 2), timestamptz '2026-01-01' + n * interval '1 minute'
      from generate_series((select coalesce(max(id), 0) + 1 from public.demo_orders),
                           (select coalesce(max(id), 0) + 1000 from public.demo_orders)) as n`);
    return r.rowCount ?? 0;
  });
  await withClient(targetUrl, async (c) => {
    await c.query(`create table if not exists public.demo_orders (
      id bigint primary key,
      customer text not null,
      amount numeric(12,2) not null,
      placed_at timestamptz not null)`);
  });
  env.KEEL_DEMO_SOURCE_URL = sourceUrl;
  env.KEEL_DEMO_TARGET_URL = targetUrl;
  if (!env.KEEL_TRANSFERS && !env.KEEL_TRANSFERS_FILE) {
    env.KEEL_TRANSFERS = JSON.stringify([
      {
        name: DEMO_TRANSFER,
        source: { engine: 'postgres', connectionSetting: 'KEEL_DEMO_SOURCE_URL', table: 'public.demo_orders' },
        target: { engine: 'postgres', connectionSetting: 'KEEL_DEMO_TARGET_URL', table: 'public.demo_orders' },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns: ['id', 'customer', 'amount', 'placed_at'].map((c) => ({ source: c, target: c })),
        batchSize: 100_000,
        chunkSize: 2_000,
      },
    ]);
  }
  return `demo transfer "${DEMO_TRANSFER}": ${SOURCE_DB}.public.demo_orders (+${added} rows) -> ${TARGET_DB}.public.demo_orders`;
}

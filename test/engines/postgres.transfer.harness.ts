// The transfer harnesses for PostgreSQL (test/contract/transferHarness.ts): journal, source and target, each in a
// fresh database on the run's embedded server.
import pg from 'pg';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { randomBytes } from 'node:crypto';
import { createJournalPool, PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { migratePostgresTarget } from '../../shared/engines/postgres/transferEndpoints.js';
import type { TransferConfig } from '../../shared/transfer/config.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import type { LogicalType } from '../../shared/transfer/checksum.js';
import {
  canonicalRowsOnly,
  type CaseColumn,
  type DataCaseSourceHarness,
  type DataCaseTargetHarness,
  type JournalHarness,
  type SourceHarness,
  type TargetHarness,
} from '../contract/transferHarness.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal, ORDERS_DDL } from '../transfer/helpers.js';

const TABLE_NAME = /^[a-z_][a-z0-9_]*$/;

function pool(url: string, max: number, applicationName = 'keel-harness'): pg.Pool {
  const p = new pg.Pool({ connectionString: url, max, application_name: applicationName });
  // A session the tests end on purpose still says so in the log (and is counted), like any pool's.
  p.on('error', poolErrorLogger('postgres', 'transfer', `harness pool (${applicationName})`));
  return p;
}

// The journal is opened as the app is in Azure: a login that may only EXECUTE the keel functions (no table access),
// like the SQL Server harness's keel_executor login, so every contract case also proves the grants suffice.
export class PostgresJournalHarness implements JournalHarness {
  readonly engine = 'postgres';
  private readonly role = `keel_tj_app_${randomBytes(3).toString('hex')}`;
  private url: Promise<{ owner: string; app: string }> | undefined;

  private database(): Promise<{ owner: string; app: string }> {
    this.url ??= (async () => {
      const url = await createTestDatabase('tj');
      const owner = pool(url, 1);
      try {
        await migrateJournal(owner);
        const db = new URL(url).pathname.slice(1);
        // Names built from [a-z0-9_] only (createTestDatabase, randomBytes hex).
        await owner.query(`create role ${this.role} login password 'app'`);
        await owner.query(`revoke all on database ${db} from public`);
        await owner.query(`grant connect on database ${db} to ${this.role}`);
        await owner.query(`grant usage on schema keel to ${this.role}`);
        await owner.query(`grant execute on all functions in schema keel to ${this.role}`);
      } finally {
        await owner.end();
      }
      const app = new URL(url);
      app.username = this.role;
      app.password = 'app';
      return { owner: url, app: app.toString() };
    })();
    return this.url;
  }

  async openJournal(opts: { poolSize?: number } = {}): Promise<PostgresTransferJournal> {
    const { app } = await this.database();
    return new PostgresTransferJournal(createJournalPool(app, { max: opts.poolSize ?? 8 }), { ownsPool: true });
  }

  async close(): Promise<void> {
    if (!this.url) return;
    const owner = pool((await this.url).owner, 1);
    try {
      await owner.query(`drop owned by ${this.role}`);
      await owner.query(`drop role if exists ${this.role}`);
    } finally {
      await owner.end();
    }
  }
}

// A data case's table: its DDL from the case's declared types (test constants, never input), its rows bound as
// parameters (text input of each type; bytes as hex).
async function createCaseTable(db: pg.Pool, prefix: string, columns: CaseColumn[], rows: (string | null)[][]) {
  const table = `${prefix}_${randomBytes(4).toString('hex')}`;
  const defs = columns.map((c) => `${c.name} ${c.type}${c.notNull ? ' not null' : ''}${c.key ? ' primary key' : ''}`);
  await db.query(`create table public.${table} (${defs.join(', ')})`);
  const values = columns.map((c, i) => (/^bytea$/i.test(c.type) ? `decode($${i + 1}, 'hex')` : `$${i + 1}::${c.type}`));
  for (const row of rows)
    await db.query(
      `insert into public.${table} (${columns.map((c) => c.name).join(', ')}) values (${values.join(', ')})`,
      row,
    );
  return `public.${table}`;
}

export class PostgresSourceHarness implements SourceHarness, DataCaseSourceHarness {
  readonly engine = 'postgres';
  private db: pg.Pool | undefined;
  private url = '';

  private async admin(): Promise<pg.Pool> {
    if (!this.db) {
      this.url = await createTestDatabase('ts');
      this.db = pool(this.url, 4);
    }
    return this.db;
  }

  async createTable() {
    const db = await this.admin();
    const table = `src_${randomBytes(4).toString('hex')}`;
    await db.query(
      `create table public.${table} (id bigint primary key, customer text, amount numeric(12,2), flag boolean)`,
    );
    return {
      source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: `public.${table}` },
      table,
    };
  }

  async insertRows(table: string, from: number, to: number): Promise<void> {
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    await (
      await this.admin()
    ).query(
      `insert into public.${table} (id, customer, amount, flag)
       select n, 'customer ' || n, case when n % 7 = 0 then null else round(n * 1.25, 2) end, n % 2 = 0
         from generate_series($1::bigint, $2::bigint) as n`,
      [from, to],
    );
  }

  async updateRow(table: string, id: number): Promise<void> {
    if (!TABLE_NAME.test(table)) throw new Error(`bad table ${table}`);
    await (
      await this.admin()
    ).query(`update public.${table} set customer = customer || ' (changed)' where id = $1`, [id]);
  }

  async openSource(t: TransferConfig): Promise<PostgresTransferSource> {
    await this.admin();
    return new PostgresTransferSource(t, pool(this.url, 3), { ownsPool: true });
  }

  async createCaseTable(columns: CaseColumn[], rows: (string | null)[][]) {
    const table = await createCaseTable(await this.admin(), 'src', columns, rows);
    return { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table };
  }

  async openRowSource(t: TransferConfig) {
    return canonicalRowsOnly(await this.openSource(t));
  }

  async close(): Promise<void> {
    await this.db?.end();
  }
}

export class PostgresTargetHarness implements TargetHarness, DataCaseTargetHarness {
  readonly engine = 'postgres';
  private db: pg.Pool | undefined;
  private url = '';
  private readonly holders = new Set<pg.PoolClient>();

  private async admin(): Promise<pg.Pool> {
    if (!this.db) {
      this.url = await createTestDatabase('tt');
      this.db = pool(this.url, 6);
      await migratePostgresTarget(this.db);
    }
    return this.db;
  }

  async createTable() {
    const db = await this.admin();
    const table = `tgt_${randomBytes(4).toString('hex')}`;
    await db.query(ORDERS_DDL.replace('public.orders', `public.${table}`));
    return {
      target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: `public.${table}` },
      column: (source: string) => source,
    };
  }

  async createCaseTable(columns: CaseColumn[]) {
    const table = await createCaseTable(await this.admin(), 'tgt', columns, []);
    return { engine: 'postgres', connectionSetting: 'TEST_TARGET', table };
  }

  column(source: string): string {
    return source;
  }

  // Read back through the PostgreSQL source adapter's canonical text (the same text keel-v1 sums), in key order.
  async readRows(t: TransferConfig, columns: { target: string; type: string; logical: LogicalType }[]) {
    const [rt] = parseTransfers(
      [
        {
          name: 'readback',
          source: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: t.target.table },
          target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: t.target.table },
          keyColumns: [columns[0]!.target],
          boundary: { column: columns[0]!.target, kind: 'key' },
          columns: columns.map((c) => ({ source: c.target, target: c.target })),
        },
      ],
      transferEngineRules(),
    );
    const s = new PostgresTransferSource(rt!, await this.admin());
    const schema = await s.readSchema();
    const out: (string | null)[][] = [];
    for await (const chunk of s.streamRows({ kind: 'key', low: null, high: '9223372036854775807' }, schema, 500))
      out.push(...chunk);
    return out.sort((a, b) => (BigInt(a[0]!) < BigInt(b[0]!) ? -1 : 1));
  }

  async openTarget(t: TransferConfig): Promise<PostgresTransferTarget> {
    await this.admin();
    // Its own pool, named so that cutApplies can find its sessions.
    return new PostgresTransferTarget(t, pool(this.url, 3, 'keel-contract-target'), { ownsPool: true });
  }

  async countRows(t: TransferConfig): Promise<number> {
    const table = t.target.table;
    if (!/^public\.[a-z_][a-z0-9_]*$/.test(table)) throw new Error(`bad table ${table}`);
    return (await (await this.admin()).query(`select count(*)::int as n from ${table}`)).rows[0].n;
  }

  async narrowAmountScale(t: TransferConfig): Promise<void> {
    const table = t.target.table;
    if (!/^public\.[a-z_][a-z0-9_]*$/.test(table)) throw new Error(`bad table ${table}`);
    await (await this.admin()).query(`alter table ${table} alter column amount type numeric(12,1)`);
  }

  async completion(batchId: string) {
    const r = await (
      await this.admin()
    ).query(`select state, fenced_through::int as f from keel_transfer.completions where batch_id = $1`, [batchId]);
    return r.rows[0] ? { state: r.rows[0].state, fencedThrough: r.rows[0].f } : null;
  }

  // The completion row's primary key serializes apply and reconcile: an uncommitted 'claimed' row is what an open
  // apply holds.
  async holdClaim(batchId: string, transfer: string) {
    const holder = await (await this.admin()).connect();
    this.holders.add(holder);
    await holder.query('begin');
    await holder.query(
      `insert into keel_transfer.completions (batch_id, transfer_name, state) values ($1, $2, 'claimed')`,
      [batchId, transfer],
    );
    return {
      release: async () => {
        if (!this.holders.delete(holder)) return;
        await holder.query('rollback').catch(() => undefined);
        holder.release();
      },
    };
  }

  async cutApplies(): Promise<void> {
    await (
      await this.admin()
    ).query(
      `select pg_terminate_backend(pid) from pg_stat_activity
        where datname = current_database() and application_name = 'keel-contract-target'
          and query like '%keel_transfer.apply_batch%' and state = 'active'`,
    );
  }

  async untilApplyWaits(): Promise<void> {
    const admin = await this.admin();
    for (const deadline = Date.now() + 20_000; ; await new Promise((r) => setTimeout(r, 20))) {
      const { rows } = await admin.query(
        `select 1 from pg_stat_activity
          where datname = current_database() and application_name = 'keel-contract-target'
            and query like '%keel_transfer.apply_batch%' and state = 'active' and wait_event_type = 'Lock'`,
      );
      if (rows.length > 0) return;
      if (Date.now() > deadline) throw new Error('no apply waits behind the held claim');
    }
  }

  async close(): Promise<void> {
    for (const h of this.holders) {
      await h.query('rollback').catch(() => undefined);
      h.release();
    }
    this.holders.clear();
    await this.db?.end();
  }
}

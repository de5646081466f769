// The transfer journal on PostgreSQL, beyond the contract every journal meets (test/contract/transferJournalContract.ts,
// run by test/engines/postgres.transferJournal.test.ts): a least-privilege role that may only EXECUTE the keel
// functions, and the journal connection's timeouts (lock wait, a server that never replies, a server that never
// accepts the login).
import { randomBytes, randomUUID } from 'node:crypto';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createJournalPool,
  JOURNAL_POSTGRES_FUNCTIONS,
  PostgresTransferJournal,
} from '../../shared/engines/postgres/transferJournal.js';
import { pgStatement } from '../../shared/engines/postgres/procedures.js';
import { pascalCase } from '../../shared/jobs/procedures.js';
import type { NewBatch } from '../../shared/transfer/journal.js';
import { JOURNAL_PROCEDURES, transitionArgs } from '../../shared/transfer/journalProcedures.js';
import { FaultProxy } from '../support/faultProxy.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal } from './helpers.js';

const repo = path.resolve(import.meta.dirname, '../..');
const base = (name: string): Omit<NewBatch, 'batchId' | 'boundaryLow' | 'boundaryHigh'> => ({
  transferName: name,
  boundaryKind: 'key',
  schemaHash: 'h'.repeat(64),
  schemaColumns: [{ name: 'id', type: 'bigint', logical: 'int' }],
});

let url: string;
let owner: pg.Pool;

beforeAll(async () => {
  url = await createTestDatabase('tr_journal');
  owner = new pg.Pool({ connectionString: url, max: 3 });
  owner.on('error', (err) => console.warn(`journal test owner pool: ${err.message}`));
  await migrateJournal(owner);
});
afterAll(async () => {
  await owner?.end();
});

describe('least privilege: a role that may only EXECUTE keel functions', () => {
  const role = `keel_tj_app_${randomBytes(3).toString('hex')}`;
  let app: pg.Pool;

  beforeAll(async () => {
    await owner.query(`create role ${role} login password 'app'`);
    const db = new URL(url).pathname.slice(1);
    await owner.query(`revoke all on database ${db} from public`);
    await owner.query(`grant connect on database ${db} to ${role}`);
    await owner.query(`grant usage on schema keel to ${role}`);
    await owner.query(`grant execute on all functions in schema keel to ${role}`);
    const u = new URL(url);
    u.username = role;
    u.password = 'app';
    app = createJournalPool(u.toString(), { max: 2 });
  });
  afterAll(async () => {
    await app?.end();
    await owner.query(`drop owned by ${role}`).catch(() => undefined);
    await owner.query(`drop role if exists ${role}`).catch(() => undefined);
  });

  // Every journal operation through this kind of login is the contract suite's job: its PostgreSQL harness opens
  // the journal as an EXECUTE-only role (test/engines/postgres.transfer.harness.ts). Here: what the role may not do.
  it('has no table access, and the functions work for it', async () => {
    await expect(app.query(`select count(*) from keel.transfer_batches`)).rejects.toMatchObject({ code: '42501' });
    await expect(app.query(`select count(*) from keel.transfer_batch_events`)).rejects.toMatchObject({ code: '42501' });
    const j = new PostgresTransferJournal(app);
    const a = await j.insertBatch({ ...base('lp'), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '50' });
    expect(await j.get(a.batchId)).toMatchObject({ batchId: a.batchId, state: 'extracting' });
    // A stamp outside the fixed set is refused by the argument builder, and by the function too.
    expect(() => transitionArgs(a.batchId, ['extracting'], 'committed', { stamp: 'created_at' as never }, 'x')).toThrow(
      /unknown stamp "created_at"/,
    );
    const call = pgStatement('transfer_batch_transition', JOURNAL_POSTGRES_FUNCTIONS.transfer_batch_transition, {
      ...transitionArgs(a.batchId, ['extracting'], 'committed', {}, 'x'),
      stamp: 'created_at',
    });
    await expect(app.query(call.text, call.values)).rejects.toMatchObject({ code: '22023' });
    expect(await j.get(a.batchId)).toMatchObject({ state: 'extracting' });
  });

  it('the journal functions are SECURITY DEFINER with a pinned search_path', async () => {
    const r = await owner.query(
      `select p.proname, p.prosecdef, p.proconfig from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'keel' and p.proname like 'transfer_batch_%' order by p.proname`,
    );
    expect(r.rows.map((x) => x.proname)).toEqual([
      'transfer_batch_event_list',
      'transfer_batch_get',
      'transfer_batch_insert',
      'transfer_batch_last',
      'transfer_batch_list',
      'transfer_batch_note',
      'transfer_batch_stale',
      'transfer_batch_transition',
    ]);
    for (const row of r.rows) {
      expect(row.prosecdef, row.proname).toBe(true);
      expect(row.proconfig, row.proname).toEqual(['search_path=pg_catalog, pg_temp']);
    }
  });
});

describe('no table SQL in the journal modules', () => {
  // The engines' journals are dialects of ProcedureJournal (shared/transfer/procedureJournal.ts): they run one
  // procedure call through their typed table, and hold no SQL text, no operation of their own, no argument list.
  const code = (file: string) =>
    readFileSync(path.join(repo, file), 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/^\s*\/\/.*$/gm, '');
  // A method of the TransferJournal interface defined in the engine's class (close() aside).
  const OPERATIONS =
    /^\s*(async\s+)?(insertBatch|lastForTransfer|get|list|events|transition|note|stale|setPaused|controls)\s*\(/m;

  it('PostgreSQL: one pool.query, of the statement pgStatement builds from JOURNAL_POSTGRES_FUNCTIONS', () => {
    const ts = code('shared/engines/postgres/transferJournal.ts');
    expect(ts).toMatch(/class PostgresTransferJournal extends ProcedureJournal/);
    expect(ts.match(/\.query\b/g)).toHaveLength(1);
    expect(ts).toMatch(/pgStatement\(proc, JOURNAL_POSTGRES_FUNCTIONS\[proc\]/);
    expect(ts).not.toMatch(/['"`]\s*(select|insert|update|delete|with)\b/i);
    expect(ts).not.toMatch(/keel\.\w/);
    expect(ts).not.toMatch(/pool\.connect/);
    expect(ts).not.toMatch(OPERATIONS);
  });

  it('SQL Server: one request per call, every input typed from JOURNAL_SQLSERVER_PARAMS', () => {
    const ts = code('shared/engines/sqlserver/transferJournal.ts');
    expect(ts).toMatch(/class SqlServerTransferJournal extends ProcedureJournal/);
    expect(ts).not.toMatch(/\.query\(|\.batch\(/);
    expect(ts.match(/\.execute\(/g)).toHaveLength(1);
    expect(ts).toMatch(/req\.execute\(this\.procedureName\(proc\)\)/);
    expect(ts.match(/\.input\(/g)).toHaveLength(1);
    expect(ts).toMatch(/req\.input\(pascalCase\(param\), types\[pascalCase\(param\)\]!/);
    expect(ts).not.toMatch(/keel\.[A-Z]/);
    expect(ts).not.toMatch(OPERATIONS);
  });

  it('SQL Server: no journal procedure shares a name with a table of its schema', () => {
    const tsql = ['V020__TransferJournal.sql', 'V021__TransferControls.sql', 'R__070_transfer_journal.sql']
      .map((f) => readFileSync(path.join(repo, 'sql/sqlserver', f), 'utf8'))
      .join('\n');
    const procs = new Set([...tsql.matchAll(/CREATE OR ALTER PROCEDURE keel\.(\w+)/g)].map((m) => m[1]!));
    expect(procs).toEqual(new Set(Object.keys(JOURNAL_PROCEDURES).map(pascalCase)));
    // The CREATE would fail on a real server.
    const tables = [...tsql.matchAll(/CREATE TABLE keel\.(\w+)/g)].map((m) => m[1]!);
    expect(tables).toEqual(['TransferBatches', 'TransferBatchEvents', 'TransferControls']);
    for (const t of tables) expect(procs.has(t), `procedure keel.${t} collides with the table`).toBe(false);
  });
});

// The transfer's last committed window is the one inserted last (seq, V033), not the one stamped latest: a batch
// created while the journal server's clock stood behind (an NTP step back, a failover to a host behind) was read as
// older than its predecessor, so the next window started again after the predecessor's high: window_taken at every
// try, the transfer stalled. The listing (newest first, its pages) follows the same order.
describe('a journal clock that steps back', () => {
  it('the last committed batch and the listing follow the order batches were created in, not created_at', async () => {
    const j = new PostgresTransferJournal(owner);
    const name = `clock_${randomBytes(3).toString('hex')}`;
    const commit = async (low: string | null, high: string) => {
      const b = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: low, boundaryHigh: high });
      await j.transition(b.batchId, ['extracting'], 'committed', { stamp: 'committed_at' }, 'committed');
      return b.batchId;
    };
    const a = await commit(null, '10');
    const b = await commit('10', '20');
    // b was stamped while the clock stood an hour behind a's stamp.
    await owner.query(
      `update keel.transfer_batches set created_at = created_at - interval '1 hour' where batch_id = $1`,
      [b],
    );
    expect((await j.lastForTransfer(name)).lastCommitted?.batchId).toBe(b);
    expect((await j.list({ transfer: name, limit: 10 })).map((x) => x.batchId)).toEqual([b, a]);
    expect((await j.list({ transfer: name, limit: 10, afterId: b })).map((x) => x.batchId)).toEqual([a]);
    expect(await j.list({ transfer: name, limit: 10, afterId: a })).toEqual([]);
    // The chain goes on after b's high.
    const c = await commit('20', '30');
    expect((await j.lastForTransfer(name)).lastCommitted?.batchId).toBe(c);
  });
});

describe('journal timeouts', () => {
  it('sessions carry the statement and idle-in-transaction timeouts; a lock wait ends at statement_timeout and changes nothing', async () => {
    const pool = createJournalPool(url, { max: 2, statementTimeoutMs: 700, idleInTransactionTimeoutMs: 1500 });
    try {
      const r = await pool.query(
        `select current_setting('statement_timeout') as st, current_setting('idle_in_transaction_session_timeout') as it, current_setting('application_name') as app`,
      );
      expect(r.rows[0]).toEqual({ st: '700ms', it: '1500ms', app: 'keel-transfer-journal' });
      const j = new PostgresTransferJournal(pool);
      const b = await j.insertBatch({ ...base('locked'), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '7' });
      const holder = await owner.connect();
      try {
        await holder.query('begin');
        await holder.query(`select 1 from keel.transfer_batches where batch_id = $1 for update`, [b.batchId]);
        const started = Date.now();
        await expect(j.transition(b.batchId, ['extracting'], 'staged', {}, 'staged')).rejects.toMatchObject({
          code: '57014',
        });
        expect(Date.now() - started).toBeLessThan(15_000);
      } finally {
        await holder.query('rollback');
        holder.release();
      }
      expect((await j.get(b.batchId))?.state).toBe('extracting');
      expect((await j.events(b.batchId)).map((e) => e.event)).toEqual(['created']);
      // A session left idle inside a transaction is ended by the server.
      const c = await pool.connect();
      const lost = new Promise<Error>((resolve) => c.once('error', resolve));
      await c.query('begin');
      const err = await Promise.race([lost, new Promise<null>((r) => setTimeout(() => r(null), 10_000))]);
      c.release(true);
      expect(err, 'the server ended the idle-in-transaction session').not.toBeNull();
    } finally {
      await pool.end();
    }
  });

  it('a control database that stops replying fails the call at the client-side reply timeout, and the pool recovers', async () => {
    const u = new URL(url);
    const proxy = await FaultProxy.start(u.hostname, Number(u.port));
    const pool = createJournalPool(proxy.urlFor(url), { max: 2, statementTimeoutMs: 600, queryTimeoutMs: 1200 });
    try {
      const j = new PostgresTransferJournal(pool);
      const b = await j.insertBatch({ ...base('silent'), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '3' });
      // The server runs the statement; its reply is swallowed and the connection left open for a minute.
      let fired = false;
      void proxy
        .arm({ kind: 'drop-reply', trigger: (s) => s.includes('keel.transfer_batch_get'), holdMs: 60_000 })
        .then(() => (fired = true));
      const started = Date.now();
      await expect(j.get(b.batchId)).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(fired).toBe(false); // the proxy still holds the dead connection open: only the client-side timeout ended the call
      expect((await j.get(b.batchId))?.state).toBe('extracting');
    } finally {
      proxy.disarm();
      await pool.end();
      await proxy.close();
    }
  });

  it('a server that accepts TCP but never answers the login fails at the connect timeout', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as net.AddressInfo).port;
    const pool = createJournalPool(`postgres://x:y@127.0.0.1:${port}/none`, { connectTimeoutMs: 500 });
    try {
      const started = Date.now();
      await expect(new PostgresTransferJournal(pool).get(randomUUID())).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await pool.end();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });
});

describe('journal pool errors', () => {
  it('an idle journal connection that dies is logged with context and does not crash the process', async () => {
    const u = new URL(url);
    const proxy = await FaultProxy.start(u.hostname, Number(u.port));
    const logged: string[] = [];
    const pool = createJournalPool(proxy.urlFor(url), { max: 1, log: (m, err) => logged.push(`${m}: ${err.message}`) });
    // A bare pool handed to the journal gets a listener too.
    const bare = new pg.Pool({ connectionString: proxy.urlFor(url), max: 1 });
    new PostgresTransferJournal(bare);
    try {
      const j = new PostgresTransferJournal(pool);
      await j.get(randomUUID());
      await new PostgresTransferJournal(bare).get(randomUUID());
      expect(bare.listenerCount('error')).toBe(1);
      await proxy.close(); // destroys both idle connections
      for (let i = 0; i < 100 && logged.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(logged.length).toBe(1);
      expect(logged[0]).toMatch(/^keel-transfer-journal: idle control-database connection lost/);
    } finally {
      await pool.end();
      await bare.end();
    }
  });
});

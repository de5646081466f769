// A rolling deploy (sql/README.md, "Rolling deploys"): the new build's migrations run while instances of the previous
// build still call the database. test/engines/previousRelease.json records what that build calls (its commit, each
// function's and procedure's parameters, the result columns it may read: test/engines/rollingDeploy.ts); the schema
// of this checkout must still serve every one of those calls, on PostgreSQL (a migrated database, as the previous
// build's app logs in) and on SQL Server (the declarations in sql/sqlserver, as no SQL Server runs here).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { pgStatement } from '../../shared/engines/postgres/procedures.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { pgResultColumns, sqlServerDeclarations, type RecordedRelease } from './rollingDeploy.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const previous = JSON.parse(
  readFileSync(path.join(ROOT, 'test/engines/previousRelease.json'), 'utf8'),
) as RecordedRelease;

// The previous build's statement for a function, built as its store builds it (named notation, each value cast).
function previousCall(fn: string, args: Record<string, unknown>) {
  const sig = previous.postgres[fn]!;
  const all = Object.fromEntries(Object.keys(sig.params).map((p) => [p, args[p] ?? null]));
  return pgStatement(fn, sig, all);
}

describe(`rolling deploy: the schema serves the previous build (${previous.commit})`, () => {
  let owner: pg.Pool;
  let app: pg.Pool; // the previous build's login: keel_executor

  beforeAll(async () => {
    const url = await createTestDatabase('rolling_deploy');
    owner = new pg.Pool({ connectionString: url, max: 2 });
    owner.on('error', poolErrorLogger('postgres', 'control', 'rolling deploy owner'));
    await migratePostgres(owner);
    app = new pg.Pool({ connectionString: appUrl(url), max: 2 });
    app.on('error', poolErrorLogger('postgres', 'control', 'rolling deploy app'));
  }, 120_000);

  afterAll(async () => {
    await app?.end();
    await owner?.end();
  });

  it('PostgreSQL: every call of the previous build resolves to one function, which returns every column it read', async () => {
    const problems: string[] = [];
    const client = await app.connect();
    try {
      for (const fn of Object.keys(previous.postgres)) {
        // PREPARE resolves the function as the call names it (missing, ambiguous, a parameter without a default
        // left out all fail here) without running it.
        try {
          await client.query(`prepare rolling_deploy as ${previousCall(fn, {}).text}`);
          await client.query('deallocate rolling_deploy');
        } catch (err) {
          problems.push(`keel.${fn}: ${(err as Error).message}`);
        }
      }
    } finally {
      client.release();
    }
    // The function each call resolves to: the one taking every named parameter with its type, every other one of
    // its parameters defaulted (the last pronargdefaults).
    const infos = [...(await pgResultColumns(owner, Object.keys(previous.postgres))).values()];
    for (const [fn, sig] of Object.entries(previous.postgres)) {
      const matches = infos.filter((i) => {
        if (i.name !== fn) return false;
        const given = Object.entries(sig.params);
        const ok = given.every(([p, t]) => {
          const at = i.inNames.indexOf(`p_${p}`);
          return at >= 0 && i.inTypes[at] === (t === 'timestamptz' ? 'timestamp with time zone' : t);
        });
        const left = i.inNames.map((n, at) => ({ n, at })).filter(({ n }) => !(n.slice(2) in sig.params));
        return ok && left.every(({ at }) => at >= i.inNames.length - i.defaults);
      });
      if (matches.length !== 1) {
        problems.push(`keel.${fn}: ${matches.length} functions take the previous build's call`);
        continue;
      }
      const missing = sig.columns.filter((c) => !matches[0]!.columns!.includes(c));
      if (missing.length > 0) problems.push(`keel.${fn}: no longer returns ${missing.join(', ')}`);
    }
    expect(problems).toEqual([]);
  });

  it("PostgreSQL: the previous build's calls of the functions changed since do what they did", async () => {
    // transfer_batch_transition gained p_if_version (the fence on the version read): without it, the state alone
    // decides, as before.
    const batchId = randomUUID();
    const ins = previousCall('transfer_batch_insert', {
      batch_id: batchId,
      transfer_name: 'rolling',
      boundary_kind: 'key',
      boundary_low: null,
      boundary_high: '10',
      schema_hash: 'h',
      schema_columns: '[]',
      detail: '{}',
    });
    expect((await app.query(ins.text, ins.values)).rows[0]).toMatchObject({ outcome: 'inserted', state: 'extracting' });
    const move = previousCall('transfer_batch_transition', {
      batch_id: batchId,
      from_states: ['extracting'],
      to_state: 'staged',
      set_row_count: true,
      row_count: 3,
      set_checksum: true,
      checksum: 'c',
      event: 'staged',
      detail: '{}',
      stamp: 'staged_at',
    });
    const moved = (await app.query(move.text, move.values)).rows;
    expect(moved).toHaveLength(1);
    expect(moved[0]).toMatchObject({ state: 'staged', row_count: '3', checksum: 'c' });
    // update_queue gained p_expected (compare-and-set): without it, the change applies as before.
    const upd = previousCall('update_queue', { name: 'rolling', paused: true, max_attempts: 7 });
    const rows = (await app.query(upd.text, upd.values)).rows;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ name: 'rolling', paused: true, max_attempts: 7, created: true });
  });

  it('SQL Server: every procedure of the previous build keeps its parameters, and any new one has a default', () => {
    const declared = sqlServerDeclarations(path.join(ROOT, 'sql', 'sqlserver'));
    const problems: string[] = [];
    for (const [proc, params] of Object.entries(previous.sqlserver)) {
      const now = declared.get(proc);
      if (!now) {
        problems.push(`keel.${proc}: no longer declared`);
        continue;
      }
      for (const [p, type] of Object.entries(params)) {
        const d = now.get(p);
        if (!d) problems.push(`keel.${proc}: @${p} is gone`);
        else if (d.type !== type) problems.push(`keel.${proc}: @${p} is ${d.type}, was ${type}`);
      }
      for (const [p, d] of now)
        if (!(p in params) && !d.defaulted) problems.push(`keel.${proc}: @${p} is new and has no default`);
    }
    expect(problems).toEqual([]);
  });
});

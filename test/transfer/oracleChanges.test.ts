// Change windows into the Oracle target (docs/transfer.md, "Deletes"): PostgreSQL change capture as the source
// (canonical rows, keel-v1), the Oracle target against the model of the server in ./oracleFake.ts (no Oracle server
// here; it runs KEEL_TRANSFER.APPLY_BATCH's rules: 'D' rows delete their key, a MIRROR baseline deletes the keys it
// does not hold, all in the commit of the completion row). And the package text itself: parameters of the calls
// match the package, and the deletes run inside APPLY_BATCH's one transaction.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { oracleStatement } from '../../shared/engines/oracle/targetProcedures.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { TransferService } from '../../shared/transfer/service.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal } from '../support/journalMigrations.js';
import { FakeOracle } from './oracleFake.js';

const ITEMS_COLUMNS = [
  ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
  ['NAME', 'VARCHAR2', null, null, 40, 10, 'C', 'N'],
  ['AMOUNT', 'NUMBER', 2, 6, 22, 0, null, 'Y'],
];

function itemsTransfer(name: string): TransferConfig {
  return parseTransfers(
    [
      {
        name,
        source: { engine: 'postgres', connectionSetting: 'S', table: 'public.items' },
        target: { engine: 'oracle', connectionSetting: 'T', table: 'ITEMS' },
        keyColumns: ['id'],
        boundary: { kind: 'changes' },
        columns: [
          { source: 'id', target: 'ID' },
          { source: 'name', target: 'NAME' },
          { source: 'amount', target: 'AMOUNT' },
        ],
        batchSize: 100,
        chunkSize: 7,
      },
    ],
    transferEngineRules(),
  )[0]!;
}

describe('change windows into the Oracle target (model of the server)', () => {
  let control: pg.Pool;
  let source: pg.Pool;

  beforeAll(async () => {
    control = new pg.Pool({ connectionString: await createTestDatabase('tr_orachg_ctl'), max: 3 });
    source = new pg.Pool({ connectionString: await createTestDatabase('tr_orachg_src'), max: 3 });
    for (const p of [control, source]) p.on('error', poolErrorLogger('postgres', 'transfer', 'test pool'));
    await migrateJournal(control);
    await migratePostgresChangeCapture(source);
    await source.query(
      `create table public.items (id bigint primary key, name varchar(10) not null, amount numeric(6,2))`,
    );
    await source.query(`insert into public.items select n, 'n' || n, n * 1.25 from generate_series(1, 30) n`);
    await source.query(`select keel_changes.enable('public.items', array['id'])`);
  });
  afterAll(async () => {
    await control?.end();
    await source?.end();
  });

  async function sourceRows(): Promise<Map<string, string[]>> {
    const r = await source.query(`select id::text, name, trim_scale(amount)::text as amount from public.items`);
    return new Map(r.rows.map((x) => [x.id as string, [x.id, x.name, x.amount] as string[]]));
  }

  it('baseline, deletes and updates, an expired window, and a re-baseline mirror', async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const t = itemsTransfer('items_chg');
    const svc = new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, source),
        target: new OracleTransferTarget(tc, fake.pool),
      }),
    });
    const runAll = async () => {
      for (;;) {
        const b = await svc.tryCreateBatch(t.name);
        if (!b) return;
        const v = await svc.run(b.batchId);
        expect(v.state, v.lastError ?? '').toBe('committed');
      }
    };
    try {
      await runAll();
      expect(fake.applied).toEqual(await sourceRows());
      // a NOT NULL target column (NAME) is NULL in the delete rows: ENSURE_STAGING was asked for the operation column
      await source.query(`delete from public.items where id in (2, 3, 4)`);
      await source.query(`update public.items set amount = null where id = 5`);
      await source.query(`insert into public.items values (31, 'new', 1)`);
      await runAll();
      expect(fake.applied).toEqual(await sourceRows());
      const last = [...fake.completions.values()].at(-1)!;
      expect(last).toMatchObject({ state: 'COMMITTED', rows: 5, deleted: 3 });
      // the staged rows carried the operation, and the checksum covered it (the readback matched the manifest)
      expect(fake.calls.some((c) => c.op === 'staging insert')).toBe(true);

      // Retention removes changes the transfer has not read: the next window fails clearly; a re-baseline mirrors.
      await source.query(`delete from public.items where id = 6`);
      await source.query(`select keel_changes.current_version('public.items')`);
      await source.query(
        `select keel_changes.retain('public.items', (select current_version from keel_changes.tracked))`,
      );
      const err = await svc.createBatch(t.name).catch((e: unknown) => e);
      expect((err as { code?: string }).code).toBe('changes_expired');
      const rb = await svc.rebaseline(t.name);
      const v = await svc.run(rb.batchId);
      expect(v.state, v.lastError ?? '').toBe('committed');
      expect(fake.applied).toEqual(await sourceRows());
      expect(fake.completions.get(rb.batchId)).toMatchObject({ deleted: 1 });
    } finally {
      await svc.close();
    }
  });

  it('a windowed baseline into the Oracle target: each key window mirrors its key range, changes made meanwhile come after', async () => {
    await source.query(
      `create table public.iw (id bigint primary key, name varchar(10) not null, amount numeric(6,2))`,
    );
    // even keys 2..60: 30 rows, key windows of 8
    await source.query(`insert into public.iw select 2 * n, 'n' || n, n from generate_series(1, 30) n`);
    await source.query(`select keel_changes.enable('public.iw', array['id'])`);
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    // target-only keys below the source's first key, inside a window's range, between two windows and past the last
    for (const k of ['-7', '0', '9', '17', '1000']) fake.applied.set(k, [k, 'stale', null as unknown as string]);
    const [t] = parseTransfers(
      [
        {
          name: 'iw_ora',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.iw' },
          target: { engine: 'oracle', connectionSetting: 'T', table: 'ITEMS' },
          keyColumns: ['id'],
          boundary: { kind: 'changes' },
          columns: [
            { source: 'id', target: 'ID' },
            { source: 'name', target: 'NAME' },
            { source: 'amount', target: 'AMOUNT' },
          ],
          batchSize: 8,
        },
      ],
      transferEngineRules(),
    );
    const target = new OracleTransferTarget(t!, fake.pool);
    expect(target.mirrorsKeyRanges).toBe(true);
    const svc = new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t!],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, source),
        target: new OracleTransferTarget(tc, fake.pool),
      }),
    });
    const rows = async () => {
      const r = await source.query(`select id::text, name, trim_scale(amount)::text as amount from public.iw`);
      return new Map(r.rows.map((x) => [x.id as string, [x.id, x.name, x.amount] as string[]]));
    };
    try {
      const windows: { low: string | null; high: string }[] = [];
      for (let i = 0; ; i++) {
        const b = await svc.tryCreateBatch(t!.name);
        if (!b) break;
        windows.push({ low: b.boundary.low, high: b.boundary.high });
        const v = await svc.run(b.batchId);
        expect(v.state, v.lastError ?? '').toBe('committed');
        // after the first key window: a change in a range already mirrored, and one past the last key
        if (i === 0) {
          await source.query(`delete from public.iw where id = 4`);
          await source.query(`insert into public.iw values (61, 'late', 1)`);
        }
      }
      // 31 rows at most in 8-row key windows: the first bounded above only, the last open above, then the change
      // window from the version captured before the first one
      const ranges = fake.mirrorRanges;
      expect(ranges).toHaveLength(windows.length);
      expect(windows).toHaveLength(5); // keys 2-16, 18-32, 34-48, 50 and up; then the change window
      expect(ranges[0]).toEqual({ low: null, high: '16' });
      expect(ranges[1]).toEqual({ low: '16', high: '32' });
      const lastKeyWindow = ranges.map((r) => r !== null).lastIndexOf(true);
      expect(ranges[lastKeyWindow]!.high).toBeNull();
      expect(ranges.slice(lastKeyWindow + 1)).toEqual(ranges.slice(lastKeyWindow + 1).map(() => null));
      expect(windows[0]!.low).toBeNull();
      expect(windows[0]!.high).toMatch(/^baseline@\d+:16$/);
      expect(fake.applied).toEqual(await rows());
      // each target-only key deleted once, by the key window of its range: -7, 0 and 9 by the first, 17 by the
      // second, 1000 by the last
      const counts = [...fake.completions.values()].map((c) => c.deleted);
      expect(counts[0]).toBe(3);
      expect(counts[1]).toBe(1);
      expect(counts[lastKeyWindow]).toBe(1);
      // the change window: the delete of 4 (already mirrored); the insert of 61 came with the last key window
      expect(counts.at(-1)).toBe(1);
    } finally {
      await svc.close();
    }
  });

  it('key-set comparison into the Oracle target: reports the keys gone at the source, then deletes them', async () => {
    await source.query(
      `create table public.kc (id bigint primary key, name varchar(10) not null, amount numeric(6,2))`,
    );
    await source.query(`insert into public.kc select n, 'n' || n, n from generate_series(1, 25) n`);
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const [t] = parseTransfers(
      [
        {
          name: 'kc_ora',
          source: { engine: 'postgres', connectionSetting: 'S', table: 'public.kc' },
          target: { engine: 'oracle', connectionSetting: 'T', table: 'ITEMS' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: [
            { source: 'id', target: 'ID' },
            { source: 'name', target: 'NAME' },
            { source: 'amount', target: 'AMOUNT' },
          ],
          batchSize: 10,
          keyCompare: 'apply',
        },
      ],
      transferEngineRules(),
    );
    const svc = new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t!],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, source),
        target: new OracleTransferTarget(tc, fake.pool),
      }),
    });
    try {
      for (;;) {
        const b = await svc.tryCreateBatch(t!.name);
        if (!b) break;
        expect((await svc.run(b.batchId)).state).toBe('committed');
      }
      expect(fake.applied.size).toBe(25);
      await source.query(`delete from public.kc where id in (3, 12, 25)`);
      const report = await svc.compareKeys(t!.name, { apply: false });
      expect(report.windows.map((w) => w.sample)).toEqual([['3'], ['12'], ['25']]);
      expect(fake.applied.size).toBe(25);
      expect((await svc.compareKeys(t!.name, { apply: true })).deleted).toBe(3);
      expect([...fake.applied.keys()].sort((a, b) => Number(a) - Number(b))).toEqual(
        Array.from({ length: 25 }, (_, i) => String(i + 1)).filter((k) => !['3', '12', '25'].includes(k)),
      );
    } finally {
      await svc.close();
    }
  });

  it('the package: APPLY_BATCH and ENSURE_STAGING take what the target binds; deletes run before its one COMMIT', () => {
    const pkg = readFileSync(
      path.resolve(import.meta.dirname, '../../sql/oracle/R__010_keel_transfer_package.sql'),
      'utf8',
    ).replace(/--[^\n]*/g, '');
    const spec = pkg.slice(0, pkg.indexOf('PACKAGE BODY'));
    const bodyText = pkg.slice(pkg.indexOf('PACKAGE BODY'));
    for (const proc of ['APPLY_BATCH', 'ENSURE_STAGING']) {
      const params = (text: string) =>
        [
          ...new RegExp(`PROCEDURE ${proc}\\(([\\s\\S]*?)\\)\\s*(;|IS)`)
            .exec(text)![1]!
            .matchAll(/(\w+)\s+(IN|OUT)\b/g),
        ].map((m) => m[1]);
      // The target's call, as its typed table builds it (named notation: p_x => :p_x).
      const names =
        proc === 'APPLY_BATCH'
          ? oracleStatement('apply_batch', {
              batch_id: 'b',
              transfer: 't',
              target_schema: null,
              target_table: 'T',
              staging_table: 'S',
              columns: ['A'],
              keys: ['A'],
              expected_count: 1,
              expected_checksum: 'c',
              attempt: 1,
              changes: 'ops',
              mirror_low: null,
              mirror_high: null,
            })
          : oracleStatement('ensure_staging', {
              transfer: 't',
              target_schema: null,
              target_table: 'T',
              columns: ['A'],
              ops: true,
            });
      const named = [...names.sql.matchAll(/(\w+) => :\1\b/g)].map((m) => m[1]);
      expect(params(spec)).toEqual(params(bodyText));
      expect(named, proc).toEqual(params(spec));
    }
    // changed_columns (APPLY_BATCH's and ENSURE_STAGING's type check) reads the dictionary once per call, both tables
    // in one query joined by column name, not twice per mapped column; every v_ name it uses is declared.
    const changed = /FUNCTION changed_columns\([\s\S]*?END changed_columns;/.exec(bodyText)![0];
    expect(bodyText).not.toMatch(/\bcolumn_type\s*\(/);
    const queries = [...changed.matchAll(/\bFOR r IN \(SELECT\b[\s\S]*?\) LOOP/g)].map((m) => m[0]);
    expect(queries).toHaveLength(1);
    expect(changed.match(/\bSELECT\b/g)).toHaveLength(3); // the query and its two sides
    expect(queries[0]!.match(/\bFROM ALL_TAB_COLUMNS c\b/g)).toHaveLength(2);
    expect(queries[0]).toMatch(/\) t\s+FULL OUTER JOIN\s+\(/);
    expect(queries[0]).toMatch(
      /c\.OWNER = NVL\(p_owner, SYS_CONTEXT\('USERENV', 'CURRENT_SCHEMA'\)\) AND c\.TABLE_NAME = p_table\) t/,
    );
    expect(queries[0]).toMatch(
      /c\.OWNER = SYS_CONTEXT\('USERENV', 'CURRENT_SCHEMA'\) AND c\.TABLE_NAME = p_staging\) s/,
    );
    expect(queries[0]).toMatch(/ON s\.COLUMN_NAME = t\.COLUMN_NAME\) LOOP$/);
    const declared = new Set([...changed.matchAll(/^\s+(v_\w+) [\w.()%]+( :=[^;]*)?;$/gm)].map((m) => m[1]));
    for (const [used] of changed.matchAll(/\bv_\w+/g)) expect(declared, used).toContain(used);
    for (const t of ['t_type_pair', 't_types_by_name']) expect(bodyText).toMatch(new RegExp(`TYPE ${t} IS `));
    const apply = /PROCEDURE APPLY_BATCH[\s\S]*?END APPLY_BATCH;/.exec(bodyText)![0];
    const commits = [...apply.matchAll(/\bCOMMIT\b[^;]*;/g)].map((m) => m.index);
    expect(commits).toHaveLength(1);
    // The apply's and the fence's commits are durable when the call returns, whatever COMMIT_WAIT / COMMIT_LOGGING
    // say (test/transfer/durableCommit.test.ts runs the same on the PostgreSQL target).
    const tryClaim = /PROCEDURE TRY_CLAIM[\s\S]*?END TRY_CLAIM;/.exec(bodyText)![0];
    for (const body of [apply, tryClaim])
      expect([...body.matchAll(/\bCOMMIT\b[^;]*;/g)].map((m) => m[0])).toEqual(['COMMIT WRITE WAIT IMMEDIATE;']);
    const deletes = [...apply.matchAll(/'DELETE FROM '/g)].map((m) => m.index!);
    expect(deletes).toHaveLength(2); // the 'D' rows, and the mirror
    for (const d of deletes) expect(d).toBeLessThan(commits[0]!);
    expect(apply.indexOf('DELETED_COUNT = o_deleted')).toBeLessThan(commits[0]!);
    // the key-range mirror: every EXECUTE of the mirror's DELETE (whole table, or bounded by the range) binds one
    // value per placeholder, and runs before the one COMMIT
    const mirrorRuns = [...apply.matchAll(/EXECUTE IMMEDIATE v_mirror([^;]*);/g)];
    expect(mirrorRuns).toHaveLength(4);
    for (const m of mirrorRuns) {
      const placeholders = [...m[1]!.split('USING')[0]!.matchAll(/:(lo|hi)\b/g)].map((x) => x[1]);
      const binds = m[1]!
        .split('USING')[1]!
        .split(',')
        .map((x) => x.trim());
      expect(binds).toEqual([
        'p_batch_id',
        ...placeholders.map((p) => (p === 'lo' ? 'p_mirror_low' : 'p_mirror_high')),
      ]);
      expect(m.index!).toBeLessThan(commits[0]!);
    }
  });
});

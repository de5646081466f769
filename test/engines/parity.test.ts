// Engine parity, compared as data. JOB_PROCEDURES (shared/jobs/procedures.ts) names every procedure and its
// parameters; each engine's store calls through its own typed table derived from it (POSTGRES_FUNCTIONS,
// SQLSERVER_PARAMS). This test compares those tables with what the engines really declare: the functions of a
// migrated PostgreSQL database, read from its catalog (pg_proc), and the SQL Server procedures declared in
// sql/sqlserver (parsed from the T-SQL, as no SQL Server runs here; npm run check:sql-model builds the full model).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import sql from 'mssql';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { JOB_PROCEDURES, OPERATION_PROCEDURE, pascalCase, type JobProcedure } from '../../shared/jobs/procedures.js';
import { STORE_ARGUMENT_CHECKS } from '../../shared/jobs/validate.js';
import { SQLSERVER_PARAMS, assertProcedureParams } from '../../shared/engines/sqlserver/jobStore.js';
import { POSTGRES_FUNCTIONS, postgresCall } from '../../shared/engines/postgres/procedures.js';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createTestDatabase } from '../support/pg.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PROCS = Object.keys(JOB_PROCEDURES) as JobProcedure[];

// Migration files at the top of the engine folder in the order the runner applies them (versioned V<n>__*.sql by
// version, then repeatable R__*.sql by name); later definitions win.
function migrationTexts(engineDir: string): { file: string; text: string }[] {
  const dir = path.join(root, 'sql', engineDir);
  const files = readdirSync(dir);
  const versioned = files
    .filter((f) => /^V\d+__\w+\.sql$/.test(f))
    .sort((a, b) => Number(/^V(\d+)/.exec(a)![1]) - Number(/^V(\d+)/.exec(b)![1]));
  const repeatable = files.filter((f) => /^R__\w+\.sql$/.test(f)).sort();
  return [...versioned, ...repeatable].map((file) => ({ file, text: readFileSync(path.join(dir, file), 'utf8') }));
}

// Removes -- line comments and /* */ block comments (good enough for our own migration files).
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/--[^\n]*/g, '');
}

// Splits on commas that are not inside parentheses or brackets.
function splitTopLevel(text: string): string[] {
  const items: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of text) {
    if (ch === '(' || ch === '[' || ch === '{') depth++;
    if (ch === ')' || ch === ']' || ch === '}') depth--;
    if (ch === ',' && depth === 0) {
      items.push(current);
      current = '';
    } else current += ch;
  }
  if (current.trim()) items.push(current);
  return items.map((s) => s.trim()).filter((s) => s.length > 0);
}

export function sqlServerSignatures(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const { text } of migrationTexts('sqlserver')) {
    const src = stripComments(text);
    // The parameter list ends at the procedure's AS keyword (not a parameter named @As...).
    const re = /create\s+or\s+alter\s+proc(?:edure)?\s+keel\.(\w+)([\s\S]*?)(?<![@\w])AS\b/gi;
    for (let m = re.exec(src); m; m = re.exec(src)) {
      // An item that does not start with @name is kept verbatim, so it can only fail a comparison.
      const params = splitTopLevel(m[2]!.trim()).map((p) => /^@(\w+)/.exec(p)?.[1] ?? `?${p}`);
      found.set(m[1]!, params);
    }
  }
  return found;
}

// The T-SQL declaration of an mssql parameter type, as sql/sqlserver writes it (e.g. NVARCHAR(MAX), DATETIME2(3)).
type MssqlType = { declaration?: string } | { type: { declaration?: string }; length?: number; scale?: number };
function tsqlDeclaration(t: MssqlType): string {
  if (!('type' in t)) return String(t.declaration).toUpperCase();
  const size = t.length !== undefined ? (t.length === sql.MAX ? 'MAX' : String(t.length)) : String(t.scale);
  return `${String(t.type.declaration).toUpperCase()}(${size})`;
}

// @Name TYPE[(size)] of each parameter, as declared (keywords and sizes upper-cased, spaces dropped).
function sqlServerParameterTypes(): Map<string, Map<string, string>> {
  const found = new Map<string, Map<string, string>>();
  for (const { text } of migrationTexts('sqlserver')) {
    const src = stripComments(text);
    const re = /create\s+or\s+alter\s+proc(?:edure)?\s+keel\.(\w+)([\s\S]*?)(?<![@\w])AS\b/gi;
    for (let m = re.exec(src); m; m = re.exec(src)) {
      const types = new Map<string, string>();
      for (const p of splitTopLevel(m[2]!.trim())) {
        const d = /^@(\w+)\s+(\w+(?:\s*\([^)]*\))?)/.exec(p);
        if (d) types.set(d[1]!, d[2]!.replace(/\s+/g, '').toUpperCase());
      }
      found.set(m[1]!, types);
    }
  }
  return found;
}

// The keel functions of a migrated database: input parameter names and types in order, and what each returns.
interface CatalogFunction {
  name: string;
  overloads: number;
  argNames: string[];
  argTypes: string[];
  returnsSet: boolean;
  returnType: string;
}
async function catalogFunctions(pool: pg.Pool): Promise<Map<string, CatalogFunction>> {
  const { rows } = await pool.query<CatalogFunction>(
    `select p.proname as name,
            count(*) over (partition by p.proname)::int as overloads,
            coalesce((p.proargnames)[1:p.pronargs], '{}') as "argNames",
            array(select format_type(a.t, null) from unnest(p.proargtypes::oid[]) with ordinality a(t, i) order by a.i)
              as "argTypes",
            p.proretset as "returnsSet",
            format_type(p.prorettype, null) as "returnType"
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'keel'`,
  );
  return new Map(rows.map((r) => [r.name, r]));
}

// format_type's names for the types POSTGRES_FUNCTIONS uses.
const CATALOG_TYPE: Record<string, string> = {
  bigint: 'bigint',
  'bigint[]': 'bigint[]',
  boolean: 'boolean',
  integer: 'integer',
  jsonb: 'jsonb',
  text: 'text',
  'text[]': 'text[]',
  timestamptz: 'timestamp with time zone',
};

describe('engine parity', () => {
  it('every JobStore operation has a procedure and an argument check entry, and every procedure serves one', () => {
    // OPERATION_PROCEDURE and STORE_ARGUMENT_CHECKS are typed Record<StoreOperation, …>: the compiler makes each
    // cover every operation of the JobStore interface; here both cover the same ones, and every procedure is used.
    expect(Object.keys(STORE_ARGUMENT_CHECKS).sort()).toEqual(Object.keys(OPERATION_PROCEDURE).sort());
    expect(new Set(Object.values(OPERATION_PROCEDURE))).toEqual(new Set(PROCS));
  });

  describe('PostgreSQL: POSTGRES_FUNCTIONS against the functions of a migrated database (pg_proc)', () => {
    let pool: pg.Pool;
    let catalog: Map<string, CatalogFunction>;
    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: await createTestDatabase('parity'), max: 1 });
      pool.on('error', poolErrorLogger('postgres', 'migration', 'parity test pool'));
      await migratePostgres(pool);
      catalog = await catalogFunctions(pool);
    });
    afterAll(async () => {
      await pool?.end();
    });

    it('the table has exactly the procedures and parameters of JOB_PROCEDURES, in order', () => {
      expect(Object.keys(POSTGRES_FUNCTIONS).sort()).toEqual([...PROCS].sort());
      for (const proc of PROCS)
        expect(Object.keys(POSTGRES_FUNCTIONS[proc].params), proc).toEqual(JOB_PROCEDURES[proc]);
    });

    it('the database declares each function once, with exactly those parameter names and types, returning that', () => {
      const problems: string[] = [];
      for (const proc of PROCS) {
        const want = POSTGRES_FUNCTIONS[proc];
        const got = catalog.get(proc);
        if (!got) {
          problems.push(`keel.${proc} is missing`);
          continue;
        }
        const wantNames = Object.keys(want.params).map((n) => `p_${n}`);
        const wantTypes = Object.values(want.params).map((t) => CATALOG_TYPE[t]);
        if (got.overloads !== 1) problems.push(`keel.${proc} has ${got.overloads} overloads`);
        if (got.argNames.join(',') !== wantNames.join(','))
          problems.push(`keel.${proc}(${got.argNames.join(', ')}) should be (${wantNames.join(', ')})`);
        if (got.argTypes.join(',') !== wantTypes.join(','))
          problems.push(`keel.${proc} takes (${got.argTypes.join(', ')}), the table says (${wantTypes.join(', ')})`);
        if (want.returns === 'rows' ? !got.returnsSet : got.returnsSet || got.returnType !== CATALOG_TYPE[want.returns])
          problems.push(
            `keel.${proc} returns ${got.returnsSet ? 'a set' : got.returnType}, the table says ${want.returns}`,
          );
      }
      expect(problems).toEqual([]);
    });

    it('a call binds every value as a parameter, by name, and refuses a wrong parameter list', async () => {
      const call = postgresCall('heartbeat', { job_id: '1', lease_id: 'x' });
      expect(call).toEqual({
        text: 'select * from keel.heartbeat(p_job_id => $1::bigint, p_lease_id => $2::text)',
        values: ['1', 'x'],
      });
      expect(postgresCall('cancel', { job_id: '7' }).text).toBe('select keel.cancel(p_job_id => $1::bigint) as result');
      expect(() => postgresCall('heartbeat', { job_id: '1', lease: 'x' } as never)).toThrow(
        /keel\.heartbeat takes \(job_id, lease_id\), got \(job_id, lease\)/,
      );
      // The statement really runs against the migrated function (named notation is checked by PostgreSQL).
      const stats = postgresCall('stats', {});
      await expect(pool.query(stats.text, stats.values)).resolves.toMatchObject({ rowCount: 0 });
      const cancel = postgresCall('cancel', { job_id: '123456789' });
      expect((await pool.query(cancel.text, cancel.values)).rows).toEqual([{ result: 'not_found' }]);
    });
  });

  describe('SQL Server: SQLSERVER_PARAMS against the procedures declared in sql/sqlserver', () => {
    it('the table has exactly the procedures and parameters of JOB_PROCEDURES (PascalCase), in order', () => {
      expect(Object.keys(SQLSERVER_PARAMS).sort()).toEqual([...PROCS].sort());
      for (const proc of PROCS) {
        expect(Object.keys(SQLSERVER_PARAMS[proc]), proc).toEqual(JOB_PROCEDURES[proc].map(pascalCase));
      }
      // The store's call() refuses a wrong list at run time as well.
      expect(() => assertProcedureParams('heartbeat', ['LeaseId', 'JobId'])).toThrow(
        /keel\.Heartbeat takes \(@JobId, @LeaseId\)/,
      );
    });

    it('sql/sqlserver declares every procedure as keel.<Pascal> with exactly its parameters (@<Pascal>), in order', () => {
      const sigs = sqlServerSignatures();
      const problems: string[] = [];
      for (const proc of PROCS) {
        const name = pascalCase(proc);
        const expected = JOB_PROCEDURES[proc].map(pascalCase);
        const got = sigs.get(name);
        if (!got) problems.push(`keel.${name} is missing`);
        else if (got.join(',') !== expected.join(','))
          problems.push(`keel.${name} @${got.join(', @')} should be @${expected.join(', @')}`);
      }
      expect(problems).toEqual([]);
    });

    it('the store binds each parameter with the type the procedure declares', () => {
      const declared = sqlServerParameterTypes();
      const problems: string[] = [];
      for (const proc of PROCS) {
        const types = declared.get(pascalCase(proc)) ?? new Map<string, string>();
        for (const [param, type] of Object.entries(SQLSERVER_PARAMS[proc] as Record<string, MssqlType>)) {
          const bound = tsqlDeclaration(type);
          if (types.get(param) !== bound)
            problems.push(`keel.${pascalCase(proc)} @${param} is ${types.get(param)}, bound as ${bound}`);
        }
      }
      expect(problems).toEqual([]);
    });
  });
});

describe('SQL Server internal procedures', () => {
  // Every keel procedure is either called by the TypeScript code (the job contract's procedures, or named as
  // 'keel.<Name>' in shared/) or internal, and every internal one is DENYed to keel_executor (R__900), so the schema-wide
  // EXECUTE cannot reach it. Read from the sources: this fails when a new helper procedure is added without a DENY.
  function tsSources(dir: string): string[] {
    return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory()
        ? tsSources(path.join(dir, e.name))
        : e.name.endsWith('.ts')
          ? [readFileSync(path.join(dir, e.name), 'utf8')]
          : [],
    );
  }
  const sqlFiles = () =>
    readdirSync(path.join(root, 'sql', 'sqlserver'))
      .filter((f) => /^(V\d+|R)__\w+\.sql$/.test(f))
      .map((f) => stripComments(readFileSync(path.join(root, 'sql', 'sqlserver', f), 'utf8')));

  it('denies keel_executor every procedure that the application does not call, and only those', () => {
    const text = sqlFiles().join('\n');
    const declared = new Set(
      [...text.matchAll(/CREATE\s+(?:OR\s+ALTER\s+)?PROC(?:EDURE)?\s+keel\.(\w+)/gi)].map((m) => m[1]!),
    );
    const called = new Set([
      ...PROCS.map((p) => pascalCase(p)),
      ...tsSources(path.join(root, 'shared')).flatMap((src) =>
        [...src.matchAll(/['"`]keel\.([A-Z]\w+)['"`]/g)].map((m) => m[1]!),
      ),
    ]);
    const denied = new Set(
      [...text.matchAll(/DENY\s+EXECUTE\s+ON\s+OBJECT::keel\.(\w+)\s+TO\s+keel_executor/gi)].map((m) => m[1]!),
    );
    const internal = [...declared].filter((p) => !called.has(p)).sort();
    expect(internal).toEqual(expect.arrayContaining(['ApplyCounters', 'DeadLetter']));
    expect([...denied].sort()).toEqual(internal);
  });
});

// Engine parity, compared as data. JOB_PROCEDURES (shared/jobs/procedures.ts) and JOURNAL_PROCEDURES
// (shared/transfer/journalProcedures.ts) name every procedure and its parameters; each engine's job store and
// transfer journal call through their own typed tables derived from them (POSTGRES_FUNCTIONS, SQLSERVER_PARAMS,
// JOURNAL_POSTGRES_FUNCTIONS, JOURNAL_SQLSERVER_PARAMS). This test compares those tables with what the engines really declare: the functions of a
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
import { SQLSERVER_PARAMS, assertProcedureParams } from '../../shared/engines/sqlserver/procedures.js';
import {
  POSTGRES_FUNCTIONS,
  pgStatement,
  postgresCall,
  type PgSignature,
  type PgType,
} from '../../shared/engines/postgres/procedures.js';
import { JOURNAL_POSTGRES_FUNCTIONS } from '../../shared/engines/postgres/transferJournal.js';
import { JOURNAL_SQLSERVER_PARAMS } from '../../shared/engines/sqlserver/transferJournal.js';
import { insertArgs, JOURNAL_PROCEDURES, type JournalProcedure } from '../../shared/transfer/journalProcedures.js';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createTestDatabase } from '../support/pg.js';
import { splitTopLevel } from './rollingDeploy.js';

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
const CATALOG_TYPE: Record<PgType | 'void', string> = {
  bigint: 'bigint',
  'bigint[]': 'bigint[]',
  boolean: 'boolean',
  integer: 'integer',
  jsonb: 'jsonb',
  text: 'text',
  'text[]': 'text[]',
  timestamptz: 'timestamp with time zone',
  uuid: 'uuid',
  void: 'void',
};

// The procedure contracts and each engine's typed table derived from it: the job store's, and the transfer
// journal's (shared/transfer/journalProcedures.ts). Both are checked the same way.
interface Contract {
  name: string;
  procedures: Record<string, readonly string[]>;
  postgres: Record<string, PgSignature>;
  sqlserver: Record<string, Record<string, MssqlType>>;
}
const CONTRACTS: Contract[] = [
  {
    name: 'JOB_PROCEDURES',
    procedures: JOB_PROCEDURES,
    postgres: POSTGRES_FUNCTIONS as Record<string, PgSignature>,
    sqlserver: SQLSERVER_PARAMS as Record<string, Record<string, MssqlType>>,
  },
  {
    name: 'JOURNAL_PROCEDURES',
    procedures: JOURNAL_PROCEDURES,
    postgres: JOURNAL_POSTGRES_FUNCTIONS as Record<string, PgSignature>,
    sqlserver: JOURNAL_SQLSERVER_PARAMS as Record<string, Record<string, MssqlType>>,
  },
];

describe('engine parity', () => {
  it('every JobStore operation has a procedure and an argument check entry, and every procedure serves one', () => {
    // OPERATION_PROCEDURE and STORE_ARGUMENT_CHECKS are typed Record<StoreOperation, …>: the compiler makes each
    // cover every operation of the JobStore interface; here both cover the same ones, and every procedure is used.
    expect(Object.keys(STORE_ARGUMENT_CHECKS).sort()).toEqual(Object.keys(OPERATION_PROCEDURE).sort());
    expect(new Set(Object.values(OPERATION_PROCEDURE))).toEqual(new Set(PROCS));
  });

  it('every journal procedure is called by the one journal implementation (ProcedureJournal), and no other name', () => {
    const src = readFileSync(path.join(root, 'shared/transfer/procedureJournal.ts'), 'utf8');
    const called = new Set([...src.matchAll(/this\.call\('(\w+)'/g)].map((m) => m[1]!));
    expect(called).toEqual(new Set(Object.keys(JOURNAL_PROCEDURES)));
  });

  it('the journal procedures take the same kind of value on both engines, parameter by parameter', () => {
    // PostgreSQL type -> the T-SQL declarations that carry the same values (a list of states: comma-separated text).
    const SAME_KIND: Record<string, RegExp> = {
      uuid: /^UNIQUEIDENTIFIER$/,
      boolean: /^BIT$/,
      bigint: /^BIGINT$/,
      integer: /^INT$/,
      jsonb: /^NVARCHAR\(MAX\)$/,
      text: /^N?(VAR)?CHAR\(\d+\)$/,
      'text[]': /^VARCHAR\(\d+\)$/,
    };
    const problems: string[] = [];
    for (const proc of Object.keys(JOURNAL_PROCEDURES) as JournalProcedure[]) {
      const pgParams = JOURNAL_POSTGRES_FUNCTIONS[proc].params as Record<string, PgType>;
      const msParams = JOURNAL_SQLSERVER_PARAMS[proc] as Record<string, MssqlType>;
      for (const param of JOURNAL_PROCEDURES[proc]) {
        const pgType = pgParams[param]!;
        const msType = tsqlDeclaration(msParams[pascalCase(param)]!);
        if (!SAME_KIND[pgType]?.test(msType))
          problems.push(`${proc}.${param}: ${pgType} on PostgreSQL, ${msType} on SQL Server`);
      }
    }
    expect(problems).toEqual([]);
  });

  describe('PostgreSQL: the typed tables against the functions of a migrated database (pg_proc)', () => {
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

    for (const c of CONTRACTS) {
      const procs = Object.keys(c.procedures);

      it(`${c.name}: the table has exactly its procedures and parameters, in order`, () => {
        expect(Object.keys(c.postgres).sort()).toEqual([...procs].sort());
        for (const proc of procs) expect(Object.keys(c.postgres[proc]!.params), proc).toEqual(c.procedures[proc]);
      });

      it(`${c.name}: the database declares each function once, with exactly those parameter names and types, returning that`, () => {
        const problems: string[] = [];
        for (const proc of procs) {
          const want = c.postgres[proc]!;
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
          if (
            want.returns === 'rows' ? !got.returnsSet : got.returnsSet || got.returnType !== CATALOG_TYPE[want.returns]
          )
            problems.push(
              `keel.${proc} returns ${got.returnsSet ? 'a set' : got.returnType}, the table says ${want.returns}`,
            );
        }
        expect(problems).toEqual([]);
      });
    }

    it('no transfer_* function of the database is left out of JOURNAL_PROCEDURES (a renamed one is dropped)', () => {
      const journal = [...catalog.keys()].filter((n) => n.startsWith('transfer_')).sort();
      expect(journal).toEqual(Object.keys(JOURNAL_PROCEDURES).sort());
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
      // The journal's table the same way, including a composite column expanded beside the outcome.
      const get = pgStatement('transfer_batch_get', JOURNAL_POSTGRES_FUNCTIONS.transfer_batch_get, { batch_id: null });
      expect(get.text).toBe('select * from keel.transfer_batch_get(p_batch_id => $1::uuid)');
      await expect(pool.query(get.text, get.values)).resolves.toMatchObject({ rowCount: 0 });
      const insert = pgStatement('transfer_batch_insert', JOURNAL_POSTGRES_FUNCTIONS.transfer_batch_insert, {
        ...insertArgs({
          batchId: '00000000-0000-4000-8000-000000000001',
          transferName: 'parity',
          boundaryKind: 'key',
          boundaryLow: null,
          boundaryHigh: '1',
          schemaHash: 'h'.repeat(64),
          schemaColumns: [],
        }),
      });
      expect(insert.text).toMatch(
        /^select r\.outcome, r\.conflict_batch_id, r\.conflict_state, \(r\.batch\)\.\* from /,
      );
      const [row] = (await pool.query(insert.text, insert.values)).rows;
      expect(row).toMatchObject({ outcome: 'inserted', batch_id: '00000000-0000-4000-8000-000000000001' });
    });
  });

  describe('SQL Server: the typed tables against the procedures declared in sql/sqlserver', () => {
    it("the job store's call() refuses a wrong parameter list at run time as well", () => {
      expect(() => assertProcedureParams('heartbeat', ['LeaseId', 'JobId'])).toThrow(
        /keel\.Heartbeat takes \(@JobId, @LeaseId\)/,
      );
    });

    for (const c of CONTRACTS) {
      const procs = Object.keys(c.procedures);

      it(`${c.name}: the table has exactly its procedures and parameters (PascalCase), in order`, () => {
        expect(Object.keys(c.sqlserver).sort()).toEqual([...procs].sort());
        for (const proc of procs)
          expect(Object.keys(c.sqlserver[proc]!), proc).toEqual(c.procedures[proc]!.map(pascalCase));
      });

      it(`${c.name}: sql/sqlserver declares every procedure as keel.<Pascal> with exactly its parameters (@<Pascal>), in order`, () => {
        const sigs = sqlServerSignatures();
        const problems: string[] = [];
        for (const proc of procs) {
          const name = pascalCase(proc);
          const expected = c.procedures[proc]!.map(pascalCase);
          const got = sigs.get(name);
          if (!got) problems.push(`keel.${name} is missing`);
          else if (got.join(',') !== expected.join(','))
            problems.push(`keel.${name} @${got.join(', @')} should be @${expected.join(', @')}`);
        }
        expect(problems).toEqual([]);
      });

      it(`${c.name}: each parameter is bound with the type the procedure declares`, () => {
        const declared = sqlServerParameterTypes();
        const problems: string[] = [];
        for (const proc of procs) {
          const types = declared.get(pascalCase(proc)) ?? new Map<string, string>();
          for (const [param, type] of Object.entries(c.sqlserver[proc]!)) {
            const bound = tsqlDeclaration(type);
            if (types.get(param) !== bound)
              problems.push(`keel.${pascalCase(proc)} @${param} is ${types.get(param)}, bound as ${bound}`);
          }
        }
        expect(problems).toEqual([]);
      });
    }
  });
});

describe('SQL Server internal procedures', () => {
  // Every keel procedure is either called by the TypeScript code (the job and journal contracts' procedures, or named as
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
      ...Object.keys(JOURNAL_PROCEDURES).map(pascalCase),
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

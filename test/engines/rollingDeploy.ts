// What a release's app calls in the database, recorded so that the next release's schema can be checked to still
// serve it (sql/README.md, "Rolling deploys"; test/engines/rollingDeploy.test.ts). While a deploy rolls, instances
// of the previous build call the functions and procedures the new build's migrations re-created.
//
// Record the current checkout (when a release is cut; the file then names the build the next one must serve):
//   KEEL_RECORD_PG_URL=postgres://postgres@127.0.0.1:PORT/postgres npx tsx test/engines/rollingDeploy.ts [out.json]
// It migrates a scratch database on that server with this checkout's sql/postgres (dropped afterwards) to read what
// each function returns, and parses this checkout's sql/sqlserver. Imports only modules every recent build has, so
// a copy of this file recorded test/engines/previousRelease.json in an older checkout.
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { POSTGRES_FUNCTIONS, type PgSignature } from '../../shared/engines/postgres/procedures.js';
import { JOURNAL_POSTGRES_FUNCTIONS } from '../../shared/engines/postgres/transferJournal.js';
import { migratePostgres } from '../../shared/engines/postgres/jobStore.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface RecordedRelease {
  commit: string;
  // Per public function the app calls: its call (pgStatement's signature: named parameters and their types) and the
  // result columns it may read ("name type"; a composite column's fields as "column.field type").
  postgres: Record<string, PgSignature & { columns: string[] }>;
  // Per procedure the app calls: its parameters as declared (name -> type, upper-cased, spaces dropped).
  sqlserver: Record<string, Record<string, string>>;
}

// The result columns of the keel functions named, as "name type" (a composite column also as "name.field type");
// a function returning one value: ["result <type>"]. Several overloads of a name: one list each.
export async function pgResultColumns(pool: pg.Pool, names: string[]): Promise<Map<number, PgFunctionInfo>> {
  const { rows } = await pool.query<PgFunctionInfo & { oid: number }>(
    `select p.oid::int as oid, p.proname as name,
            coalesce((p.proargnames)[1:p.pronargs], '{}') as "inNames",
            array(select format_type(t, null) from unnest(p.proargtypes::oid[]) with ordinality a(t, i) order by i)
              as "inTypes",
            p.pronargdefaults as defaults,
            array(select case when (p.proargmodes)[i] in ('o', 't', 'b') then p.proargnames[i] end
                    from generate_subscripts(coalesce(p.proargmodes, '{}'::"char"[]), 1) i) as "outNames",
            array(select format_type(t, null) from unnest(coalesce(p.proallargtypes, '{}'::oid[])) with ordinality a(t, i)
                   order by i) as "allTypes",
            format_type(p.prorettype, null) as "returnType",
            (select ty.typrelid <> 0 from pg_type ty where ty.oid = p.prorettype) as composite
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'keel' and p.proname = any($1)`,
    [names],
  );
  const fields = async (type: string): Promise<string[]> => {
    const r = await pool.query<{ c: string }>(
      `select a.attname || ' ' || format_type(a.atttypid, a.atttypmod) as c
         from pg_attribute a where a.attrelid = (select typrelid from pg_type where oid = $1::regtype)
          and a.attnum > 0 and not a.attisdropped order by a.attnum`,
      [type],
    );
    return r.rows.map((x) => x.c);
  };
  const out = new Map<number, PgFunctionInfo>();
  for (const r of rows) {
    const columns: string[] = [];
    const outCols = r.outNames
      .map((n, i) => (n === null ? null : `${n} ${r.allTypes[i]}`))
      .filter((c): c is string => c !== null);
    if (outCols.length > 0) columns.push(...outCols);
    else if (r.composite) columns.push(...(await fields(r.returnType)));
    else columns.push(`result ${r.returnType}`);
    for (const c of [...columns]) {
      const [name, ...type] = c.split(' ');
      const t = type.join(' ');
      const isComposite = await pool.query<{ c: boolean }>(
        `select coalesce((select typrelid <> 0 from pg_type where oid = to_regtype($1)), false) as c`,
        [t],
      );
      if (isComposite.rows[0]!.c && outCols.length > 0) columns.push(...(await fields(t)).map((f) => `${name}.${f}`));
    }
    out.set(r.oid, { ...r, columns });
  }
  return out;
}
export interface PgFunctionInfo {
  name: string;
  inNames: string[];
  inTypes: string[];
  defaults: number;
  outNames: (string | null)[];
  allTypes: string[];
  returnType: string;
  composite: boolean;
  columns?: string[];
}

// The procedures declared in a sql/sqlserver folder (later files win, as the runner applies them): per procedure,
// each parameter's declared type (upper-cased, spaces dropped) and whether it has a default.
export function sqlServerDeclarations(dir: string): Map<string, Map<string, { type: string; defaulted: boolean }>> {
  const files = readdirSync(dir).filter((f) => /^[VR]__\w+\.sql$/.test(f));
  const versioned = files
    .filter((f) => f.startsWith('V'))
    .sort((a, b) => Number(/^V(\d+)/.exec(a)![1]) - Number(/^V(\d+)/.exec(b)![1]));
  const ordered = [...versioned, ...files.filter((f) => f.startsWith('R')).sort()];
  const found = new Map<string, Map<string, { type: string; defaulted: boolean }>>();
  for (const f of ordered) {
    const src = readFileSync(path.join(dir, f), 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, ' ')
      .replace(/--[^\n]*/g, '');
    const re = /create\s+or\s+alter\s+proc(?:edure)?\s+keel\.(\w+)([\s\S]*?)(?<![@\w])AS\b/gi;
    for (let m = re.exec(src); m; m = re.exec(src)) {
      const params = new Map<string, { type: string; defaulted: boolean }>();
      for (const p of splitTopLevel(m[2]!.trim())) {
        const d = /^@(\w+)\s+([\w.]+(?:\s*\([^)]*\))?)([\s\S]*)$/.exec(p);
        if (!d) throw new Error(`keel.${m[1]}: cannot read parameter "${p}"`);
        params.set(d[1]!, { type: d[2]!.replace(/\s+/g, '').toUpperCase(), defaulted: /^\s*=/.test(d[3]!) });
      }
      found.set(m[1]!, params);
    }
  }
  return found;
}

// Splits on commas that are not inside parentheses or brackets (parameter lists; parity.test.ts too).
export function splitTopLevel(text: string): string[] {
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

const pascal = (snake: string) =>
  snake
    .split('_')
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');

async function record(adminUrl: string, commit: string): Promise<RecordedRelease> {
  const tables = { ...POSTGRES_FUNCTIONS, ...JOURNAL_POSTGRES_FUNCTIONS } as Record<string, PgSignature>;
  const name = `keel_record_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
  try {
    await migratePostgres(pool, path.join(ROOT, 'sql'));
    const infos = await pgResultColumns(pool, Object.keys(tables));
    const postgres: RecordedRelease['postgres'] = {};
    for (const fn of Object.keys(tables).sort()) {
      const found = [...infos.values()].filter((i) => i.name === fn);
      if (found.length !== 1) throw new Error(`keel.${fn}: ${found.length} functions of that name`);
      postgres[fn] = { ...tables[fn]!, columns: found[0]!.columns! };
    }
    const declared = sqlServerDeclarations(path.join(ROOT, 'sql', 'sqlserver'));
    const sqlserver: RecordedRelease['sqlserver'] = {};
    for (const fn of Object.keys(tables).sort()) {
      const params = declared.get(pascal(fn));
      if (!params) throw new Error(`keel.${pascal(fn)} is not declared in sql/sqlserver`);
      sqlserver[pascal(fn)] = Object.fromEntries([...params].map(([p, d]) => [p, d.type]));
    }
    return { commit, postgres, sqlserver };
  } finally {
    await pool.end();
    await admin.query(`drop database ${name}`);
    await admin.end();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const adminUrl = process.env.KEEL_RECORD_PG_URL;
  if (!adminUrl) throw new Error('KEEL_RECORD_PG_URL: a PostgreSQL admin URL to migrate a scratch database on');
  const out = process.argv[2] ?? path.join(ROOT, 'test', 'engines', 'previousRelease.json');
  const { execFileSync } = await import('node:child_process');
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
  writeFileSync(out, `${JSON.stringify(await record(adminUrl, commit), null, 2)}\n`);
  console.log(`recorded ${commit} into ${out}`);
}

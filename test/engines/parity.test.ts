// Engine parity: every engine declares exactly the procedures of JOB_PROCEDURES with exactly these parameters in
// this order, every JobStore operation maps to a procedure, and each engine's TypeScript store passes the same
// parameters. Read from the sources (no database needed).
import { describe, expect, it } from 'vitest';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { JOB_PROCEDURES, OPERATION_PROCEDURE, pascalCase, type JobProcedure } from '../../shared/jobs/procedures.js';
import { SQLSERVER_PARAMS, assertProcedureParams } from '../../shared/engines/sqlserver/jobStore.js';

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

// Text between the '(' at `open` and its matching ')'.
function balanced(text: string, open: number, openCh = '(', closeCh = ')'): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === openCh) depth++;
    else if (text[i] === closeCh && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error(`unbalanced ${openCh} at ${open}`);
}

export function postgresSignatures(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const { text } of migrationTexts('postgres')) {
    const src = stripComments(text);
    const re = /create\s+or\s+replace\s+function\s+keel\.(\w+)\s*\(/gi;
    for (let m = re.exec(src); m; m = re.exec(src)) {
      const params = splitTopLevel(balanced(src, m.index + m[0].length - 1)).map((p) =>
        p.split(/\s+/)[0]!.toLowerCase(),
      );
      found.set(m[1]!.toLowerCase(), params);
    }
  }
  return found;
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

// this.call('<proc>', { Key: value, ... }, ...) call sites of the SQL Server store, with their object keys in order.
export function sqlServerCallSites(source: string): { proc: string; keys: string[] }[] {
  const sites: { proc: string; keys: string[] }[] = [];
  const re = /this\.call\(\s*'(\w+)'\s*,\s*\{/g;
  for (let m = re.exec(source); m; m = re.exec(source)) {
    const body = balanced(source, m.index + m[0].length - 1, '{', '}');
    const keys = splitTopLevel(body).map((item) => {
      const key = /^([A-Za-z_]\w*)\s*:/.exec(item);
      if (!key) throw new Error(`this.call('${m![1]}', …): cannot read the key of "${item}"`);
      return key[1]!;
    });
    sites.push({ proc: m[1]!, keys });
  }
  return sites;
}

// keel.<name>(args) calls of the PostgreSQL store with their argument count.
export function postgresCallSites(source: string): { proc: string; args: number; placeholders: number }[] {
  const sites: { proc: string; args: number; placeholders: number }[] = [];
  const re = /keel\.(\w+)\(/g;
  for (let m = re.exec(source); m; m = re.exec(source)) {
    const inner = balanced(source, m.index + m[0].length - 1);
    sites.push({ proc: m[1]!, args: splitTopLevel(inner).length, placeholders: (inner.match(/\$\d+/g) ?? []).length });
  }
  return sites;
}

describe('engine parity', () => {
  it('every JobStore operation has a procedure, and every procedure serves an operation', () => {
    const contract = readFileSync(path.join(root, 'shared/jobs/contract.ts'), 'utf8');
    const body = balanced(contract, contract.indexOf('{', contract.indexOf('export interface JobStore')), '{', '}');
    const operations = [...body.matchAll(/^\s*(?:readonly\s+)?(\w+)\s*[(:]/gm)]
      .map((m) => m[1]!)
      .filter((op) => op !== 'engine' && op !== 'close');
    expect(operations.length).toBeGreaterThan(10);
    expect(Object.keys(OPERATION_PROCEDURE).sort()).toEqual([...operations].sort());
    for (const proc of Object.values(OPERATION_PROCEDURE)) expect(PROCS).toContain(proc);
    expect(new Set(Object.values(OPERATION_PROCEDURE))).toEqual(new Set(PROCS));
  });

  it('sql/postgres declares every procedure with exactly its parameters (p_<name>), in order', () => {
    const sigs = postgresSignatures();
    const problems: string[] = [];
    for (const proc of PROCS) {
      const expected = JOB_PROCEDURES[proc].map((p) => `p_${p}`);
      const got = sigs.get(proc);
      if (!got) problems.push(`keel.${proc} is missing`);
      else if (got.join(',') !== expected.join(','))
        problems.push(`keel.${proc}(${got.join(', ')}) should be (${expected.join(', ')})`);
    }
    expect(problems).toEqual([]);
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

  it('the SQL Server store passes exactly the procedure parameters, by name and in order', () => {
    for (const proc of PROCS) {
      expect(Object.keys(SQLSERVER_PARAMS[proc]), proc).toEqual(JOB_PROCEDURES[proc].map(pascalCase));
    }
    const source = readFileSync(path.join(root, 'shared/engines/sqlserver/jobStore.ts'), 'utf8');
    const sites = sqlServerCallSites(source);
    for (const { proc, keys } of sites) {
      expect(PROCS, `this.call('${proc}')`).toContain(proc);
      expect(keys, `this.call('${proc}', …)`).toEqual(JOB_PROCEDURES[proc as JobProcedure].map(pascalCase));
    }
    expect(new Set(sites.map((s) => s.proc))).toEqual(new Set(PROCS));
    // Parameters reach the driver only through call(): one request.input, driven by SQLSERVER_PARAMS.
    expect(source.match(/\.input\(/g) ?? []).toHaveLength(1);
    expect(source).not.toMatch(/\.query\(|\.batch\(/);
    // The runtime check refuses a wrong list.
    expect(() => assertProcedureParams('heartbeat', ['LeaseId', 'JobId'])).toThrow(
      /keel\.Heartbeat takes \(@JobId, @LeaseId\)/,
    );
  });

  it('the PostgreSQL store calls every procedure with as many arguments as it declares', () => {
    const source = readFileSync(path.join(root, 'shared/engines/postgres/jobStore.ts'), 'utf8');
    const sites = postgresCallSites(source).filter((s) => (PROCS as string[]).includes(s.proc));
    const problems = sites
      .filter((s) => s.args !== JOB_PROCEDURES[s.proc as JobProcedure].length)
      .map(
        (s) =>
          `keel.${s.proc}: ${s.args} argument(s) (${s.placeholders} placeholder(s)), declares ${JOB_PROCEDURES[s.proc as JobProcedure].length}`,
      );
    expect(problems).toEqual([]);
    expect(new Set(sites.map((s) => s.proc))).toEqual(new Set(PROCS));
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

// The KQL of every alert rule (infra/modules/alerts.bicep) and workbook tile (infra/modules/workbook.bicep) is parsed
// and type-checked with Microsoft's Kusto.Language (the npm build @kusto/language-service-next) against the classic
// Application Insights schema the rules are scoped to. An alert whose query does not compile never fires, and Azure
// only says so at deployment or, worse, in the rule's health later; the Bicep gate cannot see inside the strings.
// For each alert it also checks what the rule's criteria name: the measure column exists and is numeric, and every
// split dimension is a string column of the result.
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

// Columns of the classic Application Insights tables (the names the rules use; types as documented in Azure
// Monitor's "Migrate to workspace-based Application Insights" column table).
const COMMON =
  'timestamp:datetime, name:string, customDimensions:dynamic, operation_Name:string, operation_Id:string, ' +
  'operation_ParentId:string, cloud_RoleName:string, cloud_RoleInstance:string, appName:string, appId:string, ' +
  'iKey:string, itemId:string, itemType:string, sdkVersion:string, session_Id:string, user_Id:string';
const APP_INSIGHTS_TABLES: Record<string, string> = {
  customMetrics: `${COMMON}, value:real, valueCount:int, valueSum:real, valueMin:real, valueMax:real, valueStdDev:real`,
  customEvents: `${COMMON}, customMeasurements:dynamic, itemCount:int`,
  requests:
    `${COMMON}, customMeasurements:dynamic, itemCount:int, id:string, source:string, url:string, success:string, ` +
    'resultCode:string, duration:real, performanceBucket:string',
  availabilityResults:
    `${COMMON}, customMeasurements:dynamic, itemCount:int, id:string, location:string, message:string, ` +
    'success:string, duration:real, size:real, performanceBucket:string',
  dependencies:
    `${COMMON}, customMeasurements:dynamic, itemCount:int, id:string, target:string, type:string, data:string, ` +
    'success:string, resultCode:string, duration:real, performanceBucket:string',
  exceptions:
    `${COMMON}, customMeasurements:dynamic, itemCount:int, problemId:string, type:string, message:string, ` +
    'outerMessage:string, innermostMessage:string, severityLevel:int, details:dynamic',
  traces: `${COMMON}, customMeasurements:dynamic, itemCount:int, message:string, severityLevel:int`,
};
// Azure Resource Graph (the workbook's alert-state tile, queryType 1).
const RESOURCE_GRAPH_TABLES: Record<string, string> = {
  alertsmanagementresources:
    'id:string, name:string, type:string, tenantId:string, subscriptionId:string, resourceGroup:string, properties:dynamic',
};

interface Diagnostic {
  Severity: string;
  Message: string;
  Start: number;
}
interface Column {
  Name: string;
  Type: { Name: string };
}
interface ReadOnlyList<T> {
  Count: number;
  getItem(i: number): T;
}
interface KustoCode {
  GetDiagnostics(): ReadOnlyList<Diagnostic>;
  ResultType: { Columns?: ReadOnlyList<Column> } | null;
}
interface KustoLanguage {
  KustoCode: { ParseAndAnalyze(text: string, globals: unknown): KustoCode };
  GlobalState: { Default: { WithDatabase(db: unknown): unknown } };
  Symbols: {
    TableSymbol: { $ctor7: new (name: string, schema: string, description: string | null) => unknown };
    DatabaseSymbol: { $ctor2: new (name: string, alternate: string | null, members: unknown[]) => unknown };
  };
}

function loadKusto(): KustoLanguage {
  // The Bridge.NET build defines globals (Bridge, System, Kusto) when its two scripts run, in this order.
  const require = createRequire(import.meta.url);
  require('@kusto/language-service-next/bridge.js');
  require('@kusto/language-service-next/Kusto.Language.Bridge.js');
  return (globalThis as unknown as { Kusto: { Language: KustoLanguage } }).Kusto.Language;
}

function globalsFor(k: KustoLanguage, tables: Record<string, string>): unknown {
  const symbols = Object.entries(tables).map(
    ([name, cols]) => new k.Symbols.TableSymbol.$ctor7(name, `(${cols})`, null),
  );
  return k.GlobalState.Default.WithDatabase(new k.Symbols.DatabaseSymbol.$ctor2('appinsights', null, symbols));
}

const list = <T>(l: ReadOnlyList<T> | undefined): T[] => Array.from({ length: l?.Count ?? 0 }, (_, i) => l!.getItem(i));

// --- Reading the queries out of the Bicep source ------------------------------------------------------------------
// The queries are `join([ '<line>' ... ], '\n')` of single-quoted Bicep strings whose `${...}` name a parameter, a
// string field of an object variable, or a variable computed from numbers. Parameters stand in by their type (an int
// for `int`, a plain name for `string`); anything else is refused, so a new kind of interpolation cannot slip through
// unchecked.

interface BicepQuery {
  file: string;
  line: number;
  text: string;
  // The object literal that holds the query, from its `{` to its `}` (alert rules: measure and dimensions).
  block: string;
}

function bicepString(literal: string, resolve: (expr: string) => string): string {
  let out = '';
  for (let i = 1; i < literal.length - 1; i++) {
    const c = literal[i];
    if (c === '\\') {
      const n = literal[++i];
      out += n === 'n' ? '\n' : n === 't' ? '\t' : n === 'r' ? '\r' : n;
    } else if (c === '$' && literal[i + 1] === '{') {
      const end = literal.indexOf('}', i);
      out += resolve(literal.slice(i + 2, end).trim());
      i = end;
    } else out += c;
  }
  return out;
}

function resolverFor(source: string, file: string): (expr: string) => string {
  const params = new Map([...source.matchAll(/^param (\w+) (\w+)/gm)].map((m) => [m[1] ?? '', m[2] ?? '']));
  const objects = new Map<string, Map<string, string>>();
  for (const m of source.matchAll(/^var (\w+) = \{\n([\s\S]*?)\n\}/gm)) {
    const fields = new Map(
      [...(m[2] ?? '').matchAll(/^\s+(\w+): '([^'\\$]*)'$/gm)].map((f) => [f[1] ?? '', f[2] ?? '']),
    );
    objects.set(m[1] ?? '', fields);
  }
  const numericVars = new Set(
    [...source.matchAll(/^var (\w+) = ([\w\s+*/()-]+)$/gm)]
      .filter((m) =>
        (m[2] ?? '').split(/[\s+*/()-]+/).every((t) => t === '' || /^\d+$/.test(t) || params.get(t) === 'int'),
      )
      .map((m) => m[1] ?? ''),
  );
  const stringVars = new Map([...source.matchAll(/^var (\w+) = ('[^'\n]*')$/gm)].map((m) => [m[1] ?? '', m[2] ?? '']));
  const resolve = (expr: string): string => {
    const [head = '', field, ...rest] = expr.split('.');
    if (field === undefined && stringVars.has(head)) return bicepString(stringVars.get(head)!, resolve);
    if (field !== undefined && rest.length === 0 && objects.get(head)?.has(field))
      return objects.get(head)!.get(field)!;
    if (field === undefined && params.get(head) === 'int') return '5';
    if (field === undefined && params.get(head) === 'string') return `keel_${head}`;
    if (field === undefined && numericVars.has(head)) return '65';
    throw new Error(`${file}: cannot resolve \${${expr}} in a query`);
  };
  return resolve;
}

// The object literal around position `at`: back to the `{` left open there, on to the `}` that closes it (braces
// inside Bicep strings, such as a query's `${...}`, are skipped).
function enclosingObject(source: string, at: number): { open: number; close: number } {
  const depthAt: number[] = [];
  const opens: number[] = [];
  let depth = 0;
  let inString = false;
  let open = -1;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === "'") inString = false;
      continue;
    }
    if (c === "'") inString = true;
    else if (c === '{') opens[depth++] = i;
    else if (c === '}') {
      depth--;
      if (open >= 0 && depth === depthAt[0]) return { open, close: i };
    }
    if (i === at) {
      open = opens[depth - 1] ?? -1;
      depthAt[0] = depth - 1;
    }
  }
  throw new Error(`no object encloses offset ${at}`);
}

function queriesOf(file: string): BicepQuery[] {
  const source = readFileSync(path.join(repoRoot, 'infra', 'modules', file), 'utf8');
  const resolve = resolverFor(source, file);
  const out: BicepQuery[] = [];
  for (const m of source.matchAll(/query: join\(\n\s*\[\n([\s\S]*?)\n\s*\],\n\s*'\\n'\n\s*\)/g)) {
    const lines = (m[1] ?? '').split('\n').map((l) => l.trim());
    for (const l of lines) if (!/^'.*'$/.test(l)) throw new Error(`${file}: a query line is not one string: ${l}`);
    const at = m.index;
    const { open, close } = enclosingObject(source, at);
    out.push({
      file,
      line: source.slice(0, at).split('\n').length,
      text: lines.map((l) => bicepString(l, resolve)).join('\n'),
      block: source.slice(open, close),
    });
  }
  return out;
}

// Workbook parameters are substituted by the portal before the query runs; stand in with a value of their kind.
const withWorkbookParameters = (q: string) => q.replaceAll('{TimeRange:grain}', '1h');

function check(k: KustoLanguage, globals: unknown, q: BicepQuery) {
  const code = k.KustoCode.ParseAndAnalyze(q.text, globals);
  const errors = list(code.GetDiagnostics())
    .filter((d) => d.Severity === 'Error')
    .map((d) => `${d.Message} at «${q.text.slice(d.Start, d.Start + 30)}»`);
  const columns = new Map(list(code.ResultType?.Columns).map((c) => [c.Name, c.Type.Name]));
  return { errors, columns };
}

const kusto = loadKusto();
const appInsights = globalsFor(kusto, APP_INSIGHTS_TABLES);
const resourceGraph = globalsFor(kusto, RESOURCE_GRAPH_TABLES);
const alertQueries = queriesOf('alerts.bicep');
const workbookQueries = queriesOf('workbook.bicep');

describe('KQL of the alert rules and the workbook (Kusto.Language, Application Insights schema)', () => {
  it('finds every query of both modules', () => {
    const count = (file: string) =>
      readFileSync(path.join(repoRoot, 'infra', 'modules', file), 'utf8').match(/^\s+query: /gm)?.length ?? 0;
    // `query: rule.query` and `query: t.query` pass a query on; every other `query:` is one of the joins read here.
    expect(alertQueries.length).toBe(count('alerts.bicep') - 1);
    expect(workbookQueries.length).toBe(count('workbook.bicep') - 1);
    expect(alertQueries.length).toBeGreaterThanOrEqual(12);
  });

  it('every alert query compiles; its measure is a numeric column and its dimensions string columns', () => {
    const problems: string[] = [];
    for (const q of alertQueries) {
      const where = `${q.file}:${q.line}`;
      const { errors, columns } = check(kusto, appInsights, q);
      problems.push(...errors.map((e) => `${where}: ${e}`));
      const measure = /\n\s+measure: '(\w+)'/.exec(q.block)?.[1];
      if (!measure) problems.push(`${where}: no measure`);
      else if (!['real', 'long', 'int', 'decimal'].includes(columns.get(measure) ?? ''))
        problems.push(`${where}: measure ${measure} is ${columns.get(measure) ?? 'not a result column'}`);
      const dimsRef = /\n\s+dimensions: (\w+|\[[\s\S]*?\n\s{4}\])/.exec(q.block)?.[1] ?? '';
      const dimsText = dimsRef.startsWith('[')
        ? dimsRef
        : (new RegExp(`^var ${dimsRef} = \\[([\\s\\S]*?)\\n\\]`, 'm').exec(
            readFileSync(path.join(repoRoot, 'infra', 'modules', q.file), 'utf8'),
          )?.[1] ?? '');
      for (const [, dim = ''] of dimsText.matchAll(/name: '(\w+)'/g))
        if (columns.get(dim) !== 'string')
          problems.push(`${where}: dimension ${dim} is ${columns.get(dim) ?? 'not a result column'}`);
    }
    expect(problems).toEqual([]);
  });

  // Each rule's notification links docs/runbook.md#<key> (customProperties.runbook): a key without its section there
  // sends the on-call to the top of the runbook.
  it('every alert rule key has its section in docs/runbook.md', () => {
    const bicep = readFileSync(path.join(repoRoot, 'infra', 'modules', 'alerts.bicep'), 'utf8');
    expect(bicep).toContain("runbook: 'docs/runbook.md#${rule.key}'");
    const keys = [...bicep.matchAll(/^\s+key: '([a-z-]+)'$/gm)].map((m) => m[1]!);
    expect(keys).toContain('liveness');
    expect(keys.length).toBeGreaterThanOrEqual(alertQueries.length);
    const runbook = readFileSync(path.join(repoRoot, 'docs', 'runbook.md'), 'utf8');
    expect(keys.filter((k) => !runbook.includes(`<a id="${k}"></a>`))).toEqual([]);
    // deploy.md's resource table counts the rules: all but the availability test's, which it adds as "+1".
    const deploy = readFileSync(path.join(repoRoot, 'docs', 'deploy.md'), 'utf8');
    expect(/action group \+ (\d+) log alert rules \(\+1 with the availability test\)/.exec(deploy)?.[1]).toBe(
      String(keys.length - 1),
    );
  });

  it('every workbook query compiles (Application Insights tiles, and the Resource Graph tile)', () => {
    const problems: string[] = [];
    for (const q of workbookQueries) {
      const graph = q.text.startsWith('alertsmanagementresources');
      const { errors } = check(kusto, graph ? resourceGraph : appInsights, {
        ...q,
        text: withWorkbookParameters(q.text),
      });
      problems.push(...errors.map((e) => `${q.file}:${q.line}: ${e}`));
    }
    expect(problems).toEqual([]);
  });

  it("every query of the docs' kusto blocks compiles", () => {
    const problems: string[] = [];
    let blocks = 0;
    for (const file of readdirSync(path.join(repoRoot, 'docs')).filter((f) => f.endsWith('.md'))) {
      const text = readFileSync(path.join(repoRoot, 'docs', file), 'utf8');
      for (const [, block = ''] of text.matchAll(/```kusto\n([\s\S]*?)```/g)) {
        blocks++;
        // Queries are separated by blank lines; `//` lines are comments.
        for (const query of block.split(/\n\s*\n/)) {
          const body = query
            .split('\n')
            .filter((l) => !l.trim().startsWith('//'))
            .join('\n')
            .trim();
          if (!body) continue;
          const { errors } = check(kusto, appInsights, { file, line: 0, text: body, block: '' });
          problems.push(...errors.map((e) => `docs/${file}: ${e}`));
        }
      }
    }
    expect(blocks).toBeGreaterThan(0);
    expect(problems).toEqual([]);
  });

  it('the check rejects what Azure would reject', () => {
    const bad = (text: string) => check(kusto, appInsights, { file: 'x', line: 0, text, block: '' });
    expect(bad('customMetrics | summarize moved = sum(valueSumm) by name').errors.join()).toMatch(/valueSumm/);
    expect(bad('customMetrics | where name == "a" | summarise n = count()').errors).not.toEqual([]);
    expect(bad('customEvents | summarize n = count() by tostring(customDimensions.queue)').columns.get('n')).toBe(
      'long',
    );
    expect(() => resolverFor('param n int\n', 'x.bicep')('missing')).toThrow(/cannot resolve/);
  });
});

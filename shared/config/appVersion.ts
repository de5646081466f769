// The app's version as the worker registry reports it: the "version" of Keel's package.json, found by walking up from
// this module (the TypeScript sources and the compiled dist/ tree both sit below it; the deployment package ships
// package.json at its root). "unknown" when none is found, so a missing file never stops the app.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
let cached: string | undefined;

export function appVersion(): string {
  if (cached !== undefined) return cached;
  let dir = here;
  for (let i = 0; i < 6; i++) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (pkg.name === 'keel' && typeof pkg.version === 'string' && pkg.version.length > 0)
        return (cached = pkg.version.slice(0, 64));
    } catch {
      // no package.json here (or not ours): look one folder up
    }
    dir = path.dirname(dir);
  }
  return (cached = 'unknown');
}

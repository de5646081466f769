// The app's version and build as the worker registry and /health report them: the "version" of Keel's package.json,
// found by walking up from this module (the TypeScript sources and the compiled dist/ tree both sit below it; the
// deployment package ships package.json at its root), and the "keelBuild" id `npm run package` stamps into the
// package's package.json (the commit it was built from). "unknown" / null when none is found, so a missing file never
// stops the app.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
let cached: { version: string; buildId: string | null } | undefined;

function readOwnPackage(): { version: string; buildId: string | null } {
  if (cached !== undefined) return cached;
  let dir = here;
  for (let i = 0; i < 6; i++) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
        keelBuild?: { id?: unknown };
      };
      if (pkg.name === 'keel' && typeof pkg.version === 'string' && pkg.version.length > 0) {
        const id = pkg.keelBuild?.id;
        return (cached = {
          version: pkg.version.slice(0, 64),
          buildId: typeof id === 'string' && id.length > 0 ? id.slice(0, 128) : null,
        });
      }
    } catch {
      // no package.json here (or not ours): look one folder up
    }
    dir = path.dirname(dir);
  }
  return (cached = { version: 'unknown', buildId: null });
}

export function appVersion(): string {
  return readOwnPackage().version;
}

/** The build id `npm run package` stamped into the deployment package; null in a checkout. KEEL_BUILD_ID overrides it. */
export function packageBuildId(): string | null {
  return readOwnPackage().buildId;
}

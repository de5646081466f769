// npm runs a script through a shell: npm -> sh -c -> node. npm passes SIGINT/SIGTERM on to the shell only, and
// Debian's sh (dash) passes neither on: it dies of SIGTERM (npm exits, node is orphaned) and waits out SIGINT
// (nothing stops). So a signal sent to npm alone (kill <pid>, a service manager or an IDE's stop button, unlike a
// terminal's Ctrl+C, which signals the whole process group) never reached node. package.json's scripts therefore `exec` node (npm -> node: npm's forwarded signal is node's). What
// is left: npm itself killed outright (SIGKILL, a crash), which would leave node running with its ports and its
// embedded PostgreSQL. So, under npm, once the process that started this one is gone (re-parented), this one
// signals itself: the same graceful stop as Ctrl+C.
export function stopWhenOrphaned(
  signal: NodeJS.Signals = 'SIGTERM',
  opts: { everyMs?: number; env?: NodeJS.ProcessEnv } = {},
): () => void {
  const env = opts.env ?? process.env;
  const parent = process.ppid;
  // Only under npm (a plain `node scripts/start.ts &` may outlive its shell on purpose), and not when started by
  // init or a container's PID 1 (nothing to outlive).
  if (env.npm_lifecycle_event === undefined || parent <= 1) return () => undefined;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    console.log(`\nthe npm process that started this one (${parent}) is gone: stopping as on ${signal}`);
    process.kill(process.pid, signal);
  }, opts.everyMs ?? 500);
  timer.unref();
  return () => clearInterval(timer);
}

// npm run pg:stock: a throwaway cluster of the machine's own PostgreSQL (Debian's `postgresql` package, default
// postgresql.conf, jit on) for development and benchmarks. Prints the admin URL and the server log's path, runs until
// Ctrl+C or SIGTERM (to npm alone too: package.json `exec`s this script, and if npm dies first this process notices,
// dev/parentWatch.ts), then stops the server and removes its folder.
import { startStockPostgres } from '../dev/stockPostgres.js';
import { stopWhenOrphaned } from '../dev/parentWatch.js';

stopWhenOrphaned();

const server = await startStockPostgres().catch((err: Error) => {
  console.error(err.message);
  process.exit(1);
});
console.log(
  `stock PostgreSQL ${server.version} (${server.binDir}), jit ${server.jitAvailable ? 'available' : 'not available'}`,
);
console.log(`url: ${server.url}`);
console.log(`log: ${server.logFile}`);
console.log('Ctrl+C stops it and removes its data.');

let stopping = false;
const shutdown = (signal: NodeJS.Signals, code: number) => {
  if (stopping) return;
  stopping = true;
  console.log(`${signal}: stopping the server`);
  server.stop().then(
    () => process.exit(code),
    (err: unknown) => {
      console.error(`stop failed: ${(err as Error).message}`);
      process.exit(1);
    },
  );
};
process.on('SIGINT', () => shutdown('SIGINT', 0));
process.on('SIGTERM', () => shutdown('SIGTERM', 0));
process.on('SIGHUP', () => shutdown('SIGHUP', 0));
// Keep the event loop alive until a signal arrives.
setInterval(() => undefined, 1 << 30);

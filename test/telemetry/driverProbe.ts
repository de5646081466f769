// Run by drivers.test.ts in a child process, as the deployed app starts: the function app (functions/app.ts, which
// sets up telemetry first) with Application Insights on, then the runtime (getRuntime, as the first invocation does)
// on the configured PostgreSQL store. Prints the database drivers that were loaded and those instrumented.
import { createRequire, registerHooks } from 'node:module';

const resolved = new Set<string>();
registerHooks({
  resolve(specifier, context, next) {
    const r = next(specifier, context);
    resolved.add(r.url);
    return r;
  },
});

await import('../../functions/app.js');
const { getRuntime } = await import('../../shared/app/runtime.js');
const { instrumentedDrivers } = await import('../../shared/telemetry/index.js');
const runtime = await getRuntime();
await runtime.store.listQueues();
await runtime.close();

const files = [...resolved, ...Object.keys(createRequire(import.meta.url).cache)];
const drivers = ['pg', 'mssql', 'tedious', 'oracledb'].filter((d) =>
  files.some((f) => f.includes(`/node_modules/${d}/`)),
);
console.log(JSON.stringify({ drivers, instrumented: instrumentedDrivers() }));
process.exit(0);

// npm start: the local host. Embedded PostgreSQL (data in .data/pg), Azurite in-process (.data/azurite), HTTP on
// 7071 with the same routes as Azure, timers on their schedules, queue triggers polling Azurite with the host.json
// semantics. Settings: local.settings.json "Values" (if present), then the environment.
//   --demo   also create the demo transfer's two databases and configure the transfer `demo_orders` (`npm start -- --demo`;
//            scripts/demo.ts uses it; the transfer examples in the docs need it)
import '../functions/setup.js'; // telemetry first (a no-op without APPLICATIONINSIGHTS_CONNECTION_STRING)
import { bootLocal, StartupError } from '../dev/boot.js';
import { definitions } from '../functions/definitions.js';
import { encodeClientPrincipal } from '../shared/ops/auth.js';
import { configuredHandlersDir } from '../shared/jobs/handlerFolder.js';
import { scheduleQueue } from '../shared/jobs/scheduler.js';
import path from 'node:path';
import { stopWhenOrphaned } from '../dev/parentWatch.js';
import { warnIfOldNode } from '../dev/nodeVersion.js';

const demo = process.argv.includes('--demo');
warnIfOldNode();

const GRACE_MS = 5_000;
// Ctrl+C during start-up: stop at once (the embedded server, if started, is stopped on exit).
const early = () => process.exit(130);
process.on('SIGINT', early);
process.on('SIGTERM', early);
// A signal sent to npm alone does not reach this process: stop as on SIGTERM when npm is gone (dev/parentWatch.ts).
const stopOrphanWatch = stopWhenOrphaned();
const keel = await bootLocal({ definitions, demo, shutdownGraceMs: GRACE_MS }).catch((err: Error) => {
  // A start-up problem is a message, not a stack: what is wrong and what to do.
  console.error(`\nKeel could not start: ${err.message}`);
  if (!(err instanceof StartupError) && process.env.KEEL_DEBUG) console.error(err.stack);
  process.exit(1);
});
const ops = `${keel.baseUrl}/api/ops`;
const role = keel.settings.KEEL_OPS_OPERATOR_ROLE;
// What was loaded, so a handler or schedule that is missing (not in the folder, not exported) shows at once.
const { registry, schedules } = keel.runtime;
const handlersDir = path.relative(process.cwd(), configuredHandlersDir(process.env)) || '.';
// Columns as wide as the longest name (example.report.prepare, 22 characters, pushed its row's columns out of line).
const nameWidth = Math.max(20, ...registry.all().map((h) => h.type.length), ...schedules.map((d) => d.name.length));
const queueWidth = Math.max(12, ...registry.all().map((h) => (h.options.queue ?? 'default').length));
const handlerLines = registry
  .all()
  .map(
    (h) =>
      `  ${h.type.padEnd(nameWidth)} queue ${(h.options.queue ?? 'default').padEnd(queueWidth)} ${h.source ?? '(demo, dev/)'}`,
  );
const scheduleLines = schedules.map(
  (d) =>
    `  ${d.name.padEnd(nameWidth)} ${`${d.cron} ${d.timeZone}`.padEnd(28)} -> ${d.type} (queue ${scheduleQueue(d, registry)})` +
    `${'source' in d ? `  ${String((d as { source: unknown }).source)}` : ''}`,
);
console.log(`
Keel local host is running.
  ${keel.notes.join('\n  ')}

Functions:
${keel.host.functions.map((f) => `  ${f.name.padEnd(14)} ${f.kind.padEnd(6)} ${f.detail}`).join('\n')}

Handlers (from ${handlersDir}/):
${handlerLines.join('\n') || '  none'}

Schedules:
${scheduleLines.join('\n') || '  none'}

Console:   ${keel.baseUrl}/api/console/   (sign in with the ops key below; docs/operations.md)
Ops API:   ${ops}/health   (OpenAPI: ${ops}/openapi.json)
Ops key:   ${keel.opsKey}   (stored in ${keel.dataDir}/ops-key; send it in the x-functions-key header: a key in a URL ends up in logs)
Operator:  destructive routes also need x-ms-client-principal with role "${role}", e.g.
           -H "x-ms-client-principal: ${encodeClientPrincipal({ name: 'local-operator', roles: [role] })}"

  curl -s -H "x-functions-key: ${keel.opsKey}" ${ops}/stats
`);
// The machine-readable ready line, for a program that started this one with its output piped (the e2e tests, a
// script): one line, `KEEL_READY {"baseUrl","pid","azurite"}`, printed once the host serves. Not on a terminal,
// where the banner above says the same to a person (README.md, "npm start").
if (!process.stdout.isTTY)
  console.log(
    `KEEL_READY ${JSON.stringify({ baseUrl: keel.baseUrl, pid: process.pid, azurite: keel.azuriteConnection })}`,
  );

// One Ctrl+C can arrive more than once: the terminal signals the whole foreground process group (npm, its shell,
// node) and npm forwards the signal to its script as well. A repeat within DUPLICATE_SIGNAL_MS is that same
// keypress and is ignored; one later is a second Ctrl+C, and stops at once.
const DUPLICATE_SIGNAL_MS = 1_000;
let stoppingSince: number | undefined;
async function shutdown(signal: string) {
  if (stoppingSince !== undefined) {
    if (Date.now() - stoppingSince < DUPLICATE_SIGNAL_MS) return;
    // Not "on the next start": zombie rescue takes a job back once its last heartbeat is older than its queue's
    // zombie timeout (300 s by default), whenever maintenance runs after that.
    console.log(
      `${signal} again: stopping now (jobs still running stay processing until maintenance rescues them, once their last heartbeat is older than their queue's zombie timeout, 300 s by default; that attempt counts)`,
    );
    process.exit(1);
  }
  stoppingSince = Date.now();
  // Stopping already: npm going away meanwhile (killed, or its terminal closed) must not read as a second Ctrl+C
  // (the watcher's SIGTERM came a second or more later and cut the grace short, leaving jobs 'processing').
  stopOrphanWatch();
  // A signal is not a keypress: say how to repeat the one that came (a second SIGTERM from kill or a service manager).
  const again = signal === 'SIGINT' ? 'Ctrl+C again' : `send ${signal} again`;
  console.log(
    `\n${signal}: stopping; running jobs get ${GRACE_MS / 1000} s to finish, then are released (${again} to stop now)...`,
  );
  const force = setTimeout(() => process.exit(1), 30_000);
  force.unref();
  try {
    await keel.stop();
    console.log('stopped');
    process.exit(0);
  } catch (err) {
    console.error(`stopping failed: ${(err as Error).message}`);
    process.exit(1);
  }
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
// Swapped only now, in the same tick: removing the last listener restores the default action (death), so a
// signal sent as soon as KEEL_READY was read would have killed a process preempted between the two.
process.off('SIGINT', early);
process.off('SIGTERM', early);

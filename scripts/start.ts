// npm start: the local host. Embedded PostgreSQL (data in .data/pg), Azurite in-process (.data/azurite), HTTP on
// 7071 with the same routes as Azure, timers on their schedules, queue triggers polling Azurite with the host.json
// semantics. Settings: local.settings.json "Values" (if present), then the environment.
//   --demo   also create the demo transfer's two databases and configure the transfer (scripts/demo.ts uses it)
import '../functions/setup.js'; // telemetry first (a no-op without APPLICATIONINSIGHTS_CONNECTION_STRING)
import { bootLocal } from '../shared/host/boot.js';
import { encodeClientPrincipal } from '../shared/ops/auth.js';

const demo = process.argv.includes('--demo');

const keel = await bootLocal({ demo });
const ops = `${keel.baseUrl}/api/ops`;
const role = keel.settings.KEEL_OPS_OPERATOR_ROLE;
console.log(`
Keel local host is running.
  ${keel.notes.join('\n  ')}

Functions:
${keel.host.functions.map((f) => `  ${f.name.padEnd(14)} ${f.kind.padEnd(6)} ${f.detail}`).join('\n')}

Console:   ${keel.baseUrl}/api/console/   (sign in with the ops key below; docs/operations.md)
Ops API:   ${ops}/health   (OpenAPI: ${ops}/openapi.json)
Ops key:   ${keel.opsKey}   (stored in ${keel.dataDir}/ops-key; send it as x-functions-key or ?code=)
Operator:  destructive routes also need x-ms-client-principal with role "${role}", e.g.
           -H "x-ms-client-principal: ${encodeClientPrincipal({ name: 'local-operator', roles: [role] })}"

  curl -s -H "x-functions-key: ${keel.opsKey}" ${ops}/stats
KEEL_READY ${JSON.stringify({ baseUrl: keel.baseUrl, pid: process.pid, azurite: keel.azuriteConnection })}
`);

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  console.log(`\n${signal}: stopping (running jobs get a few seconds to finish)...`);
  const force = setTimeout(() => process.exit(1), 30_000);
  force.unref();
  await keel.stop();
  process.exit(0);
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));

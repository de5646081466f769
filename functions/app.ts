// Loaded by functions/index.ts (the entry point): registers every definition of functions/definitions.ts with the
// host. Settings are parsed here, at startup, so a bad app setting fails the
// app's indexing with the setting's name instead of failing the first invocation.
import './setup.js'; // telemetry first
import { app } from '@azure/functions';
import { parseSettings } from '../shared/config/settings.js';
import { principalTrustWarning } from '../shared/ops/principalTrust.js';
import { definitions, queueNameOf, scheduleOf } from './definitions.js';
import { installGracefulShutdown } from '../shared/app/shutdown.js';
import { flushTelemetry } from '../shared/telemetry/index.js';
import { processEnv } from '../shared/app/environment.js';

const env = processEnv();
const settings = parseSettings(env);
// Under the Functions host (Azure, a container, func start) the principal header is believed only behind App
// Service authentication: KEEL_TRUST_CLIENT_PRINCIPAL is the local host's (dev/) and fails the start here.
if (settings.KEEL_TRUST_CLIENT_PRINCIPAL !== undefined) {
  throw new Error(
    'KEEL_TRUST_CLIENT_PRINCIPAL is for the local host (npm start) only and is refused under the Azure Functions host: remove it; in Azure enable App Service authentication (docs/operations.md)',
  );
}
const trustWarning = principalTrustWarning(env);
if (trustWarning) console.warn(trustWarning);

for (const def of definitions) {
  switch (def.kind) {
    case 'http':
      app.http(def.name, { route: def.route, methods: def.methods, authLevel: def.authLevel, handler: def.handler });
      break;
    case 'queue':
      app.storageQueue(def.name, {
        queueName: queueNameOf(def, settings),
        connection: def.connection,
        handler: def.handler,
      });
      break;
    case 'timer':
      app.timer(def.name, {
        schedule: scheduleOf(def, settings),
        runOnStartup: def.runOnStartup,
        handler: def.handler,
      });
      break;
  }
}

// Scale-in, redeploys and restarts: the host's appTerminate (and a container's SIGTERM) stop the job processors within
// KEEL_SHUTDOWN_GRACE_MS, handing running jobs back with their attempt given back, then flush telemetry.
installGracefulShutdown(
  { appTerminate: (handler) => app.hook.appTerminate(handler), process },
  { graceMs: settings.KEEL_SHUTDOWN_GRACE_MS, log: (line) => console.log(line), after: flushTelemetry },
);

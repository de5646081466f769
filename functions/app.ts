// Loaded by functions/index.ts (the entry point): registers every definition of functions/definitions.ts with the
// host. Settings are parsed here, at startup, so a bad app setting fails the
// app's indexing with the setting's name instead of failing the first invocation.
import './setup.js'; // telemetry first
import { app } from '@azure/functions';
import { parseSettings } from '../shared/config/settings.js';
import { definitions, queueNameOf, scheduleOf } from './definitions.js';

const settings = parseSettings(process.env);

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

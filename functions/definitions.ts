// THE list of Keel's functions. functions/index.ts registers it with the Azure Functions host; the local host
// (dev/localHost.ts) is handed the same list by scripts/start.ts, scripts/demo.ts and the tests: HTTP routes,
// timers on their schedules, queue pollers. Queue names and schedules come from app settings
// (shared/config/settings.ts), resolved at registration (shared/app/definitions.ts).
import type { FunctionDefinition } from '../shared/app/definitions.js';
import { jobRunner } from './jobRunner.js';
import { dispatcher } from './dispatcher.js';
import { maintenance } from './maintenance.js';
import { scheduler } from './scheduler.js';
import { ops } from './ops.js';
import { consoleApi, consoleAssets } from './console.js';
import { health } from './health.js';
import { transferTimer } from './transferTimer.js';
import { transferStage } from './transferStage.js';
import { transferApply } from './transferApply.js';

export const definitions: readonly FunctionDefinition[] = [
  {
    name: 'jobRunner',
    kind: 'queue',
    queueSetting: 'KEEL_JOBS_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: jobRunner,
  },
  {
    name: 'dispatcher',
    kind: 'timer',
    scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
    runOnStartup: false,
    handler: dispatcher,
  },
  {
    name: 'maintenance',
    kind: 'timer',
    scheduleSetting: 'KEEL_MAINTENANCE_SCHEDULE',
    runOnStartup: false,
    handler: maintenance,
  },
  {
    name: 'scheduler',
    kind: 'timer',
    scheduleSetting: 'KEEL_SCHEDULER_SCHEDULE',
    runOnStartup: false,
    handler: scheduler,
  },
  {
    name: 'transferTimer',
    kind: 'timer',
    scheduleSetting: 'KEEL_TRANSFER_SCHEDULE',
    runOnStartup: false,
    handler: transferTimer,
  },
  {
    name: 'transferStage',
    kind: 'queue',
    queueSetting: 'KEEL_TRANSFER_STAGE_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: transferStage,
  },
  {
    name: 'transferApply',
    kind: 'queue',
    queueSetting: 'KEEL_TRANSFER_APPLY_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: transferApply,
  },
  {
    name: 'ops',
    kind: 'http',
    route: 'ops/{*path}',
    methods: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
    authLevel: 'function',
    handler: ops,
    bodyLimitSetting: 'KEEL_OPS_MAX_BODY_BYTES',
  },
  // The ops console (docs/operations.md): static files, anonymous (they hold no data) ...
  {
    name: 'console',
    kind: 'http',
    route: 'console/{*path}',
    methods: ['GET'],
    authLevel: 'anonymous',
    handler: consoleAssets,
  },
  // ... and its API: the session, and the ops API for App Service authentication sign-in (refused without it).
  {
    name: 'consoleApi',
    kind: 'http',
    route: 'console-api/{*path}',
    methods: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
    authLevel: 'anonymous',
    handler: consoleApi,
    bodyLimitSetting: 'KEEL_OPS_MAX_BODY_BYTES',
  },
  // Liveness only, without a key: no internals (readiness detail stays behind the key at ops/health).
  { name: 'health', kind: 'http', route: 'health', methods: ['GET'], authLevel: 'anonymous', handler: health },
];

export {
  queueNameOf,
  scheduleOf,
  type FunctionDefinition,
  type HttpDefinition,
  type QueueDefinition,
  type TimerDefinition,
} from '../shared/app/definitions.js';

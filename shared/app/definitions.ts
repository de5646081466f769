// The shape of a Keel function definition (functions/definitions.ts holds THE list): what the Azure Functions
// registration (functions/index.ts) and the local host (dev/localHost.ts) both read. It lives below functions/
// so the local host can be handed the list without importing functions/ itself.
import type { HttpHandler, HttpMethod, StorageQueueHandler, TimerHandler } from '@azure/functions';
import type { Settings } from '../config/settings.js';

type QueueSetting = 'KEEL_JOBS_QUEUE' | 'KEEL_TRANSFER_STAGE_QUEUE' | 'KEEL_TRANSFER_APPLY_QUEUE';
type ScheduleSetting =
  'KEEL_DISPATCH_SCHEDULE' | 'KEEL_MAINTENANCE_SCHEDULE' | 'KEEL_TRANSFER_SCHEDULE' | 'KEEL_SCHEDULER_SCHEDULE';

export interface HttpDefinition {
  name: string;
  kind: 'http';
  route: string; // below the host's routePrefix ("api")
  methods: HttpMethod[];
  authLevel: 'function' | 'anonymous';
  handler: HttpHandler;
}

export interface QueueDefinition {
  name: string;
  kind: 'queue';
  queueSetting: QueueSetting;
  connection: 'AzureWebJobsStorage';
  handler: StorageQueueHandler;
}

export interface TimerDefinition {
  name: string;
  kind: 'timer';
  scheduleSetting: ScheduleSetting;
  runOnStartup: boolean;
  handler: TimerHandler;
}

export type FunctionDefinition = HttpDefinition | QueueDefinition | TimerDefinition;

export function queueNameOf(def: QueueDefinition, settings: Settings): string {
  return settings[def.queueSetting];
}

export function scheduleOf(def: TimerDefinition, settings: Settings): string {
  return settings[def.scheduleSetting];
}

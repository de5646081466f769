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
  // The setting that bounds this route's request bodies (the ops API's KEEL_OPS_MAX_BODY_BYTES): the local host keeps
  // at most one byte more than it of a body (the handler's own limit then refuses it, 413), never the whole body up to
  // its own cap. Azure's host does not read it; the handler enforces the limit there as it reads.
  bodyLimitSetting?: 'KEEL_OPS_MAX_BODY_BYTES';
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

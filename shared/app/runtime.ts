// Composition root: builds the store, the handler registry, the processor, the queue gateway and the
// transfer service from the app settings. Azure functions and the local host both get it from here.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { JobStore } from '../jobs/contract.js';
import { HandlerRegistry, consoleLogger } from '../jobs/registry.js';
import { JobProcessor } from '../jobs/processor.js';
import { checkSchedules, configuredHandlersDir, loadHandlerFolder, registerHandlers } from '../jobs/handlerFolder.js';
import type { ScheduleDefinition } from '../jobs/define.js';
import { engineNamed } from '../engines/registry.js';
import { parseSettings, type Settings } from '../config/settings.js';
import { processEnv, type AppEnv } from './environment.js';
import { StorageQueueGateway, type QueueGateway } from './queues.js';
import { createTransferService } from './transferComposition.js';
import type { TransferService } from '../transfer/service.js';
import { processorTelemetry } from './telemetryHooks.js';
import { appFunctionTimeoutMs } from './hostJson.js';
import { registerLiveProcessor } from './shutdown.js';
import { hostingInstanceId } from '../jobs/presence.js';
import { appVersion, packageBuildId } from '../config/appVersion.js';

export interface Runtime {
  readonly settings: Settings;
  // The environment the settings were parsed from: the per-feature schemas of the transfers read it.
  readonly env: AppEnv;
  readonly store: JobStore;
  readonly registry: HandlerRegistry;
  // Recurring jobs declared in handlers/ (and by overrides.schedules).
  readonly schedules: readonly ScheduleDefinition[];
  readonly processor: JobProcessor;
  readonly queues: QueueGateway;
  // null when no transfer is configured (KEEL_TRANSFERS / KEEL_TRANSFERS_FILE unset).
  readonly transfers: TransferService | null;
  readonly workerId: string;
  close(): Promise<void>;
}

export interface RuntimeOverrides {
  store?: JobStore;
  registry?: HandlerRegistry;
  queues?: QueueGateway;
  transfers?: TransferService | null;
  // The environment `settings` came from (default: the process's); the per-feature schemas read it.
  env?: AppEnv;
  // Extra job handlers to register (the local host's demo types, tests, apps embedding Keel).
  register?: (registry: HandlerRegistry) => void;
  // The handlers folder to load (default: KEEL_HANDLERS_DIR, else handlers/ at the repository root, dist/handlers
  // when built); null loads none. Ignored when `registry` is given.
  handlersDir?: string | null;
  // Extra recurring schedules (tests, apps embedding Keel).
  schedules?: readonly ScheduleDefinition[];
}

async function openStore(settings: Settings): Promise<JobStore> {
  const engine = engineNamed(settings.KEEL_STORE_ENGINE);
  if (!engine.openJobStore) throw new Error(`KEEL_STORE_ENGINE=${engine.name} cannot hold the jobs`);
  return engine.openJobStore(settings);
}

// The default worker id: the hosting instance (WEBSITE_INSTANCE_ID's first 12 digits on Azure Functions, where the
// host name says little; else the host name), the process and a random part, so a restarted process on the same
// instance is a new worker. A Functions instance's process keeps its runtime across invocations: one worker.
export function runtimeWorkerId(env: NodeJS.ProcessEnv): string {
  const instance = hostingInstanceId(env)?.slice(0, 12) ?? hostname();
  return `${instance}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

export async function createRuntime(settings: Settings, overrides: RuntimeOverrides = {}): Promise<Runtime> {
  const env = overrides.env ?? processEnv();
  // The hosting instance is the process's (a platform variable), whatever env the runtime's settings came from.
  const workerId = settings.KEEL_WORKER_ID ?? runtimeWorkerId(processEnv());
  // Handlers' timeoutMs are checked against host.json functionTimeout as they register.
  const registry = overrides.registry ?? new HandlerRegistry({ functionTimeoutMs: appFunctionTimeoutMs() });
  const schedules: ScheduleDefinition[] = [];
  if (!overrides.registry) {
    // KEEL_HANDLERS_DIR is the process's (vitest.config.ts sets it for every runtime of the project's tests; `npm
    // start` reads it before any settings), not the runtime env's, which a test may give with its settings only.
    const dir = overrides.handlersDir === undefined ? configuredHandlersDir(processEnv()) : overrides.handlersDir;
    if (dir !== null) {
      const folder = await loadHandlerFolder(dir);
      registerHandlers(registry, folder.handlers);
      schedules.push(...folder.schedules);
    }
  }
  overrides.register?.(registry);
  schedules.push(...(overrides.schedules ?? []));
  checkSchedules(registry, schedules);
  const store = overrides.store ?? (await openStore(settings));
  const queues =
    overrides.queues ??
    StorageQueueGateway.fromConnection({
      connectionString: settings.AzureWebJobsStorage,
      queueServiceUri: settings.AzureWebJobsStorage__queueServiceUri,
      accountName: settings.AzureWebJobsStorage__accountName,
      clientId: settings.AzureWebJobsStorage__clientId,
    });
  let transfers: TransferService | null;
  try {
    transfers = overrides.transfers !== undefined ? overrides.transfers : await createTransferService(settings, env);
  } catch (err) {
    if (!overrides.store) await store.close().catch(() => undefined);
    throw err;
  }
  const processor = new JobProcessor({
    store,
    registry,
    workerId,
    leaseSeconds: settings.KEEL_LEASE_SECONDS,
    heartbeatIntervalMs: settings.KEEL_HEARTBEAT_MS,
    progressIntervalMs: settings.KEEL_PROGRESS_INTERVAL_MS,
    maxResultBytes: settings.KEEL_MAX_RESULT_BYTES,
    jobLogLines: settings.KEEL_JOB_LOG_LINES,
    log: consoleLogger,
    events: processorTelemetry,
    presence: {
      appVersion: appVersion(),
      buildId: settings.KEEL_BUILD_ID ?? packageBuildId(),
      queues: settings.KEEL_DISPATCH_QUEUES.length > 0 ? settings.KEEL_DISPATCH_QUEUES : null,
      concurrency: settings.KEEL_DISPATCH_CONCURRENCY,
      refreshMs: settings.KEEL_WORKER_REFRESH_MS,
      instanceId: hostingInstanceId(processEnv()),
    },
  });
  // The processor registers in the worker registry when it starts working (its first queue message, timer pass or
  // job: presence.ts), not here: building the runtime calls no store (an instance that only answers the ops API is
  // no worker).
  // The app's graceful stop (appTerminate, SIGTERM: shared/app/shutdown.ts) stops every live processor.
  const forgetProcessor = registerLiveProcessor(processor);
  let closed: Promise<void> | undefined;
  return {
    settings,
    env,
    store,
    registry,
    schedules,
    processor,
    queues,
    transfers,
    workerId,
    close() {
      closed ??= (async () => {
        await processor.shutdown(5_000).catch(() => undefined);
        forgetProcessor();
        if (transfers && overrides.transfers === undefined) await transfers.close().catch(() => undefined);
        if (!overrides.store) await store.close();
        // Process-wide pools the store and the journal share (SQL Server's): closed with the runtime.
        await engineNamed(settings.KEEL_STORE_ENGINE).closeShared?.();
      })();
      return closed;
    },
  };
}

// The process-wide runtime the Azure functions use: created on first use from the process environment.
let current: Promise<Runtime> | undefined;

export function getRuntime(): Promise<Runtime> {
  if (!current) {
    current = (async () => {
      const env = processEnv();
      return createRuntime(parseSettings(env), { env });
    })();
    current.catch(() => {
      current = undefined; // a failed start (database down) is retried by the next invocation
    });
  }
  return current;
}

// Installs a runtime built elsewhere (the local host, tests).
export function setRuntime(runtime: Runtime | undefined): void {
  current = runtime ? Promise.resolve(runtime) : undefined;
}

// One-time Application Insights (OpenTelemetry) setup, driven by APPLICATIONINSIGHTS_CONNECTION_STRING.
//
// With a connection string: `useAzureMonitor` from applicationinsights v3 installs the global OpenTelemetry
// tracer, meter and logger providers with the Azure Monitor exporters, the Azure Functions pre-invocation
// hook (so spans and events created inside a function run join the invocation's operation), and the
// built-in instrumentations: http, Azure SDK (storage queues), and PostgreSQL (`pg`). Keel adds the
// OpenTelemetry instrumentations for `tedious` (the driver under `mssql`) and `oracledb`, each only when an engine
// that uses it is first opened (instrumentDriver, called by shared/engines/registry.ts), so calls to every
// configured database appear as dependencies correlated with the invocation, and a deployment loads no driver of an
// engine it does not use (test/telemetry/drivers.test.ts).
//
// Without one (local runs, tests): nothing is loaded, nothing is registered, no network is touched; the
// facade stays bound to the OpenTelemetry API's no-op providers and every call is a valid no-op.

import { createRequire } from 'node:module';
import { diag, type TracerProvider } from '@opentelemetry/api';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import type { TokenCredential } from '@azure/identity';
import type * as AppInsights from 'applicationinsights';

const require = createRequire(import.meta.url);

export interface TelemetryEnv {
  APPLICATIONINSIGHTS_CONNECTION_STRING?: string | undefined;
  /** `Authorization=AAD;ClientId=<guid>`: use Microsoft Entra auth (App Insights local auth disabled). */
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING?: string | undefined;
  /** The user-assigned managed identity's client id (fallback for the Entra credential). */
  AZURE_CLIENT_ID?: string | undefined;
  /** `false` turns telemetry off even with a connection string. */
  KEEL_TELEMETRY_ENABLED?: string | undefined;
  [key: string]: string | undefined;
}

// The settings initTelemetryOnce parses (shared/app/settingsIndex.ts; the shape of shared/config/declaration.ts,
// written out because telemetry is a leaf). The OpenTelemetry SDK reads its own OTEL_* variables (docs/telemetry.md).
export const TELEMETRY_SETTINGS: readonly { name: string; type: string; default: string; doc: string }[] = [
  {
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING',
    type: 'Application Insights connection string',
    default: 'unset',
    doc: 'turns telemetry on (without it every telemetry call is a no-op)',
  },
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING',
    type: '"Authorization=AAD;ClientId=<guid>"',
    default: 'unset',
    doc: 'ingestion with Microsoft Entra auth, as the managed identity',
  },
  {
    name: 'AZURE_CLIENT_ID',
    type: 'client id',
    default: 'unset',
    doc: "the user-assigned identity, when the authentication string names none (also read by @azure/identity's credentials)",
  },
  {
    name: 'KEEL_TELEMETRY_ENABLED',
    type: 'boolean',
    default: 'true',
    doc: '"false" turns telemetry off even with a connection string',
  },
];

export interface TelemetryState {
  enabled: boolean;
}

export interface InitHooks {
  /** Called after the global providers are installed (index.ts rebinds the facade here). */
  onEnabled?: () => void;
}

let state: TelemetryState | undefined;

/** The auth part of the exporter options, from APPLICATIONINSIGHTS_AUTHENTICATION_STRING. */
export function parseAuthenticationString(value: string | undefined): { aad: boolean; clientId?: string } {
  if (!value) return { aad: false };
  const parts = new Map<string, string>();
  for (const piece of value.split(';')) {
    const i = piece.indexOf('=');
    if (i > 0) parts.set(piece.slice(0, i).trim().toLowerCase(), piece.slice(i + 1).trim());
  }
  const aad = (parts.get('authorization') ?? '').toUpperCase() === 'AAD';
  const clientId = parts.get('clientid');
  return clientId ? { aad, clientId } : { aad };
}

function entraCredential(env: TelemetryEnv): TokenCredential | undefined {
  const auth = parseAuthenticationString(env.APPLICATIONINSIGHTS_AUTHENTICATION_STRING);
  if (!auth.aad) return undefined;
  const clientId = auth.clientId ?? env.AZURE_CLIENT_ID;
  const identity = require('@azure/identity') as typeof import('@azure/identity');
  return clientId ? new identity.ManagedIdentityCredential({ clientId }) : new identity.ManagedIdentityCredential();
}

/**
 * Keel is ESM; the drivers are CommonJS. OpenTelemetry's instrumentations patch a driver when it passes
 * through `require`, which an ESM `import` of the package does not do. Requiring the driver once, after
 * its instrumentation is registered, patches the shared CommonJS module instance (`pg` Client,
 * `tedious` Connection, the `oracledb` trace handler), so it works whether the engine imported its
 * driver before or after. `mssql` uses `tedious` underneath. An engine names its driver here
 * (EngineDescriptor.telemetryDriver); a new driver adds its instrumentation to this table.
 */
const INSTRUMENTATIONS = {
  pg: () => {
    const { PgInstrumentation } =
      require('@opentelemetry/instrumentation-pg') as typeof import('@opentelemetry/instrumentation-pg');
    return new PgInstrumentation();
  },
  tedious: () => {
    const { TediousInstrumentation } =
      require('@opentelemetry/instrumentation-tedious') as typeof import('@opentelemetry/instrumentation-tedious');
    return new TediousInstrumentation();
  },
  oracledb: () => {
    const { OracleInstrumentation } =
      require('@opentelemetry/instrumentation-oracledb') as typeof import('@opentelemetry/instrumentation-oracledb');
    return new OracleInstrumentation();
  },
} satisfies Record<string, () => Instrumentation>;

export type InstrumentedDriver = keyof typeof INSTRUMENTATIONS;

// useAzureMonitor registers these itself (instrumentationOptions below): the driver is only required to patch it.
const BUILT_IN: ReadonlySet<InstrumentedDriver> = new Set(['pg']);

// The drivers instrumented since telemetry was enabled, each with its unregister function.
const instrumented = new Map<InstrumentedDriver, () => void>();

export interface DatabaseInstrumentationOptions {
  /** The drivers to instrument (and require, which patches them). */
  drivers: readonly InstrumentedDriver[];
  /** Defaults to the global tracer provider (the one useAzureMonitor installs). */
  tracerProvider?: TracerProvider;
}

/**
 * Registers the instrumentations of `drivers` and patches those drivers, loading them. Returns a function that
 * unregisters them. Spans are children of the active context, i.e. of the function invocation.
 */
export function registerDatabaseInstrumentations(options: DatabaseInstrumentationOptions): () => void {
  const instrumentations: Instrumentation[] = [];
  for (const name of options.drivers) {
    try {
      instrumentations.push(INSTRUMENTATIONS[name]());
    } catch (err) {
      diag.warn(`keel telemetry: ${name} instrumentation unavailable`, err);
    }
  }
  const { registerInstrumentations } =
    require('@opentelemetry/instrumentation') as typeof import('@opentelemetry/instrumentation');
  const unregister = registerInstrumentations(
    options.tracerProvider ? { instrumentations, tracerProvider: options.tracerProvider } : { instrumentations },
  );
  for (const name of options.drivers) requireDriver(name);
  return unregister;
}

function requireDriver(name: InstrumentedDriver): void {
  try {
    require(name);
  } catch {
    // driver not installed in this deployment: nothing to instrument
  }
}

/**
 * Instruments one database driver if telemetry is enabled, once per process: called by the engine registry before
 * an engine's factory first loads its driver. A no-op with telemetry off.
 */
export function instrumentDriver(driver: InstrumentedDriver): void {
  if (!state?.enabled || instrumented.has(driver)) return;
  if (BUILT_IN.has(driver)) {
    requireDriver(driver);
    instrumented.set(driver, () => undefined);
  } else instrumented.set(driver, registerDatabaseInstrumentations({ drivers: [driver] }));
}

/** The drivers instrumented so far (tests). */
export function instrumentedDrivers(): InstrumentedDriver[] {
  return [...instrumented.keys()];
}

/**
 * Sets up Application Insights once per process. Idempotent: later calls return the first result.
 * Never throws; a setup failure is logged and leaves telemetry disabled.
 */
export function initTelemetryOnce(env: TelemetryEnv, hooks: InitHooks = {}): TelemetryState {
  if (state) return state;
  const connectionString = env.APPLICATIONINSIGHTS_CONNECTION_STRING?.trim();
  if (!connectionString || env.KEEL_TELEMETRY_ENABLED?.trim().toLowerCase() === 'false') {
    state = { enabled: false };
    return state;
  }
  try {
    const ai = require('applicationinsights') as typeof AppInsights;
    const credential = entraCredential(env);
    ai.useAzureMonitor({
      azureMonitorExporterOptions: credential ? { connectionString, credential } : { connectionString },
      enableAutoCollectExceptions: true,
      instrumentationOptions: {
        http: { enabled: true },
        azureSdk: { enabled: true },
        postgreSql: { enabled: true },
        mongoDb: { enabled: false },
        mySql: { enabled: false },
        redis: { enabled: false },
        redis4: { enabled: false },
      },
    });
    state = { enabled: true };
    hooks.onEnabled?.();
  } catch (err) {
    console.error('keel telemetry: Application Insights setup failed; telemetry is off', err);
    state = { enabled: false };
  }
  return state;
}

/**
 * Sends whatever is buffered (no-op when disabled). Under the Functions host the app's appTerminate hook calls it
 * after the job processors have stopped (shared/app/shutdown.ts), so the hand-backs' events are sent too: one hook,
 * in that order, instead of a flush of its own that would run before them.
 */
export async function flushTelemetry(): Promise<void> {
  if (!state?.enabled) return;
  const ai = require('applicationinsights') as typeof AppInsights;
  await ai.flushAzureMonitor();
}

/** Flushes and shuts the providers down; a later initTelemetry starts afresh. */
export async function shutdownTelemetry(): Promise<void> {
  const wasEnabled = state?.enabled === true;
  state = undefined;
  for (const unregister of instrumented.values()) unregister();
  instrumented.clear();
  if (!wasEnabled) return;
  const ai = require('applicationinsights') as typeof AppInsights;
  await ai.flushAzureMonitor();
  await ai.shutdownAzureMonitor();
}

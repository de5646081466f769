// One-time Application Insights (OpenTelemetry) setup, driven by APPLICATIONINSIGHTS_CONNECTION_STRING.
//
// With a connection string: `useAzureMonitor` from applicationinsights v3 installs the global OpenTelemetry
// tracer, meter and logger providers with the Azure Monitor exporters, the Azure Functions pre-invocation
// hook (so spans and events created inside a function run join the invocation's operation), and the
// built-in instrumentations: http, Azure SDK (storage queues), and PostgreSQL (`pg`). Keel adds the
// OpenTelemetry instrumentations for `tedious` (the driver under `mssql`) and `oracledb`, so calls to all
// three databases appear as dependencies correlated with the invocation.
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

export interface TelemetryState {
  enabled: boolean;
}

export interface InitHooks {
  /** Called after the global providers are installed (index.ts rebinds the facade here). */
  onEnabled?: () => void;
}

let state: TelemetryState | undefined;
let unregisterDatabaseInstrumentations: (() => void) | undefined;

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
 * through `require`, which an ESM `import` of the package does not do. Requiring each driver once, after
 * the instrumentations are registered, patches the shared CommonJS module instance (`pg` Client,
 * `tedious` Connection, the `oracledb` trace handler), so it works whether the engines imported their
 * driver before or after `initTelemetry` ran. `mssql` uses `tedious` underneath.
 */
const DRIVERS = ['pg', 'tedious', 'oracledb'] as const;

export interface DatabaseInstrumentationOptions {
  /** Defaults to the global tracer provider (the one useAzureMonitor installs). */
  tracerProvider?: TracerProvider;
  /** Also register the `pg` instrumentation (useAzureMonitor already does; tests without it need it). */
  includePg?: boolean;
}

/**
 * Registers the database driver instrumentations that the Azure Monitor distro does not bundle
 * (`tedious`, `oracledb`; optionally `pg`) and patches the already-loaded drivers. Returns a function that
 * unregisters them. Spans are children of the active context, i.e. of the function invocation.
 */
export function registerDatabaseInstrumentations(options: DatabaseInstrumentationOptions = {}): () => void {
  const instrumentations: Instrumentation[] = [];
  const add = (load: () => Instrumentation, name: string) => {
    try {
      instrumentations.push(load());
    } catch (err) {
      diag.warn(`keel telemetry: ${name} instrumentation unavailable`, err);
    }
  };
  if (options.includePg) {
    add(() => {
      const { PgInstrumentation } =
        require('@opentelemetry/instrumentation-pg') as typeof import('@opentelemetry/instrumentation-pg');
      return new PgInstrumentation();
    }, 'pg');
  }
  add(() => {
    const { TediousInstrumentation } =
      require('@opentelemetry/instrumentation-tedious') as typeof import('@opentelemetry/instrumentation-tedious');
    return new TediousInstrumentation();
  }, 'tedious');
  add(() => {
    const { OracleInstrumentation } =
      require('@opentelemetry/instrumentation-oracledb') as typeof import('@opentelemetry/instrumentation-oracledb');
    return new OracleInstrumentation();
  }, 'oracledb');
  const { registerInstrumentations } =
    require('@opentelemetry/instrumentation') as typeof import('@opentelemetry/instrumentation');
  const unregister = registerInstrumentations(
    options.tracerProvider ? { instrumentations, tracerProvider: options.tracerProvider } : { instrumentations },
  );
  for (const name of DRIVERS) {
    try {
      require(name);
    } catch {
      // driver not installed in this deployment: nothing to instrument
    }
  }
  return unregister;
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
    unregisterDatabaseInstrumentations = registerDatabaseInstrumentations();
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
  unregisterDatabaseInstrumentations?.();
  unregisterDatabaseInstrumentations = undefined;
  if (!wasEnabled) return;
  const ai = require('applicationinsights') as typeof AppInsights;
  await ai.flushAzureMonitor();
  await ai.shutdownAzureMonitor();
}

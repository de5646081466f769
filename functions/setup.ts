// Imported first by functions/index.ts: Application Insights must be set up before the database drivers and the
// Azure SDK are loaded, so their instrumentations can patch them (ESM evaluates imports in order).
import { initTelemetry } from '../shared/telemetry/index.js';
import { processEnv } from '../shared/app/environment.js';

initTelemetry(processEnv());

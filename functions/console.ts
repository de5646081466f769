// HTTP triggers for the ops console (shared/ops/console.ts): its static files under /api/console, and its API
// (session; the ops API for a browser signed in through App Service authentication) under /api/console-api.
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { handleConsoleApi, serveConsoleAsset } from '../shared/ops/console.js';
import { processEnv } from '../shared/app/environment.js';
import { opsForConsole } from './ops.js';

// The console reads KEEL_CONSOLE_DIR, the role names and the hosting markers from the process environment (handed
// down explicitly: shared/app/environment.ts); the session answers without starting the runtime.
export async function consoleAssets(request: HttpRequest, _context: InvocationContext): Promise<HttpResponseInit> {
  return serveConsoleAsset(request, request.params.path, processEnv());
}

export function consoleApi(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  return handleConsoleApi(request, context, opsForConsole, processEnv());
}

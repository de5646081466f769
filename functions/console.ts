// HTTP triggers for the ops console (shared/ops/console.ts): its static files under /api/console, and its API
// (session; the ops API for a browser signed in through App Service authentication) under /api/console-api.
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { handleConsoleApi, serveConsoleAsset } from '../shared/ops/console.js';
import { hostEnvironment } from '../shared/app/hostEnvironment.js';
import { opsForConsole } from './ops.js';

// The console's folder, role names and principal trust are parsed from the process environment once
// (shared/app/hostEnvironment.ts); the session answers without starting the runtime.
export async function consoleAssets(request: HttpRequest, _context: InvocationContext): Promise<HttpResponseInit> {
  return serveConsoleAsset(request, request.params.path, hostEnvironment().console);
}

export function consoleApi(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  return handleConsoleApi(request, context, opsForConsole, hostEnvironment().console);
}

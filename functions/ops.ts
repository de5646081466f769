// HTTP trigger for the whole ops API under /api/ops/...: one route table (shared/ops/routes.ts). Callers here hold a
// function key (the host checks it); the console's key-less path relays through opsForConsole.
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { opsRuntimeOf } from '../shared/app/opsRuntime.js';
import { createOpsHandler } from '../shared/ops/router.js';
import { allRoutes } from '../shared/ops/routes.js';
import type { OpsChannel } from '../shared/ops/auth.js';

const handle = createOpsHandler(allRoutes(), async () => opsRuntimeOf(await getRuntime()));

export function ops(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  return handle(request, context, 'key');
}

// The same routes for /api/console-api/ops (shared/ops/console.ts): no key, the principal's roles only.
export function opsForConsole(
  request: HttpRequest,
  context: InvocationContext,
  channel: OpsChannel,
): Promise<HttpResponseInit> {
  return handle(request, context, channel);
}

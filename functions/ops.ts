// HTTP trigger for the whole ops API under /api/ops/...: one route table (shared/ops/routes.ts). Callers here hold a
// function key (the host checks it); the console's key-less path relays through opsForConsole.
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { opsRuntimeOf } from '../shared/app/opsRuntime.js';
import { createOpsHandler } from '../shared/ops/router.js';
import { allRoutes } from '../shared/ops/routes.js';
import type { OpsChannel } from '../shared/ops/auth.js';
import type { OpsError } from '../shared/ops/errors.js';

const handle = createOpsHandler(allRoutes(), async () => opsRuntimeOf(await getRuntime()));

export function ops(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  return handle(request, context, 'key');
}

// The same routes for /api/console-api/ops (shared/ops/console.ts): no key, the principal's roles only.
// `refused`: the console's front door turned the call away (no same-origin header, not signed in): the ops handler
// records the refusal against the route and answers with it.
export function opsForConsole(
  request: HttpRequest,
  context: InvocationContext,
  channel: OpsChannel,
  refused?: OpsError,
): Promise<HttpResponseInit> {
  return handle(request, context, channel, refused);
}

// HTTP trigger for the whole ops API under /api/ops/...: one route table (shared/ops/routes.ts).
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { getRuntime } from '../shared/app/runtime.js';
import { opsRuntimeOf } from '../shared/app/opsRuntime.js';
import { createOpsHandler } from '../shared/ops/router.js';
import { allRoutes } from '../shared/ops/routes.js';

const handle = createOpsHandler(allRoutes(), async () => opsRuntimeOf(await getRuntime()));

export function ops(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  return handle(request, context);
}

// The ops route list, assembled here once: each tag's routes come from the file named for it, in the order the
// OpenAPI document (GET /openapi.json, added last) lists them.
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';
import { openApiDocument } from './openapi.js';
import { healthRoute } from './healthRoutes.js';
import { statsRoutes } from './statsRoutes.js';
import { queueRoutes } from './queueRoutes.js';
import { jobRoutes } from './jobRoutes.js';
import { dlqRoutes } from './dlqRoutes.js';
import { purgeRoute } from './purgeRoutes.js';
import { watchRoutes } from './watchRoutes.js';
import { handlerRoutes } from './handlerRoutes.js';
import { transferRoutes } from './transferRoutes.js';
import { auditRoutes } from './auditRoutes.js';

export function allRoutes(): OpsRoute<any, any, any>[] {
  const routes: OpsRoute<any, any, any>[] = [
    healthRoute,
    ...statsRoutes,
    ...queueRoutes,
    ...jobRoutes,
    ...dlqRoutes,
    purgeRoute,
    ...watchRoutes,
    ...handlerRoutes,
    ...transferRoutes,
    ...auditRoutes,
  ];
  routes.push(
    route({
      method: 'GET',
      path: '/openapi.json',
      operationId: 'openapi',
      summary: 'This API as an OpenAPI 3.1 document',
      tag: 'health',
      role: 'reader',
      query: s.emptyQuery,
      responses: { 200: 'OpenAPI document' },
      output: s.out.openapi,
      async handle() {
        return { body: openApiDocument(routes) };
      },
    }),
  );
  return routes;
}

// GET /audit: the ops audit trail (keel.ops_audit, written by the router for every write and refusal). Operator only:
// it names every caller and what they did, so a reader (or a producer) may not see other principals' actions.
import { invalid } from './errors.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

export const auditRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/audit',
    operationId: 'searchAudit',
    summary:
      'The audit trail: every write and every refused call, who made it and what came of it; newest first, keyset paging, bounded scan',
    tag: 'audit',
    role: 'operator',
    query: s.auditSearchQuery,
    responses: {
      200: 'a page of audit records; pass nextBeforeId as beforeId for the next page',
      400: 'a filter outside its bounds (the field is named)',
      403: 'operator role missing',
    },
    output: s.auditPage,
    async handle({ rt, query }) {
      // As instants, not as text (an offset or a fraction would be judged by its spelling).
      if (query.from && query.to && Date.parse(query.from) > Date.parse(query.to))
        throw invalid('from', 'must not be after "to"');
      const page = await rt.store.searchAudit({
        ...(query.from ? { from: new Date(query.from) } : {}),
        ...(query.to ? { to: new Date(query.to) } : {}),
        ...(query.principal ? { principal: query.principal } : {}),
        ...(query.action ? { action: query.action } : {}),
        ...(query.target ? { target: query.target } : {}),
        ...(query.outcome ? { outcome: query.outcome } : {}),
        ...(query.beforeId ? { beforeId: query.beforeId } : {}),
        ...(query.scanRows !== undefined ? { scanRows: query.scanRows } : {}),
        limit: query.limit,
      });
      return { body: page };
    },
  }),
];

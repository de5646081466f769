// Ops routes for what handlers/ declares: job types with their options and payload schema, and recurring schedules.
import { z } from 'zod/v4';
import type { RegisteredHandler } from '../jobs/registry.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

function payloadSchema(h: RegisteredHandler): unknown {
  if (!h.options.payload) return null;
  try {
    return z.toJSONSchema(h.options.payload, { io: 'input', unrepresentable: 'any' });
  } catch {
    return { description: 'not representable as JSON Schema' };
  }
}

export function describeHandler(h: RegisteredHandler): Record<string, unknown> {
  const o = h.options;
  return {
    type: h.type,
    source: h.source ?? null,
    queue: o.queue ?? null,
    timeoutMs: o.timeoutMs,
    maxAttempts: o.maxAttempts ?? null, // null: the job's own, else the queue's
    backoff: o.backoff,
    retryOnTimeout: o.retryOnTimeout,
    concurrency: o.concurrency ?? null, // null: no per-type limit
    payloadSchema: payloadSchema(h),
  };
}

export const handlerRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/handlers',
    operationId: 'listHandlers',
    summary: 'Registered job types with their options (queue, timeout, attempts, backoff, concurrency) and payload JSON Schema',
    tag: 'jobs',
    query: s.emptyQuery,
    responses: { 200: 'registered handlers' },
    async handle({ rt }) {
      return {
        body: {
          allowUnknownTypes: rt.settings.KEEL_ALLOW_UNKNOWN_JOB_TYPES,
          items: rt.registry.all().map(describeHandler),
        },
      };
    },
  }),
];

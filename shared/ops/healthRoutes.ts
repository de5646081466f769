// GET /health: whether the store and the storage queues answer, and what this instance runs.
import { appVersion } from '../config/appVersion.js';
import { route } from './router.js';
import * as s from './schemas.js';

export const healthRoute = route({
  method: 'GET',
  path: '/health',
  operationId: 'health',
  summary: 'Liveness of the store and the storage queues',
  tag: 'health',
  role: 'reader',
  query: s.emptyQuery,
  responses: { 200: 'healthy', 503: 'store or storage unreachable' },
  output: s.out.health,
  async handle({ rt }) {
    const started = Date.now();
    const [store, storage] = await Promise.all([
      rt.store.listQueues().then(
        () => true,
        () => false,
      ),
      rt.queues.ping(),
    ]);
    const ok = store && storage;
    return {
      status: ok ? 200 : 503,
      body: {
        status: ok ? 'ok' : 'degraded',
        version: appVersion(), // package.json's, as the worker registry reports it
        engine: rt.store.engine,
        checks: { store, storage },
        transfers: rt.transfers ? 'configured' : 'not configured',
        workerId: rt.workerId,
        elapsedMs: Date.now() - started,
      },
    };
  },
});

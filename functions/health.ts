// Anonymous liveness probe at /api/health: answers 200 as long as the app is loaded and its worker serves
// requests. It touches no database or queue and says nothing about them (readiness, with store and storage
// detail, is the keyed /api/ops/health), so platform probes and availability tests can call it without a key
// and without learning anything about the deployment.
import type { HttpResponseInit } from '@azure/functions';

export async function health(): Promise<HttpResponseInit> {
  return {
    status: 200,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
    body: JSON.stringify({ status: 'ok' }),
  };
}

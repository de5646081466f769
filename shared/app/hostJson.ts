// Reads the parts of host.json the local host honours, with the Functions host's defaults.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

// "hh:mm:ss" (optionally "d.hh:mm:ss") -> milliseconds.
export function parseTimeSpan(value: string, field: string): number {
  const m = /^(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?$/.exec(value);
  if (!m) throw new Error(`host.json ${field}: "${value}" is not a time span (hh:mm:ss)`);
  const [, d, h, min, s, ms] = m;
  return (
    ((Number(d ?? 0) * 24 + Number(h)) * 3600 + Number(min) * 60 + Number(s)) * 1000 +
    Number((ms ?? '0').padEnd(3, '0'))
  );
}

const schema = z
  .object({
    version: z.literal('2.0'),
    functionTimeout: z.string().optional(),
    extensions: z
      .object({
        http: z.object({ routePrefix: z.string().optional() }).loose().optional(),
        queues: z
          .object({
            batchSize: z.number().int().min(1).max(32).optional(),
            newBatchThreshold: z.number().int().min(0).optional(),
            maxDequeueCount: z.number().int().min(1).optional(),
            visibilityTimeout: z.string().optional(),
            maxPollingInterval: z.string().optional(),
            messageEncoding: z.enum(['base64', 'none']).optional(),
          })
          .loose()
          .optional(),
      })
      .loose()
      .optional(),
  })
  .loose();

export interface HostConfig {
  routePrefix: string;
  functionTimeoutMs: number | null;
  queues: {
    batchSize: number;
    newBatchThreshold: number;
    maxDequeueCount: number;
    visibilityTimeoutMs: number; // delay before a failed message is visible again
    maxPollingIntervalMs: number;
    messageEncoding: 'base64' | 'none';
  };
}

export function hostConfigFrom(json: unknown): HostConfig {
  const r = schema.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`host.json ${i.path.join('.')}: ${i.message}`);
  }
  const q = r.data.extensions?.queues ?? {};
  const batchSize = q.batchSize ?? 16;
  return {
    routePrefix: (r.data.extensions?.http?.routePrefix ?? 'api').replace(/^\/+|\/+$/g, ''),
    functionTimeoutMs: r.data.functionTimeout ? parseTimeSpan(r.data.functionTimeout, 'functionTimeout') : null,
    queues: {
      batchSize,
      newBatchThreshold: q.newBatchThreshold ?? Math.floor(batchSize / 2),
      maxDequeueCount: q.maxDequeueCount ?? 5,
      visibilityTimeoutMs: q.visibilityTimeout
        ? parseTimeSpan(q.visibilityTimeout, 'extensions.queues.visibilityTimeout')
        : 0,
      maxPollingIntervalMs: q.maxPollingInterval
        ? parseTimeSpan(q.maxPollingInterval, 'extensions.queues.maxPollingInterval')
        : 60_000,
      messageEncoding: q.messageEncoding ?? 'base64',
    },
  };
}

export function readHostConfig(file: string): HostConfig {
  return hostConfigFrom(JSON.parse(readFileSync(file, 'utf8')));
}

// functionTimeout of the app's own host.json, found by walking up from this module (the sources and the compiled
// dist/ of the repo and of the deployment package all sit below it); null when there is none or it sets none.
export function appFunctionTimeoutMs(from: string = path.dirname(fileURLToPath(import.meta.url))): number | null {
  let dir = from;
  for (let i = 0; i < 5; i++) {
    const file = path.join(dir, 'host.json');
    if (existsSync(file)) return readHostConfig(file).functionTimeoutMs;
    dir = path.dirname(dir);
  }
  return null;
}

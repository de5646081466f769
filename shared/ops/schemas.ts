// Request schemas of the ops API (zod v4 API, so the OpenAPI document is generated from the same schemas
// that validate). Objects are strict: an unknown field is a 400 naming that field.
import { z } from 'zod/v4';
import { DLQ_REASONS, type DlqReason } from '../jobs/contract.js';
import { MAX_BATCH } from '../jobs/validate.js';

export const NAME_PATTERN = /^[A-Za-z0-9_.:-]+$/;
export const name = z.string().min(1).max(128).regex(NAME_PATTERN, 'letters, digits and _ . : - only');
export const UUID_PATTERN = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
export const batchId = z.string().regex(UUID_PATTERN, 'must be a batch id (a UUID)');
export const jobId = z.string().regex(/^[1-9][0-9]{0,18}$/, 'must be a job id (a positive integer)');
const isoDate = z.iso.datetime({ offset: true }).describe('ISO 8601 date-time');
const reason = z.enum(DLQ_REASONS as unknown as [DlqReason, ...DlqReason[]]);
const location = z.enum(['hot', 'archive', 'dlq']);
const hotState = z.enum(['pending', 'fetched', 'processing']);

// Query strings arrive as text: integers are parsed from their decimal text only (documented as integers).
const qInt = (min: number, max: number, def: number) =>
  z
    .string()
    .regex(/^-?\d+$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .default(def)
    .meta({ type: 'integer', minimum: min, maximum: max, description: `integer, default ${def}`, pattern: undefined });

export const enqueueJob = z.strictObject({
  queue: name.optional().describe("job queue (created on first use); default: the handler's queue, else \"default\""),
  type: name.describe('job type: a registered handler'),
  payload: z.unknown().optional().describe('any JSON value'),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
  delayMs: z.number().int().min(0).max(366 * 24 * 3600 * 1000).optional(),
  runAt: isoDate.optional(),
  tags: z.array(z.string().min(1).max(64)).max(16).optional(),
  idempotencyKey: z.string().min(1).max(200).optional(),
  maxAttempts: z.number().int().min(1).max(1000).optional(),
  expiresAt: isoDate.optional(),
});

export const enqueueBody = z.union([
  enqueueJob,
  z.strictObject({ jobs: z.array(enqueueJob).min(1).max(MAX_BATCH) }),
]);

export const jobSearchQuery = z.strictObject({
  location: location.default('hot'),
  queue: name.optional(),
  type: name.optional(),
  tag: z.string().min(1).max(64).optional(),
  state: hotState.optional(),
  reason: reason.optional(),
  from: isoDate.optional(),
  to: isoDate.optional(),
  text: z.string().min(1).max(200).optional(),
  afterId: jobId.optional(),
  limit: qInt(1, 500, 50),
});

export const metricsQuery = z.strictObject({
  windowMinutes: qInt(1, 7 * 24 * 60, 60),
  queue: name.optional(),
});

export const emptyQuery = z.strictObject({});

export const queuePatch = z
  .strictObject({
    maxConcurrency: z.number().int().min(0).max(100_000).nullable().optional().describe('global limit across hosts; null = unlimited'),
    zombieTimeoutSeconds: z.number().int().min(1).max(7 * 24 * 3600).optional(),
    zombiePolicy: z.enum(['dlq', 'retry']).optional(),
    maxAttempts: z.number().int().min(1).max(1000).optional(),
    archiveRetentionSeconds: z.number().int().min(60).max(10 * 366 * 24 * 3600).optional(),
    dlqRetentionSeconds: z.number().int().min(60).max(10 * 366 * 24 * 3600).optional(),
    metricsRetentionSeconds: z.number().int().min(60).max(10 * 366 * 24 * 3600).optional(),
  })
  .refine((p) => Object.keys(p).length > 0, { message: 'give at least one setting to change' });

export const resurrectFilterBody = z.strictObject({
  queue: name.optional(),
  type: name.optional(),
  reason: reason.optional(),
  failedAfter: isoDate.optional(),
  failedBefore: isoDate.optional(),
  limit: z.number().int().min(1).max(1000).describe('most jobs to resurrect in this call'),
  dryRun: z.boolean().default(true).describe('true (default): only list what would be resurrected'),
});

export const purgeBody = z.strictObject({
  target: z.enum(['archive', 'dlq', 'metrics']),
  queue: name.optional().describe('only this queue (default: every queue)'),
  olderThan: isoDate.describe('delete rows finished/failed/bucketed before this instant'),
  batchSize: z.number().int().min(1).max(10_000).default(1000),
  maxBatches: z.number().int().min(1).max(100).default(10),
  dryRun: z.boolean().default(true).describe('true (default): count what would be deleted (archive/dlq, up to 10,000)'),
});

export const batchListQuery = z.strictObject({
  transfer: name.optional(),
  state: z.string().min(1).max(64).optional(),
  limit: qInt(1, 500, 50),
  afterId: batchId.optional(),
});

export const reconcileStaleBody = z.strictObject({
  olderThanMs: z.number().int().min(0).max(30 * 24 * 3600_000).optional(),
  limit: z.number().int().min(1).max(1000).default(20),
});

export const emptyBody = z.strictObject({});

export const idParams = z.strictObject({ id: jobId });
export const nameParams = z.strictObject({ name });
export const batchParams = z.strictObject({ id: batchId });

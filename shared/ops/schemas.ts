// Request schemas of the ops API (zod v4 API, so the OpenAPI document is generated from the same schemas
// that validate). Objects are strict: an unknown field is a 400 naming that field.
import { z } from 'zod/v4';
import { DLQ_REASONS, TEXT_SEARCH_SCAN_ROWS, TEXT_SEARCH_SCAN_ROWS_MAX, type DlqReason } from '../jobs/contract.js';
import { MAX_BATCH, jsonTextProblem, textProblem } from '../jobs/validate.js';

// Text and JSON a database can store (no NUL, no lone surrogate): a 400 naming the field instead of a database error.
const text = (min: number, max: number) =>
  z
    .string()
    .min(min)
    .max(max)
    .superRefine((v, ctx) => {
      const m = textProblem(v);
      if (m) ctx.addIssue({ code: 'custom', message: m });
    });
const jsonValue = z.unknown().superRefine((v, ctx) => {
  const r = jsonTextProblem(v);
  if (r) ctx.addIssue({ code: 'custom', message: r.message, path: r.path });
});

export const NAME_PATTERN = /^[A-Za-z0-9_.:-]+$/;
export const name = z.string().min(1).max(128).regex(NAME_PATTERN, 'letters, digits and _ . : - only');
export const UUID_PATTERN = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
export const batchId = z.string().regex(UUID_PATTERN, 'must be a batch id (a UUID)');
const MAX_JOB_ID = 9223372036854775807n; // bigint: the largest id any engine can hold
export const jobId = z
  .string()
  .regex(/^[1-9][0-9]{0,18}$/, 'must be a job id (a positive integer)')
  .refine(
    (v) => !/^[0-9]+$/.test(v) || BigInt(v) <= MAX_JOB_ID,
    `must be a job id (a positive integer up to ${MAX_JOB_ID})`,
  );
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
  queue: name.optional().describe('job queue (created on first use); default: the handler\'s queue, else "default"'),
  type: name.describe('job type: a registered handler'),
  payload: jsonValue.optional().describe('any JSON value'),
  priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
  delayMs: z
    .number()
    .int()
    .min(0)
    .max(366 * 24 * 3600 * 1000)
    .optional(),
  runAt: isoDate.optional(),
  tags: z.array(text(1, 64)).max(16).optional(),
  idempotencyKey: text(1, 200).optional(),
  maxAttempts: z.number().int().min(1).max(1000).optional(),
  expiresAt: isoDate.optional(),
});

export const enqueueBody = z.union([enqueueJob, z.strictObject({ jobs: z.array(enqueueJob).min(1).max(MAX_BATCH) })]);

export const jobSearchQuery = z.strictObject({
  location: location.default('hot'),
  queue: name.optional(),
  type: name.optional(),
  tag: text(1, 64).optional(),
  state: hotState.optional(),
  reason: reason.optional(),
  from: isoDate.optional(),
  to: isoDate.optional(),
  text: text(1, 200).optional(),
  afterId: jobId.optional(),
  scanRows: z
    .string()
    .regex(/^-?\d+$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().int().min(1).max(TEXT_SEARCH_SCAN_ROWS_MAX))
    .optional()
    .meta({
      type: 'integer',
      minimum: 1,
      maximum: TEXT_SEARCH_SCAN_ROWS_MAX,
      pattern: undefined,
      description: `archive/DLQ text searches only: rows examined per call, the next ids below afterId (default ${TEXT_SEARCH_SCAN_ROWS}); continue from nextAfterId`,
    }),
  limit: qInt(1, 500, 50),
});

export const metricsQuery = z.strictObject({
  windowMinutes: qInt(1, 7 * 24 * 60, 60),
  queue: name.optional(),
});

export const emptyQuery = z.strictObject({});

export const queuePatch = z
  .strictObject({
    maxConcurrency: z
      .number()
      .int()
      .min(0)
      .max(100_000)
      .nullable()
      .optional()
      .describe('global limit across hosts; null = unlimited'),
    zombieTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .optional(),
    zombiePolicy: z.enum(['dlq', 'retry']).optional(),
    maxAttempts: z.number().int().min(1).max(1000).optional(),
    archiveRetentionSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 366 * 24 * 3600)
      .optional(),
    dlqRetentionSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 366 * 24 * 3600)
      .optional(),
    metricsRetentionSeconds: z
      .number()
      .int()
      .min(60)
      .max(10 * 366 * 24 * 3600)
      .optional(),
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
  state: text(1, 64).optional(),
  limit: qInt(1, 500, 50),
  afterId: batchId.optional(),
});

export const reconcileStaleBody = z.strictObject({
  olderThanMs: z
    .number()
    .int()
    .min(0)
    .max(30 * 24 * 3600_000)
    .optional(),
  limit: z.number().int().min(1).max(1000).default(20),
});

export const emptyBody = z.strictObject({});

export const idParams = z.strictObject({ id: jobId });
export const nameParams = z.strictObject({ name });
export const batchParams = z.strictObject({ id: batchId });

// Response shapes, for the OpenAPI document (handlers build these bodies; the schemas describe them).
const dateTime = z.string().meta({ format: 'date-time' });
export const out = (() => {
  const job = z.object({
    id: z.string().describe('job id (a 64-bit integer as a string)'),
    location: location,
    queue: z.string(),
    type: z.string(),
    payload: z.unknown(),
    priority: z.number().int(),
    state: z.enum(['pending', 'fetched', 'processing', 'succeeded', 'dead']),
    attempts: z.number().int(),
    idempotencyKey: z.string().nullable(),
    tags: z.array(z.string()),
    createdAt: dateTime,
    runAt: dateTime.nullable(),
    startedAt: dateTime.nullable(),
    finishedAt: dateTime.nullable(),
    durationMs: z.number().nullable(),
    reason: reason.nullable(),
    lastError: z.string().nullable(),
    cancelRequested: z.boolean(),
    leaseId: z.string().nullable(),
    workerId: z.string().nullable(),
  });
  const enqueued = z.object({
    id: z.string(),
    duplicate: z.boolean().describe('an idempotency key matched a hot job: id is that job'),
    posted: z
      .boolean()
      .describe(
        'false: duplicate, delayed beyond the queue message limit, or the post failed (the dispatcher runs it)',
      ),
  });
  const queueSettings = z.object({
    name: z.string(),
    paused: z.boolean(),
    maxConcurrency: z.number().int().nullable(),
    zombieTimeoutSeconds: z.number().int(),
    zombiePolicy: z.enum(['dlq', 'retry']),
    maxAttempts: z.number().int(),
    archiveRetentionSeconds: z.number().int(),
    dlqRetentionSeconds: z.number().int(),
    metricsRetentionSeconds: z.number().int(),
  });
  const counters = {
    pending: z.number().int(),
    fetched: z.number().int(),
    processing: z.number().int(),
    dlq: z.number().int(),
    succeeded: z.number().int(),
    failed: z.number().int(),
    retried: z.number().int(),
    cancelled: z.number().int(),
    zombie: z.number().int(),
    resurrected: z.number().int(),
  };
  const queueStats = z.object({
    queue: z.string(),
    due: z.number().int().describe('pending jobs that are due; at least this many when dueExact is false'),
    dueExact: z.boolean().describe('false when both the due and the not-yet-due pending jobs number 1,000 or more'),
    oldestDueAgeMs: z.number().nullable(),
    ...counters,
  });
  return {
    health: z.object({
      status: z.enum(['ok', 'degraded']),
      version: z.string(),
      engine: z.string(),
      checks: z.object({ store: z.boolean(), storage: z.boolean() }),
      transfers: z.string(),
      workerId: z.string(),
      elapsedMs: z.number(),
    }),
    stats: z.object({ queues: z.array(queueStats), totals: z.object(counters) }),
    metrics: z.object({
      windowMinutes: z.number().int(),
      queue: z.string().nullable(),
      buckets: z.array(
        z.object({
          bucketStart: dateTime,
          queue: z.string(),
          outcome: z.enum(['succeeded', 'failed']),
          reason: z.string(),
          count: z.number().int(),
          totalDurationMs: z.number(),
          maxDurationMs: z.number(),
        }),
      ),
    }),
    queues: z.object({ items: z.array(queueSettings) }),
    queue: queueSettings.extend({ stats: queueStats.nullable() }),
    queueSettingsChanged: queueSettings.extend({
      created: z.boolean().describe('true: the queue had no settings yet (first use)'),
    }),
    enqueue: z.union([enqueued, z.object({ jobs: z.array(enqueued) })]),
    job: job,
    jobPage: z.object({
      location: location,
      items: z.array(job),
      nextAfterId: z.string().nullable().describe('pass as afterId for the next page; null: nothing left below'),
      scanBounded: z
        .boolean()
        .describe('the archive/DLQ text search stopped after scanRows rows: more may match below nextAfterId'),
    }),
    cancel: z.object({
      id: z.string(),
      result: z
        .enum(['cancelled', 'cancel_requested'])
        .describe('cancelled: in the DLQ now; cancel_requested: running, its handler is being stopped'),
      outcome: z.literal('dlq_cancelled').describe('how the job ends, in both cases: in the DLQ with reason cancelled'),
      stoppedNow: z
        .boolean()
        .optional()
        .describe(
          'cancel_requested: the handler ran in the instance that answered and was told to stop at once (else: at its next heartbeat)',
        ),
      message: z.string().optional(),
    }),
    resurrected: z.object({ id: z.string(), resurrected: z.literal(true), posted: z.boolean() }),
    resurrectedMany: z.object({
      dryRun: z.boolean(),
      count: z.number().int(),
      ids: z.array(z.string()),
      posted: z.number().int(),
    }),
    purge: z.object({
      dryRun: z.boolean(),
      target: z.enum(['archive', 'dlq', 'metrics']),
      queue: z.string().nullable(),
      olderThan: z.string(),
      matched: z.number().int().optional(),
      capped: z.boolean().optional(),
      note: z.string().optional(),
      deleted: z.number().int().optional(),
      batches: z.number().int().optional(),
      mayHaveMore: z.boolean().optional(),
    }),
    openapi: z
      .object({ openapi: z.string(), info: z.object({}).passthrough(), paths: z.record(z.string(), z.unknown()) })
      .passthrough(),
  };
})();

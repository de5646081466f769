// Request schemas of the ops API, built from the job domain's schemas and limits (shared/jobs/validate.ts), so the
// API and the store accept the same values; the OpenAPI document is generated from the same schemas that validate.
// Objects are strict: an unknown field is a 400 naming that field.
import { z } from 'zod';
import {
  AUDIT_AUTH_METHODS,
  AUDIT_OUTCOMES,
  AUDIT_SCAN_ROWS_DEFAULT,
  AUDIT_TEXT_LIMITS,
  TEXT_SEARCH_SCAN_ROWS,
  TEXT_SEARCH_SCAN_ROWS_MAX,
} from '../jobs/contract.js';
import {
  DATE_RANGE,
  LIMITS,
  NOT_BOTH_DELAY_AND_RUN_AT,
  batchId,
  dlqReason,
  enqueueFields,
  hotState,
  isJobId,
  jobId,
  jobLocation,
  jobName,
  purgeTarget,
  queueExpectedSchema,
  queuePatchFields,
  storableText,
  textProblem,
  zombiePolicy,
} from '../jobs/validate.js';

export { batchId, jobId };
export const name = jobName;
const isoDate = z.iso.datetime({ offset: true }).describe('ISO 8601 date-time');
// A job's own dates are stored: within the range every engine holds (the store's check, DATE_RANGE), so an
// out-of-range one is refused here, before the call is started.
const jobDate = isoDate.refine((v) => {
  const t = Date.parse(v);
  return t >= DATE_RANGE.min.getTime() && t <= DATE_RANGE.max.getTime();
}, 'must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (UTC)');
const reason = dlqReason;
const location = jobLocation;

// Query strings arrive as text: integers are parsed from their decimal text only (documented as integers).
const intText = (min: number, max: number) =>
  z
    .string()
    .regex(/^-?\d+$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
const intMeta = (min: number, max: number, description: string) =>
  ({ type: 'integer', minimum: min, maximum: max, pattern: undefined, description }) as const;
const qInt = (min: number, max: number, def: number) =>
  intText(min, max)
    .default(def)
    .meta(intMeta(min, max, `integer, default ${def}`));
const qOptionalInt = (min: number, max: number, description: string) =>
  intText(min, max)
    .optional()
    .meta(intMeta(min, max, description));

export const enqueueJob = z
  .strictObject({
    ...enqueueFields,
    queue: name.optional().describe('job queue (created on first use); default: the handler\'s queue, else "default"'),
    type: name.describe('job type: a registered handler'),
    payload: enqueueFields.payload.describe('any JSON value'),
    runAt: jobDate.optional(),
    expiresAt: jobDate.optional(),
  })
  .refine((j) => !(j.delayMs !== undefined && j.runAt !== undefined), NOT_BOTH_DELAY_AND_RUN_AT);

export const enqueueBody = z.union([
  enqueueJob,
  z.strictObject({ jobs: z.array(enqueueJob).min(1).max(LIMITS.batchJobs) }),
]);

export const jobSearchQuery = z.strictObject({
  location: location.default('hot'),
  queue: name.optional(),
  type: name.optional(),
  tag: storableText(1, LIMITS.tagLength).optional(),
  state: hotState.optional(),
  reason: reason.optional(),
  from: isoDate.optional(),
  to: isoDate.optional(),
  text: storableText(1, LIMITS.searchTextLength).optional(),
  priority: qOptionalInt(-1_000_000, 1_000_000, 'exactly this priority'),
  idempotencyKey: storableText(1, 200)
    .optional()
    .describe(
      "exactly this idempotency key: a job's siblings (keys are unique per queue and type among hot jobs only)",
    ),
  order: z.enum(['newest', 'oldest']).default('newest').describe('by id: newest (default) or oldest first'),
  afterId: jobId.optional(),
  scanRows: qOptionalInt(
    1,
    TEXT_SEARCH_SCAN_ROWS_MAX,
    `archive/DLQ searches only: rows examined per call, the next ids below afterId (default ${TEXT_SEARCH_SCAN_ROWS}); continue from nextAfterId`,
  ),
  limit: qInt(1, LIMITS.searchJobs, 50),
});

export const metricsQuery = z.strictObject({
  windowMinutes: qInt(1, LIMITS.metricsWindowMinutes, 60),
  queue: name.optional(),
});

export const emptyQuery = z.strictObject({});

// Pausing has its own routes (POST /queues/{name}/pause, /resume).
const { paused: _paused, ...patchable } = queuePatchFields;
export const queuePatch = z
  .strictObject({
    ...patchable,
    maxConcurrency: patchable.maxConcurrency.describe('global limit across hosts; null = unlimited'),
    confirmPurge: z
      .boolean()
      .optional()
      .describe(
        'true: lower a retention even though the next maintenance pass then deletes rows (without it such a change is refused with 409 and a preview of the counts)',
      ),
    expected: queueExpectedSchema
      .optional()
      .describe(
        'compare-and-set: the current values the caller saw, e.g. {"dlqRetentionSeconds": 2592000}. When one differs (someone changed it meanwhile) nothing is changed: 409 conflict naming the field, with its current value',
      ),
  })
  .refine((p) => Object.keys(p).some((k) => k !== 'confirmPurge' && k !== 'expected'), {
    message: 'give at least one setting to change',
  });

const previewIds = z
  .array(jobId)
  .min(1)
  .max(LIMITS.resurrectJobs)
  .refine((ids) => new Set(ids).size === ids.length, 'must not repeat an id');

export const resurrectFilterBody = z.strictObject({
  queue: name.optional(),
  type: name.optional(),
  reason: reason.optional(),
  failedAfter: isoDate.optional(),
  failedBefore: isoDate.optional(),
  limit: z.number().int().min(1).max(LIMITS.resurrectJobs).describe('most jobs to resurrect in this call'),
  dryRun: z.boolean().default(true).describe('true (default): only list what would be resurrected'),
  ids: previewIds
    .optional()
    .describe(
      "required with dryRun=false: the preview's ids (or a selection). Exactly these are resurrected, those still in the DLQ; the filter only reports matches that arrived after the preview",
    ),
});

export const cancelManyBody = z.strictObject({
  queue: name.optional(),
  type: name.optional(),
  tag: storableText(1, LIMITS.tagLength).optional(),
  state: hotState.optional(),
  ids: previewIds
    .optional()
    .describe(
      "a selection to preview, or (dryRun=false, required) the preview's ids: exactly these are cancelled, those still hot",
    ),
  limit: z.number().int().min(1).max(LIMITS.resurrectJobs).default(100).describe('most jobs a filter preview lists'),
  dryRun: z.boolean().default(true).describe('true (default): only list what would be cancelled'),
});

export const purgeBody = z.strictObject({
  target: purgeTarget,
  queue: name.optional().describe('only this queue (default: every queue)'),
  olderThan: isoDate.describe('delete rows finished/failed/bucketed before this instant'),
  batchSize: z.number().int().min(1).max(LIMITS.purgeBatchRows).default(1000),
  maxBatches: z.number().int().min(1).max(100).default(10),
  dryRun: z
    .boolean()
    .default(true)
    .describe('true (default): count what would be deleted (archive/dlq: exact up to 100,000, else "at least")'),
  previewMatched: z
    .number()
    .int()
    .min(0)
    .optional()
    .describe("dryRun=false: the preview's count, so the answer says how many previewed rows left meanwhile"),
});

export const batchListQuery = z.strictObject({
  transfer: name.optional(),
  state: storableText(1, 64).optional(),
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

// Free text the transfer journal stores (reasons, window bounds): trimmed when asked, and refused when the database
// could not store it (NUL, a lone surrogate) with a 400 naming the field, not a 500 from the insert.
const journalText = (min: number, max: number, opts: { trim?: boolean; empty?: string } = {}) =>
  (opts.trim ? z.string().trim() : z.string())
    .min(min, opts.empty)
    .max(max)
    .superRefine((v, ctx) => {
      const m = textProblem(v);
      if (m) ctx.addIssue({ code: 'custom', message: m });
    });

// Abandon: the reason is recorded on the batch; preview answers what would happen and changes nothing.
export const abandonBatchBody = z.strictObject({
  reason: journalText(1, 500, { trim: true, empty: 'say why the batch is abandoned' }),
  preview: z.boolean().default(false),
});

// Replay: a range of committed windows (low: a committed batch's low bound, null = from the beginning; high: a
// committed batch's high bound), sent again; preview answers the plan and changes nothing.
export const replayBody = z.strictObject({
  low: journalText(1, 64).nullable(),
  high: journalText(1, 64),
  preview: z.boolean().default(false),
});

export const rebaselineBody = z.strictObject({
  preview: z.boolean().default(false), // what the re-baseline would do; nothing created
});

export const compareKeysBody = z.strictObject({
  apply: z.boolean().default(false),
  windows: z.number().int().min(1).max(1000).optional(), // the last n committed windows (default: up to 1000)
});

export const pauseTransferBody = z.strictObject({
  reason: journalText(1, 2000, { trim: true }).optional(),
});

export const idParams = z.strictObject({ id: jobId });
export const nameParams = z.strictObject({ name });
export const batchParams = z.strictObject({ id: batchId });

// Response shapes, for the OpenAPI document (handlers build these bodies; the schemas describe them).
const dateTime = z.string().meta({ format: 'date-time' });
export const out = (() => {
  const attempt = z.object({
    attempt: z.number().int(),
    worker: z.string().nullable(),
    startedAt: dateTime.nullable(),
    endedAt: dateTime.nullable().describe('null while running'),
    outcome: z.enum([
      'retried',
      'interrupted',
      'zombie',
      'exhausted',
      'fatal',
      'timeout',
      'cancelled',
      'succeeded',
      'running',
    ]),
    error: z.string().nullable().describe('cut to 2,000 characters'),
  });
  // One end of a flow's edge (GET /jobs/{id}: parents and children).
  const flowLink = z.object({
    id: z.string(),
    type: z.string().nullable().describe('null: the job is no longer stored (retention purged it)'),
    queue: z.string().nullable(),
    location: location.nullable(),
    state: z.enum([...hotState.options, 'succeeded', 'dead']).nullable(),
    outcome: z
      .enum(['succeeded', 'failed'])
      .nullable()
      .describe("what the parent's final move told the child; null while the parent is unfinished"),
  });
  const job = z.object({
    id: z.string().describe('job id (a 64-bit integer as a string)'),
    location: location,
    queue: z.string(),
    type: z.string(),
    payload: z.unknown(),
    priority: z.number().int(),
    state: z.enum([...hotState.options, 'succeeded', 'dead']),
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
    progress: z
      .object({
        fraction: z.number().nullable().describe('0..1; derived from done/total when only those were reported'),
        done: z.number().nullable(),
        total: z.number().nullable(),
        note: z.string().nullable(),
      })
      .nullable()
      .describe(
        'hot jobs: the latest ctx.progress() of the running attempt (kept while a retry waits; null once the next attempt starts)',
      ),
    result: z
      .unknown()
      .optional()
      .describe(
        'archived jobs: the JSON value the handler returned (absent when it returned nothing); GET /jobs/{id} only',
      ),
    logs: z
      .array(
        z.object({
          attempt: z.number().int(),
          at: dateTime,
          level: z.enum(['info', 'warn', 'error']),
          message: z.string(),
          fields: z.record(z.string(), z.unknown()).optional(),
        }),
      )
      .optional()
      .describe("the job's own ctx.log lines, oldest first (its newest KEEL_JOB_LOG_LINES); GET /jobs/{id} only"),
    attemptLog: z
      .array(attempt)
      .optional()
      .describe(
        'the attempts that ended without success, oldest first (the newest 100), recorded by the move that ended each; GET /jobs/{id} only',
      ),
    maxAttempts: z.number().int().nullable().describe("the job's own limit; null: its type's, else its queue's"),
    leaseExpiresAt: dateTime.nullable().describe("hot jobs: when the claim's lease runs out"),
    heartbeatAt: dateTime.nullable().describe("hot jobs: the running attempt's last heartbeat"),
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
    zombiePolicy: zombiePolicy,
    maxAttempts: z.number().int(),
    archiveRetentionSeconds: z.number().int(),
    dlqRetentionSeconds: z.number().int(),
    metricsRetentionSeconds: z.number().int(),
  });
  const counters = {
    pending: z.number().int(),
    fetched: z.number().int(),
    processing: z.number().int(),
    waiting: z.number().int().describe("a flow's jobs whose parents have not all finished (not due; not in pending)"),
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
      inFlight: z
        .number()
        .int()
        .optional()
        .describe(
          'pause: jobs of the queue claimed before the pause (fetched or processing) as it returned; they run to their end, and no other job of the queue starts',
        ),
      unchanged: z
        .literal(true)
        .optional()
        .describe(
          'expected no longer matched, but the queue already held every value the request sets (a retry of a change that applied, its answer lost): nothing was written',
        ),
    }),
    enqueue: z.union([enqueued, z.object({ jobs: z.array(enqueued) })]),
    job: job.extend({
      timeline: z
        .array(attempt)
        .describe('every attempt, oldest first: attemptLog, then the archived success or the attempt running now'),
      attemptLimit: z
        .number()
        .int()
        .describe("the attempts the job may use: its own maxAttempts, else its type's, else its queue's"),
      parents: z
        .array(flowLink.extend({ result: z.unknown().optional().describe("an archived parent's result") }))
        .describe('the jobs this one waits (or waited) for, in the order of its after list (docs/jobs.md, "Flows")'),
      children: z.array(flowLink).describe('the jobs that wait for this one, the first 1,000 by id'),
    }),
    jobPage: z.object({
      location: location,
      items: z.array(
        job.omit({ payload: true, result: true, logs: true, attemptLog: true }).extend({
          payloadBytes: z.number().int().describe("size of the payload's JSON text in bytes"),
          payloadPreview: z.string().describe("the payload's JSON text, cut to its first 200 characters"),
          payloadTruncated: z.boolean().describe('the preview is cut: GET /jobs/{id} has the whole payload'),
          lastError: z.string().nullable().describe('cut to 1,000 characters (the whole text: GET /jobs/{id})'),
        }),
      ),
      nextAfterId: z.string().nullable().describe('pass as afterId for the next page; null: nothing left below'),
      scanBounded: z
        .boolean()
        .describe('the archive/DLQ search stopped after scanRows rows: more may match below nextAfterId'),
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
    resurrected: z.object({
      id: z.string(),
      resurrected: z.literal(true),
      posted: z.boolean().describe("this job's own message was posted"),
      count: z.number().int().describe('jobs moved DLQ -> hot by this call: this one and its flowChildren'),
      ids: z.array(z.string()),
      flowChildren: z
        .array(z.string())
        .describe(
          "the flow children (and theirs) this job's failure dead-lettered, back with it, waiting for it again",
        ),
    }),
    resurrectedMany: z.object({
      dryRun: z.boolean(),
      count: z
        .number()
        .int()
        .describe(
          'confirm: jobs moved DLQ -> hot by this call, exactly (fromPreview + flowChildren); dry run: the ids that would be',
        ),
      ids: z.array(z.string()),
      fromPreview: z
        .number()
        .int()
        .optional()
        .describe('confirm: previewed ids resurrected; fromPreview + skipped is every previewed id'),
      flowChildren: z
        .array(z.string())
        .optional()
        .describe(
          'confirm: jobs not previewed that came back with a resurrected parent (the flow children its failure dead-lettered, waiting for it again)',
        ),
      posted: z.number().int(),
      matched: z
        .object({ count: z.number().int(), exact: z.boolean() })
        .optional()
        .describe('dry run with a filter: every DLQ job the filter matches (exact, or at least count)'),
      skipped: z
        .array(
          z.object({
            id: z.string(),
            why: z.enum(['not_in_dlq', 'gone', 'key_held']),
            location: z.string().nullable(),
            state: z.string().nullable(),
          }),
        )
        .optional()
        .describe('confirm: previewed ids not resurrected, and where each is now (what changed since the preview)'),
      arrivedAfterPreview: z
        .object({ count: z.number().int(), exact: z.boolean(), ids: z.array(z.string()) })
        .optional()
        .describe('confirm with a filter: DLQ jobs matching it now that the preview did not list (not resurrected)'),
    }),
    cancelledMany: z.object({
      dryRun: z.boolean(),
      count: z.number().int(),
      ids: z.array(z.string()),
      matched: z.object({ count: z.number().int(), exact: z.boolean() }).optional(),
      rows: z.array(
        z.object({
          id: z.string(),
          outcome: z.enum(['would_cancel', 'would_request_cancel', 'cancelled', 'cancel_requested', 'not_hot', 'gone']),
          location: z.string().nullable(),
          state: z.string().nullable(),
        }),
      ),
      arrivedAfterPreview: z
        .object({ count: z.number().int(), exact: z.boolean(), ids: z.array(z.string()) })
        .optional(),
    }),
    purge: z.object({
      dryRun: z.boolean(),
      target: purgeTarget,
      queue: z.string().nullable(),
      olderThan: z.string(),
      matched: z.number().int().optional(),
      capped: z.boolean().optional().describe('matched is a lower bound: the count stopped there'),
      asOf: z.string().optional().describe("the store's clock when the preview counted"),
      note: z.string().optional(),
      leftMeanwhile: z
        .number()
        .int()
        .optional()
        .describe('previewed rows no longer there at the confirm (resurrected or purged meanwhile)'),
      deleted: z.number().int().optional(),
      batches: z.number().int().optional(),
      mayHaveMore: z.boolean().optional(),
    }),
    openapi: z.looseObject({ openapi: z.string(), info: z.looseObject({}), paths: z.record(z.string(), z.unknown()) }),
  };
})();

// GET /audit: the ops audit trail, newest first. Its ids are audit record ids (bigints like job ids): a bad one is
// named as such, not as a job id.
const AUDIT_ID_MESSAGE = "must be an audit record id (a positive integer: a page's nextBeforeId)";
const auditId = z
  .string()
  .regex(/^[1-9][0-9]{0,18}$/, AUDIT_ID_MESSAGE)
  .refine((v) => !/^[1-9][0-9]{0,18}$/.test(v) || isJobId(v), AUDIT_ID_MESSAGE);
export const auditSearchQuery = z.strictObject({
  from: isoDate.optional().describe('records at or after this instant'),
  to: isoDate.optional().describe('records before this instant'),
  principal: storableText(1, AUDIT_TEXT_LIMITS.principalName)
    .optional()
    .describe("the caller's Entra object id or name, exactly"),
  action: z
    .string()
    .regex(/^[A-Za-z]+$/, 'must be an operation id (letters only), e.g. cancelJob')
    .max(AUDIT_TEXT_LIMITS.action)
    .optional()
    .describe('operation id, e.g. cancelJob, enqueue, purge'),
  target: storableText(1, AUDIT_TEXT_LIMITS.target)
    .optional()
    .describe('exactly, e.g. queue:emails, job:42, batch:<uuid>, transfer:orders'),
  outcome: z.enum(AUDIT_OUTCOMES).optional(),
  beforeId: auditId.optional().describe('records below this id (nextBeforeId of the previous page)'),
  scanRows: qOptionalInt(
    1,
    TEXT_SEARCH_SCAN_ROWS_MAX,
    `records examined per call, the next ids below beforeId (default ${AUDIT_SCAN_ROWS_DEFAULT}); continue from nextBeforeId`,
  ),
  limit: qInt(1, LIMITS.searchJobs, 50),
});

const auditRecord = z.object({
  id: z.string(),
  at: dateTime.describe("the database server's time"),
  principalId: z.string().nullable().describe('Entra object id'),
  principalName: z.string().nullable(),
  tenantId: z.string().nullable(),
  appId: z.string().nullable().describe('the calling application, for a workload identity'),
  authMethod: z
    .enum(AUDIT_AUTH_METHODS)
    .describe('key: a function key alone; principal: App Service authentication; local: the local host; none'),
  channel: z.enum(['key', 'console']),
  role: z.enum(['reader', 'producer', 'operator']).nullable().describe('the highest level the caller held'),
  requiredRole: z.enum(['reader', 'producer', 'operator']),
  httpMethod: z.string(),
  action: z.string().describe('operation id'),
  target: z.string().nullable(),
  summary: z.string().nullable().describe('path parameters, query and body (payloads as size and digest), as JSON'),
  outcome: z.enum(AUDIT_OUTCOMES).describe('started: the action began and its end was not recorded'),
  status: z.number().int().nullable(),
  reason: z.string().nullable(),
  affected: z.number().int().nullable(),
  requestId: z.string().nullable(),
  clientIp: z.string().nullable(),
  finishedAt: dateTime.nullable(),
});

export const auditPage = z.object({
  items: z.array(auditRecord),
  nextBeforeId: z.string().nullable().describe('pass as beforeId for the next page; null: nothing left below'),
  scanBounded: z.boolean().describe('the search stopped after scanRows records: more may match below nextBeforeId'),
});

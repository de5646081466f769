// The job runtime's app settings, parsed once with zod by the composition root (shared/app/runtime.ts,
// functions/app.ts, dev/boot.ts) from the environment it hands down (shared/app/environment.ts). Azure passes app
// settings as environment variables (strings); the local host fills the same names. An invalid value fails at
// startup naming the setting. Each field is declared once here with its type and default, its comment is its doc line.
// The settings of a few features are parsed by per-feature schemas from the same environment, passed to them
// explicitly (names that are not fixed, or read before Settings or without it): shared/app/settingsIndex.ts lists
// every schema and the settings each declares, and test/config/settingsIndex.test.ts keeps that list, the code's
// reads and docs/operations.md ("Settings") in step.
// It reads the engine registry (job store engines and their control settings): below the composition root, import
// its Settings type only (eslint.config.js).
import { z } from 'zod';
import { engineNamed, enginesWith } from '../engines/registry.js';
import { LIMITS } from '../jobs/validate.js';
import { DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES_LIMIT } from '../jobs/progress.js';
import { DEFAULT_JOB_LOG_LINES, JOB_LOG_LINES_LIMIT } from '../jobs/jobLog.js';
import { ncrontabProblem } from '../jobs/ncrontab.js';

const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no', 'TRUE', 'FALSE', 'True', 'False'])
    .optional()
    .transform((v) => (v === undefined ? def : ['true', '1', 'yes'].includes(v.toLowerCase())));

const int = (def: number, min: number, max: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return def;
      if (!/^-?\d+$/.test(v.trim())) {
        ctx.addIssue({ code: 'custom', message: `expected an integer, got "${v}"` });
        return z.NEVER;
      }
      const n = Number(v);
      if (n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `must be between ${min} and ${max}, got ${n}` });
        return z.NEVER;
      }
      return n;
    });

const list = z
  .string()
  .optional()
  .transform((v) =>
    (v ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  );

// Azure Storage queue names: 3-63 chars, lowercase letters, digits and single hyphens.
const queueName = (def: string) =>
  z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? def : v.trim()))
    .pipe(
      z
        .string()
        .regex(
          /^[a-z0-9](?!.*--)[a-z0-9-]{1,56}[a-z0-9]$/,
          'must be a storage queue name (3-58 chars: a-z, 0-9, single hyphens), leaving room for "-poison"',
        ),
    );

// Six-field NCRONTAB (second minute hour day month weekday), as the Functions timer trigger expects.
const schedule = (def: string) =>
  z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? def : v.trim()))
    .pipe(
      z
        .string()
        // As the Functions host parses a timer schedule (NCrontab): refused here, naming the cron field, rather than
        // by the host at start (Azure) or never (a permissive parser locally).
        .superRefine((s, ctx) => {
          const problem = ncrontabProblem(s);
          if (problem) ctx.addIssue({ code: 'custom', message: `must be a six-field NCRONTAB expression: ${problem}` });
        }),
    );

const roleName = (def: string) =>
  z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? def : v.trim()));

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v));

export const settingsSchema = z
  .object({
    // Storage account for the queue triggers (Azurite locally).
    AzureWebJobsStorage: optionalString,
    AzureWebJobsStorage__queueServiceUri: optionalString,
    AzureWebJobsStorage__accountName: optionalString,
    AzureWebJobsStorage__clientId: optionalString,
    KEEL_STORE_ENGINE: z.enum(enginesWith('jobStore')).optional().default('postgres'),
    KEEL_PG_URL: optionalString.pipe(z.url('must be a postgres:// URL').optional()),
    // The schema owner's connection for migrations at startup (KEEL_MIGRATE_ON_START), when KEEL_PG_URL is the
    // application's least-privilege login (a member of keel_executor, which may only execute the keel functions).
    KEEL_PG_MIGRATE_URL: optionalString.pipe(z.url('must be a postgres:// URL').optional()),
    KEEL_PG_POOL_SIZE: int(10, 1, 200),
    // How long the job store's pool keeps a connection nobody uses (ms). Longer than pg-pool's 10 s: a Worker or
    // dispatcher idle between bursts reopened its connections, ~13-16 ms of server CPU each (bench/README.md); bounded,
    // so an idle instance gives its connections back (a server's or Azure's connection limit).
    KEEL_PG_POOL_IDLE_MS: int(60_000, 1_000, 3_600_000),
    KEEL_MAX_PAYLOAD_BYTES: int(LIMITS.payloadBytes, 1024, LIMITS.maxPayloadBytesSetting),
    KEEL_SQL_CONNECTION: optionalString,
    KEEL_SQL_POOL_SIZE: int(10, 1, 200),
    // Apply the schema at startup: default on for PostgreSQL; off for SQL Server, whose app identity should only
    // EXECUTE the procedures (install with `npm run migrate`); turn on where the login may run DDL.
    KEEL_MIGRATE_ON_START: z
      .enum(['true', 'false', '1', '0', 'yes', 'no'])
      .optional()
      .transform((v) => (v === undefined ? undefined : ['true', '1', 'yes'].includes(v))),
    // Storage queues (names are also referenced as %KEEL_JOBS_QUEUE% etc. by the triggers).
    KEEL_JOBS_QUEUE: queueName('keel-jobs'),
    KEEL_TRANSFER_STAGE_QUEUE: queueName('keel-transfer-stage'),
    KEEL_TRANSFER_APPLY_QUEUE: queueName('keel-transfer-apply'),
    // Timers. Minute granularity by default, so an idle app costs one cheap probe per timer a minute (docs/deploy.md,
    // "What it costs"): due work arrives by queue message (enqueue, retries and schedule ticks post one, delayed to
    // when the job is due); the dispatcher is the backstop for a lost message, a job due more than 7 days out, a job
    // its queue's concurrency limit held back, at most one tick late. All three on the same second: firings that
    // coincide share one billed activity period (at least 1 s each on Flex Consumption).
    KEEL_DISPATCH_SCHEDULE: schedule('0 * * * * *'),
    KEEL_MAINTENANCE_SCHEDULE: schedule('0 * * * * *'),
    KEEL_TRANSFER_SCHEDULE: schedule('0 0 * * * *'),
    // Recurring jobs (defineSchedule in handlers/): how often the scheduler looks for due ticks. Every minute by
    // default, on the minute, so minute-or-coarser schedules run on time. Schedules finer than a minute need this as
    // fine as they are (e.g. "* * * * * *"; the scheduler warns otherwise). A pass with no tick due by what it last
    // saw makes no database call; with no schedules declared it never does.
    KEEL_SCHEDULER_SCHEDULE: schedule('0 * * * * *'),
    // Dispatcher: which job queues it drains (empty = every queue the store knows), how long, how wide.
    KEEL_DISPATCH_QUEUES: list,
    KEEL_DISPATCH_MODE: z.enum(['run', 'post']).optional().default('run'),
    KEEL_DISPATCH_BUDGET_MS: int(10_000, 100, 540_000),
    // Jobs whose handlers run at once per dispatcher invocation (counted in jobs); claims come in batches of half of it
    // (JobProcessor.drain).
    KEEL_DISPATCH_CONCURRENCY: int(32, 1, 1000),
    KEEL_DISPATCH_POST_LIMIT: int(256, 1, 10_000),
    // Job processing.
    KEEL_WORKER_ID: optionalString,
    // The worker registry (the console's Workers page, shared/jobs/presence.ts): a processor refreshes its row when it
    // does something, at most this often (never per job; an idle process sends nothing of its own); maintenance deletes
    // the rows not seen for KEEL_WORKER_RETENTION_MS. KEEL_BUILD_ID: a build or commit id the rows report beside
    // package.json's version (e.g. set by the deployment pipeline).
    KEEL_WORKER_REFRESH_MS: int(300_000, 1_000, 3_600_000),
    KEEL_WORKER_RETENTION_MS: int(3_600_000, 3_000, 7 * 24 * 3_600_000),
    KEEL_BUILD_ID: optionalString.pipe(z.string().max(128, 'must be at most 128 characters').optional()),
    KEEL_LEASE_SECONDS: int(60, 5, 3600),
    KEEL_HEARTBEAT_MS: int(10_000, 200, 600_000),
    // ctx.progress() writes at most this often per running job (the latest value wins); results over the limit fail
    // the job as fatal (shared/jobs/progress.ts).
    KEEL_PROGRESS_INTERVAL_MS: int(1_000, 100, 600_000),
    KEEL_MAX_RESULT_BYTES: int(DEFAULT_MAX_RESULT_BYTES, 1, MAX_RESULT_BYTES_LIMIT),
    // ctx.log lines kept with each job across its attempts, newest first out (0: the process log only).
    KEEL_JOB_LOG_LINES: int(DEFAULT_JOB_LOG_LINES, 0, JOB_LOG_LINES_LIMIT),
    // Graceful stop under the Functions host (appTerminate, SIGTERM): how long running handlers get before they are
    // aborted with reason 'shutdown' and handed back. The host kills the worker 5 s after asking it to terminate
    // (WorkerTerminate's grace period), so the default and the cap leave room for the hand-back writes.
    KEEL_SHUTDOWN_GRACE_MS: int(3_000, 0, 4_000),
    KEEL_DEMO_HANDLERS: bool(false),
    // Accept enqueues of job types this app has no handler for (a producer-only app; another app runs them).
    // Off: such jobs are refused at enqueue (400 naming "type") instead of being dead-lettered later.
    KEEL_ALLOW_UNKNOWN_JOB_TYPES: bool(false),
    // Maintenance.
    KEEL_MAINT_RESCUE_BATCH: int(500, 1, LIMITS.rescueJobs),
    KEEL_MAINT_PURGE_BATCH: int(1000, 1, LIMITS.purgeBatchRows),
    KEEL_MAINT_MAX_BATCHES: int(20, 1, 1000),
    // Retention purges (three calls per queue) run at most this often per instance, not every pass: retention is
    // counted in days, and an idle pass is then two calls (rescue, stats). A purge that left more runs again next pass.
    KEEL_MAINT_PURGE_INTERVAL_MS: int(3_600_000, 0, 24 * 3_600_000),
    KEEL_TRANSFER_STALE_MS: int(600_000, 1000, 7 * 24 * 3600_000),
    KEEL_TRANSFER_RECONCILE_LIMIT: int(20, 1, 1000),
    // Retries of a failed stage or apply step (docs/transfer.md, "Retries"): the step re-posts itself with a delay
    // of base * 2^(n-1), capped at max, up to limit times in a row; the transfer timer restarts a chain that ended.
    KEEL_TRANSFER_RETRY_BASE_MS: int(30_000, 1000, 3600_000),
    KEEL_TRANSFER_RETRY_MAX_MS: int(900_000, 1000, 7 * 24 * 3600_000),
    KEEL_TRANSFER_RETRY_LIMIT: int(10, 0, 1000),
    KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT: int(3, 0, 1000),
    // Catch-up: after a commit whose window was full, the apply step creates and posts the next batch at once, until
    // the chain (started by a timer tick or a start) has committed this many rows (0 turns catch-up off) or has run
    // this many ms since its first batch was created (0: no time budget), whichever comes first; the next timer tick
    // starts a new chain. The time budget is the one that ends a long backfill's chain with the defaults.
    KEEL_TRANSFER_CATCHUP_ROWS: int(100_000_000, 0, 1_000_000_000),
    KEEL_TRANSFER_CATCHUP_MS: int(3_600_000, 0, 7 * 24 * 3600_000),
    // Direct apply (docs/transfer.md): a PostgreSQL -> PostgreSQL key window is staged and applied in one target
    // transaction, each row written once; false: every batch is staged, then applied (two writes per row).
    KEEL_TRANSFER_DIRECT_APPLY: bool(true),
    // Rows behind (keel.transfer.rows_behind, GET /transfers): rows at the source past the last committed window,
    // counted up to this many (a bounded walk of the boundary column's index); 0: not counted.
    KEEL_TRANSFER_ROWS_BEHIND_CAP: int(1_000_000, 0, 100_000_000),
    // Transfer journal (control database) connections: connect, per-statement and idle-in-transaction limits
    // (PostgreSQL; on SQL Server the first two are the pool's connection and request timeouts). Bounded well
    // inside the Functions 10-minute timeout so a dead control database fails a step instead of hanging it.
    KEEL_JOURNAL_CONNECT_TIMEOUT_MS: int(10_000, 500, 120_000),
    KEEL_JOURNAL_STATEMENT_TIMEOUT_MS: int(30_000, 500, 300_000),
    KEEL_JOURNAL_IDLE_TX_TIMEOUT_MS: int(60_000, 500, 300_000),
    // Transfers started by the timer: names from the transfer config, or "*" for all of them. Empty: none.
    KEEL_SCHEDULED_TRANSFERS: list,
    // Ops API.
    // Role names (app roles of the Entra app registration) for the three ops levels (docs/operations.md).
    KEEL_OPS_READER_ROLE: roleName('Keel.Reader'),
    KEEL_OPS_PRODUCER_ROLE: roleName('Keel.Producer'),
    KEEL_OPS_OPERATOR_ROLE: roleName('Keel.Operator'),
    // "local": the local host (npm start) and the tests take x-ms-client-principal as the caller sends it. Refused
    // wherever a hosting environment is detected (shared/ops/principalTrust.ts).
    KEEL_TRUST_CLIENT_PRINCIPAL: z.preprocess(
      (v) => (typeof v === 'string' && v.trim() === '' ? undefined : v),
      z.enum(['local']).optional(),
    ),
    KEEL_OPS_MAX_BODY_BYTES: int(256 * 1024, 1024, 64 * 1024 * 1024),
    // A caller's 401/403 refusals of one ops route after its first within this window are counted into one audit
    // record at the window's end instead of a record each (shared/ops/refusalWindows.ts); 0: a record each.
    KEEL_OPS_REFUSAL_WINDOW_MS: int(60_000, 0, 3_600_000),
    // The ops audit trail (keel.ops_audit): rows older than this many days are deleted by the maintenance pass.
    KEEL_OPS_AUDIT_RETENTION_DAYS: int(365, 1, 36_500),
    // Warnings on the console's overview (GET /warnings): a worker whose oldest held job showed no sign of life
    // (heartbeat, start or claim) for this long; a queue whose oldest due job has waited this long; a queue that
    // dead-lettered at least this many jobs in the last 15 minutes.
    KEEL_WARN_STALE_HEARTBEAT_MS: int(60_000, 1000, 24 * 3600_000),
    KEEL_WARN_QUEUE_LAG_MS: int(300_000, 1000, 7 * 24 * 3600_000),
    KEEL_WARN_DLQ_PER_15_MIN: int(10, 1, 1_000_000),
    // Set by the local host only: the key its HTTP layer requires (Azure enforces function keys itself).
    KEEL_OPS_KEY: optionalString,
    // The sql/ folder the migrations at startup read (and the transfer targets', from the same setting): default the
    // one found above the app's code (shared/config/sqlDir.ts).
    KEEL_SQL_DIR: optionalString,
  })
  .superRefine((s, ctx) => {
    // A live worker refreshes its row every KEEL_WORKER_REFRESH_MS at most: a shorter retention would prune it.
    if (s.KEEL_WORKER_RETENTION_MS <= 2 * s.KEEL_WORKER_REFRESH_MS) {
      ctx.addIssue({
        code: 'custom',
        path: ['KEEL_WORKER_RETENTION_MS'],
        message: `must be more than twice KEEL_WORKER_REFRESH_MS (${s.KEEL_WORKER_REFRESH_MS}), or live workers are pruned`,
      });
    }
    // The job store's engine says which setting holds the control database (shared/engines/registry.ts).
    const setting = engineNamed(s.KEEL_STORE_ENGINE).controlSetting;
    if (setting && !s[setting as keyof typeof s]) {
      ctx.addIssue({
        code: 'custom',
        path: [setting],
        message: `is required when KEEL_STORE_ENGINE=${s.KEEL_STORE_ENGINE}`,
      });
    }
  });

export type Settings = z.output<typeof settingsSchema>;

export class SettingsError extends Error {
  constructor(
    readonly setting: string,
    detail: string,
  ) {
    super(`invalid app setting ${setting}: ${detail}`);
    this.name = 'SettingsError';
  }
}

// Parses the settings from an environment-like record; throws SettingsError naming the first bad setting.
export function parseSettings(env: Record<string, string | undefined>): Settings {
  const result = settingsSchema.safeParse(env);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const setting = String(issue.path[0] ?? 'settings');
    throw new SettingsError(setting, issue.message);
  }
  return result.data;
}

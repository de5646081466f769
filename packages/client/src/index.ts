// @keel/client: enqueue Keel jobs from another application — over the HTTP API (function key or Entra token) or
// inside the producer's own PostgreSQL or SQL Server transaction — typed by a job type map. See README.md.
export {
  KeelHttpClient,
  type CallOptions,
  type EnqueuedJob,
  type HttpClientOptions,
  type TokenCredentialLike,
  type TokenSource,
} from './http.js';
export {
  enqueueInTransaction,
  encodeJobMessage,
  type PgQueryable,
  type QueueSender,
  type TransactionalEnqueueOptions,
  type TransactionalEnqueueResult,
} from './pg.js';
export { enqueueInSqlServerTransaction, type MssqlRequestLike } from './mssql.js';
export {
  jobTypes,
  jobTypesFrom,
  DEFAULT_QUEUE,
  type HandlerLike,
  type JobInput,
  type JobOptions,
  type JobTypeMap,
  type JobTypeSpec,
  type JobTypesOf,
  type PayloadOf,
} from './jobTypes.js';
export { IdempotencyConflictError, KeelApiError, KeelUnavailableError } from './errors.js';
export { flowJobs, flowResult, type Flow, type FlowJob, type FlowResult } from './flow.js';
export {
  DATE_RANGE,
  LIMITS,
  ON_PARENT_FAILURE,
  SCHEDULE_KEY_PREFIX,
  ValidationError,
  prepareEnqueue,
  type EnqueueJob,
  type OnParentFailure,
  type ParentRef,
} from './rules.js';

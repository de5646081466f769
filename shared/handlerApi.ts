// The handler API: the one module code in handlers/ imports (`import { defineHandler, z } from
// '../shared/handlerApi.js'`; the lint rule for handlers/ in eslint.config.js refuses any other module of the app).
// Everything a handler file needs — defining handlers and schedules, the errors that steer retries, enqueuing
// follow-up jobs with the app's checks, and the errors enqueue throws — behind a name that stays put while the
// modules behind it move. Handler tests use the test kit, test/kit.ts (docs/jobs.md, "Testing a handler").
import type { EnqueuedJob, Logger } from './app/enqueue.js';
import { processEnv } from './app/environment.js';
import type { JobRequest } from './jobs/typedEnqueue.js';
import type { Flow, FlowResult } from '../packages/client/src/flow.js';

export { defineHandler, defineSchedule, z } from './jobs/define.js';
export type {
  HandlerDefinition,
  HandlerSpec,
  ScheduleDefinition,
  ScheduleSpec,
  MissedTickPolicy,
} from './jobs/define.js';
export { FatalError, RetryAfterError } from './jobs/handlerErrors.js';
export type { JobContext, JobLogger } from './jobs/registry.js';
export type { BackoffOptions } from './jobs/backoff.js';
export type { JobProgress, ProgressInput } from './jobs/progress.js';
export { ValidationError } from './jobs/validate.js';
export { IdempotencyConflictError } from './jobs/contract.js';
export type { JobRequest } from './jobs/typedEnqueue.js';
export type { EnqueuedJob } from './app/enqueue.js';
export type { JobLink } from './jobs/contract.js';
export type { Flow, FlowResult } from '../packages/client/src/flow.js';

// A handler's own app setting, by name (the handler's names, not Keel's: shared/app/settingsIndex.ts lists Keel's
// only), from the process environment through the one module that reads it (shared/app/environment.ts). App settings
// do not change while the app runs: read one once, at first use, not per job.
export function appSetting(name: string): string | undefined {
  return processEnv()[name];
}

// Enqueues jobs from a handler (a follow-up job) or any code running in the app, with the ops API's checks: a
// registered type, the handler's payload schema and queue (ValidationError naming the field, nothing written), an
// idempotency key held with another payload (IdempotencyConflictError). The row is written, then its message posted.
export async function enqueue(jobs: JobRequest | JobRequest[], log?: Logger): Promise<EnqueuedJob[]> {
  // Loaded on first use: the runtime loads the handlers folder, so a handler module must not load the runtime.
  const [{ getRuntime }, { enqueueJobs }] = await Promise.all([import('./app/runtime.js'), import('./app/enqueue.js')]);
  return enqueueJobs(await getRuntime(), jobs, log);
}

// Enqueues a flow (docs/jobs.md, "Flows"): `parent`, the `children` that run after it and `then`, which runs after all
// of them, in one transaction (all of it or nothing), with enqueue's checks. Children read their parents' results
// with ctx.parents().
export async function enqueueFlow(flow: Flow<JobRequest>, log?: Logger): Promise<FlowResult<EnqueuedJob>> {
  const [{ getRuntime }, jobs] = await Promise.all([import('./app/runtime.js'), import('./app/enqueue.js')]);
  return jobs.enqueueFlow(await getRuntime(), flow, log);
}

// What the ops API needs from the running app, as an interface of its own: the ops routes depend on this, not on
// the composition root (shared/app), so ops/ never imports app/ (docs/architecture.md). shared/app/opsRuntime.ts
// builds it from the Runtime and functions/ops.ts hands it to the router.
import type { Settings } from '../config/settings.js';
import type { EnqueueResult, JobId, JobStore } from '../jobs/contract.js';
import type { ScheduleDefinition } from '../jobs/define.js';
import type { HandlerRegistry } from '../jobs/registry.js';
import type { JobRequest, TypedEnqueueOptions } from '../jobs/typedEnqueue.js';
import type { TransferService } from '../transfer/service.js';
import type { PrincipalTrust } from './principalTrust.js';

export interface OpsLogger {
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface OpsEnqueued extends EnqueueResult {
  posted: boolean; // false: duplicate, too far in the future for a queue message, or posting failed
}

export interface OpsRuntime {
  readonly settings: Settings;
  // Who vouches for x-ms-client-principal (shared/ops/principalTrust.ts), parsed from the process environment once
  // (shared/app/environment.ts: hostEnvironment).
  principalTrust(): PrincipalTrust;
  readonly store: JobStore;
  // Whether an error says a database was out of reach or its connection broke (the engines' shapes): answered 503.
  readonly connectionLost?: (err: unknown) => boolean;
  readonly registry: HandlerRegistry;
  // Recurring schedules declared by the handlers (and the app).
  readonly schedules: readonly ScheduleDefinition[];
  readonly queues: { ping(): Promise<boolean> };
  // null when no transfer is configured (KEEL_TRANSFERS / KEEL_TRANSFERS_FILE unset).
  readonly transfers: TransferService | null;
  readonly workerId: string;
  // This instance's processor: a cancel stops a handler running here at once (elsewhere at its next heartbeat).
  readonly processor: { requestCancel(jobId: JobId): boolean };
  // Check each job against its handler, write the rows, then post their queue messages (a lost message only
  // delays a job until the dispatcher).
  enqueueAndPost(
    jobs: readonly JobRequest[],
    log: OpsLogger,
    opts?: Pick<TypedEnqueueOptions, 'prefix'>,
  ): Promise<OpsEnqueued[]>;
  // Post existing jobs' messages; returns how many were posted.
  postJobs(ids: JobId[], log: OpsLogger): Promise<number>;
  // Post the messages of the jobs due now in these queues (at most KEEL_DISPATCH_POST_LIMIT), for a queue that can run
  // more than before (resumed, concurrency raised): they start now instead of at the dispatcher's next tick.
  postDue(queues: string[], log: OpsLogger): Promise<number>;
  // Which of these jobs are fetched in a queue with a concurrency limit (id -> queue), read before a cancel: such a
  // job holds one of its queue's slots, which its cancel frees (shared/app/slots.ts). Never throws (a failed read
  // finds none: the dispatcher covers the slot).
  slotHolders(ids: JobId[], log: OpsLogger): Promise<Map<JobId, string>>;
  // Hand on the slots freed in limited queues (an entry per freed slot) as a finished job's is: the next due jobs'
  // messages are posted now, not at the dispatcher's tick. Never throws; returns how many were posted.
  handOnSlots(queues: string[], log: OpsLogger): Promise<number>;
  // A queue's maxConcurrency was changed here: drop this instance's cached view of the limits (read at most every
  // 5 s), so the next finish of one of its jobs hands its slot on under the new limit at once.
  queueLimitsChanged(): void;
  // Post a batch to the stage queue; false when posting failed (the transfer timer resumes it).
  postStage(batchId: string, log: OpsLogger): Promise<boolean>;
}

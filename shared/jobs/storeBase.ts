// The single-job operations every engine serves through its batch procedure (see OPERATION_PROCEDURE):
// one enqueue is a batch of one, and so are one start and one complete.
import type {
  CompleteResult,
  EnqueueRequest,
  EnqueueResult,
  JobId,
  JobStore,
  LeaseRef,
  OwnerResultById,
  StartResult,
} from './contract.js';

type BatchOnly = Pick<JobStore, 'enqueueMany' | 'startMany' | 'completeMany'>;

export abstract class BatchBackedJobStore implements BatchOnly {
  abstract enqueueMany(jobs: EnqueueRequest[]): Promise<EnqueueResult[]>;
  abstract startMany(refs: LeaseRef[]): Promise<(StartResult & { jobId: JobId })[]>;
  abstract completeMany(refs: LeaseRef[]): Promise<OwnerResultById[]>;

  async enqueue(job: EnqueueRequest): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany([job]);
    return result!;
  }

  async start(ref: LeaseRef): Promise<StartResult> {
    const [r] = await this.startMany([ref]);
    return { status: r!.status, attempt: r!.attempt };
  }

  async complete(ref: LeaseRef): Promise<CompleteResult> {
    const [r] = await this.completeMany([ref]);
    return r!.status;
  }
}

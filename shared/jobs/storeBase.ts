// What every engine's job store shares: the contract's argument checks, applied once at the boundary, and the
// single-job operations served through the batch procedure (see OPERATION_PROCEDURE): one enqueue is a batch of
// one, and so are one start and one complete.
import {
  CANCEL_MANY_CHUNK,
  type CancelResult,
  type CancelResultById,
  type CompleteResult,
  type EnqueueRequest,
  type EnqueueResult,
  type JobId,
  type JobStore,
  type LeaseRef,
  type OwnerResultById,
  type StartResult,
} from './contract.js';
import { STORE_ARGUMENT_CHECKS, isJobId, type StoreOperation } from './validate.js';

type BatchOnly = Pick<JobStore, 'enqueueMany' | 'startMany' | 'completeMany'>;
type AnyMethod = (...args: unknown[]) => Promise<unknown>;
type AnyCheck = (...args: unknown[]) => { answer: unknown } | undefined;

export abstract class BatchBackedJobStore implements BatchOnly {
  constructor() {
    // Every operation with a check runs it before the engine's own method, so both engines refuse the same bad
    // input with the same ValidationError (and answer an id that can name no job the same way) from one table,
    // instead of a copy of the checks in each engine. The engine methods are found on the subclass prototype.
    const self = this as unknown as Record<StoreOperation, AnyMethod>;
    for (const op of Object.keys(STORE_ARGUMENT_CHECKS) as StoreOperation[]) {
      const check = STORE_ARGUMENT_CHECKS[op] as AnyCheck | null;
      const method = self[op];
      if (!check || typeof method !== 'function') continue;
      Object.defineProperty(this, op, {
        configurable: true,
        writable: true,
        value: async (...args: unknown[]) => {
          const early = check(...args);
          return early ? early.answer : method.apply(this, args);
        },
      });
    }
  }

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

  // One transaction of cancelMany: the ids (distinct job ids, ascending, at most CANCEL_MANY_CHUNK) and what each
  // engine's cancel_many answered for them (an id it does not list was not found).
  protected abstract cancelChunk(ids: JobId[]): Promise<CancelResultById[]>;

  async cancelMany(jobIds: JobId[]): Promise<CancelResultById[]> {
    const distinct = [...new Set(jobIds)];
    const valid = distinct.filter(isJobId).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
    const found = new Map<JobId, CancelResult>();
    for (let i = 0; i < valid.length; i += CANCEL_MANY_CHUNK) {
      for (const r of await this.cancelChunk(valid.slice(i, i + CANCEL_MANY_CHUNK))) found.set(r.jobId, r.result);
    }
    return distinct.map((jobId) => ({ jobId, result: found.get(jobId) ?? 'not_found' }));
  }
}

// The ops API's view of the Runtime (shared/ops/context.ts): the same store, queues and transfers, with the
// posting steps bound to this runtime. One per runtime, so every request sees the same object.
import type { OpsRuntime } from '../ops/context.js';
import { postDueJobs } from './timerPasses.js';
import { enqueueAndPost, postJobs } from './enqueue.js';
import type { Runtime } from './runtime.js';
import { hostEnvironment } from './hostEnvironment.js';
import { postStage } from './transferSteps.js';
import { forgetQueueLimits, handOnSlots, slotHolders } from './slots.js';
import { isConnectionLost } from '../engines/connectionLost.js';

const views = new WeakMap<Runtime, OpsRuntime>();

export function opsRuntimeOf(rt: Runtime): OpsRuntime {
  let view = views.get(rt);
  if (!view) {
    view = {
      settings: rt.settings,
      principalTrust: () => hostEnvironment().principalTrust,
      store: rt.store,
      connectionLost: isConnectionLost,
      registry: rt.registry,
      schedules: rt.schedules,
      queues: rt.queues,
      transfers: rt.transfers,
      workerId: rt.workerId,
      processor: rt.processor,
      enqueueAndPost: (jobs, log, opts) => enqueueAndPost(rt, jobs, log, opts),
      postJobs: (ids, log) => postJobs(rt, ids, log),
      postDue: async (queues, log) => (await postDueJobs(rt, queues, log)).posted,
      postStage: (batchId, log) => postStage(rt, batchId, log),
      slotHolders: (ids, log) => slotHolders(rt, ids, log),
      handOnSlots: (queues, log) => handOnSlots(rt, queues, log),
      queueLimitsChanged: () => forgetQueueLimits(rt),
    };
    views.set(rt, view);
  }
  return view;
}

// Handing on a freed slot of a queue with a concurrency limit (maxConcurrency). The queue runner acknowledges the
// message of a job its queue's limit holds back; without a hand-on that job would wait for the dispatcher's next tick
// (a minute) after a slot frees. So whoever finishes a job of a limited queue posts the next due job(s) of that queue
// at once: pick the jobs a claim would take (the SQL pick enforces the limit and due time, so at most the free slots,
// whatever runs concurrently; the jobs stay pending) and post their ids, as the dispatcher's post mode does. One finish hands on at most the slots it
// freed, so a burst of finishes never posts more than the limit lets run (no thundering herd). A lost post, or a
// crash between the finish and the post, is covered by the dispatcher as before.
import type { JobOutcome } from '../jobs/contract.js';
import { LIMITS } from '../jobs/validate.js';
import { postJobs, type Logger } from './enqueue.js';
import type { Runtime } from './runtime.js';

// How long the queues' limits are taken as known (one list_queues read per runtime per interval, never per job): a
// limit set a moment ago is seen within this, and until then the dispatcher covers it as before.
export const QUEUE_LIMITS_TTL_MS = 5_000;

interface KnownLimits {
  at: number;
  limits: Map<string, number>; // limited queues only: name -> maxConcurrency
  pending?: Promise<Map<string, number>>;
}

const known = new WeakMap<Runtime, KnownLimits>();

// Ids this runtime handed on whose messages may still be on their way (queue -> id -> when). A handed-on job stays
// pending until its message arrives, so a second finish a moment later would pick and post that same job again and
// the second freed slot would wait for the dispatcher. So a runtime's hand-ons run one at a time (two at once would
// each skip the rows the other holds locked while it picks), and each picks past the jobs it already handed on and
// posts only new ids. Another instance can still pick the same job (the runner acknowledges the second
// message); the dispatcher covers the slot then, as before.
export const HANDED_ON_MS = 30_000;
interface HandOns {
  recent: Map<string, Map<string, number>>;
  tail: Promise<unknown>;
}
const handOns = new WeakMap<Runtime, HandOns>();

function handOnsOf(rt: Runtime): HandOns {
  let h = handOns.get(rt);
  if (!h) handOns.set(rt, (h = { recent: new Map(), tail: Promise.resolve() }));
  return h;
}

function recentlyHandedOn(h: HandOns, queue: string, now: number): Map<string, number> {
  let m = h.recent.get(queue);
  if (!m) h.recent.set(queue, (m = new Map()));
  for (const [id, at] of m) if (now - at >= HANDED_ON_MS) m.delete(id);
  return m;
}

// The limited queues (name -> maxConcurrency), as read at most QUEUE_LIMITS_TTL_MS ago. A failed read leaves the
// previous answer (the hand-on is an optimisation; the dispatcher is the guarantee).
export async function queueLimits(rt: Runtime, now = Date.now()): Promise<Map<string, number>> {
  let k = known.get(rt);
  if (!k) known.set(rt, (k = { at: -Infinity, limits: new Map() }));
  if (now - k.at < QUEUE_LIMITS_TTL_MS) return k.limits;
  const entry = k;
  entry.pending ??= rt.store
    .listQueues()
    .then((qs) => {
      entry.limits = new Map(
        qs.filter((q) => q.maxConcurrency !== null).map((q) => [q.name, q.maxConcurrency as number]),
      );
      entry.at = Date.now();
      return entry.limits;
    })
    .catch(() => entry.limits)
    .finally(() => (entry.pending = undefined));
  return entry.pending;
}

// Forget the limits read so far (a queue's settings were changed in this process).
export function forgetQueueLimits(rt: Runtime): void {
  known.delete(rt);
}

// Outcomes that free a slot the job held and leave it to someone else: archived, pending again for a later attempt,
// dead-lettered (failed, cancelled while it ran). Not 'released' (the job itself is due again now and its own message
// is posted) nor 'lease_lost' (someone else holds the job, and its slot).
export function freesSlot(outcome: JobOutcome | 'not_claimed'): boolean {
  return outcome === 'succeeded' || outcome === 'retried' || outcome === 'dead_lettered';
}

// Jobs of these queues (one entry per finished job) freed their slots: for each limited queue among them, claim,
// release and post up to that many due jobs (at most its limit). Never throws; returns how many ids were posted.
export async function handOnSlots(rt: Runtime, finishedQueues: readonly string[], log: Logger): Promise<number> {
  return handOn(rt, finishedQueues, () => 1, log);
}

// Before an operator's cancel of these ids: which are fetched jobs of a limited queue (id -> queue). A fetched job
// holds a slot of its queue's limit (the claim counts fetched and processing jobs), so cancelling it frees one that
// no finish hands on (no handler runs it); the cancel routes hand it on with handOnSlots. A pending or waiting job
// held none, and a running one hands its slot on when its handler stops. Reads nothing while no queue has a limit;
// else a getJob per id or a search per limited queue (its fetched jobs: at most its limit), whichever is fewer.
// Never throws: a failed read finds none (the dispatcher covers the slot).
export async function slotHolders(rt: Runtime, ids: readonly string[], log: Logger): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  try {
    const limits = await queueLimits(rt);
    if (limits.size === 0 || ids.length === 0) return found;
    if (ids.length <= limits.size) {
      for (const job of await Promise.all(ids.map((id) => rt.store.getJob(id))))
        if (job?.location === 'hot' && job.state === 'fetched' && limits.has(job.queue)) found.set(job.id, job.queue);
      return found;
    }
    const wanted = new Set(ids);
    for (const [queue, limit] of limits) {
      const page = await rt.store.searchJobs({
        location: 'hot',
        queue,
        state: 'fetched',
        limit: Math.max(1, Math.min(limit, LIMITS.searchJobs)),
      });
      for (const j of page.items) if (wanted.has(j.id)) found.set(j.id, queue);
    }
  } catch (err) {
    log.warn(
      `reading the fetched jobs of limited queues failed (the dispatcher runs the next job): ${(err as Error).message}`,
    );
  }
  return found;
}

// After the dispatcher's drain: every limited queue among `queues` may have free slots nobody is about to fill (its
// budget ran out with due jobs left); hand on up to each one's limit. Never throws; returns how many ids were posted.
export async function handOnDrained(rt: Runtime, queues: readonly string[], log: Logger): Promise<number> {
  return handOn(rt, queues, (limit) => limit, log);
}

// For each limited queue among `queues` (an entry per freed slot, or one per queue), hand on up to slotsOf(limit) an
// entry, at most its limit: one at a time per runtime, past the jobs already handed on.
async function handOn(
  rt: Runtime,
  queues: readonly string[],
  slotsOf: (limit: number) => number,
  log: Logger,
): Promise<number> {
  if (queues.length === 0) return 0;
  let posted = 0;
  try {
    const limits = await queueLimits(rt);
    if (limits.size === 0) return 0;
    const freed = new Map<string, number>();
    for (const q of queues) {
      const limit = limits.get(q);
      if (limit !== undefined && limit > 0) freed.set(q, (freed.get(q) ?? 0) + slotsOf(limit));
    }
    if (freed.size === 0) return 0;
    const h = handOnsOf(rt);
    const run = h.tail.then(async () => {
      for (const [queue, n] of freed) {
        const wanted = Math.min(n, limits.get(queue)!);
        const recent = recentlyHandedOn(h, queue, Date.now());
        // Pick past the jobs already handed on (pending until their messages arrive); the pick, as a claim, is still
        // capped at the queue's free slots.
        const r = await pickAndPost(rt, [queue], wanted + recent.size, log, (ids) => {
          const fresh = ids.filter((id) => !recent.has(id)).slice(0, wanted);
          const at = Date.now();
          for (const id of fresh) recent.set(id, at);
          return fresh;
        });
        posted += r.posted;
      }
    });
    h.tail = run.catch(() => undefined);
    await run;
  } catch (err) {
    log.warn(`handing on a freed slot failed (the dispatcher runs the next job): ${(err as Error).message}`);
  }
  return posted;
}

// Post the ids of up to `limit` due jobs of `queues` for the queue runner (those `choose` picks of them, by default
// all): the jobs a claim would take now (it honours pause, the global limit and due time), picked in one store call
// that leaves them pending (pickDue), so the runner that gets a message claims its job by id. Nothing is held in
// between: a pause that answers meanwhile does not count them in flight (they never run while it lasts), and a crash
// leaves nothing for zombie rescue. Returns how many were picked and how many posted.
export async function pickAndPost(
  rt: Runtime,
  queues: string[],
  limit: number,
  log: Logger,
  choose: (pickedIds: string[]) => string[] = (ids) => ids,
): Promise<{ picked: number; posted: number }> {
  const picked = await rt.store.pickDue(queues, limit);
  return { picked: picked.length, posted: await postJobs(rt, choose(picked), log) };
}

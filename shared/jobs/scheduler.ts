// Recurring jobs: on every pass (the scheduler timer: a singleton in Azure, yet two passes may still meet during a
// lock hand-over or a manual run) each schedule declared in handlers/ works out which ticks are due since the last one
// handled, applies its missed-tick policy, and enqueues them through the store's compare-and-set (fireSchedule): one
// pass wins each step, so each tick is enqueued exactly once across any number of instances. Each job also carries
// the idempotency key schedule:<name>:<tick>.
import { ncrontab, type Ncrontab } from './ncrontab.js';
import type { EnqueueRequest, FireStatus, JobId, JobStore, ScheduleState } from './contract.js';
import type { ScheduleDefinition } from './define.js';
import type { HandlerRegistry } from './registry.js';
import { DEFAULT_QUEUE, prepareTypedJobs } from './typedEnqueue.js';
import { storeClock } from './maintenance.js';

// How many ticks one pass looks back at most: bounds a pass after a long outage (catch-up is bounded separately).
export const MAX_TICKS_PER_PASS = 100;

export function cronOf(def: ScheduleDefinition): Ncrontab {
  return ncrontab(def.cron, def.timeZone);
}

export function nextTick(def: ScheduleDefinition, after: Date): Date | null {
  return cronOf(def).next(after);
}

export interface TickPlan {
  enqueue: Date[]; // ticks to enqueue, oldest first
  advanceTo: Date | null; // the new lastTick (null: nothing is due, leave it)
  onTime: number;
  missed: number; // due ticks older than graceMs (counted up to MAX_TICKS_PER_PASS: the look-back is bounded)
  skipped: number; // missed ticks not enqueued under the policy
}

// The ticks due in (from, now], from = the later of lastTick and resumedAt. A schedule seen for the first time (no
// last tick, never resumed) starts with its next tick: nothing from before it existed runs, not even a tick a
// second old (the grace period is for ticks of a schedule that already runs), so the first pass only records the
// latest past tick as its baseline.
export function planTicks(
  def: ScheduleDefinition,
  state: Pick<ScheduleState, 'lastTick' | 'resumedAt'> | null,
  now: Date,
): TickPlan {
  const lastTick = state?.lastTick ?? null;
  const resumedAt = state?.resumedAt ?? null;
  const from = Math.max(lastTick?.getTime() ?? -Infinity, resumedAt?.getTime() ?? -Infinity);
  const c = cronOf(def);
  let due: Date[] = [];
  if (Number.isFinite(from)) {
    // Forward from the last handled tick: the usual case is a tick or two.
    let t: Date | null = new Date(from);
    for (let i = 0; i <= MAX_TICKS_PER_PASS; i++) {
      t = c.next(t);
      if (!t || t.getTime() > now.getTime()) break;
      due.push(t);
    }
  }
  if (!Number.isFinite(from) || due.length > MAX_TICKS_PER_PASS) {
    // First sight (only the latest tick matters), or a long outage (only the latest MAX_TICKS_PER_PASS do: catch-up
    // is bounded).
    const n = Number.isFinite(from) ? MAX_TICKS_PER_PASS : 1;
    due = c
      .previousN(n, new Date(now.getTime() + 1))
      .filter((x) => x.getTime() > from)
      .reverse();
  }
  const empty: TickPlan = { enqueue: [], advanceTo: null, onTime: 0, missed: 0, skipped: 0 };
  if (due.length === 0) return empty;
  const latest = due[due.length - 1]!;
  if (!Number.isFinite(from)) {
    // First sight: the baseline only. The first job is the next tick's, on a later pass.
    return { enqueue: [], advanceTo: latest, onTime: 0, missed: 0, skipped: 0 };
  }
  const onTime = due.filter((t) => now.getTime() - t.getTime() <= def.graceMs);
  const missed = due.filter((t) => now.getTime() - t.getTime() > def.graceMs);
  let fromMissed: Date[] = [];
  if (missed.length > 0) {
    if (def.missed === 'once') fromMissed = [missed[missed.length - 1]!];
    else if (def.missed === 'catchUp') fromMissed = missed.slice(-def.maxCatchUp);
  }
  return {
    enqueue: [...fromMissed, ...onTime],
    advanceTo: latest,
    onTime: onTime.length,
    missed: missed.length,
    skipped: missed.length - fromMissed.length,
  };
}

// The queue a schedule's jobs go to: its own, else its handler's, else "default" (what enqueue applies).
export function scheduleQueue(def: ScheduleDefinition, registry: HandlerRegistry): string {
  return def.queue ?? registry.get(def.type)?.options.queue ?? DEFAULT_QUEUE;
}

export function scheduleKey(def: ScheduleDefinition, tick: Date): string {
  return `schedule:${def.name}:${tick.toISOString()}`;
}

export interface SchedulePassItem {
  name: string;
  // failed: this schedule threw (error says why); nothing of it was enqueued, its last tick is unchanged, and the
  // next pass tries it again. The other schedules of the pass are not affected.
  status: FireStatus | 'idle' | 'failed';
  error?: string;
  enqueued: JobId[];
  ticks: string[];
  missed: number;
  skipped: number;
}

// What a process last read or wrote of each schedule's state: lets a pass with no tick due skip the database. Safe
// while stale: another pass only moves lastTick forward, a resume only moves resumedAt forward and a pause only stops
// ticks, so a tick not due by the remembered state is not due by the stored one either. A remembered pause is asked
// again every pass (a resume can make ticks due).
export type ScheduleMemory = Map<string, Pick<ScheduleState, 'paused' | 'lastTick' | 'resumedAt'>>;

// True when, by `memory`, no schedule has a tick due at `now`: the pass needs no database call.
export function nothingDue(schedules: readonly ScheduleDefinition[], memory: ScheduleMemory, now: Date): boolean {
  return schedules.every((def) => {
    const state = memory.get(def.name);
    return state !== undefined && !state.paused && planTicks(def, state, now).advanceTo === null;
  });
}

// One pass over every schedule. `now` is injectable for tests (a fake clock); the store's own clock is not used to
// decide ticks, only to stamp updates. With `memory` (kept by the caller across passes), a pass with nothing due by
// it makes no database call at all, so a minute timer over hourly schedules costs the database nothing between ticks.
export async function runSchedules(
  store: JobStore,
  registry: HandlerRegistry,
  schedules: readonly ScheduleDefinition[],
  now: Date = new Date(),
  memory?: ScheduleMemory,
): Promise<SchedulePassItem[]> {
  if (schedules.length === 0) return [];
  if (memory && nothingDue(schedules, memory, now)) {
    return schedules.map((def) => ({ name: def.name, status: 'idle', enqueued: [], ticks: [], missed: 0, skipped: 0 }));
  }
  const states = new Map((await resumedInHostTime(store, await store.listSchedules())).map((s) => [s.name, s]));
  if (memory) for (const [name, s] of states) memory.set(name, s);
  const out: SchedulePassItem[] = [];
  for (const def of schedules) {
    try {
      out.push(await runSchedule(store, registry, def, states.get(def.name) ?? null, now, memory));
    } catch (err) {
      // One schedule's failure (a payload its handler's schema now refuses, a store error) must not stop the others;
      // the next pass reads its state again.
      memory?.delete(def.name);
      const error = err instanceof Error ? err.message : String(err);
      out.push({ name: def.name, status: 'failed', error, enqueued: [], ticks: [], missed: 0, skipped: 0 });
    }
  }
  return out;
}

// A resume is stamped by the store's clock (set_schedule_paused: the database server's now()), the ticks and `now` by
// this host's: compared as they are, a host an hour ahead of the database ran an hour of the paused ticks after a
// resume, and one an hour behind ran nothing for an hour. So a resumedAt is read in this host's time: moved by the
// store's clock's offset from this host's (one short read, storeClock, on a pass that reads the states anyway and only
// when a schedule has been resumed; the read's round trip is its error, far below a tick). A remembered state keeps
// the moved value, so the passes that skip the database compare it right too.
async function resumedInHostTime(store: JobStore, states: ScheduleState[]): Promise<ScheduleState[]> {
  if (!states.some((s) => s.resumedAt && !s.paused)) return states;
  const sent = Date.now();
  const storeNow = (await storeClock(store)).getTime();
  const offset = storeNow - (sent + Date.now()) / 2;
  return states.map((s) => (s.resumedAt ? { ...s, resumedAt: new Date(s.resumedAt.getTime() - offset) } : s));
}

async function runSchedule(
  store: JobStore,
  registry: HandlerRegistry,
  def: ScheduleDefinition,
  state: ScheduleState | null,
  now: Date,
  memory: ScheduleMemory | undefined,
): Promise<SchedulePassItem> {
  if (state?.paused) return { name: def.name, status: 'paused', enqueued: [], ticks: [], missed: 0, skipped: 0 };
  const plan = planTicks(def, state, now);
  if (!plan.advanceTo) return { name: def.name, status: 'idle', enqueued: [], ticks: [], missed: 0, skipped: 0 };
  const jobs: EnqueueRequest[] = prepareTypedJobs(
    registry,
    plan.enqueue.map((tick) => ({
      type: def.type,
      ...(def.queue ? { queue: def.queue } : {}),
      payload: def.payload,
      priority: def.priority,
      tags: [`schedule:${def.name}`],
      idempotencyKey: scheduleKey(def, tick),
    })),
  );
  const r = await store.fireSchedule(def.name, state?.lastTick ?? null, plan.advanceTo, jobs);
  // Fired: this pass moved lastTick. Lost (another pass moved it, maybe less far) or paused: ask again next pass.
  if (memory && r.status === 'fired')
    memory.set(def.name, { paused: false, lastTick: plan.advanceTo, resumedAt: state?.resumedAt ?? null });
  else memory?.delete(def.name);
  return {
    name: def.name,
    status: r.status,
    enqueued: r.status === 'fired' ? r.jobs.filter((j) => !j.duplicate).map((j) => j.id) : [],
    ticks: r.status === 'fired' ? plan.enqueue.map((t) => t.toISOString()) : [],
    missed: plan.missed,
    skipped: plan.skipped,
  };
}

// What code in handlers/ uses: defineHandler and defineSchedule. A file in handlers/ exports their results (any
// export name); the app loads every such file at start (shared/jobs/handlerFolder.ts) in Azure and under
// `npm start`, so adding a handler is: add a file, export the definition, deploy. See docs/jobs.md. (The project's
// own tests load test/fixtures/handlers instead: KEEL_HANDLERS_DIR.)
import { z } from 'zod';
import { ncrontab } from './ncrontab.js';
import type { HandlerOptions, JobContext } from './registry.js';
import { LIMITS, scheduleName } from './validate.js';

export { z };
export { FatalError, RetryAfterError } from './handlerErrors.js';
export type { JobContext } from './registry.js';
export type { BackoffOptions } from './backoff.js';

const HANDLER = Symbol.for('keel.handler-definition');
const SCHEDULE = Symbol.for('keel.schedule-definition');

// T and S keep the type name and the payload schema's own types, so a producer can derive a typed client from the
// definitions (@keel/client's jobTypesFrom).
export interface HandlerDefinition<
  P = unknown,
  T extends string = string,
  S extends z.ZodType | undefined = z.ZodType | undefined,
> {
  readonly [HANDLER]: true;
  readonly type: T;
  readonly options: Omit<HandlerOptions, 'payload'> & { readonly payload?: S };
  readonly handle: (payload: P, ctx: JobContext) => Promise<unknown>;
}

export type HandlerSpec<S extends z.ZodType> = Omit<HandlerOptions, 'payload'> & {
  // A zod schema for the payload: enqueue refuses a payload that fails it (400 naming the field), and the
  // handler gets the parsed value (defaults applied, transforms run).
  payload?: S;
  handle: (payload: z.output<S>, ctx: JobContext) => Promise<unknown>;
};

// Who wants to hear of each definition as it is made: the handlers folder, while it imports a file, to tell a file
// that defines a handler or schedule but does not export it. Kept on globalThis (under a registered symbol) so two
// copies of this module (sources and dist/, or a test runner's) report to the same listeners.
type DefinitionListener = (definition: HandlerDefinition<any> | ScheduleDefinition) => void;
const LISTENERS = Symbol.for('keel.definition-listeners');
function listeners(): Set<DefinitionListener> {
  const g = globalThis as { [LISTENERS]?: Set<DefinitionListener> };
  return (g[LISTENERS] ??= new Set());
}
function made<D extends HandlerDefinition<any> | ScheduleDefinition>(definition: D): D {
  for (const l of listeners()) l(definition);
  return definition;
}

// Calls `listener` with every definition made until the returned function is called.
export function onDefinition(listener: DefinitionListener): () => void {
  listeners().add(listener);
  return () => listeners().delete(listener);
}

export function defineHandler<const T extends string, S extends z.ZodType = z.ZodUnknown>(
  type: T,
  spec: HandlerSpec<S>,
): HandlerDefinition<z.output<S>, T, S> {
  const { handle, ...options } = spec;
  if (typeof handle !== 'function') throw new Error(`defineHandler("${type}"): handle must be a function`);
  return made(
    Object.freeze({
      [HANDLER]: true as const,
      type,
      options: options as HandlerDefinition<z.output<S>, T, S>['options'],
      handle,
    }),
  );
}

export function isHandlerDefinition(v: unknown): v is HandlerDefinition {
  return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[HANDLER] === true;
}

// What happens to ticks that passed while no scheduler ran (downtime, or a pause ended by resume is NOT this:
// ticks during a pause are never run):
// - 'skip': none of them; the next tick runs on time (default)
// - 'once': one job, for the latest missed tick
// - 'catchUp': one job per missed tick, the latest `maxCatchUp` of them (older ones are dropped)
export type MissedTickPolicy = 'skip' | 'once' | 'catchUp';
export const MISSED_TICK_POLICIES: readonly MissedTickPolicy[] = ['skip', 'once', 'catchUp'];

export interface ScheduleSpec {
  cron: string; // six fields with seconds: "sec min hour day month weekday", e.g. "0 */5 * * * *"
  timeZone?: string; // IANA name, default UTC
  type: string; // the job type to enqueue (a handler in handlers/)
  payload?: unknown; // checked against the handler's payload schema at start
  queue?: string; // default: the handler's queue, else "default"
  priority?: number;
  missed?: MissedTickPolicy; // default 'skip'
  maxCatchUp?: number; // bound for 'catchUp' (default 10, at most 1000)
  graceMs?: number; // a tick is on time, not missed, while it is at most this old (default 60 s)
}

export interface ScheduleDefinition extends Required<Omit<ScheduleSpec, 'payload' | 'queue' | 'priority'>> {
  readonly [SCHEDULE]: true;
  readonly name: string;
  readonly payload: unknown;
  readonly queue: string | undefined;
  readonly priority: number;
}

export function defineSchedule(name: string, spec: ScheduleSpec): ScheduleDefinition {
  const bad = (field: string, why: string) => new Error(`schedule "${name}": ${field} ${why}`);
  if (!scheduleName.safeParse(name).success)
    throw bad('name', `must be 1-${LIMITS.scheduleNameLength} letters, digits and _ . : -`);
  const timeZone = spec.timeZone ?? 'UTC';
  try {
    Intl.DateTimeFormat('en', { timeZone });
  } catch {
    throw bad('timeZone', `"${timeZone}" is not an IANA time zone`);
  }
  try {
    // NCRONTAB as the timers read it: both day fields must match a day, and no Quartz extensions (L, W, #, ?, 7).
    ncrontab(spec.cron, timeZone);
  } catch (err) {
    throw bad('cron', (err as Error).message);
  }
  const missed = spec.missed ?? 'skip';
  if (!MISSED_TICK_POLICIES.includes(missed)) throw bad('missed', `must be one of ${MISSED_TICK_POLICIES.join(', ')}`);
  const maxCatchUp = spec.maxCatchUp ?? 10;
  if (!Number.isInteger(maxCatchUp) || maxCatchUp < 1 || maxCatchUp > 1000)
    throw bad('maxCatchUp', 'must be an integer from 1 to 1000');
  const graceMs = spec.graceMs ?? 60_000;
  if (!Number.isInteger(graceMs) || graceMs < 0 || graceMs > 24 * 3600_000)
    throw bad('graceMs', 'must be an integer from 0 to 86400000');
  return made(
    Object.freeze({
      [SCHEDULE]: true as const,
      name,
      cron: spec.cron,
      timeZone,
      type: spec.type,
      payload: spec.payload ?? null,
      queue: spec.queue,
      priority: spec.priority ?? 0,
      missed,
      maxCatchUp,
      graceMs,
    }),
  );
}

export function isScheduleDefinition(v: unknown): v is ScheduleDefinition {
  return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[SCHEDULE] === true;
}

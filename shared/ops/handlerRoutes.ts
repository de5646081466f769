// Ops routes for what handlers/ declares: job types with their options and payload schema, and recurring schedules.
import { z } from 'zod';
import type { HandlerRegistry, RegisteredHandler } from '../jobs/registry.js';
import type { ScheduleState } from '../jobs/contract.js';
import type { ScheduleDefinition } from '../jobs/define.js';
import { nextTick, scheduleQueue } from '../jobs/scheduler.js';
import { notFound } from './errors.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';
import { scheduleName } from '../jobs/validate.js';

function payloadSchema(h: RegisteredHandler): unknown {
  if (!h.options.payload) return null;
  try {
    return z.toJSONSchema(h.options.payload, { io: 'input', unrepresentable: 'any' });
  } catch {
    return { description: 'not representable as JSON Schema' };
  }
}

export function describeHandler(h: RegisteredHandler): Record<string, unknown> {
  const o = h.options;
  return {
    type: h.type,
    source: h.source ?? null,
    queue: o.queue ?? null,
    timeoutMs: o.timeoutMs,
    maxAttempts: o.maxAttempts ?? null, // null: the job's own, else the queue's
    backoff: o.backoff,
    retryOnTimeout: o.retryOnTimeout,
    concurrency: o.concurrency ?? null, // null: no per-type limit
    payloadSchema: payloadSchema(h),
  };
}

const scheduleParams = z.strictObject({
  name: scheduleName,
});

function describeSchedule(
  def: ScheduleDefinition,
  state: ScheduleState | undefined,
  now: Date,
  registry: HandlerRegistry,
): Record<string, unknown> {
  const paused = state?.paused ?? false;
  return {
    name: def.name,
    source: 'source' in def ? ((def as { source?: string }).source ?? null) : null,
    cron: def.cron,
    timeZone: def.timeZone,
    type: def.type,
    queue: scheduleQueue(def, registry), // where its jobs go: its own queue, else its handler's, else "default"
    payload: def.payload,
    missed: def.missed,
    maxCatchUp: def.maxCatchUp,
    graceMs: def.graceMs,
    state: paused ? 'paused' : 'active',
    lastTick: state?.lastTick?.toISOString() ?? null,
    nextTick: paused ? null : (nextTick(def, now)?.toISOString() ?? null),
    lastJobId: state?.lastJobId ?? null,
    resumedAt: state?.resumedAt?.toISOString() ?? null,
  };
}

export const handlerRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/handlers',
    operationId: 'listHandlers',
    summary:
      'Registered job types with their options (queue, timeout, attempts, backoff, concurrency) and payload JSON Schema',
    tag: 'jobs',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'registered handlers' },
    async handle({ rt }) {
      return {
        body: {
          allowUnknownTypes: rt.settings.KEEL_ALLOW_UNKNOWN_JOB_TYPES,
          items: rt.registry.all().map(describeHandler),
        },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/schedules',
    operationId: 'listSchedules',
    summary:
      'Recurring schedules declared in handlers/: cron, time zone, job, missed-tick policy, state, last and next tick',
    tag: 'jobs',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'schedules (undeclared: state kept in the database for a schedule no longer in the code)' },
    async handle({ rt }) {
      const now = new Date();
      const states = new Map((await rt.store.listSchedules()).map((x) => [x.name, x]));
      const items = rt.schedules.map((d) => describeSchedule(d, states.get(d.name), now, rt.registry));
      const declared = new Set(rt.schedules.map((d) => d.name));
      const undeclared = [...states.values()]
        .filter((x) => !declared.has(x.name))
        .map((x) => ({ name: x.name, paused: x.paused, lastTick: x.lastTick?.toISOString() ?? null }));
      return { body: { items, undeclared } };
    },
  }),
  ...(['pause', 'resume'] as const).map((action) =>
    route({
      method: 'POST',
      path: `/schedules/:name/${action}`,
      operationId: `${action}Schedule`,
      summary:
        action === 'pause'
          ? 'Pause a schedule: no ticks are enqueued until resumed (kept in the database, for every instance)'
          : 'Resume a schedule: ticks that passed while paused are not run; the next tick is',
      tag: 'jobs',
      role: 'operator',
      params: scheduleParams,
      query: s.emptyQuery,
      body: s.emptyBody,
      responses: { 200: 'the schedule after the change', 403: 'operator role missing', 404: 'no such schedule' },
      async handle({ rt, params }) {
        const def = rt.schedules.find((d) => d.name === params.name);
        if (!def) throw notFound(`schedule "${params.name}"`);
        const state = await rt.store.setSchedulePaused(def.name, action === 'pause');
        return { body: describeSchedule(def, state, new Date(), rt.registry) };
      },
    }),
  ),
];

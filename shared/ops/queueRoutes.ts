// Queue routes: list and read queues, pause and resume, change limits and retentions (a lowered retention shows
// what the next maintenance pass would delete, and changes nothing until confirmed).
import type {
  PurgeTarget,
  QueueExpectField,
  QueueSettings,
  QueueSettingsExpected,
  QueueSettingsPatch,
} from '../jobs/contract.js';
import { previewPurge, storeClock } from '../jobs/maintenance.js';
import { OpsError, notFound } from './errors.js';
import { PREVIEW_COUNT_CAP } from './preview.js';
import { route, type OpsRoute } from './router.js';
import * as s from './schemas.js';

// The retention settings and the rows each one purges.
const RETENTIONS = [
  ['archiveRetentionSeconds', 'archive'],
  ['dlqRetentionSeconds', 'dlq'],
  ['metricsRetentionSeconds', 'metrics'],
] as const satisfies readonly (readonly [keyof QueueSettingsPatch, PurgeTarget])[];

// A compare-and-set that failed: the setting the caller saw another value of, and its value now. Nothing was changed.
function changedMeanwhile(queue: string, field: QueueExpectField, sent: unknown, now: QueueSettings): OpsError {
  return new OpsError(
    'conflict',
    `${field} of queue "${queue}" is ${JSON.stringify(now[field])}, not ${JSON.stringify(sent)} as expected: it was changed meanwhile; nothing was changed. Read the queue again and repeat with what you see`,
    field,
    { expected: sent, current: now[field], settings: now },
  );
}

// Whether the settings already hold every value the patch sets (at least one): the store's rule too
// (keel.update_queue, keel.UpdateQueue).
function holdsPatch(current: QueueSettings, patch: QueueSettingsPatch): boolean {
  const set = (Object.keys(patch) as (keyof QueueSettingsPatch)[]).filter((k) => patch[k] !== undefined);
  return set.length > 0 && set.every((k) => patch[k] === current[k]);
}

export const queueRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/queues',
    operationId: 'listQueues',
    summary: 'Queue settings',
    tag: 'queues',
    role: 'reader',
    query: s.emptyQuery,
    responses: { 200: 'queues' },
    output: s.out.queues,
    async handle({ rt }) {
      return { body: { items: await rt.store.listQueues() } };
    },
  }),
  route({
    method: 'GET',
    path: '/queues/:name',
    operationId: 'getQueue',
    summary: 'One queue: settings and stats',
    tag: 'queues',
    role: 'reader',
    params: s.nameParams,
    query: s.emptyQuery,
    responses: { 200: 'queue', 404: 'no such queue' },
    output: s.out.queue,
    async handle({ rt, params }) {
      const q = await rt.store.getQueue(params.name);
      if (!q) throw notFound(`queue "${params.name}"`);
      const stats = (await rt.store.stats()).find((x) => x.queue === params.name) ?? null;
      return { body: { ...q, stats } };
    },
  }),
  ...(['pause', 'resume'] as const).map((action) =>
    route({
      method: 'POST',
      path: `/queues/:name/${action}`,
      operationId: `${action}Queue`,
      summary:
        action === 'pause'
          ? 'Pause a queue: no new claims until resumed. Returns once every claim in flight has committed (from then on no claim takes a job of the queue), with the jobs claimed before it (inFlight: processing, or fetched and still to start), which run to their end'
          : 'Resume a paused queue',
      tag: 'queues',
      role: 'operator',
      params: s.nameParams,
      query: s.emptyQuery,
      body: s.emptyBody,
      responses: {
        200: 'queue settings after the change (created: the queue had no settings yet and now has them)',
        403: 'operator role missing',
      },
      output: s.out.queueSettingsChanged,
      // A queue exists from its first use: an enqueue or a settings change. So a queue can be paused (or limited)
      // before its first job arrives, e.g. 'default' on a fresh install.
      // created comes from the store's upsert: of two instances creating the queue at once, one is told so.
      async handle({ rt, params, log }) {
        // A pause waits in the store for the claims in flight (they may have read "not paused") to commit: what
        // they claimed is counted below (a fetched one still starts after this answer), and no claim after it takes
        // a job.
        const settings = await rt.store.updateQueue(params.name, { paused: action === 'pause' });
        if (action === 'pause') {
          const stats = (await rt.store.stats()).find((x) => x.queue === params.name);
          return { body: { ...settings, inFlight: (stats?.fetched ?? 0) + (stats?.processing ?? 0) } };
        }
        // Its due jobs' messages were acknowledged while it was paused: post them now, not at the dispatcher's tick.
        await rt.postDue([params.name], log);
        return { body: settings };
      },
    }),
  ),
  route({
    method: 'PATCH',
    path: '/queues/:name',
    operationId: 'updateQueue',
    summary: 'Change queue limits: max concurrency, attempts, zombie timeout and policy, retention',
    tag: 'queues',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.queuePatch,
    responses: {
      200: 'queue settings after the change (created: the queue had no settings yet and now has them)',
      400: 'invalid setting',
      403: 'operator role missing',
      409: 'a setting named in expected has another value now (field, expected, current; nothing changed); or a lowered retention would make the next maintenance pass delete rows: the body\'s preview counts them per target; repeat with "confirmPurge": true',
    },
    output: s.out.queueSettingsChanged,
    async handle({ rt, params, body, log }) {
      const { confirmPurge, expected, ...patch } = body as QueueSettingsPatch & {
        confirmPurge?: boolean;
        expected?: QueueSettingsExpected;
      };
      const current = await rt.store.getQueue(params.name);
      // The caller's view is stale: say so before previewing anything against values it never saw. (The store
      // compares again, atomically, with the row it changes.) Not when the queue already holds every value asked
      // for: a retry of a change that applied, its answer lost; the store answers it unchanged.
      if (current && expected && !holdsPatch(current, patch)) {
        const stale = (Object.keys(expected) as QueueExpectField[]).sort().find((f) => expected[f] !== current[f]);
        if (stale) throw changedMeanwhile(params.name, stale, expected[stale], current);
      }
      if (current && !confirmPurge) {
        // Lowering a retention deletes, at the next maintenance pass, every row older than the new one: show how
        // many first (counted in SQL), and change nothing until the caller confirms.
        const preview: Record<string, { from: number; to: number; wouldPurge: number; capped: boolean }> = {};
        let total = 0;
        let clock: Date | undefined; // the store's, as the maintenance pass's cutoffs (storeClock)
        for (const [field, target] of RETENTIONS) {
          const to = patch[field];
          if (to === undefined || to >= current[field]) continue;
          clock ??= await storeClock(rt.store);
          const cutoff = new Date(clock.getTime() - to * 1000);
          const counted = await previewPurge(rt.store, target, params.name, cutoff, PREVIEW_COUNT_CAP);
          const capped = counted.kind === 'rows' && !counted.exact;
          preview[target] = { from: current[field], to, wouldPurge: counted.matched, capped };
          total += counted.matched;
        }
        if (total > 0)
          throw new OpsError(
            'conflict',
            `lowering the retention makes the next maintenance pass delete ${Object.entries(preview)
              .filter(([, p]) => p.wouldPurge > 0)
              .map(([t, p]) => `${p.wouldPurge}${p.capped ? '+' : ''} ${t} rows`)
              .join(
                ', ',
              )} of queue "${params.name}"; nothing was changed. Repeat with "confirmPurge": true to go ahead`,
            'confirmPurge',
            { preview },
          );
      }
      const { conflict: stale, ...settings } = await rt.store.updateQueue(params.name, patch, expected);
      if (stale) {
        const { created: _created, ...now } = settings;
        throw changedMeanwhile(params.name, stale, expected?.[stale], now);
      }
      // This instance sees a new limit at once (other instances within the limits' 5 s cache, shared/app/slots.ts).
      if (patch.maxConcurrency !== undefined) rt.queueLimitsChanged();
      // More room than before: jobs held back by the limit may run now; post their messages.
      const limit = (q: { maxConcurrency: number | null } | null) => q?.maxConcurrency ?? Infinity;
      if (!settings.paused && limit(settings) > limit(current)) await rt.postDue([params.name], log);
      return { body: settings };
    },
  }),
];

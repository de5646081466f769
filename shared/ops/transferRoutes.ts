// Ops routes for transfers: list configured transfers, start one (creates a batch and posts it to the stage
// queue), pause and resume one, list batches, batch detail with its journal, reconcile one batch or every stale
// one, resume or abandon a batch, replay a committed range, re-baseline a changes transfer, compare key sets.
import type { OpsLogger, OpsRuntime } from './context.js';
import { OPEN_STATES } from '../transfer/lifecycle.js';
import type { BatchView, TransferService } from '../transfer/service.js';
import { BATCH_STATES, type BatchState } from '../transfer/types.js';
import { isTransferError, type TransferErrorCode } from '../transfer/errors.js';
import { conflict, invalid, notFound, OpsError } from './errors.js';
import { OPS_PREFIX, route, type OpsRoute } from './router.js';
import * as s from './schemas.js';
import type { ClientPrincipal } from './auth.js';
import { auditText } from './auditRecord.js';
import { JOURNAL_TEXT_MAX } from '../transfer/journalProcedures.js';

function service(rt: OpsRuntime): TransferService {
  if (!rt.transfers)
    throw new OpsError('not_found', 'no transfers are configured (KEEL_TRANSFERS or KEEL_TRANSFERS_FILE)');
  return rt.transfers;
}

const CONFLICT_CODES: ReadonlySet<TransferErrorCode> = new Set<TransferErrorCode>([
  'open_batch_exists',
  'window_taken',
  'duplicate_batch_id',
  'invalid_state',
  'not_staged',
  'schema_drift',
  'staging_conflict',
  'duplicate_keys',
  'manifest_mismatch',
  'target_incompatible',
  'unsupported_type',
  'transfer_paused',
  'changes_expired',
  'changes_not_enabled',
]);

// Transfer errors carry a code; map it, never the message, to a status.
async function mapTransferErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isTransferError(err)) {
      if (err.code === 'unknown_transfer' || err.code === 'unknown_batch')
        throw new OpsError('not_found', err.message, undefined, { code: err.code });
      if (CONFLICT_CODES.has(err.code))
        throw conflict(err.message, { code: err.code, ...(err.detail ? { detail: err.detail } : {}) });
      if (err.code === 'config_invalid') throw new OpsError('unavailable', err.message, undefined, { code: err.code });
    }
    throw err;
  }
}

// A 202 says where to watch the work it started (the Durable Functions status pattern): the batch's status URL,
// and how long to wait before asking.
export const BATCH_POLL_SECONDS = 10;
function accepted(batchId: string, body: unknown) {
  return {
    status: 202,
    body,
    headers: {
      location: `${OPS_PREFIX}/transfers/batches/${encodeURIComponent(batchId)}`,
      'retry-after': String(BATCH_POLL_SECONDS),
    },
  };
}

// A new batch (the next window, or a baseline) created and posted to the stage queue: 202 with where to watch it,
// or 200 when there is nothing new to transfer.
async function queueNewBatch(
  rt: OpsRuntime,
  log: OpsLogger,
  create: (svc: TransferService) => Promise<BatchView>,
): Promise<{ status: number; body: unknown; headers?: Record<string, string> }> {
  const svc = service(rt);
  try {
    const batch = await mapTransferErrors(() => create(svc));
    const posted = await rt.postStage(batch.batchId, log);
    return accepted(batch.batchId, { started: true, posted, batch });
  } catch (err) {
    if (err instanceof OpsError) throw err;
    if (isTransferError(err, 'nothing_to_transfer'))
      return { status: 200, body: { started: false, reason: err.code, message: err.message } };
    throw err;
  }
}

// The caller's name as journal data (a pause's changedBy, an abandon's reason), as the audit keeps it: without what
// no database text stores (a NUL, a lone surrogate). Taken as sent, a NUL in a principal's name made pause and resume
// a 500, and an abandon a 500 after the target's final fence, the batch left open.
function callerName(principal: ClientPrincipal | null): string | null {
  return auditText(principal?.name, JOURNAL_TEXT_MAX.changed_by);
}

function stateOf(value: string | undefined): BatchState | undefined {
  if (value === undefined) return undefined;
  if (!(BATCH_STATES as readonly string[]).includes(value))
    throw invalid('state', `must be one of ${BATCH_STATES.join(', ')}`);
  return value as BatchState;
}

const ROWS_BEHIND_REUSE_MS = 30_000;
const ROWS_BEHIND_WAIT_MS = 2_000;

export const transferRoutes: OpsRoute<any, any, any>[] = [
  route({
    method: 'GET',
    path: '/transfers',
    operationId: 'listTransfers',
    summary: 'Configured transfers',
    tag: 'transfers',
    role: 'reader',
    query: s.emptyQuery,
    responses: {
      200: 'transfers (empty when none is configured), each with its pause control, open batch, last commit, secondsSinceCommit and rowsBehind',
    },
    async handle({ rt }) {
      if (!rt.transfers) return { body: { configured: false, items: [] } };
      // Rows behind: counted at the source up to KEEL_TRANSFER_ROWS_BEHIND_CAP, a count reused for 30 s (a console
      // refreshing the page does not walk the source's index each time); a source slower than 2 s to count (or
      // unreachable) shows null rather than holding the page.
      const states = new Map(
        (
          await rt.transfers.transferStates(Date.now(), {
            rowsBehindCap: rt.settings.KEEL_TRANSFER_ROWS_BEHIND_CAP,
            rowsBehindMaxAgeMs: ROWS_BEHIND_REUSE_MS,
            rowsBehindWaitMs: ROWS_BEHIND_WAIT_MS,
          })
        ).map((x) => [x.name, x]),
      );
      const items = rt.transfers.listTransfers().map((t) => ({ ...t, ...states.get(t.name) }));
      return { body: { configured: true, items } };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/pause',
    operationId: 'pauseTransfer',
    summary:
      'Pause a transfer: no new batch (timer, catch-up, start) and its queue steps leave its open batch as it is, until resumed',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.pauseTransferBody,
    responses: { 200: 'paused (persisted in the journal)', 404: 'no such transfer' },
    async handle({ rt, params, body, principal }) {
      const svc = service(rt);
      const c = await mapTransferErrors(() =>
        svc.pauseTransfer(params.name, body.reason ?? null, callerName(principal)),
      );
      return { body: { transfer: c.transferName, paused: c.paused, reason: c.reason, changedBy: c.changedBy } };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/resume',
    operationId: 'resumeTransfer',
    summary: 'Resume a paused transfer; its open retryable batch (if any) is posted to the stage queue again',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: { 200: 'resumed', 404: 'no such transfer' },
    async handle({ rt, params, principal, log }) {
      const svc = service(rt);
      const c = await mapTransferErrors(() => svc.resumeTransfer(params.name, callerName(principal)));
      const recent = await svc.listBatches({ transfer: c.transferName, limit: 5 });
      const open = recent.find((b) => b.status !== 'committed' && b.state !== 'failed');
      const posted = open?.retryable ? await rt.postStage(open.batchId, log) : false;
      // A replay batch pauses with its transfer (its queue steps left it as it was), and is a chain of its own: not
      // the transfer's open batch above, so posted here too, or it waited for maintenance's stale pass.
      const replays = [];
      for (const r of await svc.openReplays(c.transferName))
        replays.push({
          batchId: r.batchId,
          state: r.state,
          posted: r.retryable ? await rt.postStage(r.batchId, log) : false,
        });
      return {
        body: {
          transfer: c.transferName,
          paused: c.paused,
          changedBy: c.changedBy,
          ...(open ? { openBatch: { batchId: open.batchId, state: open.state, posted } } : {}),
          ...(replays.length > 0 ? { openReplays: replays } : {}),
        },
      };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/start',
    operationId: 'startTransfer',
    summary:
      'Create a batch for the next window of a transfer (manifest recorded first) and post it to the stage queue',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: {
      202: 'batch created and queued',
      200: 'nothing new to transfer (no batch created)',
      404: 'no such transfer',
      409: 'an open batch exists, or the source schema drifted',
    },
    async handle({ rt, params, log }) {
      return queueNewBatch(rt, log, (svc) => svc.createBatch(params.name));
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/rebaseline',
    operationId: 'rebaselineTransfer',
    summary:
      'Changes transfer whose next window expired at the source (changes_expired): a baseline (the whole table as it is now, applied as a mirror: target rows gone at the source are deleted; in key windows of batchSize where the target mirrors key ranges), its first batch queued (preview: what it would do, nothing created)',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.rebaselineBody,
    responses: {
      202: 'baseline batch created and queued',
      200: "the preview, or the source's version has not moved since the last committed window (no batch created)",
      404: 'no such transfer',
      409: 'not a changes transfer, the transfer is paused, an open batch exists, or the source schema drifted',
    },
    async handle({ rt, params, body, log }) {
      if (body.preview) {
        const plan = await mapTransferErrors(() => service(rt).rebaselinePlan(params.name));
        return { body: { preview: true, ...plan } };
      }
      return queueNewBatch(rt, log, (svc) => svc.rebaseline(params.name));
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/compare-keys',
    operationId: 'compareTransferKeys',
    summary:
      'Transfer without change tracking (keyCompare): compare source and target key sets per committed key window; report the target keys gone at the source, and with apply (keyCompare apply) delete them on the target',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.compareKeysBody,
    responses: {
      200: 'per window: source and target keys, keys gone at the source (a sample), rows deleted',
      404: 'no such transfer',
      409: 'the transfer does not compare key sets, or declares report only (apply refused)',
    },
    async handle({ rt, params, body }) {
      const svc = service(rt);
      const report = await mapTransferErrors(() =>
        svc.compareKeys(params.name, { apply: body.apply, ...(body.windows ? { windows: body.windows } : {}) }),
      );
      return { body: report };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/:name/replay',
    operationId: 'replayTransfer',
    summary:
      'Send a range of committed windows again from the source as it is now, as one new batch (preview: the covered batches and rows, nothing changed)',
    tag: 'transfers',
    role: 'operator',
    params: s.nameParams,
    query: s.emptyQuery,
    body: s.replayBody,
    responses: {
      200: 'the preview',
      202: 'replay batch created and queued',
      400: 'low or high is not a bound of the committed windows, or the range is larger than batchSize',
      404: 'no such transfer',
      409: 'the transfer is paused, or the source schema drifted',
    },
    async handle({ rt, params, body, log }) {
      const svc = service(rt);
      try {
        const { plan, batch } = await mapTransferErrors(() =>
          svc.replay(params.name, body.low, body.high, body.preview),
        );
        if (!batch) return { body: { preview: true, plan } };
        const posted = await rt.postStage(batch.batchId, log);
        return accepted(batch.batchId, { started: true, posted, plan, batch });
      } catch (err) {
        if (isTransferError(err, 'invalid_range')) throw invalid(String(err.detail?.field ?? 'high'), err.message);
        throw err;
      }
    },
  }),
  route({
    method: 'GET',
    path: '/transfers/batches',
    operationId: 'listBatches',
    summary: 'Batches, newest first, with their status (incomplete, committed, unresolved) and next action',
    tag: 'transfers',
    role: 'reader',
    query: s.batchListQuery,
    responses: { 200: 'a page of batches; pass nextAfterId as afterId for the next page' },
    async handle({ rt, query }) {
      if (!rt.transfers) return { body: { items: [], nextAfterId: null } };
      const state = stateOf(query.state);
      const items = await rt.transfers.listBatches({
        ...(query.transfer ? { transfer: query.transfer } : {}),
        ...(state ? { state } : {}),
        limit: query.limit,
        ...(query.afterId ? { afterId: query.afterId } : {}),
      });
      const nextAfterId = items.length === query.limit ? (items[items.length - 1]?.batchId ?? null) : null;
      return { body: { items, nextAfterId } };
    },
  }),
  route({
    method: 'GET',
    path: '/transfers/batches/:id',
    operationId: 'getBatch',
    summary: 'One batch with its journal events',
    tag: 'transfers',
    role: 'reader',
    params: s.batchParams,
    query: s.emptyQuery,
    responses: { 200: 'the batch and its journal', 404: 'no such batch' },
    async handle({ rt, params }) {
      const batch = await service(rt).getBatch(params.id);
      if (!batch) throw notFound(`batch ${params.id}`);
      return { body: batch };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/batches/:id/reconcile',
    operationId: 'reconcileBatch',
    summary:
      'Ask the target now whether the batch committed (every batch not committed or failed; a "not applied" answer is fenced on the target, so it is final)',
    tag: 'transfers',
    role: 'operator',
    params: s.batchParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: { 200: 'the batch after reconciliation', 404: 'no such batch' },
    async handle({ rt, params }) {
      const svc = service(rt);
      return { body: await mapTransferErrors(() => svc.reconcile(params.id)) };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/batches/:id/resume',
    operationId: 'resumeBatch',
    summary: 'Post a retryable batch (same id) to the stage queue again: stage if needed, then apply',
    tag: 'transfers',
    role: 'operator',
    params: s.batchParams,
    query: s.emptyQuery,
    body: s.emptyBody,
    responses: {
      202: 'queued',
      404: 'no such batch',
      409: 'the batch is not retryable (committed, failed, or its outcome is unknown)',
    },
    async handle({ rt, params, log }) {
      const batch = await service(rt).getBatch(params.id);
      if (!batch) throw notFound(`batch ${params.id}`);
      if (!batch.retryable)
        throw conflict(`batch ${params.id} is ${batch.state}: ${batch.nextAction}`, {
          state: batch.state,
          status: batch.status,
        });
      const posted = await rt.postStage(params.id, log);
      return accepted(params.id, { batchId: params.id, posted });
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/batches/:id/abandon',
    operationId: 'abandonBatch',
    summary:
      'Give up an open batch and release its window, only once the target proves it not applied under the final fence (preview: what would happen, nothing changed)',
    tag: 'transfers',
    role: 'operator',
    params: s.batchParams,
    query: s.emptyQuery,
    body: s.abandonBatchBody,
    responses: {
      200: 'abandoned (failed, window released), or the preview',
      404: 'no such batch',
      409: 'not abandoned: the batch is not open (or another call abandoned it meanwhile), or the target said committed, blocked, or gave no answer',
    },
    async handle({ rt, params, body, principal }) {
      const svc = service(rt);
      const before = await svc.getBatch(params.id);
      if (!before) throw notFound(`batch ${params.id}`);
      const open = OPEN_STATES.includes(before.state);
      if (body.preview) {
        return {
          body: {
            preview: true,
            abandonable: open,
            batch: before,
            effect: !open
              ? `Nothing to abandon: the batch is ${before.state}.`
              : before.attempts === 0 && before.state === 'extracting'
                ? `No apply was ever started: the batch fails at once and its window (${before.boundary.low ?? '-inf'}, ${before.boundary.high}] is released for a new batch.`
                : `The target is asked for the outcome under the final fence (no apply of this batch id can commit afterwards). Only a "not applied" answer fails the batch and releases its window (${before.boundary.low ?? '-inf'}, ${before.boundary.high}]; "committed" records it committed; "blocked" or no answer leaves it open.`,
          },
        };
      }
      if (!open) throw conflict(`batch ${params.id} is ${before.state}: nothing to abandon`, { state: before.state });
      const name = callerName(principal);
      const by = name ? ` (${name})` : '';
      const { batch: after, abandoned } = await mapTransferErrors(() =>
        svc.abandonOnce(params.id, `${body.reason}${by}`),
      );
      // Another call abandoned it meanwhile (or it ended otherwise): one effect, one success among concurrent calls.
      if (after.state === 'failed' && !abandoned)
        throw conflict(`batch ${params.id} is ${after.state}: nothing to abandon (another call ended it meanwhile)`, {
          state: after.state,
        });
      if (after.state !== 'failed')
        throw conflict(
          `batch ${params.id} was not abandoned: it is ${after.state} after asking the target (${after.lastError ?? 'no detail'}). ${after.nextAction}`,
          { state: after.state, status: after.status },
        );
      return { body: { abandoned: true, batch: after } };
    },
  }),
  route({
    method: 'POST',
    path: '/transfers/reconcile',
    operationId: 'reconcileStale',
    summary:
      'Reconcile now every batch whose apply outcome is unknown and untouched for olderThanMs (default KEEL_TRANSFER_STALE_MS)',
    tag: 'transfers',
    role: 'operator',
    query: s.emptyQuery,
    body: s.reconcileStaleBody,
    responses: { 200: 'the batches reconciled' },
    async handle({ rt, body }) {
      const svc = service(rt);
      const items = await mapTransferErrors(() =>
        svc.reconcileStale(body.olderThanMs ?? rt.settings.KEEL_TRANSFER_STALE_MS, body.limit),
      );
      return { body: { count: items.length, items } };
    },
  }),
];

// Feeds Keel's telemetry facade from the runtime: processor outcomes and lease losses, enqueues, maintenance
// passes, queue lag, and transfer batch states. Every facade call is a no-op when telemetry is off.
import { telemetry, LEASE_OPERATIONS, type LeaseOperation, type ReconcileResult } from '../telemetry/index.js';
import type { ProcessorEvents } from '../jobs/processor.js';
import type { MaintenanceReport } from '../jobs/maintenance.js';
import type { QueueStats } from '../jobs/contract.js';
import type { BatchView } from '../transfer/service.js';

export const processorTelemetry: ProcessorEvents = {
  onOutcome({ job, outcome, reason, durationMs, unregisteredType }) {
    const dims = { queue: job.queue, type: job.type };
    if (unregisteredType) telemetry.jobTypeNotRegistered({ ...dims, jobId: job.id, outcome });
    if (outcome === 'succeeded') telemetry.jobCompleted({ ...dims, durationMs });
    else if (outcome === 'retried') telemetry.jobRetried(dims);
    else if (outcome === 'dead_lettered' && reason) telemetry.jobDeadLettered({ ...dims, reason, jobId: job.id });
    // 'released': the handler never ran, or shutdown cut it short (its time would measure the grace period).
    if (outcome !== 'released') telemetry.handlerDuration({ ...dims, outcome, durationMs });
  },
  onLeaseLost({ job, operation }) {
    if ((LEASE_OPERATIONS as readonly string[]).includes(operation)) {
      telemetry.leaseLost({ queue: job.queue, type: job.type, operation: operation as LeaseOperation });
    }
  },
};

export function enqueuedTelemetry(jobs: { queue: string; type: string }[]): void {
  const counts = new Map<string, { queue: string; type: string; n: number }>();
  for (const j of jobs) {
    const k = `${j.queue}\u0000${j.type}`;
    const c = counts.get(k) ?? { queue: j.queue, type: j.type, n: 0 };
    c.n++;
    counts.set(k, c);
  }
  for (const c of counts.values()) telemetry.jobEnqueued({ queue: c.queue, type: c.type }, c.n);
}

export function maintenanceTelemetry(
  report: MaintenanceReport | null,
  durationMs: number,
  stats: QueueStats[] | null,
): void {
  if (report) telemetry.zombiesRescued(report.rescued);
  telemetry.maintenanceRun({ durationMs, outcome: report ? 'succeeded' : 'failed' });
  for (const q of stats ?? []) telemetry.queueLag({ queue: q.queue, lagMs: q.oldestDueAgeMs });
}

export function scheduleFailedTelemetry(schedule: string): void {
  telemetry.scheduleFailed({ schedule });
}

export function batchTelemetry(view: BatchView, previousState?: string): void {
  if (view.state !== previousState)
    telemetry.transferBatchState({ transfer: view.transfer, state: view.state, batchId: view.batchId });
  if (view.state === 'committed' && previousState !== 'committed' && view.appliedCount) {
    telemetry.rowsTransferred({ transfer: view.transfer, rows: view.appliedCount });
  }
}

// journalNowMs: the journal's clock, the clock of applyStartedAt (a host's may be off it by hours).
export function reconcileTelemetry(view: BatchView, journalNowMs: number): void {
  const outcome: ReconcileResult =
    view.state === 'committed'
      ? 'committed'
      : view.state === 'failed'
        ? 'failed'
        : view.state === 'unresolved' || view.state === 'applying'
          ? 'unresolved'
          : 'not_applied';
  const since = view.applyStartedAt ? Math.max(0, journalNowMs - Date.parse(view.applyStartedAt)) : undefined;
  telemetry.reconcileOutcome({
    transfer: view.transfer,
    outcome,
    batchId: view.batchId,
    ...(outcome === 'unresolved' && since !== undefined ? { unresolvedForMs: since } : {}),
  });
}

// The transfer service's log hook: a batch that failed (terminal error or abandon) is an event an alert reads.
export function transferServiceLog(event: string, data: Record<string, unknown>): void {
  if (event === 'transfer.batch.failed')
    telemetry.transferBatchFailed({
      transfer: String(data.transfer),
      batchId: String(data.batchId),
      code: String(data.code),
    });
}

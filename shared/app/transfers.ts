// Transfer plumbing for the functions: building the service from settings, and the queue steps
// (stage queue -> apply queue), each claiming the batch by id through the journal's state machine.
import type { Settings } from '../config/settings.js';
import type { TransferService, BatchView } from '../transfer/service.js';
import { isTransferError } from '../transfer/errors.js';
import { loadTransfers } from '../transfer/config.js';
import type { TransferJournal } from '../transfer/journal.js';
import { composeTransferService } from './transferAdapters.js';
import { engineNamed, transferEngineRules } from '../engines/registry.js';
import type { Logger } from './jobs.js';
import type { Runtime } from './runtime.js';

export type TransferServiceLike = TransferService;

export interface TransferMessage {
  batchId: string;
}

// Builds the service when transfers are configured (KEEL_TRANSFERS / KEEL_TRANSFERS_FILE); null otherwise.
// The batch journal lives in the control database, beside the jobs.
export async function createTransferService(
  settings: Settings,
  env: Record<string, string | undefined>,
): Promise<TransferService | null> {
  if (loadTransfers(transferEngineRules(), env as NodeJS.ProcessEnv).length === 0) return null;
  // The batch journal lives in the control database, beside the jobs: the job store's engine opens it.
  const control = engineNamed(settings.KEEL_STORE_ENGINE);
  if (!control.openJournal) throw new Error(`KEEL_STORE_ENGINE=${control.name} cannot hold the transfer journal`);
  const journal: TransferJournal = await control.openJournal(settings);
  const created = composeTransferService(journal, env as NodeJS.ProcessEnv);
  if (!created) {
    await journal.close();
    return null;
  }
  return created.service;
}

export async function postStage(rt: Runtime, batchId: string, log: Logger): Promise<boolean> {
  try {
    await rt.queues.send(rt.settings.KEEL_TRANSFER_STAGE_QUEUE, { batchId } satisfies TransferMessage);
    return true;
  } catch (err) {
    log.warn(
      `batch ${batchId}: posting to ${rt.settings.KEEL_TRANSFER_STAGE_QUEUE} failed (the transfer timer resumes it): ${(err as Error).message}`,
    );
    return false;
  }
}

export async function postApply(rt: Runtime, batchId: string): Promise<void> {
  await rt.queues.send(rt.settings.KEEL_TRANSFER_APPLY_QUEUE, { batchId } satisfies TransferMessage);
}

export function describeView(v: BatchView): string {
  return `batch ${v.batchId} (${v.transfer}): ${v.state}/${v.status}${v.lastError ? `, last error: ${v.lastError}` : ''}`;
}

// Names the timer starts: KEEL_SCHEDULED_TRANSFERS, "*" for every configured transfer.
export function scheduledTransfers(rt: Runtime): string[] {
  if (!rt.transfers) return [];
  const configured = rt.transfers.listTransfers().map((t) => t.name);
  const wanted = rt.settings.KEEL_SCHEDULED_TRANSFERS;
  if (wanted.includes('*')) return configured;
  return wanted.filter((n) => configured.includes(n));
}

export interface TimerStep {
  transfer: string;
  action: 'created' | 'resumed' | 'nothing_new' | 'open_batch_busy' | 'error';
  batchId?: string;
  detail?: string;
}

// One pass of the transfer timer: a new batch per scheduled transfer, or, when a retryable batch is open and
// untouched for KEEL_TRANSFER_STALE_MS (its queue message was lost or poisoned), that batch re-posted.
export async function runTransferSchedule(rt: Runtime, log: Logger): Promise<TimerStep[]> {
  const service = rt.transfers;
  if (!service) return [];
  const steps: TimerStep[] = [];
  for (const name of scheduledTransfers(rt)) {
    try {
      const created = await service.tryCreateBatch(name);
      if (created) {
        await postStage(rt, created.batchId, log);
        steps.push({ transfer: name, action: 'created', batchId: created.batchId });
        continue;
      }
      const recent = await service.listBatches({ transfer: name, limit: 5 });
      const open = recent.find((b) => b.status !== 'committed' && b.state !== 'failed');
      if (open && open.retryable && Date.now() - Date.parse(open.updatedAt) > rt.settings.KEEL_TRANSFER_STALE_MS) {
        await postStage(rt, open.batchId, log);
        steps.push({ transfer: name, action: 'resumed', batchId: open.batchId });
      } else {
        steps.push({
          transfer: name,
          action: open ? 'open_batch_busy' : 'nothing_new',
          ...(open ? { batchId: open.batchId } : {}),
        });
      }
    } catch (err) {
      log.error(`transfer ${name}: scheduled start failed: ${(err as Error).message}`);
      steps.push({ transfer: name, action: 'error', detail: (err as Error).message });
    }
  }
  return steps;
}

export { isTransferError };

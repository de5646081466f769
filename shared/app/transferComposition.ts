// Builds the transfer service from the settings when transfers are configured: the journal from the control
// engine, the adapters per transfer (transferAdapters.ts).
import type { Settings } from '../config/settings.js';
import { loadTransfers } from '../transfer/config.js';
import type { TransferJournal } from '../transfer/journal.js';
import type { TransferService } from '../transfer/service.js';
import { engineNamed, transferEngineRules } from '../engines/registry.js';
import type { AppEnv } from './environment.js';
import { composeTransferService } from './transferAdapters.js';

// Builds the service when transfers are configured (KEEL_TRANSFERS / KEEL_TRANSFERS_FILE); null otherwise.
// The batch journal lives in the control database, beside the jobs.
export async function createTransferService(settings: Settings, env: AppEnv): Promise<TransferService | null> {
  // Parsed once here, and handed on.
  const transfers = loadTransfers(transferEngineRules(), env);
  if (transfers.length === 0) return null;
  // The batch journal lives in the control database, beside the jobs: the job store's engine opens it.
  const control = engineNamed(settings.KEEL_STORE_ENGINE);
  if (!control.openJournal) throw new Error(`KEEL_STORE_ENGINE=${control.name} cannot hold the transfer journal`);
  const journal: TransferJournal = await control.openJournal(settings);
  const created = composeTransferService(journal, env, transfers, {
    directApply: settings.KEEL_TRANSFER_DIRECT_APPLY,
    applyTimeoutLimit: settings.KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT,
  });
  if (!created) {
    await journal.close();
    return null;
  }
  return created.service;
}

// Transfer adapters per transfer from the configured app settings: each side is built by its engine's transfer
// endpoints (shared/engines/registry.ts), one set of endpoints per engine per service, so pools are shared by the
// transfers that name the same connection setting.
import { connectionString, loadTransfers, type TransferConfig } from '../transfer/config.js';
import type { TransferJournal } from '../transfer/journal.js';
import { TransferService } from '../transfer/service.js';
import { transferTimeouts, type TransferTimeouts } from '../transfer/timeouts.js';
import type { Adapters } from '../transfer/types.js';
import type { TransferEndpoints } from '../engines/descriptor.js';
import { engineNamed, transferEngineRules } from '../engines/registry.js';
import { transferServiceLog } from './telemetryHooks.js';

export interface AdapterFactoryOptions {
  env: NodeJS.ProcessEnv; // the transfer settings (timeouts, the connection settings each transfer names)
  pgPoolSize?: number;
}

export class AdapterFactory {
  private readonly endpoints = new Map<string, Promise<TransferEndpoints>>();
  private readonly env: NodeJS.ProcessEnv;
  readonly timeouts: TransferTimeouts;

  constructor(private readonly opts: AdapterFactoryOptions) {
    this.env = opts.env;
    this.timeouts = transferTimeouts(this.env); // invalid settings fail here, at startup
  }

  private endpointsOf(engine: string): Promise<TransferEndpoints> {
    let e = this.endpoints.get(engine);
    if (!e) {
      const descriptor = engineNamed(engine);
      if (!descriptor.transferEndpoints) throw new Error(`engine ${engine} takes no part in transfers`);
      e = descriptor.transferEndpoints({
        env: this.env,
        timeouts: this.timeouts,
        ...(this.opts.pgPoolSize ? { poolSize: this.opts.pgPoolSize } : {}),
      });
      this.endpoints.set(engine, e);
      e.catch(() => this.endpoints.delete(engine)); // a failed driver load is retried on the next connect
    }
    return e;
  }

  connect = async (t: TransferConfig): Promise<Adapters> => {
    const from = await this.endpointsOf(t.source.engine);
    if (!from.source) throw new Error(`${t.name}: engine ${t.source.engine} cannot be a transfer source`);
    const source = await from.source(t);
    const to = await this.endpointsOf(t.target.engine);
    if (!to.target) throw new Error(`${t.name}: engine ${t.target.engine} cannot be a transfer target`);
    const target = await to.target(t);
    return { source, target };
  };

  async close(): Promise<void> {
    const all = [...this.endpoints.values()];
    this.endpoints.clear();
    for (const e of all) await e.then((x) => x.close()).catch(() => undefined);
  }
}

// A service over the given journal: transfers from KEEL_TRANSFERS / KEEL_TRANSFERS_FILE (validated now, so bad
// configuration fails at startup), or as the caller already parsed them from the same env.
// shared/app/transferComposition.ts opens the journal from the control engine and calls this; tests call it with a journal of
// their own.
export function composeTransferService(
  journal: TransferJournal,
  env: NodeJS.ProcessEnv,
  transfers: TransferConfig[] = loadTransfers(transferEngineRules(), env),
  opts: { directApply?: boolean; applyTimeoutLimit?: number } = {}, // KEEL_TRANSFER_DIRECT_APPLY (default true), KEEL_TRANSFER_APPLY_TIMEOUT_LIMIT
): { service: TransferService; transfers: TransferConfig[] } | null {
  if (transfers.length === 0) return null;
  for (const t of transfers) {
    connectionString(t.source.connectionSetting, `${t.name}.source`, env);
    connectionString(t.target.connectionSetting, `${t.name}.target`, env);
  }
  const factory = new AdapterFactory({ env });
  const service = new TransferService({
    journal,
    transfers,
    connect: factory.connect,
    onClose: () => factory.close(),
    log: transferServiceLog,
    directApply: opts.directApply ?? true, // a key window into a PostgreSQL target: one target transaction
    ...(opts.applyTimeoutLimit !== undefined ? { applyTimeoutLimit: opts.applyTimeoutLimit } : {}),
    statementTimeoutMs: factory.timeouts.statementMs, // the one its adapters' sessions set
  });
  return { service, transfers };
}

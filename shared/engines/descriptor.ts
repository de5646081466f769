// What an engine provides, declared once per engine (River's driver interface is the model). The composition
// root (shared/app), scripts/migrate.ts and the settings check look an engine up in shared/engines/registry.ts
// and call these factories; none of them branches on an engine's name. Every factory loads the engine's driver
// on first use, and the registry instruments that driver for telemetry just before (never earlier), so a deployment
// loads only the drivers of the engines it configured (PostgreSQL never loads mssql, tedious or oracledb;
// test/telemetry/drivers.test.ts). docs/architecture.md lists the steps to add an engine.
import type { Settings } from '../config/settings.js';
import type { SettingDeclaration } from '../config/declaration.js';
import type { JobStore } from '../jobs/contract.js';
import type { TransferConfig, TransferSourceRules, TransferTargetRules } from '../transfer/config.js';
import type { InstrumentedDriver } from '../telemetry/index.js';
import type { TransferJournal } from '../transfer/journal.js';
import type { TransferTimeouts } from '../transfer/timeouts.js';
import type { SourceAdapter, TargetAdapter } from '../transfer/types.js';

export interface EngineCapabilities {
  jobStore: boolean; // can hold the jobs (KEEL_STORE_ENGINE)
  journal: boolean; // can hold the transfer batch journal (it lives beside the jobs)
  transferSource: boolean; // a transfer may read from it
  transferTarget: boolean; // a transfer may write to it
}

export interface ControlMigrateResult {
  applied: string[];
  alreadyApplied: number;
}

export interface TransferEndpointOptions {
  env: NodeJS.ProcessEnv;
  timeouts: TransferTimeouts; // shared/transfer/timeouts.ts, read once at startup
  poolSize?: number;
}

// One per engine per transfer service: owns that engine's transfer pools (shared by the transfers that name the
// same connection setting, source and target alike) and closes them with the service.
export interface TransferEndpoints {
  source?(t: TransferConfig): Promise<SourceAdapter>;
  target?(t: TransferConfig): Promise<TargetAdapter>;
  close(): Promise<void>;
}

export interface EngineDescriptor {
  readonly name: string;
  readonly capabilities: EngineCapabilities;
  // The database driver its factories load: instrumented (when telemetry is on) before the first factory call.
  readonly telemetryDriver: InstrumentedDriver;
  // The app setting holding the control database's connection when this engine holds the jobs.
  readonly controlSetting?: keyof Settings & string;
  // The setting `npm run migrate` prefers over controlSetting when set (a schema owner's login).
  readonly migrateSetting?: keyof Settings & string;
  openJobStore?(settings: Settings): Promise<JobStore>;
  openJournal?(settings: Settings): Promise<TransferJournal>;
  // `npm run migrate`: the versioned schema and logic scripts of the control database, from `sqlRoot` (the sql/
  // folder, KEEL_SQL_DIR) when given, else the packaged one.
  migrateControl?(connection: string, log: (line: string) => void, sqlRoot?: string): Promise<ControlMigrateResult>;
  transferEndpoints?(opts: TransferEndpointOptions): Promise<TransferEndpoints>;
  // Fixed-name settings the transfer endpoints read from TransferEndpointOptions.env besides the ones every engine
  // shares (listed in shared/app/settingsIndex.ts).
  readonly transferSettings?: readonly SettingDeclaration[];
  // What a transfer's configuration may ask of this engine as a source / as a target (checked at startup by
  // shared/transfer/config.ts); required with the transferSource / transferTarget capability.
  readonly transferSourceRules?: TransferSourceRules;
  readonly transferTargetRules?: TransferTargetRules;
  // Process-wide resources (shared pools) released when the runtime closes.
  closeShared?(): Promise<void>;
}

// Every setting Keel reads, by the schema that declares it: the one index of the configuration model
// (docs/architecture.md, "Configuration"). Settings (shared/config/settings.ts) is the runtime's, parsed once at
// startup; the per-feature schemas parse the same environment, handed to them by the composition root, where a
// feature's settings are not fixed names, are needed before or without Settings, or are the platform's.
// test/config/settingsIndex.test.ts checks that every fixed-name read in shared/ and functions/ is declared here,
// that no setting is declared twice, and that docs/operations.md ("Settings") lists them all.
import type { SettingDeclaration } from '../config/declaration.js';
import { settingsSchema } from '../config/settings.js';
import { ENGINES } from '../engines/registry.js';
import { HANDLERS_FOLDER_SETTINGS } from '../jobs/handlerFolder.js';
import { HOSTING_SETTINGS } from '../ops/principalTrust.js';
import { CONSOLE_SETTINGS } from '../ops/console.js';
import { TELEMETRY_SETTINGS } from '../telemetry/index.js';
import { TRANSFER_CONFIG_SETTINGS } from '../transfer/config.js';
import { TRANSFER_TIMEOUT_SETTINGS } from '../transfer/timeouts.js';

export interface SettingsSchemaEntry {
  readonly schema: string;
  // Where it is parsed, and who hands it the environment.
  readonly module: string;
  readonly readBy: string;
  // The fixed names it declares (Settings: its zod fields, each with its type, default and doc comment).
  readonly settings: readonly string[];
  readonly declarations?: readonly SettingDeclaration[];
  // Settings declared in Settings that this schema reads again from the same environment, and why.
  readonly alsoReads?: readonly string[];
  // Names that are not fixed: what they are.
  readonly dynamic?: string;
}

const declared = (schema: Omit<SettingsSchemaEntry, 'settings'> & { declarations: readonly SettingDeclaration[] }) => ({
  ...schema,
  settings: schema.declarations.map((d) => d.name),
});

export const SETTINGS_INDEX: readonly SettingsSchemaEntry[] = [
  {
    schema: 'Settings',
    module: 'shared/config/settings.ts',
    readBy:
      'the composition root at startup (shared/app/runtime.ts getRuntime, functions/app.ts, dev/boot.ts); the layers below get the parsed object',
    settings: Object.keys(settingsSchema.shape),
  },
  declared({
    schema: 'telemetry',
    module: 'shared/telemetry/init.ts',
    readBy: 'functions/setup.ts, first, before any driver loads (so not through Settings, which loads the registry)',
    declarations: TELEMETRY_SETTINGS,
  }),
  declared({
    schema: 'transfers',
    module: 'shared/transfer/config.ts',
    readBy: 'createRuntime, from the runtime env (shared/app/transferComposition.ts, transferAdapters.ts)',
    declarations: TRANSFER_CONFIG_SETTINGS,
    dynamic:
      'the connection settings each transfer names (source/target connectionSetting, target userSetting and passwordSetting)',
  }),
  declared({
    schema: 'transfer timeouts',
    module: 'shared/transfer/timeouts.ts',
    readBy: 'createRuntime, from the runtime env (shared/app/transferAdapters.ts)',
    declarations: TRANSFER_TIMEOUT_SETTINGS,
  }),
  declared({
    schema: 'transfer endpoints',
    module: 'shared/engines/*/index.ts (EngineDescriptor.transferSettings)',
    readBy: "the engines' transfer endpoints, from the runtime env (TransferEndpointOptions.env)",
    declarations: ENGINES.flatMap((e) => e.transferSettings ?? []),
    alsoReads: ['KEEL_SQL_DIR'],
  }),
  declared({
    schema: 'handlers folder',
    module: 'shared/jobs/handlerFolder.ts',
    readBy: 'createRuntime and scripts/start.ts (before any Settings), from the process environment',
    declarations: HANDLERS_FOLDER_SETTINGS,
  }),
  declared({
    schema: 'hosting platform',
    module: 'shared/ops/principalTrust.ts',
    readBy:
      'from the process environment: functions/app.ts at startup (the trust warning), shared/app/hostEnvironment.ts once for the ops API and the console (OpsRuntime.principalTrust), createRuntime (WEBSITE_INSTANCE_ID for the worker id and registry row)',
    declarations: HOSTING_SETTINGS,
    alsoReads: ['KEEL_TRUST_CLIENT_PRINCIPAL'],
  }),
  declared({
    schema: 'console',
    module: 'shared/ops/console.ts',
    readBy:
      'shared/app/hostEnvironment.ts, once, from the process environment, for functions/console.ts (the session needs no runtime; the role names through Settings fields)',
    declarations: CONSOLE_SETTINGS,
    alsoReads: ['KEEL_OPS_READER_ROLE', 'KEEL_OPS_PRODUCER_ROLE', 'KEEL_OPS_OPERATOR_ROLE'],
  }),
];

// Every fixed-name setting, once.
export function declaredSettings(): string[] {
  return SETTINGS_INDEX.flatMap((s) => s.settings);
}

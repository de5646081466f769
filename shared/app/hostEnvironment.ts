// What the ops API and the console read from the process environment outside Settings, parsed once: who vouches for
// x-ms-client-principal (shared/ops/principalTrust.ts) and the console's folder and role names (shared/ops/console.ts;
// the role names through Settings' own fields, so one parser and one default). The console answers its session
// without a runtime, so this does not wait for Settings as a whole. The settings index lists every name read here.
import type { RoleNames } from '../ops/auth.js';
import { consoleDir, type ConsoleConfig } from '../ops/console.js';
import { principalTrustOf, type PrincipalTrust } from '../ops/principalTrust.js';
import { settingsSchema } from '../config/settings.js';
import { processEnv, type AppEnv } from './environment.js';

export interface HostEnvironment {
  readonly principalTrust: PrincipalTrust;
  readonly console: ConsoleConfig;
}

export function parseHostEnvironment(env: AppEnv): HostEnvironment {
  const shape = settingsSchema.shape;
  const roleNames: RoleNames = {
    reader: shape.KEEL_OPS_READER_ROLE.parse(env.KEEL_OPS_READER_ROLE),
    producer: shape.KEEL_OPS_PRODUCER_ROLE.parse(env.KEEL_OPS_PRODUCER_ROLE),
    operator: shape.KEEL_OPS_OPERATOR_ROLE.parse(env.KEEL_OPS_OPERATOR_ROLE),
  };
  const principalTrust = principalTrustOf(env);
  return { principalTrust, console: { dir: consoleDir(env), roleNames, principalTrust } };
}

let parsed: HostEnvironment | undefined;

// The process's, parsed on first use.
export function hostEnvironment(): HostEnvironment {
  parsed ??= parseHostEnvironment(processEnv());
  return parsed;
}

// Parse again on next use: for a composition root that sets the process environment after something may have read
// it (dev/boot.ts, before it starts the local host; a test that switches the hosting platform's markers).
export function rereadHostEnvironment(): void {
  parsed = undefined;
}

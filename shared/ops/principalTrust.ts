// Who vouches for x-ms-client-principal, read from the environment once (the process's, handed down by
// shared/app/environment.ts; the settings index lists the names): App Service authentication in front of the app,
// the caller itself on the local host (KEEL_TRUST_CLIENT_PRINCIPAL=local, refused wherever a hosting environment is
// detected), or nobody. Fail closed: only the first two make the header believed (shared/ops/auth.ts).
import type { SettingDeclaration } from '../config/declaration.js';

export type PrincipalMode = 'caller' | 'appservice' | 'untrusted';

// A start-up error: the principal trust settings contradict the environment.
export class PrincipalTrustError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PrincipalTrustError';
  }
}

// Environment variables that say the app runs hosted, not on a developer's machine: App Service / Functions
// (WEBSITE_*), the Functions container images (AzureWebJobsScriptRoot), Azure Container Apps, Kubernetes, Cloud Run
// and ECS. Under any of them a caller-stated principal would let a key holder (or, under `func start`, which
// enforces no keys, anyone) claim the operator role.
export const HOSTING_MARKERS = [
  'WEBSITE_SITE_NAME',
  'WEBSITE_INSTANCE_ID',
  'AzureWebJobsScriptRoot',
  'CONTAINER_APP_NAME',
  'KUBERNETES_SERVICE_HOST',
  'K_SERVICE',
  'ECS_CONTAINER_METADATA_URI',
  'ECS_CONTAINER_METADATA_URI_V4',
] as const;

// The fixed-name environment the principal checks parse (shared/app/settingsIndex.ts), besides Settings'
// KEEL_TRUST_CLIENT_PRINCIPAL: set by the platform, never by the app's configuration.
export const HOSTING_SETTINGS: readonly SettingDeclaration[] = [
  ...HOSTING_MARKERS.map((name) => ({
    name,
    type: 'any non-empty value',
    default: 'unset',
    doc:
      'set by a hosting platform: KEEL_TRUST_CLIENT_PRINCIPAL=local is refused when present' +
      (name === 'WEBSITE_INSTANCE_ID'
        ? "; also the worker id's and registry row's instance (shared/jobs/presence.ts)"
        : ''),
  })),
  {
    name: 'WEBSITE_AUTH_ENABLED',
    type: '"True" or unset',
    default: 'unset',
    doc: 'set by App Service when its authentication fronts the app (with WEBSITE_SITE_NAME): x-ms-client-principal is believed',
  },
];

export function hostingMarkers(env: NodeJS.ProcessEnv): string[] {
  return HOSTING_MARKERS.filter((k) => (env[k] ?? '').trim() !== '');
}

function localTrustSetting(env: NodeJS.ProcessEnv): boolean {
  const v = (env.KEEL_TRUST_CLIENT_PRINCIPAL ?? '').trim();
  if (v === '') return false;
  if (v !== 'local') throw new PrincipalTrustError(`KEEL_TRUST_CLIENT_PRINCIPAL must be "local" or unset (got "${v}")`);
  const markers = hostingMarkers(env);
  if (markers.length > 0)
    throw new PrincipalTrustError(
      `KEEL_TRUST_CLIENT_PRINCIPAL=local is for the local host only and is refused here: a hosting environment is detected (${markers.join(', ')}). Remove the setting; in Azure enable App Service authentication (docs/operations.md)`,
    );
  return true;
}

// Who vouches for x-ms-client-principal: App Service authentication ('appservice': App Service sets
// WEBSITE_SITE_NAME, and WEBSITE_AUTH_ENABLED=True when authentication fronts the app), the caller on the local host
// ('caller': KEEL_TRUST_CLIENT_PRINCIPAL=local), or nobody ('untrusted': the header is ignored). Throws
// PrincipalTrustError when the local setting is given where it is refused.
export function principalMode(env: NodeJS.ProcessEnv): PrincipalMode {
  const local = localTrustSetting(env);
  if (env.WEBSITE_SITE_NAME && (env.WEBSITE_AUTH_ENABLED ?? '').toLowerCase() === 'true') return 'appservice';
  return local ? 'caller' : 'untrusted';
}

// For start-up: throws PrincipalTrustError on a refused setting; otherwise a warning line, or null when App Service
// authentication vouches for the principal.
export function principalTrustWarning(env: NodeJS.ProcessEnv): string | null {
  const mode = principalMode(env);
  if (mode === 'appservice') return null;
  if (mode === 'caller')
    return 'ops: x-ms-client-principal is taken as the caller sends it (KEEL_TRUST_CLIENT_PRINCIPAL=local): any caller with the ops key can claim any role. For the local host only';
  return 'ops: x-ms-client-principal is ignored (no App Service authentication, WEBSITE_AUTH_ENABLED is not True): function keys reach the reader and producer routes, every operator route is refused (docs/operations.md)';
}

// What the environment says, parsed once: the mode, or the refusal every call that needs the principal answers with
// (a 503 naming no setting: the message stays in the log).
export type PrincipalTrust = { readonly mode: PrincipalMode } | { readonly refused: PrincipalTrustError };

export function principalTrustOf(env: NodeJS.ProcessEnv): PrincipalTrust {
  try {
    return { mode: principalMode(env) };
  } catch (err) {
    if (err instanceof PrincipalTrustError) return { refused: err };
    throw err;
  }
}

// The mode, or throws the refusal.
export function trustedMode(trust: PrincipalTrust): PrincipalMode {
  if ('refused' in trust) throw trust.refused;
  return trust.mode;
}

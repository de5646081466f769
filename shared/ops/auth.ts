// Ops authorization.
// - Keys: in Azure the `ops` function is `authLevel: 'function'`, so the Functions host rejects calls without a
//   function (or host) key before our code runs. The local host enforces its own ops key the same way
//   (`x-functions-key` header): checkFunctionKey below. The console's own path (/api/console-api) has no key.
// - Roles: every route needs one of three levels, reader < producer < operator (authorize below). The roles come
//   from the App Service authentication principal (`x-ms-client-principal`: base64 JSON with
//   `claims: [{typ, val}]`). A function key on /api/ops grants reader and producer by itself (what a key granted
//   before roles existed); the operator level always needs the role.
// - Fail closed: the principal header is believed only when App Service authentication fronts the app (it
//   overwrites the header on every request), or on the local host with KEEL_TRUST_CLIENT_PRINCIPAL=local, which
//   is refused wherever a hosting environment is detected. Otherwise it is ignored.
import { timingSafeEqual, createHash } from 'node:crypto';
import { OpsError } from './errors.js';
import type { SettingDeclaration } from '../config/declaration.js';

export interface ClientPrincipal {
  authType: string | null;
  name: string | null;
  roles: string[];
  // Who, for the audit trail: the Entra object id, tenant id and calling application (a workload identity's app id).
  id?: string | null;
  tenantId?: string | null;
  appId?: string | null;
}

// Claim types App Service forwards for Entra ID (long URI form) and their short JWT names.
const OBJECT_ID_CLAIMS = ['http://schemas.microsoft.com/identity/claims/objectidentifier', 'oid'];
const TENANT_ID_CLAIMS = ['http://schemas.microsoft.com/identity/claims/tenantid', 'tid'];
const APP_ID_CLAIMS = ['appid', 'azp'];

interface RawPrincipal {
  auth_typ?: unknown;
  name_typ?: unknown;
  role_typ?: unknown;
  claims?: unknown;
}

// Parses the header; null when absent, OpsError(401) when present but unreadable.
export function parseClientPrincipal(header: string | null | undefined): ClientPrincipal | null {
  if (header === null || header === undefined || header.trim() === '') return null;
  let raw: RawPrincipal;
  try {
    raw = JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as RawPrincipal;
  } catch {
    throw new OpsError('unauthorized', 'x-ms-client-principal is not base64-encoded JSON');
  }
  if (typeof raw !== 'object' || raw === null || !Array.isArray(raw.claims)) {
    throw new OpsError('unauthorized', 'x-ms-client-principal has no claims array');
  }
  // Roles come from the app roles claim only. A `groups` claim is never read as a role, even when a group's name or
  // id equals a role name: assign groups to the app roles in Entra instead (docs/operations.md, "Auth").
  const roleTypes = new Set(['roles', 'role']);
  if (typeof raw.role_typ === 'string' && raw.role_typ !== 'groups') roleTypes.add(raw.role_typ);
  const nameType = typeof raw.name_typ === 'string' ? raw.name_typ : 'name';
  const roles: string[] = [];
  let name: string | null = null;
  let id: string | null = null;
  let tenantId: string | null = null;
  let appId: string | null = null;
  for (const c of raw.claims as unknown[]) {
    if (typeof c !== 'object' || c === null) continue;
    const { typ, val } = c as { typ?: unknown; val?: unknown };
    if (typeof typ !== 'string' || typeof val !== 'string') continue;
    if (roleTypes.has(typ)) roles.push(val);
    if (typ === nameType && name === null) name = val;
    if (id === null && OBJECT_ID_CLAIMS.includes(typ)) id = val;
    if (tenantId === null && TENANT_ID_CLAIMS.includes(typ)) tenantId = val;
    if (appId === null && APP_ID_CLAIMS.includes(typ)) appId = val;
  }
  return { authType: typeof raw.auth_typ === 'string' ? raw.auth_typ : null, name, roles, id, tenantId, appId };
}

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

// The three levels, lowest first: each grants the ones below it.
export const OPS_ROLES = ['reader', 'producer', 'operator'] as const;
export type OpsRole = (typeof OPS_ROLES)[number];

// The app role names that stand for each level (settings KEEL_OPS_READER_ROLE, _PRODUCER_ROLE, _OPERATOR_ROLE).
export type RoleNames = Record<OpsRole, string>;

export const DEFAULT_ROLE_NAMES: RoleNames = {
  reader: 'Keel.Reader',
  producer: 'Keel.Producer',
  operator: 'Keel.Operator',
};

// How the call reached the ops routes: with a function key (/api/ops), or through the console's key-less path
// (/api/console-api/ops, App Service authentication only).
export type OpsChannel = 'key' | 'console';

// The highest level the caller holds (null: none).
export function grantedLevel(principal: ClientPrincipal | null, names: RoleNames, channel: OpsChannel): OpsRole | null {
  let rank = channel === 'key' ? OPS_ROLES.indexOf('producer') : -1;
  if (principal) {
    for (const [i, level] of OPS_ROLES.entries()) if (principal.roles.includes(names[level])) rank = Math.max(rank, i);
  }
  return rank >= 0 ? OPS_ROLES[rank]! : null;
}

// The principal the header states, when something vouches for it (null otherwise); throws PrincipalTrustError on a
// refused setting and OpsError(401) on an unreadable header that would be believed.
export function believedPrincipal(
  header: string | null | undefined,
  env: NodeJS.ProcessEnv,
): { mode: PrincipalMode; principal: ClientPrincipal | null } {
  const mode = principalMode(env);
  return { mode, principal: mode === 'untrusted' ? null : parseClientPrincipal(header) };
}

// Throws 403 unless the caller holds `required` (or a higher level); returns the principal it believed, if any.
// An unreadable header is a 401 only where the header is believed.
export function authorize(
  header: string | null | undefined,
  required: OpsRole,
  names: RoleNames,
  channel: OpsChannel,
  env: NodeJS.ProcessEnv,
): ClientPrincipal | null {
  const { mode, principal } = believedPrincipal(header, env);
  const level = grantedLevel(principal, names, channel);
  if (level !== null && OPS_ROLES.indexOf(level) >= OPS_ROLES.indexOf(required)) return principal;
  const role = names[required];
  const extra = { requiredRole: role, requiredLevel: required };
  if (mode === 'untrusted')
    throw new OpsError(
      'forbidden',
      `this action needs the "${role}" role, which cannot be verified: App Service authentication is not enabled on this app (docs/operations.md)`,
      undefined,
      extra,
    );
  if (!principal)
    throw new OpsError(
      'forbidden',
      `this action needs the "${role}" role; no authenticated principal (x-ms-client-principal) on the request`,
      undefined,
      extra,
    );
  throw new OpsError('forbidden', `this action needs the "${role}" role (or a higher one)`, undefined, extra);
}

// Builds the header value App Service authentication would send (tests, the demo, local calls).
export function encodeClientPrincipal(p: {
  name?: string;
  roles: string[];
  authType?: string;
  oid?: string;
  tid?: string;
  groups?: string[];
}): string {
  const claims = [
    ...(p.name ? [{ typ: 'name', val: p.name }] : []),
    ...(p.oid ? [{ typ: 'http://schemas.microsoft.com/identity/claims/objectidentifier', val: p.oid }] : []),
    ...(p.tid ? [{ typ: 'http://schemas.microsoft.com/identity/claims/tenantid', val: p.tid }] : []),
    ...p.roles.map((r) => ({ typ: 'roles', val: r })),
    ...(p.groups ?? []).map((g) => ({ typ: 'groups', val: g })),
  ];
  return Buffer.from(
    JSON.stringify({ auth_typ: p.authType ?? 'aad', name_typ: 'name', role_typ: 'roles', claims }),
    'utf8',
  ).toString('base64');
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

// The local host's stand-in for the Functions host key check.
export function checkFunctionKey(
  expected: string,
  headerKey: string | null | undefined,
  queryCode: string | null | undefined,
): boolean {
  const given = headerKey ?? queryCode;
  if (!given) return false;
  return timingSafeEqual(digest(given), digest(expected));
}

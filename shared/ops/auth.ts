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
//   is refused wherever a hosting environment is detected. Otherwise it is ignored. Which of these holds is read
//   from the environment once (shared/ops/principalTrust.ts) and handed to the checks below.
import { timingSafeEqual, createHash } from 'node:crypto';
import { OpsError } from './errors.js';
import { trustedMode, type PrincipalMode, type PrincipalTrust } from './principalTrust.js';

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

const UTF8 = new TextDecoder('utf-8', { fatal: true });

// Parses the header; null when absent, OpsError(401) when present but unreadable.
export function parseClientPrincipal(header: string | null | undefined): ClientPrincipal | null {
  if (header === null || header === undefined || header.trim() === '') return null;
  let raw: RawPrincipal;
  try {
    // Strictly base64 (App Service's encoding) and UTF-8: Buffer.from(.., 'base64') skips what it cannot read, so
    // "<a valid principal>x" or one with a stray character inside was believed as the principal it spells.
    const text = header.trim();
    if (text.length % 4 === 1 || !/^[A-Za-z0-9+/]+={0,2}$/.test(text)) throw new Error('not base64');
    raw = JSON.parse(UTF8.decode(Buffer.from(text, 'base64'))) as RawPrincipal;
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

// The three levels, lowest first: each grants the ones below it.
export const OPS_ROLES = ['reader', 'producer', 'operator'] as const;
export type OpsRole = (typeof OPS_ROLES)[number];

// The app role names that stand for each level (settings KEEL_OPS_READER_ROLE, _PRODUCER_ROLE, _OPERATOR_ROLE, whose
// defaults are Keel.Reader, Keel.Producer and Keel.Operator: shared/config/settings.ts).
export type RoleNames = Record<OpsRole, string>;

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
  trust: PrincipalTrust,
): { mode: PrincipalMode; principal: ClientPrincipal | null } {
  const mode = trustedMode(trust);
  return { mode, principal: mode === 'untrusted' ? null : parseClientPrincipal(header) };
}

// Throws 403 unless the caller holds `required` (or a higher level); returns the principal it believed, if any.
// An unreadable header is a 401 only where the header is believed.
export function authorize(
  header: string | null | undefined,
  required: OpsRole,
  names: RoleNames,
  channel: OpsChannel,
  trust: PrincipalTrust,
): ClientPrincipal | null {
  const { mode, principal } = believedPrincipal(header, trust);
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

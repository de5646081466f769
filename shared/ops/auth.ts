// Ops authorization.
// - Keys: in Azure every ops route is `authLevel: 'function'`, so the Functions host rejects calls without a
//   function (or host) key before our code runs. The local host enforces its own ops key the same way
//   (`x-functions-key` header or `code` query parameter): checkFunctionKey below.
// - Roles: destructive routes also need the operator role, read from the App Service authentication
//   principal (`x-ms-client-principal`: base64 JSON with `claims: [{typ, val}]`). App Service authentication
//   overwrites this header on every request it fronts; without it enabled the header is caller-controlled,
//   which is why the docs require it in Azure (docs/operations.md).
import { timingSafeEqual, createHash } from 'node:crypto';
import { OpsError } from './errors.js';

export interface ClientPrincipal {
  authType: string | null;
  name: string | null;
  roles: string[];
}

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
  const roleTypes = new Set(['roles', 'role']);
  if (typeof raw.role_typ === 'string') roleTypes.add(raw.role_typ);
  const nameType = typeof raw.name_typ === 'string' ? raw.name_typ : 'name';
  const roles: string[] = [];
  let name: string | null = null;
  for (const c of raw.claims as unknown[]) {
    if (typeof c !== 'object' || c === null) continue;
    const { typ, val } = c as { typ?: unknown; val?: unknown };
    if (typeof typ !== 'string' || typeof val !== 'string') continue;
    if (roleTypes.has(typ)) roles.push(val);
    if (typ === nameType && name === null) name = val;
  }
  return { authType: typeof raw.auth_typ === 'string' ? raw.auth_typ : null, name, roles };
}

// In Azure (WEBSITE_SITE_NAME is set by App Service) the principal header can only be trusted when App Service
// authentication fronts the app (WEBSITE_AUTH_ENABLED=True): otherwise any key holder could forge the operator
// role. Outside Azure (the local host, tests) the header is taken as given.
export function principalHeaderTrusted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (!env.WEBSITE_SITE_NAME) return true;
  return (env.WEBSITE_AUTH_ENABLED ?? '').toLowerCase() === 'true';
}

// Throws 403 unless the principal carries the operator role.
export function requireOperator(
  header: string | null | undefined,
  role: string,
  env: NodeJS.ProcessEnv = process.env,
): ClientPrincipal {
  if (!principalHeaderTrusted(env)) {
    throw new OpsError(
      'forbidden',
      `this action needs the "${role}" role, which cannot be verified: App Service authentication is not enabled on this app (docs/operations.md)`,
      undefined,
      { requiredRole: role },
    );
  }
  const principal = parseClientPrincipal(header);
  if (!principal) {
    throw new OpsError(
      'forbidden',
      `this action needs the "${role}" role; no authenticated principal (x-ms-client-principal) on the request`,
      undefined,
      { requiredRole: role },
    );
  }
  if (!principal.roles.includes(role)) {
    throw new OpsError('forbidden', `this action needs the "${role}" role`, undefined, { requiredRole: role });
  }
  return principal;
}

// Builds the header value App Service authentication would send (tests, the demo, local calls).
export function encodeClientPrincipal(p: { name?: string; roles: string[]; authType?: string }): string {
  const claims = [...(p.name ? [{ typ: 'name', val: p.name }] : []), ...p.roles.map((r) => ({ typ: 'roles', val: r }))];
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

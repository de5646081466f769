// The console's access to the ops API. Two ways in (docs/operations.md, "The ops console"):
// - key: the ops key (locally the printed one; in Azure a function key), kept in sessionStorage for this tab only
//   and sent as x-functions-key to /api/ops, never in a URL. On the local host the operator may also choose to
//   send the operator role, which the local host takes as given (it has no sign-in).
// - appservice: App Service authentication signed the browser in; calls go to /api/console-api/ops with the
//   session cookie, and the API reads the role from the principal App Service authentication vouches for.
export type PrincipalMode = 'caller' | 'appservice' | 'untrusted';

export interface Session {
  mode: PrincipalMode;
  signedIn: boolean;
  principal: { name: string | null; roles: string[] } | null;
  level: 'reader' | 'producer' | 'operator' | null; // the signed-in principal's level (appservice)
  operatorRole: string;
  loginUrl: string | null;
  logoutUrl: string | null;
}

export type Access =
  { kind: 'key'; key: string; operator: boolean } | { kind: 'appservice'; name: string | null; roles: string[] };

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | undefined,
    readonly body: Record<string, unknown> | null,
  ) {
    super(message);
  }

  // One line in operator words.
  describe(): string {
    if (this.status === 0) return `Keel did not answer: ${this.message}`;
    if (this.status === 403) {
      // On the local host the role is the sign-in's checkbox: say so, or a newcomer is left with a header name.
      const hint =
        session?.mode === 'caller' && access?.kind === 'key' && !access.operator
          ? ' Sign out and sign in again with "Act as operator" ticked.'
          : '';
      return `Refused (403 ${this.code}): ${this.message}${hint}`;
    }
    if (this.status === 401) return `Not signed in (401): ${this.message}`;
    if (this.status === 400 || this.status === 409 || this.status === 404) {
      return `${this.status === 400 ? 'Invalid' : this.status === 409 ? 'Conflict' : 'Not found'} (${this.status} ${this.code})${this.field ? ` — ${this.field}` : ''}: ${this.message}`;
    }
    return `Error ${this.status} ${this.code}: ${this.message}`;
  }
}

const KEY_ITEM = 'keel.console.key';
const OPERATOR_ITEM = 'keel.console.operator';

const here = () => new URL('./', window.location.href.split('#')[0]);
const opsBase = () => new URL('../ops/', here()).toString();
const consoleApiBase = () => new URL('../console-api/', here()).toString();

let access: Access | null = null;
let onUnauthorized: ((message: string) => void) | null = null;
let session: Session | null = null;

export function setUnauthorizedHandler(fn: (message: string) => void): void {
  onUnauthorized = fn;
}

export function currentAccess(): Access | null {
  return access;
}

export function currentSession(): Session | null {
  return session;
}

export async function loadSession(): Promise<Session> {
  const res = await fetch(new URL('session', consoleApiBase()), {
    headers: { accept: 'application/json' },
    credentials: 'same-origin',
  });
  if (!res.ok) throw new ApiError(res.status, 'session', `the console API answered ${res.status}`, undefined, null);
  session = (await res.json()) as Session;
  if (session.mode === 'appservice' && session.signedIn && session.principal) {
    access = { kind: 'appservice', name: session.principal.name, roles: session.principal.roles };
  } else {
    const key = sessionStorage.getItem(KEY_ITEM);
    access = key
      ? { kind: 'key', key, operator: session.mode === 'caller' && sessionStorage.getItem(OPERATOR_ITEM) === '1' }
      : null;
  }
  return session;
}

function principalHeader(role: string): string {
  const json = JSON.stringify({
    auth_typ: 'local',
    name_typ: 'name',
    role_typ: 'roles',
    claims: [
      { typ: 'name', val: 'console' },
      { typ: 'roles', val: role },
    ],
  });
  return btoa(String.fromCharCode(...new TextEncoder().encode(json)));
}

function headersFor(a: Access, method: string): Record<string, string> {
  const headers: Record<string, string> = { accept: 'application/json' };
  // The API refuses a write without this type even when it has no body (a cross-site form cannot send it).
  if (method !== 'GET') headers['content-type'] = 'application/json';
  if (a.kind === 'key') {
    headers['x-functions-key'] = a.key;
    if (a.operator && session) headers['x-ms-client-principal'] = principalHeader(session.operatorRole);
  } else {
    headers['x-keel-console'] = '1';
  }
  return headers;
}

async function raw(a: Access, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const url =
    a.kind === 'key' ? opsBase() + path.replace(/^\//, '') : `${consoleApiBase()}ops/${path.replace(/^\//, '')}`;
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: headersFor(a, method),
      credentials: 'same-origin',
      cache: 'no-store',
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch (err) {
    throw new ApiError(0, 'network', (err as Error).message || 'network error', undefined, null);
  }
  let json: any = null;
  const text = await res.text();
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  return { status: res.status, json };
}

// Calls an ops route ("/stats", "/jobs?location=dlq", ...). Resolves with the JSON body on 2xx (and on the
// documented non-error 503 of /health), rejects with ApiError otherwise.
export async function api<T = any>(
  method: string,
  path: string,
  body?: unknown,
  opts: { allow?: number[] } = {},
): Promise<T> {
  if (!access) throw new ApiError(401, 'unauthorized', 'not signed in', undefined, null);
  const { status, json } = await raw(access, method, path, body);
  if ((status >= 200 && status < 300) || opts.allow?.includes(status)) return json as T;
  const err = new ApiError(status, json?.error ?? 'error', json?.message ?? `HTTP ${status}`, json?.field, json);
  if (status === 401 && onUnauthorized) onUnauthorized(err.message);
  throw err;
}

// Checks a key against the API before keeping it.
export async function signInWithKey(key: string, operator: boolean): Promise<void> {
  const candidate: Access = { kind: 'key', key, operator };
  const { status, json } = await raw(candidate, 'GET', 'health');
  if (status === 401) throw new ApiError(401, 'unauthorized', 'that key was refused', undefined, json);
  if (status !== 200 && status !== 503)
    throw new ApiError(status, json?.error ?? 'error', json?.message ?? `HTTP ${status}`, undefined, json);
  sessionStorage.setItem(KEY_ITEM, key);
  if (operator) sessionStorage.setItem(OPERATOR_ITEM, '1');
  else sessionStorage.removeItem(OPERATOR_ITEM);
  access = candidate;
}

export function signOut(): void {
  sessionStorage.removeItem(KEY_ITEM);
  sessionStorage.removeItem(OPERATOR_ITEM);
  access = null;
}

export function isOperatorClaimed(): boolean {
  if (!access || !session) return false;
  return access.kind === 'key' ? access.operator : access.roles.includes(session.operatorRole);
}

export function q(params: Record<string, string | number | undefined | null>): string {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  const s = u.toString();
  return s ? `?${s}` : '';
}

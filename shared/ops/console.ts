// The ops console: a static web app (console/, built by `npm run build:console` into dist/console) served by Keel
// itself, plus the console's own small API:
// - GET  /api/console/{*path}           the built assets (anonymous: they hold no data), with a strict CSP.
// - GET  /api/console-api/session       how this browser may sign in: the ops key, or App Service authentication.
// - ANY  /api/console-api/ops/{*path}   the ops API for a browser signed in through App Service authentication
//                                       (Easy Auth): no function key, the same route table and role checks, the
//                                       principal's roles only. Refused unless App Service authentication fronts
//                                       the app.
// With the key (locally, or in Azure without App Service authentication) the console calls /api/ops directly.
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import {
  grantedLevel,
  parseClientPrincipal,
  type ClientPrincipal,
  type OpsChannel,
  type OpsRole,
  type RoleNames,
} from './auth.js';
import { PrincipalTrustError, trustedMode, type PrincipalMode, type PrincipalTrust } from './principalTrust.js';
import { refuseCrossSite } from './router.js';
import { OpsError, errorResponse, json } from './errors.js';
import type { SettingDeclaration } from '../config/declaration.js';

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

export const CONSOLE_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

// The header every console API call carries: a cross-site form or <img> cannot send it, and a cross-site fetch
// that sets it needs a CORS preflight this app never grants, so a signed-in operator's cookie cannot be ridden.
export const CONSOLE_CSRF_HEADER = 'x-keel-console';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json; charset=utf-8',
  '.ico': 'image/x-icon',
  '.png': 'image/png',
  '.txt': 'text/plain; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
};

function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    const up = path.dirname(dir);
    if (up === dir) return process.cwd();
    dir = up;
  }
}

// What the console reads from the environment, parsed once by the composition root (shared/app/hostEnvironment.ts):
// its folder, the role names (Settings' fields: the session answers without starting the runtime) and who vouches for
// the principal.
export interface ConsoleConfig {
  readonly dir: string;
  readonly roleNames: RoleNames;
  readonly principalTrust: PrincipalTrust;
}

// The fixed-name setting the console parses (shared/app/settingsIndex.ts), besides Settings' role names.
export const CONSOLE_SETTINGS: readonly SettingDeclaration[] = [
  {
    name: 'KEEL_CONSOLE_DIR',
    type: 'path',
    default: 'dist/console under the package root',
    doc: "the built console's files (tests build into a scratch folder)",
  },
];

// dist/console under the package root (the same for `npm start` from sources and for the deployed dist/);
// KEEL_CONSOLE_DIR overrides it (tests build into a scratch folder).
export function consoleDir(env: NodeJS.ProcessEnv): string {
  return path.resolve(env.KEEL_CONSOLE_DIR || path.join(packageRoot(), 'dist', 'console'));
}

function textPage(status: number, title: string, body: string): HttpResponseInit {
  const esc = (s: string) =>
    s.replace(
      /[&<>"]/g,
      (c) => `&${({ '&': 'amp', '<': 'lt', '>': 'gt', '"': 'quot' } as Record<string, string>)[c]};`,
    );
  return {
    status,
    headers: { ...CONSOLE_HEADERS, 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' },
    body: `<!doctype html><html lang="en"><meta charset="utf-8"><title>${esc(title)}</title><h1>${esc(title)}</h1><p>${esc(body)}</p></html>`,
  };
}

// Serves one file of the built console. `tail` is the catch-all segment below /api/console.
export function serveConsoleAsset(
  request: HttpRequest,
  tail: string | undefined,
  config: ConsoleConfig,
): HttpResponseInit {
  const url = new URL(request.url);
  // /api/console -> /api/console/: the built page refers to its assets relative to the folder.
  if ((tail === undefined || tail === '') && !url.pathname.endsWith('/')) {
    return {
      status: 308,
      headers: { ...CONSOLE_HEADERS, location: `${url.pathname}/${url.search}`, 'cache-control': 'no-store' },
    };
  }
  const root = config.dir;
  const rel = tail && tail !== '' ? tail : 'index.html';
  let decoded: string;
  try {
    decoded = decodeURIComponent(rel);
  } catch {
    return textPage(400, 'Bad request', 'The path is not valid percent-encoding.');
  }
  const file = path.resolve(root, decoded);
  if (decoded.includes('\0') || (file !== root && !file.startsWith(root + path.sep))) {
    return textPage(404, 'Not found', `No console file ${rel}.`);
  }
  const index = path.join(root, 'index.html');
  if (!existsSync(index)) {
    return textPage(
      503,
      'Keel console not built',
      `The console's files are not in ${root}. Run "npm run build:console" (or "npm run build"), then reload.`,
    );
  }
  let target = file;
  if (!existsSync(target) || !statSync(target).isFile()) {
    // Only the page itself falls back; a missing asset is a real 404.
    if (path.extname(decoded) !== '') return textPage(404, 'Not found', `No console file ${rel}.`);
    target = index;
  }
  const ext = path.extname(target);
  const hashed = target.startsWith(path.join(root, 'assets') + path.sep);
  return {
    status: 200,
    headers: {
      ...CONSOLE_HEADERS,
      'content-type': TYPES[ext] ?? 'application/octet-stream',
      // Vite puts a content hash in every asset name: cache those for good, never the page.
      'cache-control': hashed ? 'public, max-age=31536000, immutable' : 'no-cache',
    },
    body: readFileSync(target),
  };
}

export interface ConsoleSession {
  mode: PrincipalMode;
  signedIn: boolean; // App Service authentication vouched for a principal on this request
  principal: { name: string | null; roles: string[] } | null;
  // The level the signed-in principal holds on the console path (null: none, every call is refused).
  level: OpsRole | null;
  operatorRole: string;
  loginUrl: string | null;
  logoutUrl: string | null;
}

export function consoleSession(request: HttpRequest, config: ConsoleConfig): ConsoleSession {
  const mode = trustedMode(config.principalTrust);
  let principal: ClientPrincipal | null = null;
  if (mode === 'appservice') {
    try {
      principal = parseClientPrincipal(request.headers.get('x-ms-client-principal'));
    } catch {
      principal = null;
    }
  }
  const names = config.roleNames;
  return {
    mode,
    signedIn: principal !== null,
    principal: principal ? { name: principal.name, roles: principal.roles } : null,
    level: principal ? grantedLevel(principal, names, 'console') : null,
    operatorRole: names.operator,
    loginUrl: mode === 'appservice' ? '/.auth/login/aad?post_login_redirect_uri=/api/console/' : null,
    logoutUrl: mode === 'appservice' ? '/.auth/logout?post_logout_redirect_uri=/api/console/' : null,
  };
}

// Same-origin checks for the cookie-authenticated proxy, on reads too: the custom header, and Origin /
// Sec-Fetch-Site when the browser sends them.
function checkSameOrigin(request: HttpRequest): void {
  if (request.headers.get(CONSOLE_CSRF_HEADER) !== '1') {
    throw new OpsError('forbidden', `console API calls must carry the ${CONSOLE_CSRF_HEADER}: 1 header`);
  }
  refuseCrossSite(request);
}

export type OpsInvoker = (
  request: HttpRequest,
  context: InvocationContext,
  channel: OpsChannel,
  refused?: OpsError,
) => Promise<HttpResponseInit>;

// /api/console-api/{*path}: `session`, or `ops/<ops route>` relayed to the ops handler for a signed-in principal.
export async function handleConsoleApi(
  request: HttpRequest,
  context: InvocationContext,
  ops: OpsInvoker,
  config: ConsoleConfig,
): Promise<HttpResponseInit> {
  const tail = request.params.path ?? '';
  try {
    if (tail === 'session') {
      if (request.method.toUpperCase() !== 'GET')
        throw new OpsError('method_not_allowed', `${request.method} is not allowed on session`, undefined, {
          allow: 'GET',
        });
      return json(200, consoleSession(request, config));
    }
    if (tail !== 'ops' && !tail.startsWith('ops/')) throw new OpsError('not_found', `no console API route ${tail}`);
    // The front door's refusals go to the ops handler too, which records them in the audit trail against the route
    // the call named (one place for every refusal); nothing of the call is read or run.
    let refused: OpsError | null = null;
    try {
      frontDoor(request, config);
    } catch (err) {
      if (!(err instanceof OpsError)) throw err;
      refused = err;
    }
    const url = new URL(request.url);
    const opsTail = tail === 'ops' ? '' : tail.slice('ops/'.length);
    const headers: Record<string, string> = {};
    request.headers.forEach((v, k) => {
      headers[k] = v;
    });
    // The body is relayed unread, as the caller's own stream: the ops handler reads it after the role check, within
    // KEEL_OPS_MAX_BODY_BYTES, counting as it goes (shared/ops/router.ts, readBodyWithin). Reading it here first
    // (request.arrayBuffer()) held a body of any size whole in memory before any limit applied.
    const body = refused || ['GET', 'HEAD'].includes(request.method.toUpperCase()) ? null : request.body;
    const query: Record<string, string> = {};
    url.searchParams.forEach((v, k) => {
      query[k] = v;
    });
    // Loaded on use: @azure/functions is a CommonJS bundle whose classes Node's ESM loader only exposes on the
    // default export (the registration test mocks the module without one, so not at module load). Under tsx (npm
    // start) the namespace carries them by name and has no default: every console API call was a 500 there.
    const azureFunctions = (await import('@azure/functions')) as typeof import('@azure/functions') & {
      default?: typeof import('@azure/functions');
    };
    const HttpRequestClass = azureFunctions.default?.HttpRequest ?? azureFunctions.HttpRequest;
    const relayedUrl = `${url.origin}${url.pathname.replace(/\/console-api\/ops(\/.*)?$/, (_m, rest: string | undefined) => `/ops${rest ?? ''}`)}${url.search}`;
    // Built over a native Request, as the library's own streaming path does (`nativeRequest`): its `body` init
    // takes bytes only. A stream body needs duplex 'half'.
    const nativeRequest = new Request(relayedUrl, {
      method: request.method,
      headers,
      body,
      ...(body ? { duplex: 'half' } : {}),
    } as RequestInit);
    const relayed = new HttpRequestClass({
      method: request.method,
      url: relayedUrl,
      query,
      params: { path: opsTail },
      nativeRequest,
    } as ConstructorParameters<typeof HttpRequestClass>[0]);
    // The role every route declares is checked by the ops handler, on the console channel: no key, so the
    // principal's own roles are all there is.
    return await ops(relayed, context, 'console', refused ?? undefined);
  } catch (err) {
    if (err instanceof OpsError) return errorResponse(err);
    if (err instanceof PrincipalTrustError) {
      context.error(`console API: ${err.message}`);
      return errorResponse(new OpsError('unavailable', 'the console API is misconfigured; see the function logs'));
    }
    context.error(`console API ${tail} failed: ${(err as Error).stack ?? String(err)}`);
    return errorResponse(new OpsError('internal_error', 'internal error; see the function logs'));
  }
}

// What the key-less path needs before a call reaches the ops routes: App Service authentication in front, the
// console's same-origin header, a signed-in principal.
function frontDoor(request: HttpRequest, config: ConsoleConfig): void {
  if (trustedMode(config.principalTrust) !== 'appservice') {
    throw new OpsError(
      'unauthorized',
      'signing in without a key needs App Service authentication in front of the app (WEBSITE_AUTH_ENABLED=True); use the ops key (docs/operations.md)',
    );
  }
  checkSameOrigin(request);
  const principal = parseClientPrincipal(request.headers.get('x-ms-client-principal'));
  if (!principal)
    throw new OpsError('unauthorized', 'not signed in: sign in through App Service authentication (/.auth/login/aad)');
}

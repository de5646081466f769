// An in-process stand-in for what sits in front of Keel in Azure, so the client talks HTTP to the real ops router:
// - the Functions host: /api/ops/* needs a function key (x-functions-key), /api/console-api/* none;
// - App Service authentication (Easy Auth): a bearer token is validated (here against a test token issuer: HMAC
//   signature, audience, expiry) and turned into x-ms-client-principal with the token's `roles`, the header a
//   caller sends itself is stripped, and an invalid token is a 401 before the app runs;
// - faults a test asks for: an answer of its choice, or the connection dropped after the app answered.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { HttpResponseInit } from '@azure/functions';
import { HttpRequest } from '../../../dev/azureFunctions.js';
import { ops } from '../../../functions/ops.js';
import { consoleApi } from '../../../functions/console.js';
import { checkFunctionKey } from '../../../shared/ops/auth.js';
import { context } from '../../../test/functions/support.js';

export const AUDIENCE = 'api://keel-test-app';

// Issues Entra-style access tokens (a JWT's three parts, HS256 here) for a managed identity or app registration.
export class TestTokenIssuer {
  private readonly secret = randomBytes(32);

  issue(claims: { roles?: string[]; appid?: string; aud?: string; expiresInS?: number }): string {
    const now = Math.floor(Date.now() / 1000);
    const header = { alg: 'HS256', typ: 'JWT' };
    const body = {
      aud: claims.aud ?? AUDIENCE,
      iss: 'https://login.microsoftonline.com/test-tenant/v2.0',
      appid: claims.appid ?? 'producer-mi-client-id',
      azp: claims.appid ?? 'producer-mi-client-id',
      idtyp: 'app', // an app-only token: a managed identity or a service principal, no user
      oid: 'producer-mi-object-id',
      roles: claims.roles ?? [],
      iat: now,
      exp: now + (claims.expiresInS ?? 3600),
    };
    const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const unsigned = `${enc(header)}.${enc(body)}`;
    return `${unsigned}.${createHmac('sha256', this.secret).update(unsigned).digest('base64url')}`;
  }

  // What App Service authentication does with a bearer token: validate it, then describe the caller to the app.
  principalFor(token: string): string | null {
    const [h, b, sig] = token.split('.');
    if (!h || !b || !sig) return null;
    const expected = createHmac('sha256', this.secret).update(`${h}.${b}`).digest();
    const given = Buffer.from(sig, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    const claims = JSON.parse(Buffer.from(b, 'base64url').toString('utf8')) as Record<string, unknown>;
    if (claims.aud !== AUDIENCE || typeof claims.exp !== 'number' || claims.exp * 1000 < Date.now()) return null;
    // The shape Easy Auth sends for an app-only token: one claim per role under "roles", the role_typ URI.
    const list: { typ: string; val: string }[] = [];
    for (const [typ, val] of Object.entries(claims)) {
      if (Array.isArray(val)) for (const v of val) list.push({ typ, val: String(v) });
      else list.push({ typ, val: String(val) });
    }
    return Buffer.from(
      JSON.stringify({
        auth_typ: 'aad',
        name_typ: 'http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name',
        role_typ: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/role',
        claims: list,
      }),
    ).toString('base64');
  }

  // An @azure/identity TokenCredential stand-in (what ManagedIdentityCredential is to the client).
  credential(roles: string[]) {
    const scopes: string[] = [];
    return {
      scopes,
      getToken: async (scope: string | string[]) => {
        scopes.push(...(Array.isArray(scope) ? scope : [scope]));
        return { token: this.issue({ roles }), expiresOnTimestamp: Date.now() + 3600_000 };
      },
    };
  }
}

export type Fault = { status: number; headers?: Record<string, string>; body?: unknown } | 'drop-after-app';

export interface FrontDoor {
  baseUrl: string;
  functionKey: string;
  issuer: TestTokenIssuer;
  faults: Fault[]; // taken one per request, in order
  requests: { path: string; headers: http.IncomingHttpHeaders }[];
  close(): Promise<void>;
}

function send(res: http.ServerResponse, r: HttpResponseInit): void {
  const headers: Record<string, string> = {};
  const h = r.headers as Record<string, string> | undefined;
  if (h) for (const [k, v] of Object.entries(h)) headers[k] = String(v);
  const body = r.jsonBody !== undefined ? JSON.stringify(r.jsonBody) : ((r.body as string | Buffer | undefined) ?? '');
  res.writeHead(r.status ?? 200, headers).end(body);
}

export async function startFrontDoor(): Promise<FrontDoor> {
  const functionKey = randomBytes(16).toString('hex');
  const issuer = new TestTokenIssuer();
  const faults: Fault[] = [];
  const requests: FrontDoor['requests'] = [];
  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const bytes = Buffer.concat(chunks);
      const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
      requests.push({ path: url.pathname, headers: req.headers });
      const fault = faults.shift();
      if (fault && fault !== 'drop-after-app') {
        res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
        res.end(JSON.stringify(fault.body ?? { error: 'unavailable', message: 'injected by the test' }));
        return;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers[k] = String(v);
      delete headers['x-ms-client-principal']; // Easy Auth strips what a caller sends
      const auth = headers.authorization;
      if (auth?.startsWith('Bearer ')) {
        const principal = issuer.principalFor(auth.slice('Bearer '.length));
        if (!principal) return void res.writeHead(401, { 'www-authenticate': 'Bearer' }).end();
        headers['x-ms-client-principal'] = principal;
      }
      const query: Record<string, string> = {};
      url.searchParams.forEach((v, k) => (query[k] = v));
      const make = (tail: string) =>
        new HttpRequest({
          method: req.method ?? 'GET',
          url: url.toString(),
          headers,
          query,
          params: { path: decodeURIComponent(tail) },
          ...(bytes.length > 0 ? { body: { bytes: new Uint8Array(bytes) } } : {}),
        });
      let answer: HttpResponseInit;
      if (url.pathname.startsWith('/api/ops/')) {
        if (!checkFunctionKey(functionKey, headers['x-functions-key'], null)) return void res.writeHead(401).end(); // the Functions host's answer: no body
        answer = await ops(make(url.pathname.slice('/api/ops/'.length)), context('ops'));
      } else if (url.pathname.startsWith('/api/console-api/')) {
        answer = await consoleApi(make(url.pathname.slice('/api/console-api/'.length)), context('consoleApi'));
      } else answer = { status: 404 };
      if (fault === 'drop-after-app') return void res.socket?.destroy(); // the app wrote the job; the answer is lost
      send(res, answer);
    })().catch((err: unknown) => {
      res.writeHead(500).end(String(err));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    functionKey,
    issuer,
    faults,
    requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

// App Service authentication fronting the app (the console's key-less path believes the principal only then).
export function easyAuthEnv(): () => void {
  const saved = {
    KEEL_TRUST_CLIENT_PRINCIPAL: process.env.KEEL_TRUST_CLIENT_PRINCIPAL,
    WEBSITE_SITE_NAME: process.env.WEBSITE_SITE_NAME,
    WEBSITE_AUTH_ENABLED: process.env.WEBSITE_AUTH_ENABLED,
  };
  delete process.env.KEEL_TRUST_CLIENT_PRINCIPAL;
  process.env.WEBSITE_SITE_NAME = 'keel-test';
  process.env.WEBSITE_AUTH_ENABLED = 'True';
  return () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
}

// The console's HTTP surface without a browser: static files (CSP, caching, traversal, missing build), the session
// endpoint per access mode, and the App Service authentication relay to the ops API (refusals and what it relays).
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpRequest, HttpResponseInit } from '@azure/functions';
import { HttpRequest as Req, InvocationContext } from '../../dev/azureFunctions.js';
import {
  CONSOLE_CSP,
  consoleSession,
  handleConsoleApi,
  serveConsoleAsset,
  type ConsoleConfig,
} from '../../shared/ops/console.js';
import { principalMode } from '../../shared/ops/principalTrust.js';
import { parseHostEnvironment } from '../../shared/app/hostEnvironment.js';
import { encodeClientPrincipal } from '../../shared/ops/auth.js';
import { errorResponse, type OpsError } from '../../shared/ops/errors.js';
import { readBodyWithin, routedTail } from '../../shared/ops/router.js';
import { definitions } from '../../functions/definitions.js';
import { BODY_CHUNK, overLimitBody, streamingPost } from '../support/chunkedBody.js';

let dir: string;
const ctx = () => new InvocationContext({ invocationId: 'test', functionName: 'console', logHandler: () => undefined });
const EASY_AUTH = { WEBSITE_SITE_NAME: 'keel-app', WEBSITE_AUTH_ENABLED: 'True' };
const ALICE = encodeClientPrincipal({ name: 'alice', roles: [] });
// The console's configuration as the composition root parses it from an environment.
const consoleOf = (env: NodeJS.ProcessEnv): ConsoleConfig => parseHostEnvironment(env).console;

function req(
  method: string,
  url: string,
  opts: { headers?: Record<string, string>; params?: Record<string, string>; body?: string } = {},
): HttpRequest {
  return new Req({
    method,
    url,
    headers: opts.headers ?? {},
    params: opts.params ?? {},
    ...(opts.body !== undefined ? { body: { string: opts.body } } : {}),
  });
}

function text(res: HttpResponseInit): string {
  return Buffer.isBuffer(res.body) ? res.body.toString('utf8') : String(res.body ?? '');
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'keel-console-assets-'));
  await mkdir(path.join(dir, 'assets'));
  await writeFile(path.join(dir, 'index.html'), '<!doctype html><title>console</title>');
  await writeFile(path.join(dir, 'assets', 'index-abc123.js'), 'console.log(1)');
  await writeFile(path.join(dir, '..', 'secret.txt'), 'not for you').catch(() => undefined);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('console: static files', () => {
  const env = () => consoleOf({ KEEL_CONSOLE_DIR: dir });

  it('is registered as two anonymous HTTP functions outside the reserved admin route', () => {
    const http = definitions.filter((d) => d.kind === 'http' && d.name.startsWith('console'));
    expect(http.map((d) => [d.name, d.kind === 'http' ? d.route : '', d.kind === 'http' ? d.authLevel : ''])).toEqual([
      ['console', 'console/{*path}', 'anonymous'],
      ['consoleApi', 'console-api/{*path}', 'anonymous'],
    ]);
  });

  it('redirects /api/console to the folder, then serves the page with a strict CSP and no caching', () => {
    const r = serveConsoleAsset(req('GET', 'http://h/api/console'), undefined, env());
    expect(r.status).toBe(308);
    expect((r.headers as Record<string, string>).location).toBe('/api/console/');
    const page = serveConsoleAsset(req('GET', 'http://h/api/console/'), '', env());
    const headers = page.headers as Record<string, string>;
    expect(page.status).toBe(200);
    expect(text(page)).toContain('<title>console</title>');
    expect(headers['content-security-policy']).toBe(CONSOLE_CSP);
    expect(CONSOLE_CSP).toContain("default-src 'none'");
    expect(CONSOLE_CSP).toContain("connect-src 'self'");
    expect(CONSOLE_CSP).not.toMatch(/unsafe-inline|unsafe-eval|https?:/);
    expect(headers['x-frame-options']).toBe('DENY');
    expect(headers['cache-control']).toBe('no-cache');
  });

  it('serves hashed assets as immutable, with their type', () => {
    const r = serveConsoleAsset(
      req('GET', 'http://h/api/console/assets/index-abc123.js'),
      'assets/index-abc123.js',
      env(),
    );
    expect(r.status).toBe(200);
    expect((r.headers as Record<string, string>)['content-type']).toBe('text/javascript; charset=utf-8');
    expect((r.headers as Record<string, string>)['cache-control']).toContain('immutable');
  });

  it('never serves a file outside its folder, and a missing asset is a 404', () => {
    for (const tail of ['../secret.txt', '..%2Fsecret.txt', '%2e%2e/secret.txt', 'assets/../../secret.txt']) {
      const r = serveConsoleAsset(req('GET', `http://h/api/console/${tail}`), tail, env());
      expect(r.status, tail).toBe(404);
      expect(text(r)).not.toContain('not for you');
    }
    expect(serveConsoleAsset(req('GET', 'http://h/api/console/assets/nope.js'), 'assets/nope.js', env()).status).toBe(
      404,
    );
    expect(serveConsoleAsset(req('GET', 'http://h/api/console/%E0%A4%A'), '%E0%A4%A', env()).status).toBe(400);
  });

  it('says how to build the console when it is not built', () => {
    const r = serveConsoleAsset(
      req('GET', 'http://h/api/console/'),
      '',
      consoleOf({ KEEL_CONSOLE_DIR: path.join(dir, 'missing') }),
    );
    expect(r.status).toBe(503);
    expect(text(r)).toContain('npm run build:console');
  });
});

describe('console: session and access modes', () => {
  it('locally the key is the way in and the caller states its role', () => {
    const LOCAL = { KEEL_TRUST_CLIENT_PRINCIPAL: 'local' };
    expect(principalMode(LOCAL)).toBe('caller');
    // Without the local setting nobody vouches for the header (fail closed).
    expect(principalMode({})).toBe('untrusted');
    const s = consoleSession(
      req('GET', 'http://h/api/console-api/session', { headers: { 'x-ms-client-principal': ALICE } }),
      consoleOf(LOCAL),
    );
    expect(s).toMatchObject({
      mode: 'caller',
      signedIn: false,
      principal: null,
      operatorRole: 'Keel.Operator',
      loginUrl: null,
    });
  });

  it('in Azure without App Service authentication the principal header is not believed', () => {
    expect(principalMode({ WEBSITE_SITE_NAME: 'keel-app' })).toBe('untrusted');
    const s = consoleSession(
      req('GET', 'http://h/x', { headers: { 'x-ms-client-principal': ALICE } }),
      consoleOf({ WEBSITE_SITE_NAME: 'keel-app' }),
    );
    expect(s.signedIn).toBe(false);
  });

  it('behind App Service authentication the signed-in principal is the session', () => {
    const s = consoleSession(
      req('GET', 'http://h/x', {
        headers: { 'x-ms-client-principal': encodeClientPrincipal({ name: 'bob', roles: ['Keel.Operator'] }) },
      }),
      consoleOf({
        ...EASY_AUTH,
        KEEL_OPS_OPERATOR_ROLE: 'Ops.Admin',
      }),
    );
    expect(s).toMatchObject({
      mode: 'appservice',
      signedIn: true,
      principal: { name: 'bob', roles: ['Keel.Operator'] },
      operatorRole: 'Ops.Admin',
    });
    expect(s.loginUrl).toContain('/.auth/login/aad');
    const anonymous = consoleSession(req('GET', 'http://h/x'), consoleOf(EASY_AUTH));
    expect(anonymous).toMatchObject({ mode: 'appservice', signedIn: false });
  });
});

describe('console: the ops API for App Service authentication sign-in', () => {
  const relayed: HttpRequest[] = [];
  const channels: string[] = [];
  // Refusals of the front door reach the ops handler too (it records them), with the refusal and no body.
  const refusedCalls: { request: HttpRequest; refused: OpsError }[] = [];
  const fakeOps = async (
    r: HttpRequest,
    _c: unknown,
    channel: string,
    refused?: OpsError,
  ): Promise<HttpResponseInit> => {
    if (refused) {
      refusedCalls.push({ request: r, refused });
      return errorResponse(refused);
    }
    relayed.push(r);
    channels.push(channel);
    return { status: 200, jsonBody: { ok: true } };
  };
  const call = (
    method: string,
    tail: string,
    headers: Record<string, string>,
    env: NodeJS.ProcessEnv,
    body?: string,
    search = '',
  ) =>
    handleConsoleApi(
      req(method, `http://app.example/api/console-api/${tail}${search}`, {
        headers: { host: 'app.example', ...headers },
        params: { path: tail },
        ...(body ? { body } : {}),
      }),
      ctx(),
      fakeOps,
      consoleOf(env),
    );

  it('is refused without App Service authentication: the key is the only way in then', async () => {
    for (const env of [{}, { WEBSITE_SITE_NAME: 'keel-app' }]) {
      const r = await call('GET', 'ops/stats', { 'x-keel-console': '1', 'x-ms-client-principal': ALICE }, env);
      expect(r.status).toBe(401);
      expect((r.jsonBody as { message: string }).message).toContain('WEBSITE_AUTH_ENABLED');
    }
    expect(relayed).toEqual([]);
  });

  it('needs a signed-in principal, the console header and the same origin', async () => {
    refusedCalls.length = 0;
    expect((await call('GET', 'ops/stats', { 'x-keel-console': '1' }, EASY_AUTH)).status).toBe(401);
    expect((await call('GET', 'ops/stats', { 'x-ms-client-principal': ALICE }, EASY_AUTH)).status).toBe(403);
    const cross = await call(
      'POST',
      'ops/queues/q/pause',
      { 'x-keel-console': '1', 'x-ms-client-principal': ALICE, origin: 'https://evil.example' },
      EASY_AUTH,
      '{}',
    );
    expect(cross.status).toBe(403);
    const site = await call(
      'POST',
      'ops/queues/q/pause',
      { 'x-keel-console': '1', 'x-ms-client-principal': ALICE, 'sec-fetch-site': 'cross-site' },
      EASY_AUTH,
      '{}',
    );
    expect(site.status).toBe(403);
    expect(relayed).toEqual([]);
    // Each refusal went to the ops handler as a refusal naming its route, with nothing of the body read.
    expect(refusedCalls.map((c) => [c.request.method, c.request.params.path, c.refused.status])).toEqual([
      ['GET', 'stats', 401],
      ['GET', 'stats', 403],
      ['POST', 'queues/q/pause', 403],
      ['POST', 'queues/q/pause', 403],
    ]);
    expect(refusedCalls[2]!.request.body).toBeNull();
  });

  it('relays method, path, query, body and the principal to the ops handler, which checks the role itself', async () => {
    const r = await call(
      'POST',
      'ops/dlq/resurrect',
      {
        'x-keel-console': '1',
        'x-ms-client-principal': ALICE,
        origin: 'http://app.example',
        'content-type': 'application/json',
      },
      EASY_AUTH,
      '{"limit":5}',
      '?x=1',
    );
    expect(r.status).toBe(200);
    const out = relayed.pop()!;
    expect(out.method).toBe('POST');
    expect(out.params.path).toBe('dlq/resurrect');
    expect(new URL(out.url).pathname).toBe('/api/ops/dlq/resurrect');
    expect(new URL(out.url).search).toBe('?x=1');
    expect(out.headers.get('x-ms-client-principal')).toBe(ALICE);
    expect(await out.json()).toEqual({ limit: 5 });
    // The console channel: no key, so only the principal's own roles count (the router checks them).
    expect(channels.pop()).toBe('console');
  });

  // The host hands over the catch-all decoded ("ops/queues/a/b/pause" for a%2Fb): the relayed URL keeps the path as
  // sent, from which the ops router takes the segments, so the "/" stays in the queue name (a 400 naming it) and the
  // call is not routed as the queue "a" or another route.
  it('relays an encoded "/" in a path parameter as sent, so the ops router keeps it in its parameter', async () => {
    const r = await handleConsoleApi(
      req('POST', 'http://app.example/api/console-api/ops/queues/a%2Fb/pause', {
        headers: {
          host: 'app.example',
          'x-keel-console': '1',
          'x-ms-client-principal': ALICE,
          'content-type': 'application/json',
        },
        params: { path: 'ops/queues/a/b/pause' },
        body: '{}',
      }),
      ctx(),
      fakeOps,
      consoleOf(EASY_AUTH),
    );
    expect(r.status).toBe(200);
    const out = relayed.pop()!;
    expect(out.params.path).toBe('queues/a/b/pause');
    expect(new URL(out.url).pathname).toBe('/api/ops/queues/a%2Fb/pause');
    expect(routedTail(out.params.path!, new URL(out.url).pathname)).toBe('queues/a%2Fb/pause');
    // Where the URL says what the segment says (Azure's front end decoded it), it is routed as it came.
    expect(routedTail('queues/a/b/pause', '/api/ops/queues/a/b/pause')).toBe('queues/a/b/pause');
    expect(routedTail('queues/a?b/pause', '/api/ops/queues/a%3Fb/pause')).toBe('queues/a%3Fb/pause');
    expect(routedTail('queues/a%/x', '/api/ops/queues/a%25/x')).toBe('queues/a%25/x');
    channels.pop();
  });

  // The relay reads nothing of the body: the ops handler reads it after the role check, counting as it goes, and stops
  // one chunk past KEEL_OPS_MAX_BODY_BYTES (readBodyWithin). It used to read the whole body first, whatever its size.
  it('relays the body unread: a huge one is refused at the limit, never pulled whole from the caller', async () => {
    const LIMIT = 256 * 1024;
    const { body: source, pulled } = overLimitBody();
    const url = 'http://app.example/api/console-api/ops/jobs';
    const headers = {
      host: 'app.example',
      'x-keel-console': '1',
      'x-ms-client-principal': ALICE,
      'content-type': 'application/json',
    };
    const incoming = new Req({
      method: 'POST',
      url,
      params: { path: 'ops/jobs' },
      nativeRequest: streamingPost(url, headers, source),
    } as ConstructorParameters<typeof Req>[0]);
    const limitedOps = async (r: HttpRequest): Promise<HttpResponseInit> => {
      try {
        await readBodyWithin(r, LIMIT);
        return { status: 200 };
      } catch (err) {
        return errorResponse(err as OpsError);
      }
    };
    const res = await handleConsoleApi(incoming, ctx(), limitedOps, consoleOf(EASY_AUTH));
    expect(res.status).toBe(413);
    expect(res.jsonBody).toMatchObject({ error: 'payload_too_large', limit: LIMIT });
    expect((res.jsonBody as { message: string }).message).toContain('KEEL_OPS_MAX_BODY_BYTES');
    // The limit and what the stream had queued ahead of the reader: far from the 16 MB sent.
    expect(pulled()).toBeLessThanOrEqual(LIMIT + 4 * BODY_CHUNK);
  });

  it('serves the session and refuses unknown console routes', async () => {
    const s = await call('GET', 'session', {}, EASY_AUTH);
    expect(s.status).toBe(200);
    expect((await call('POST', 'session', {}, EASY_AUTH)).status).toBe(405);
    expect((await call('GET', 'nope', {}, EASY_AUTH)).status).toBe(404);
  });
});

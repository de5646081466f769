// Who may call what (review F1, F3, F4, F5): every route declares a role level, checked on both paths; writes are
// refused from another site and without a JSON content type; a forged principal is ignored where nobody vouches
// for it. Each attack of the review is a call here that is refused and changes nothing.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ops, opsForConsole } from '../../functions/ops.js';
import { handleConsoleApi } from '../../shared/ops/console.js';
import { parseHostEnvironment, rereadHostEnvironment } from '../../shared/app/hostEnvironment.js';
import { allRoutes } from '../../shared/ops/routes.js';
import { OPS_ROLES, encodeClientPrincipal, type OpsChannel } from '../../shared/ops/auth.js';
import { auditRows, context, createTestRuntime, jsonOf, lastAuditId, request, type TestRuntime } from './support.js';

let t: TestRuntime;

beforeAll(async () => {
  t = await createTestRuntime('ops_access');
});

afterAll(async () => {
  await t?.close();
});

const as = (roles: string[]) => encodeClientPrincipal({ name: `has ${roles.join('+') || 'no role'}`, roles });
const TENANT = as([]); // any member, guest or workload identity of the tenant: signed in, no Keel role
const READER = as(['Keel.Reader']);
const PRODUCER = as(['Keel.Producer']);
const OPERATOR = as(['Keel.Operator']);

async function call(
  channel: OpsChannel,
  method: string,
  path: string,
  opts: Parameters<typeof request>[2] & { principal?: string } = {},
) {
  const headers = { ...(opts.principal ? { 'x-ms-client-principal': opts.principal } : {}), ...opts.headers };
  const req = request(method, path, { ...opts, headers });
  const ctx = context('ops');
  const res = channel === 'key' ? await ops(req, ctx) : await opsForConsole(req, ctx, 'console');
  return { status: res.status ?? 200, body: jsonOf(res), logs: ctx.logs };
}

// A concrete path for a route pattern: the role is checked before any parameter is parsed.
function concrete(path: string): string {
  return path
    .replace(/^\//, '')
    .replace('/transfers/batches/:id', '/transfers/batches/00000000-0000-4000-8000-000000000000')
    .replace('transfers/batches/:id', 'transfers/batches/00000000-0000-4000-8000-000000000000')
    .replace(':id', '1')
    .replace(':name', 'acl-q');
}

const EXPECTED_ROLES: Record<string, string> = {
  health: 'reader',
  stats: 'reader',
  metrics: 'reader',
  listQueues: 'reader',
  getQueue: 'reader',
  pauseQueue: 'operator',
  resumeQueue: 'operator',
  updateQueue: 'operator',
  enqueue: 'producer',
  searchJobs: 'reader',
  getJob: 'reader',
  cancelJob: 'operator',
  resurrectJob: 'operator',
  resurrectByFilter: 'operator',
  cancelMany: 'operator',
  purge: 'operator',
  dlqGroups: 'reader',
  listWorkers: 'reader',
  warnings: 'reader',
  listHandlers: 'reader',
  listSchedules: 'reader',
  pauseSchedule: 'operator',
  resumeSchedule: 'operator',
  listTransfers: 'reader',
  startTransfer: 'operator',
  pauseTransfer: 'operator',
  resumeTransfer: 'operator',
  replayTransfer: 'operator',
  rebaselineTransfer: 'operator',
  compareTransferKeys: 'operator',
  listBatches: 'reader',
  getBatch: 'reader',
  reconcileBatch: 'operator',
  resumeBatch: 'operator',
  abandonBatch: 'operator',
  reconcileStale: 'operator',
  openapi: 'reader',
  searchAudit: 'operator', // names every caller: not for readers
};

describe('the route table', () => {
  it('gives every route a role level, and writes never the reader level', () => {
    const routes = allRoutes();
    for (const r of routes) {
      expect(OPS_ROLES, `${r.method} ${r.path}`).toContain(r.role);
      if (r.method !== 'GET') expect(r.role, `${r.method} ${r.path}`).not.toBe('reader');
    }
    // A new route must be added here with its level: the table is the documented one (docs/operations.md).
    expect(Object.fromEntries(routes.map((r) => [r.operationId, r.role]))).toEqual(EXPECTED_ROLES);
  });

  it('refuses every route on the console path to a principal one level short, before any work, and records each refusal once', async () => {
    for (const r of allRoutes()) {
      const below = OPS_ROLES.indexOf(r.role) - 1;
      const principal = below < 0 ? TENANT : as([`Keel.${below === 0 ? 'Reader' : 'Producer'}`]);
      const before = await lastAuditId(t.pool);
      const res = await call('console', r.method, concrete(r.path), { principal, body: {} });
      expect(res.status, `${r.method} ${r.path}: ${JSON.stringify(res.body)}`).toBe(403);
      expect(res.body.requiredLevel).toBe(r.role);
      const rows = await auditRows(t.pool, before);
      expect(rows, `${r.method} ${r.path}`).toHaveLength(1);
      expect(rows[0], `${r.method} ${r.path}`).toMatchObject({
        action: r.operationId,
        http_method: r.method,
        channel: 'console',
        outcome: 'refused',
        status: 403,
        required_role: r.role,
        role: below < 0 ? null : OPS_ROLES[below],
        principal_name: below < 0 ? 'has no role' : `has Keel.${below === 0 ? 'Reader' : 'Producer'}`,
      });
    }
    expect(t.queues.sent).toEqual([]);
  });

  it('refuses every operator route on /api/ops to a key holder without the operator role', async () => {
    for (const r of allRoutes().filter((x) => x.role === 'operator')) {
      for (const principal of [undefined, READER, PRODUCER]) {
        const res = await call('key', r.method, concrete(r.path), { body: {}, ...(principal ? { principal } : {}) });
        expect(res.status, `${r.method} ${r.path}`).toBe(403);
      }
    }
  });
});

describe('the console path (no key): the principal roles only', () => {
  it('a tenant principal without a role reads nothing (F1)', async () => {
    for (const path of ['jobs?location=archive&limit=500', 'schedules', 'stats', 'transfers/batches']) {
      const r = await call('console', 'GET', path, { principal: TENANT });
      expect(r.status, path).toBe(403);
      expect(r.body).toMatchObject({ error: 'forbidden', requiredRole: 'Keel.Reader' });
    }
    const enq = await call('console', 'POST', 'jobs', { principal: TENANT, body: { type: 'demo.echo' } });
    expect(enq.status).toBe(403);
    expect(t.queues.sent).toEqual([]);
  });

  it('a reader reads but cannot enqueue; a producer enqueues but cannot start a transfer (F3)', async () => {
    expect((await call('console', 'GET', 'stats', { principal: READER })).status).toBe(200);
    const refused = await call('console', 'POST', 'jobs', {
      principal: READER,
      body: { queue: 'acl-q', type: 'demo.echo' },
    });
    expect(refused).toMatchObject({ status: 403, body: { requiredRole: 'Keel.Producer' } });
    expect((await call('console', 'GET', 'jobs?queue=acl-q', { principal: READER })).body.items).toEqual([]);
    const made = await call('console', 'POST', 'jobs', {
      principal: PRODUCER,
      body: { queue: 'acl-q', type: 'demo.echo' },
    });
    expect(made.status).toBe(201);
    t.queues.clear();
    const start = await call('console', 'POST', 'transfers/none/start', { principal: PRODUCER, body: {} });
    expect(start).toMatchObject({ status: 403, body: { requiredRole: 'Keel.Operator' } });
    const reconcile = await call('console', 'POST', 'transfers/reconcile', {
      principal: PRODUCER,
      body: { olderThanMs: 0, limit: 1000 },
    });
    expect(reconcile.status).toBe(403);
    // The operator passes the role check (no transfer is configured here: 404 from the route itself).
    expect((await call('console', 'POST', 'transfers/none/start', { principal: OPERATOR, body: {} })).status).toBe(404);
  });

  it('through handleConsoleApi behind App Service authentication: the role table applies with no key', async () => {
    vi.stubEnv('WEBSITE_SITE_NAME', 'keel-app');
    vi.stubEnv('WEBSITE_AUTH_ENABLED', 'True');
    vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', '');
    rereadHostEnvironment(); // the principal trust is parsed once: again, for this environment
    try {
      const env = { WEBSITE_SITE_NAME: 'keel-app', WEBSITE_AUTH_ENABLED: 'True' };
      const viaConsole = async (principal: string, path: string) => {
        const url = new URL(`http://app.example/api/console-api/ops/${path}`);
        const req = request('GET', 'x', {
          headers: { host: 'app.example', 'x-keel-console': '1', 'x-ms-client-principal': principal },
        });
        // request() builds an /api/ops URL: rebuild it as the console path the browser calls.
        const { HttpRequest } = await import('../../dev/azureFunctions.js');
        const consoleReq = new HttpRequest({
          method: 'GET',
          url: url.toString(),
          headers: Object.fromEntries(req.headers.entries()),
          query: Object.fromEntries(url.searchParams),
          params: { path: `ops/${url.pathname.replace(/^\/api\/console-api\/ops\//, '')}` },
        });
        return handleConsoleApi(consoleReq, context('consoleApi'), opsForConsole, parseHostEnvironment(env).console);
      };
      expect((await viaConsole(TENANT, 'jobs?location=dlq&limit=500')).status).toBe(403);
      expect((await viaConsole(READER, 'jobs?location=dlq&limit=5')).status).toBe(200);
    } finally {
      vi.unstubAllEnvs();
      rereadHostEnvironment();
    }
  });
});

describe('a workload identity (managed identity or service principal) with the producer app role', () => {
  // What App Service authentication sends for an app-only Entra token (no user, no name claim): the token's claims,
  // one per role under "roles", and role_typ naming the long role claim type. Some configurations carry the roles
  // under that long type instead; both are roles.
  const appOnly = (roleTyp: string, roles: string[]) =>
    Buffer.from(
      JSON.stringify({
        auth_typ: 'aad',
        name_typ: 'http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name',
        role_typ: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/role',
        claims: [
          { typ: 'aud', val: 'api://keel-app' },
          { typ: 'appid', val: '7f0c1a52-0000-4000-8000-000000000001' },
          { typ: 'idtyp', val: 'app' },
          { typ: 'http://schemas.microsoft.com/identity/claims/objectidentifier', val: 'mi-object-id' },
          ...roles.map((val) => ({ typ: roleTyp, val })),
        ],
      }),
    ).toString('base64');

  it('is a producer on the key-less path: it enqueues and reads, and every operator route refuses it', async () => {
    for (const typ of ['roles', 'http://schemas.microsoft.com/ws/2008/06/identity/claims/role']) {
      const principal = appOnly(typ, ['Keel.Producer']);
      const r = await call('console', 'POST', 'jobs', { principal, body: { type: 'demo.echo', payload: { n: 1 } } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect((await call('console', 'GET', `jobs/${r.body.id}`, { principal })).status).toBe(200);
      for (const route of allRoutes().filter((x) => x.role === 'operator')) {
        const res = await call('console', route.method, concrete(route.path), { principal, body: {} });
        expect(res.status, `${route.method} ${route.path}`).toBe(403);
        expect(res.body.requiredLevel).toBe('operator');
      }
    }
    // Without the role the same identity is refused the enqueue, naming the role it needs.
    const none = await call('console', 'POST', 'jobs', {
      principal: appOnly('roles', []),
      body: { type: 'demo.echo', payload: { n: 1 } },
    });
    expect(none.status).toBe(403);
    expect(none.body.requiredRole).toBe('Keel.Producer');
  });
});

describe('/api/ops with a function key', () => {
  it('reads and enqueues with the key alone, as documented; operator routes need the role', async () => {
    expect((await call('key', 'GET', 'stats')).status).toBe(200);
    expect((await call('key', 'POST', 'jobs', { body: { queue: 'acl-key', type: 'demo.echo' } })).status).toBe(201);
    t.queues.clear();
    const pause = await call('key', 'POST', 'queues/acl-key/pause', { body: {} });
    expect(pause).toMatchObject({ status: 403, body: { requiredRole: 'Keel.Operator' } });
    expect((await call('key', 'POST', 'queues/acl-key/pause', { body: {}, principal: OPERATOR })).status).toBe(200);
    expect((await call('key', 'POST', 'queues/acl-key/resume', { body: {}, principal: OPERATOR })).status).toBe(200);
  });

  // The audit columns drop what a database cannot store (NUL): a claim of nothing else is recorded as absent, not as
  // an empty text the store refuses (that failed the call closed, 503, and left its refusals unrecorded).
  it('records a principal whose claims are nothing but NUL: its write runs, its refusal is recorded', async () => {
    const nul = (roles: string[]) =>
      encodeClientPrincipal({ name: '\u0000', oid: '\u0000\u0000', tid: '\u0000', roles });
    const from = await lastAuditId(t.pool);
    const ok = await call('key', 'POST', 'queues/acl-nul/pause', { body: {}, principal: nul(['Keel.Operator']) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const refused = await call('key', 'POST', 'queues/acl-nul/resume', { body: {}, principal: nul(['Keel.Reader']) });
    expect(refused.status, JSON.stringify(refused.body)).toBe(403);
    const rows = await auditRows(t.pool, from);
    expect(rows.map((r) => [r.action, r.outcome, r.status, r.principal_id, r.principal_name, r.tenant_id])).toEqual([
      ['pauseQueue', 'ok', 200, null, null, null],
      ['resumeQueue', 'refused', 403, null, null, null],
    ]);
  });

  it('ignores a forged principal where nobody vouches for it (F5): a container, func start, Azure without auth', async () => {
    for (const env of [{}, { WEBSITE_SITE_NAME: 'keel-app' }, { WEBSITE_AUTH_ENABLED: 'True' }]) {
      vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', '');
      for (const [k, v] of Object.entries(env)) vi.stubEnv(k, v);
      rereadHostEnvironment(); // the principal trust is parsed once: again, for this environment
      try {
        const r = await call('key', 'POST', 'queues/acl-forged/pause', { body: {}, principal: OPERATOR });
        expect(r.status, JSON.stringify(env)).toBe(403);
        expect(r.body.message).toMatch(/cannot be verified/);
      } finally {
        vi.unstubAllEnvs();
        rereadHostEnvironment();
      }
    }
    // The local setting where a hosting environment is detected: every call fails closed.
    vi.stubEnv('KUBERNETES_SERVICE_HOST', '10.0.0.1');
    rereadHostEnvironment(); // the principal trust is parsed once: again, for this environment
    try {
      const r = await call('key', 'POST', 'queues/acl-forged/pause', { body: {}, principal: OPERATOR });
      expect(r).toMatchObject({ status: 503, body: { error: 'unavailable' } });
      expect(r.body.message).not.toMatch(/KUBERNETES/);
    } finally {
      vi.unstubAllEnvs();
      rereadHostEnvironment();
    }
    expect((await call('key', 'GET', 'queues/acl-forged')).status).toBe(404);
  });
});

describe('the console front door', () => {
  it('records its refusals (no console header: a cross-site form post) against the route, and hides the route table', async () => {
    vi.stubEnv('WEBSITE_SITE_NAME', 'keel-app');
    vi.stubEnv('WEBSITE_AUTH_ENABLED', 'True');
    vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', '');
    rereadHostEnvironment(); // the principal trust is parsed once: again, for this environment
    try {
      const env = { WEBSITE_SITE_NAME: 'keel-app', WEBSITE_AUTH_ENABLED: 'True' };
      const { HttpRequest } = await import('../../dev/azureFunctions.js');
      const post = (path: string, headers: Record<string, string>) =>
        handleConsoleApi(
          new HttpRequest({
            method: 'POST',
            url: `http://app.example/api/console-api/ops/${path}`,
            headers: { host: 'app.example', 'content-type': 'text/plain', ...headers },
            params: { path: `ops/${path}` },
            body: { string: 'x=1' },
          }),
          context('consoleApi'),
          opsForConsole,
          parseHostEnvironment(env).console,
        );
      const before = await lastAuditId(t.pool);
      // The operator's session cookie rides along (App Service sets the principal), but the page cannot send the
      // console header.
      const forged = await post('queues/acl-front/pause', { 'x-ms-client-principal': OPERATOR });
      expect(forged.status).toBe(403);
      const rows = await auditRows(t.pool, before);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        action: 'pauseQueue',
        target: 'queue:acl-front',
        channel: 'console',
        auth_method: 'principal',
        principal_name: 'has Keel.Operator',
        outcome: 'refused',
        status: 403,
      });
      expect(String(rows[0]!.reason)).toMatch(/x-keel-console/);
      // A refused caller gets the refusal, not a 404 that would map the routes; nothing is recorded for no route.
      const probe = await post('no/such/route', {});
      expect(probe.status).toBe(403);
      expect(await auditRows(t.pool, before)).toHaveLength(1);
      expect((await call('key', 'GET', 'queues/acl-front')).status).toBe(404);
    } finally {
      vi.unstubAllEnvs();
      rereadHostEnvironment();
    }
  });
});

describe('cross-site writes (F4)', () => {
  it("refuses the attacker page's form post and foreign-origin writes, and changes nothing", async () => {
    // <form method="POST" action=".../api/ops/queues/payments/pause?code=KEY"> auto-submitted, the operator's
    // principal injected from the session cookie.
    const form = await call('key', 'POST', 'queues/acl-csrf/pause?code=KEY', {
      principal: OPERATOR,
      raw: '',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        origin: 'https://evil.example',
        'sec-fetch-site': 'cross-site',
      },
    });
    expect(form.status).toBe(403);
    const noType = await call('key', 'POST', 'queues/acl-csrf/pause', {
      principal: OPERATOR,
      raw: '',
      headers: { 'content-type': '' },
    });
    expect(noType.status).toBe(415);
    const foreign: Record<string, string>[] = [
      { origin: 'https://evil.example' },
      { origin: 'null' },
      { 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site' },
    ];
    for (const headers of foreign) {
      const r = await call('key', 'POST', 'queues/acl-csrf/pause', { principal: OPERATOR, body: {}, headers });
      expect(r.status, JSON.stringify(headers)).toBe(403);
      expect(r.body.error).toBe('forbidden');
    }
    expect((await call('key', 'GET', 'queues/acl-csrf')).status).toBe(404);
    // The console's own calls: same origin, JSON.
    const same = await call('key', 'POST', 'queues/acl-csrf/pause', {
      principal: OPERATOR,
      body: {},
      headers: { origin: 'http://localhost:7071', host: 'localhost:7071', 'sec-fetch-site': 'same-origin' },
    });
    expect(same.status).toBe(200);
  });

  it('writes one JSON audit line per write and a warning per refusal', async () => {
    const ok = await call('key', 'POST', 'queues/acl-audit/resume', { principal: OPERATOR, body: {} });
    expect(ok.status).toBe(200);
    const line = ok.logs.find((l) => l.text.startsWith('ops audit '))!;
    expect(JSON.parse(line.text.slice('ops audit '.length))).toMatchObject({
      action: 'resumeQueue',
      channel: 'key',
      principalName: 'has Keel.Operator',
      target: 'queue:acl-audit',
      outcome: 'ok',
      status: 200,
    });
    const refused = await call('console', 'GET', 'stats', { principal: TENANT });
    const warning = refused.logs.find((l) => l.level === 'warning' && l.text.startsWith('ops audit '))!;
    expect(JSON.parse(warning.text.slice('ops audit '.length))).toMatchObject({
      action: 'stats',
      outcome: 'refused',
      status: 403,
      authMethod: 'local',
    });
  });
});

describe('bounded reads (F7)', () => {
  it('search returns payload previews; the whole payload only on the job detail route', async () => {
    const big = { blob: 'x'.repeat(200_000), note: 'é' };
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await call('key', 'POST', 'jobs', {
        body: { queue: 'acl-big', type: 'demo.echo', payload: big, delayMs: 3_600_000 },
      });
      expect(r.status).toBe(201);
      ids.push(r.body.id);
    }
    t.queues.clear();
    const res = await ops(request('GET', 'jobs?queue=acl-big&limit=500'), context('ops'));
    const page = jsonOf(res);
    // Three 200 kB payloads, one small page.
    expect(JSON.stringify(page).length).toBeLessThan(5_000);
    expect(page.items).toHaveLength(3);
    for (const item of page.items) {
      expect(item).not.toHaveProperty('payload');
      expect(item).toMatchObject({
        payloadBytes: Buffer.byteLength(JSON.stringify(big)),
        payloadTruncated: true,
      });
      expect(item.payloadPreview).toBe(JSON.stringify(big).slice(0, 200));
    }
    const detail = await call('key', 'GET', `jobs/${ids[0]}`);
    expect(detail.body.payload).toEqual(big);
    const small = await call('key', 'POST', 'jobs', { body: { queue: 'acl-small', type: 'demo.echo', payload: [1] } });
    t.queues.clear();
    expect((await call('key', 'GET', 'jobs?queue=acl-small')).body.items[0]).toMatchObject({
      id: small.body.id,
      payloadPreview: '[1]',
      payloadBytes: 3,
      payloadTruncated: false,
    });
  });

  it('archive and DLQ searches are bounded without text too; hot searches take no bound', async () => {
    const r = await call('key', 'GET', 'jobs?location=dlq&type=acl-none&scanRows=10');
    expect(r.status).toBe(200);
    expect(r.body.items).toEqual([]);
    const hot = await call('key', 'GET', 'jobs?location=hot&scanRows=10');
    expect(hot).toMatchObject({ status: 400, body: { field: 'scanRows' } });
  });
});

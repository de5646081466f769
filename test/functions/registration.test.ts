// functions/index.ts registers exactly the definitions list with the Azure host; settings, host.json and the
// client-principal parsing behave as documented.
import { describe, expect, it, vi } from 'vitest';
import path from 'node:path';

const registered: { kind: string; name: string; options: Record<string, unknown> }[] = [];
const terminateHooks: unknown[] = [];

vi.mock('@azure/functions', async (importOriginal) => {
  const real = await importOriginal<typeof import('@azure/functions')>();
  const record = (kind: string) => (name: string, options: Record<string, unknown>) =>
    registered.push({ kind, name, options });
  return {
    ...real,
    app: {
      http: record('http'),
      storageQueue: record('storageQueue'),
      timer: record('timer'),
      hook: { appTerminate: (handler: unknown) => terminateHooks.push(handler) },
    },
  };
});

describe('Azure registration', () => {
  it('registers every definition with resolved queue names, schedules, routes and function-level auth', async () => {
    vi.stubEnv('KEEL_PG_URL', 'postgres://u:p@127.0.0.1:5432/keel');
    vi.stubEnv('KEEL_JOBS_QUEUE', 'custom-jobs');
    vi.stubEnv('KEEL_DISPATCH_SCHEDULE', '*/30 * * * * *');
    vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', '');
    const sigtermBefore = process.listeners('SIGTERM');
    await import('../../functions/index.js');
    const { definitions } = await import('../../functions/definitions.js');
    expect(registered.map((r) => r.name).sort()).toEqual(definitions.map((d) => d.name).sort());
    // Graceful scale-in: one appTerminate hook (processors, then telemetry) and a SIGTERM listener doing the same.
    expect(terminateHooks).toHaveLength(1);
    const added = process.listeners('SIGTERM').filter((l) => !sigtermBefore.includes(l));
    expect(added).toHaveLength(1);
    for (const l of added) process.off('SIGTERM', l);
    const byName = Object.fromEntries(registered.map((r) => [r.name, r]));
    expect(byName.jobRunner).toMatchObject({
      kind: 'storageQueue',
      options: { queueName: 'custom-jobs', connection: 'AzureWebJobsStorage' },
    });
    expect(byName.transferStage?.options.queueName).toBe('keel-transfer-stage');
    expect(byName.transferApply?.options.queueName).toBe('keel-transfer-apply');
    expect(byName.dispatcher).toMatchObject({ kind: 'timer', options: { schedule: '*/30 * * * * *' } });
    expect(byName.maintenance?.options.schedule).toBe('0 * * * * *');
    expect(byName.ops).toMatchObject({ kind: 'http', options: { route: 'ops/{*path}', authLevel: 'function' } });
    expect(byName.health).toMatchObject({
      kind: 'http',
      options: { route: 'health', methods: ['GET'], authLevel: 'anonymous' },
    });
    for (const r of registered) expect(typeof r.options.handler).toBe('function');
    // The host reserves routes starting with "admin".
    for (const d of definitions) if (d.kind === 'http') expect(d.route.startsWith('admin')).toBe(false);
    vi.unstubAllEnvs();
  });
});

describe('fail closed under the Functions host', () => {
  it('refuses to start with the local principal setting, whatever the environment says', async () => {
    vi.resetModules();
    vi.stubEnv('KEEL_PG_URL', 'postgres://u:p@127.0.0.1:5432/keel');
    vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', 'local');
    await expect(import('../../functions/app.js')).rejects.toThrow(/KEEL_TRUST_CLIENT_PRINCIPAL .*refused/);
    vi.unstubAllEnvs();
  });
});

describe('liveness', () => {
  it('answers 200 without a key, a runtime or any internals', async () => {
    const runtime = await import('../../shared/app/runtime.js');
    runtime.setRuntime(undefined);
    const { health } = await import('../../functions/health.js');
    // No KEEL_* setting at all: the probe must not build the runtime (that would need a store).
    const res = await health();
    expect(res.status).toBe(200);
    expect(JSON.parse(String(res.body))).toEqual({ status: 'ok' });
    expect((res.headers as Record<string, string>)['cache-control']).toBe('no-store');
  });
});

describe('settings', () => {
  it('fail naming the setting at fault', async () => {
    const { parseSettings } = await import('../../shared/config/settings.js');
    const base = { KEEL_PG_URL: 'postgres://u:p@127.0.0.1:5432/keel' };
    expect(() => parseSettings({})).toThrow(/KEEL_PG_URL/);
    expect(() => parseSettings({ ...base, KEEL_DISPATCH_BUDGET_MS: 'soon' })).toThrow(
      /KEEL_DISPATCH_BUDGET_MS: expected an integer/,
    );
    expect(() => parseSettings({ ...base, KEEL_JOBS_QUEUE: 'Bad_Name' })).toThrow(/KEEL_JOBS_QUEUE/);
    expect(() => parseSettings({ ...base, KEEL_DISPATCH_SCHEDULE: '* * * * *' })).toThrow(
      /KEEL_DISPATCH_SCHEDULE: must be a six-field/,
    );
    expect(() => parseSettings({ ...base, KEEL_DEMO_HANDLERS: 'maybe' })).toThrow(/KEEL_DEMO_HANDLERS/);
    expect(() => parseSettings({ KEEL_STORE_ENGINE: 'sqlserver' })).toThrow(/KEEL_SQL_CONNECTION/);
    const s = parseSettings(base);
    expect(s).toMatchObject({
      KEEL_OPS_OPERATOR_ROLE: 'Keel.Operator',
      KEEL_JOBS_QUEUE: 'keel-jobs',
      KEEL_DEMO_HANDLERS: false,
    });
    expect(parseSettings({ ...base, KEEL_OPS_OPERATOR_ROLE: 'Ops.Admin' }).KEEL_OPS_OPERATOR_ROLE).toBe('Ops.Admin');
    expect(s).toMatchObject({ KEEL_OPS_READER_ROLE: 'Keel.Reader', KEEL_OPS_PRODUCER_ROLE: 'Keel.Producer' });
  });
});

describe('host.json', () => {
  it('is read with the queue semantics the local host honours', async () => {
    const { readHostConfig, parseTimeSpan } = await import('../../shared/app/hostJson.js');
    const cfg = readHostConfig(path.resolve(import.meta.dirname, '../../host.json'));
    expect(cfg.routePrefix).toBe('api');
    expect(cfg.queues).toMatchObject({
      batchSize: 16,
      maxDequeueCount: 5,
      messageEncoding: 'base64',
      visibilityTimeoutMs: 10_000,
    });
    expect(parseTimeSpan('1.02:03:04', 'x')).toBe(((24 + 2) * 3600 + 3 * 60 + 4) * 1000);
    expect(() => parseTimeSpan('10s', 'x')).toThrow(/time span/);
  });
});

describe('client principal', () => {
  it('reads roles from the App Service authentication header', async () => {
    const { parseClientPrincipal, authorize, encodeClientPrincipal, checkFunctionKey } =
      await import('../../shared/ops/auth.js');
    const { principalTrustOf } = await import('../../shared/ops/principalTrust.js');
    // The default role names, as Settings parses them.
    const names = { reader: 'Keel.Reader', producer: 'Keel.Producer', operator: 'Keel.Operator' };
    const LOCAL = principalTrustOf({ KEEL_TRUST_CLIENT_PRINCIPAL: 'local' });
    const header = encodeClientPrincipal({ name: 'ana', roles: ['Keel.Operator', 'Other'] });
    expect(parseClientPrincipal(header)).toEqual({
      authType: 'aad',
      name: 'ana',
      roles: ['Keel.Operator', 'Other'],
      id: null,
      tenantId: null,
      appId: null,
    });
    expect(authorize(header, 'operator', names, 'key', LOCAL)?.name).toBe('ana');
    expect(() => authorize(header, 'operator', { ...names, operator: 'Keel.Admin' }, 'key', LOCAL)).toThrow(
      /Keel.Admin/,
    );
    expect(() => authorize(undefined, 'operator', names, 'key', LOCAL)).toThrow(/no authenticated principal/);
    // Without App Service authentication and without the local setting the header is caller-controlled: ignored.
    for (const env of [{}, { WEBSITE_SITE_NAME: 'keel-app' }, { WEBSITE_AUTH_ENABLED: 'True' }])
      expect(() => authorize(header, 'operator', names, 'key', principalTrustOf(env))).toThrow(
        /App Service authentication is not enabled/,
      );
    expect(
      authorize(
        header,
        'operator',
        names,
        'key',
        principalTrustOf({ WEBSITE_SITE_NAME: 'keel-app', WEBSITE_AUTH_ENABLED: 'True' }),
      )?.name,
    ).toBe('ana');
    // Entra ID principals name the role claim type in role_typ.
    const entra = Buffer.from(
      JSON.stringify({
        auth_typ: 'aad',
        role_typ: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/role',
        claims: [{ typ: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/role', val: 'Keel.Operator' }],
      }),
    ).toString('base64');
    expect(parseClientPrincipal(entra)?.roles).toEqual(['Keel.Operator']);
    // The audit trail's who: object id, tenant and calling application from the Entra claims.
    const workload = Buffer.from(
      JSON.stringify({
        auth_typ: 'aad',
        claims: [
          { typ: 'http://schemas.microsoft.com/identity/claims/objectidentifier', val: 'oid-1' },
          { typ: 'http://schemas.microsoft.com/identity/claims/tenantid', val: 'tid-1' },
          { typ: 'appid', val: 'app-1' },
        ],
      }),
    ).toString('base64');
    expect(parseClientPrincipal(workload)).toMatchObject({ id: 'oid-1', tenantId: 'tid-1', appId: 'app-1', roles: [] });
    // Group membership is not a role: a groups claim whose value is a role name grants nothing, even when the
    // header names "groups" as its role claim type (assign groups to app roles in Entra instead).
    const grouped = encodeClientPrincipal({ name: 'gus', roles: [], groups: ['Keel.Operator'] });
    expect(parseClientPrincipal(grouped)?.roles).toEqual([]);
    expect(() => authorize(grouped, 'reader', names, 'console', LOCAL)).toThrow(/Keel.Reader/);
    const groupsAsRoles = Buffer.from(
      JSON.stringify({ auth_typ: 'aad', role_typ: 'groups', claims: [{ typ: 'groups', val: 'Keel.Operator' }] }),
    ).toString('base64');
    expect(parseClientPrincipal(groupsAsRoles)?.roles).toEqual([]);
    expect(() => parseClientPrincipal('not-json')).toThrow(/x-ms-client-principal/);
    expect(checkFunctionKey('secret-key', 'secret-key', null)).toBe(true);
    expect(checkFunctionKey('secret-key', null, 'secret-key')).toBe(true);
    expect(checkFunctionKey('secret-key', 'secret-kez', null)).toBe(false);
    expect(checkFunctionKey('secret-key', null, null)).toBe(false);
  });
});

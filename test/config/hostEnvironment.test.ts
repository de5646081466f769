// What the ops API and the console read outside Settings is parsed once (docs/architecture.md, "Configuration"):
// a request reads the parsed value, so an environment changed after the first use is not seen until the composition
// root asks for a new parse (the local host after it fills the process environment in).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { hostEnvironment, parseHostEnvironment, rereadHostEnvironment } from '../../shared/app/hostEnvironment.js';
import { parseSettings } from '../../shared/config/settings.js';

afterEach(() => {
  vi.unstubAllEnvs();
  rereadHostEnvironment();
});

describe('the host environment (shared/app/hostEnvironment.ts)', () => {
  it('is parsed on first use and kept: a later change of the process environment is not read per call', () => {
    vi.stubEnv('KEEL_TRUST_CLIENT_PRINCIPAL', 'local');
    vi.stubEnv('KEEL_OPS_OPERATOR_ROLE', 'Ops.Admin');
    rereadHostEnvironment();
    const first = hostEnvironment();
    expect(first.principalTrust).toEqual({ mode: 'caller' });
    expect(first.console.roleNames.operator).toBe('Ops.Admin');
    vi.stubEnv('WEBSITE_SITE_NAME', 'keel-app');
    vi.stubEnv('WEBSITE_AUTH_ENABLED', 'True');
    vi.stubEnv('KEEL_OPS_OPERATOR_ROLE', 'Other');
    expect(hostEnvironment()).toBe(first);
    // Parsed again on request: now a hosting environment refuses the local setting, and every call says so.
    rereadHostEnvironment();
    const second = hostEnvironment();
    expect('refused' in second.principalTrust && second.principalTrust.refused.message).toMatch(/WEBSITE_SITE_NAME/);
    expect(second.console.roleNames.operator).toBe('Other');
  });

  it("reads the role names with Settings' own fields: the same trimming and defaults", () => {
    for (const env of [{}, { KEEL_OPS_READER_ROLE: '  Team.Read  ', KEEL_OPS_PRODUCER_ROLE: ' ' }]) {
      const settings = parseSettings({ KEEL_PG_URL: 'postgres://u@h/db', ...env });
      expect(parseHostEnvironment(env).console.roleNames).toEqual({
        reader: settings.KEEL_OPS_READER_ROLE,
        producer: settings.KEEL_OPS_PRODUCER_ROLE,
        operator: settings.KEEL_OPS_OPERATOR_ROLE,
      });
    }
    expect(parseHostEnvironment({}).console.roleNames).toEqual({
      reader: 'Keel.Reader',
      producer: 'Keel.Producer',
      operator: 'Keel.Operator',
    });
  });
});

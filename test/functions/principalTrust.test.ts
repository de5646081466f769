// Review F5: the principal header is believed only behind App Service authentication, or on the local host with
// KEEL_TRUST_CLIENT_PRINCIPAL=local, which is refused wherever a hosting environment is detected.
import { describe, expect, it } from 'vitest';

describe('principal trust fails closed', () => {
  it('refuses the local setting wherever a hosting environment is detected, and warns without App Service auth', async () => {
    const { principalMode, principalTrustWarning, HOSTING_MARKERS } =
      await import('../../shared/ops/principalTrust.js');
    const { checkLocalPrincipalTrust } = await import('../../dev/localHost.js');
    const LOCAL = { KEEL_TRUST_CLIENT_PRINCIPAL: 'local' };
    expect(principalMode(LOCAL)).toBe('caller');
    for (const marker of HOSTING_MARKERS) {
      expect(() => principalMode({ ...LOCAL, [marker]: 'x' })).toThrow(new RegExp(`hosting environment.*${marker}`));
      expect(() => checkLocalPrincipalTrust('127.0.0.1', { ...LOCAL, [marker]: 'x' }, false)).toThrow(marker);
      // Without the setting the same environment simply does not believe the header.
      expect(principalMode({ [marker]: 'x' })).toBe('untrusted');
    }
    expect(() => principalMode({ KEEL_TRUST_CLIENT_PRINCIPAL: 'yes' })).toThrow(/must be "local"/);
    // WEBSITE_AUTH_ENABLED alone (no App Service) vouches for nothing.
    expect(principalMode({ WEBSITE_AUTH_ENABLED: 'True' })).toBe('untrusted');
    expect(principalMode({ WEBSITE_SITE_NAME: 'a', WEBSITE_AUTH_ENABLED: 'True' })).toBe('appservice');
    // A container publishing the port: refused; one listening on loopback (a dev container): allowed, with a warning.
    expect(() => checkLocalPrincipalTrust('0.0.0.0', LOCAL, true)).toThrow(/container listening on 0.0.0.0/);
    expect(checkLocalPrincipalTrust('127.0.0.1', LOCAL, true)).toMatch(/KEEL_TRUST_CLIENT_PRINCIPAL=local/);
    expect(checkLocalPrincipalTrust('0.0.0.0', {}, true)).toMatch(/is ignored/);
    expect(principalTrustWarning({ WEBSITE_SITE_NAME: 'a', WEBSITE_AUTH_ENABLED: 'True' })).toBeNull();
    const { parseSettings } = await import('../../shared/config/settings.js');
    const base = { KEEL_PG_URL: 'postgres://u:p@127.0.0.1:5432/keel' };
    expect(() => parseSettings({ ...base, KEEL_TRUST_CLIENT_PRINCIPAL: 'true' })).toThrow(
      /KEEL_TRUST_CLIENT_PRINCIPAL/,
    );
    expect(parseSettings({ ...base, KEEL_TRUST_CLIENT_PRINCIPAL: '' }).KEEL_TRUST_CLIENT_PRINCIPAL).toBeUndefined();
  });
});

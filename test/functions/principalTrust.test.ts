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

  it("npm start's default (local) where it is refused: a start-up error that says it is the default and how to opt out", async () => {
    const { defaultLocalTrust, StartupError } = await import('../../dev/boot.js');
    // Unset: npm start sets it; on loopback it stands.
    const env: Record<string, string | undefined> = {};
    defaultLocalTrust(env, '127.0.0.1', true);
    expect(env.KEEL_TRUST_CLIENT_PRINCIPAL).toBe('local');
    // Unset, a hosting environment: the message names the default and the opt-out, not "remove the setting".
    const hosted = () => defaultLocalTrust({ KUBERNETES_SERVICE_HOST: '10.0.0.1' }, '127.0.0.1', false);
    expect(hosted).toThrow(StartupError);
    expect(hosted).toThrow(
      /by default \(KEEL_TRUST_CLIENT_PRINCIPAL=local\).*KUBERNETES_SERVICE_HOST.*Set KEEL_TRUST_CLIENT_PRINCIPAL to an empty value/,
    );
    expect(hosted).not.toThrow(/Remove the setting/);
    // Unset, a container publishing its port: listen on loopback, or opt out.
    expect(() => defaultLocalTrust({}, '0.0.0.0', true)).toThrow(
      /container listens on 0\.0\.0\.0 \(KEEL_HTTP_HOST\).*Listen on 127\.0\.0\.1 \(KEEL_HTTP_HOST\), or set KEEL_TRUST_CLIENT_PRINCIPAL to an empty value/,
    );
    // Set by the user: the setting's own refusal, as a start-up error.
    expect(() =>
      defaultLocalTrust({ KEEL_TRUST_CLIENT_PRINCIPAL: 'local', K_SERVICE: 'x' }, '127.0.0.1', false),
    ).toThrow(/hosting environment is detected \(K_SERVICE\)\. Remove the setting/);
    expect(() => defaultLocalTrust({ KEEL_TRUST_CLIENT_PRINCIPAL: 'yes' }, '127.0.0.1', false)).toThrow(StartupError);
    // Set empty: the opt-out the message names starts, the header ignored.
    const optedOut: Record<string, string | undefined> = {
      KEEL_TRUST_CLIENT_PRINCIPAL: '',
      KUBERNETES_SERVICE_HOST: 'x',
    };
    expect(() => defaultLocalTrust(optedOut, '0.0.0.0', true)).not.toThrow();
    expect(optedOut.KEEL_TRUST_CLIENT_PRINCIPAL).toBe('');
  });
});

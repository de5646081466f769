// The azd hooks are Node scripts (they run the same on Windows, macOS and Linux). The preprovision hook refuses to
// provision alerts that notify nobody, and keeps a client IP that is already set without asking the network.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const hook = path.resolve(import.meta.dirname, '../../infra/scripts/preprovision.mjs');
// No azd on PATH: the hook must decide from the environment alone.
const run = (env: Record<string, string>) =>
  spawnSync(process.execPath, [hook], {
    encoding: 'utf8',
    env: { PATH: path.dirname(process.execPath), ...env },
    timeout: 30_000,
  });

describe('preprovision hook', () => {
  it('fails when no alert receiver is configured, saying how to set one', () => {
    const r = run({ KEEL_CLIENT_IP: '203.0.113.7' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/KEEL_ALERT_EMAILS/);
    expect(r.stderr).toMatch(/KEEL_ALERT_ACTION_GROUP_ID/);
  });

  it('accepts e-mail receivers or an action group, and keeps an IP already set', () => {
    const byMail = run({ KEEL_ALERT_EMAILS: 'ops@example.com', KEEL_CLIENT_IP: '203.0.113.7' });
    expect(byMail.status).toBe(0);
    expect(byMail.stdout).toMatch(/alerts notify: ops@example.com/);
    expect(byMail.stdout).toMatch(/KEEL_CLIENT_IP=203\.0\.113\.7/);
    const byGroup = run({
      KEEL_ALERT_ACTION_GROUP_ID: '/subscriptions/x/resourceGroups/y/providers/microsoft.insights/actionGroups/z',
      KEEL_CLIENT_IP: '203.0.113.7',
    });
    expect(byGroup.status).toBe(0);
  });
});

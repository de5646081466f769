#!/usr/bin/env node
// azd preprovision hook, in Node so it runs the same on Windows, macOS and Linux (azure.yaml).
// 1. Alerts must reach someone: fails unless KEEL_ALERT_EMAILS or KEEL_ALERT_ACTION_GROUP_ID is set.
// 2. Records this machine's public IPv4 address as KEEL_CLIENT_IP, so the SQL firewall (and, with the virtual
//    network, Key Vault) admit the post-provision step. Set KEEL_CLIENT_IP yourself, or to "none" to skip it.
import { execFileSync } from 'node:child_process';

const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

function azd(...args) {
  return execFileSync('azd', args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    shell: process.platform === 'win32',
  }).trim();
}

function envValue(name) {
  if (process.env[name]) return process.env[name].trim();
  try {
    return azd('env', 'get-value', name);
  } catch {
    return ''; // not set in the azd environment
  }
}

const emails = envValue('KEEL_ALERT_EMAILS');
const actionGroup = envValue('KEEL_ALERT_ACTION_GROUP_ID');
if (!emails && !actionGroup) {
  console.error('Alerts need a receiver. Set at least one of:');
  console.error('  azd env set KEEL_ALERT_EMAILS "ops@example.com,oncall@example.com"');
  console.error(
    '  azd env set KEEL_ALERT_ACTION_GROUP_ID "/subscriptions/<id>/resourceGroups/<rg>/providers/microsoft.insights/actionGroups/<name>"',
  );
  console.error('(optionally also KEEL_ALERT_WEBHOOK_URL), then run azd up again. See docs/deploy.md.');
  process.exit(1);
}
console.log(`alerts notify: ${[emails, actionGroup].filter(Boolean).join('; ')}`);

const current = envValue('KEEL_CLIENT_IP');
if (current === 'none') {
  console.log('KEEL_CLIENT_IP=none: no client firewall rule');
  azd('env', 'set', 'KEEL_CLIENT_IP', '');
  process.exit(0);
}
if (IPV4.test(current)) {
  console.log(`KEEL_CLIENT_IP=${current}`);
  process.exit(0);
}

let ip = '';
try {
  const res = await fetch('https://api.ipify.org', { signal: AbortSignal.timeout(10_000) });
  if (res.ok) ip = (await res.text()).trim();
} catch {
  // no answer: said below
}
if (IPV4.test(ip)) {
  azd('env', 'set', 'KEEL_CLIENT_IP', ip);
  console.log(`KEEL_CLIENT_IP=${ip} (SQL firewall rule AllowDeploymentClient)`);
} else {
  console.error(
    "Could not determine this machine's public IPv4 address; set it with: azd env set KEEL_CLIENT_IP <ipv4>",
  );
  console.error('(without it, run the post-provision step from a machine the SQL firewall admits)');
}

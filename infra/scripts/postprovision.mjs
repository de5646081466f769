#!/usr/bin/env node
// azd postprovision hook, in Node so it runs the same on Windows, macOS and Linux (azure.yaml); also runnable by
// hand after `az deployment sub create` (docs/deploy.md, path B) with the variables below set from the deployment
// outputs. Installs the Keel schema on Azure SQL (`npm run migrate`, as the Microsoft Entra administrator you are
// signed in as) and creates the app identity's database user with the role keel_executor
// (infra/sql/post-provision.sql).
//
// Needs: Node and npm, go-sqlcmd (`sqlcmd` with --authentication-method), a Microsoft Entra sign-in that
// DefaultAzureCredential finds (az login or azd auth login), and the SQL firewall admitting this machine
// (KEEL_CLIENT_IP). KEEL_SKIP_MIGRATE=true skips the schema step (already installed).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const windows = process.platform === 'win32';

const required = ['KEEL_SQLSERVER_SERVER', 'KEEL_SQLSERVER_DATABASE', 'KEEL_IDENTITY_NAME', 'KEEL_IDENTITY_CLIENT_ID'];
const missing = required.filter((name) => !process.env[name]);
if (missing.length > 0) {
  console.error(`missing (deployment outputs): ${missing.join(', ')}`);
  process.exit(1);
}
const server = process.env.KEEL_SQLSERVER_SERVER;
const database = process.env.KEEL_SQLSERVER_DATABASE;
const identityName = process.env.KEEL_IDENTITY_NAME;
const identityClientId = process.env.KEEL_IDENTITY_CLIENT_ID;

function run(cmd, args, opts = {}) {
  // npm is npm.cmd on Windows, which only a shell starts.
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, shell: windows && cmd === 'npm', ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if ((process.env.KEEL_SKIP_MIGRATE ?? 'false') !== 'true') {
  console.log(`== installing the Keel schema on ${server}/${database}`);
  if (!existsSync(path.join(root, 'node_modules'))) run('npm', ['ci', '--no-audit', '--no-fund']);
  run('npm', ['run', 'migrate'], {
    env: {
      ...process.env,
      KEEL_STORE_ENGINE: 'sqlserver',
      KEEL_SQLSERVER_AUTH: 'entra',
      KEEL_SQL_CONNECTION: `Server=tcp:${server},1433;Database=${database};Authentication=Active Directory Default;Encrypt=True;TrustServerCertificate=False`,
    },
  });
}

try {
  execFileSync('sqlcmd', ['--version'], { stdio: 'ignore' });
} catch {
  console.error(
    'sqlcmd (go-sqlcmd) not found: install it, then run infra/sql/post-provision.sql as shown in docs/deploy.md',
  );
  process.exit(1);
}

console.log(`== database user for ${identityName} (role keel_executor)`);
run('sqlcmd', [
  '-S',
  `tcp:${server},1433`,
  '-d',
  database,
  '--authentication-method',
  'ActiveDirectoryDefault',
  '-b',
  '-v',
  `IdentityName=${identityName}`,
  `IdentityClientId=${identityClientId}`,
  '-i',
  path.join(root, 'infra', 'sql', 'post-provision.sql'),
]);

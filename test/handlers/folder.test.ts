// The handlers folder is the one place for user handlers: a file added there is registered by the built app
// (dist/) and by the runtime every host builds (Azure, npm start, tests), with nothing else to edit.
import { afterAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { parseSettings } from '../../shared/config/settings.js';
import { createRuntime } from '../../shared/app/runtime.js';
import { registerDemoHandlers } from '../../dev/demoHandlers.js';
import { HANDLERS_DIR, configuredHandlersDir, loadHandlerFolder } from '../../shared/jobs/handlerFolder.js';
import type { JobStore } from '../../shared/jobs/contract.js';

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tag = `p${process.pid}`;
// The probe goes into a copy of the app's source tree, never into the real handlers/ folder: test files run in
// parallel, and every runtime they build loads handlers/ (a probe there would show up in their registries).
const project = path.join(root, '.tmp', `project-${tag}`);
const probeFile = path.join(project, 'handlers', `probe-${tag}.ts`);
const outDir = path.join(project, 'dist');
const settings = parseSettings({ KEEL_PG_URL: 'postgres://u:p@127.0.0.1:1/none' });
// Registration needs no database: the store is never called before a job is enqueued.
const noStore = { engine: 'none', close: async () => undefined } as unknown as JobStore;
const noQueues = { send: async () => undefined, sendPoison: async () => undefined, ping: async () => true };

afterAll(() => {
  rmSync(project, { recursive: true, force: true });
});

describe('handlers folder', () => {
  it('loads the configured folder (KEEL_HANDLERS_DIR, else handlers/); the demo handlers only when the local host adds them', async () => {
    expect(HANDLERS_DIR).toBe(path.join(root, 'handlers'));
    expect(configuredHandlersDir({})).toBe(HANDLERS_DIR);
    expect(configuredHandlersDir({ KEEL_HANDLERS_DIR: 'test/fixtures/handlers' })).toBe(
      path.resolve('test/fixtures/handlers'),
    );
    // The test run's own setting (vitest.config.ts): the fixture folder, not the user's handlers/.
    expect(process.env.KEEL_HANDLERS_DIR).toBe(path.join(root, 'test', 'fixtures', 'handlers'));
    const rt = await createRuntime(settings, { store: noStore, queues: noQueues, transfers: null });
    expect(rt.registry.types()).toEqual(['fixture.echo']);
    expect(rt.registry.get('fixture.echo')!.source).toBe(path.join('handlers', 'fixtureEcho.ts'));
    expect(rt.schedules).toEqual([]);
    await rt.close();
    // KEEL_DEMO_HANDLERS alone registers nothing in the app: the demo types are dev code (dev/boot.ts adds them).
    const plain = await createRuntime(
      parseSettings({ ...process.env, KEEL_PG_URL: 'postgres://u:p@127.0.0.1:1/none', KEEL_DEMO_HANDLERS: 'true' }),
      {
        store: noStore,
        queues: noQueues,
        transfers: null,
      },
    );
    expect(plain.registry.types().filter((t) => t.startsWith('demo.'))).toEqual([]);
    await plain.close();
    const demo = await createRuntime(
      parseSettings({ ...process.env, KEEL_PG_URL: 'postgres://u:p@127.0.0.1:1/none', KEEL_DEMO_HANDLERS: 'true' }),
      {
        store: noStore,
        queues: noQueues,
        transfers: null,
        register: registerDemoHandlers,
      },
    );
    expect(demo.registry.types()).toEqual(expect.arrayContaining(['demo.echo', 'fixture.echo']));
    await demo.close();
  });

  it('skips tests and private files, loads nested folders, and refuses a type declared twice naming both files', async () => {
    mkdirSync(path.join(root, '.tmp'), { recursive: true });
    const dir = mkdtempSync(path.join(root, '.tmp', 'hf-'));
    try {
      const define = (from: string) =>
        path.relative(from, path.join(root, 'shared/jobs/define.js')).split(path.sep).join('/');
      const file = (type: string, from = dir) =>
        `import { defineHandler } from '${define(from)}';\nexport const h = defineHandler('${type}', { async handle() {} });\nexport default h;\n`;
      writeFileSync(path.join(dir, 'a.ts'), file('t.a'));
      writeFileSync(path.join(dir, 'a.test.ts'), file('t.test'));
      writeFileSync(path.join(dir, '_private.ts'), file('t.private'));
      const { mkdirSync } = await import('node:fs');
      mkdirSync(path.join(dir, 'billing'));
      writeFileSync(path.join(dir, 'billing', 'b.ts'), file('t.b', path.join(dir, 'billing')));
      const loaded = await loadHandlerFolder(dir);
      expect(loaded.handlers.map((h) => h.type).sort()).toEqual(['t.a', 't.b']); // default + named export: once
      writeFileSync(path.join(dir, 'c.ts'), file('t.a'));
      await expect(
        createRuntime(settings, { store: noStore, queues: noQueues, transfers: null, handlersDir: dir }),
      ).rejects.toThrow(/c\.ts declares job type "t\.a", which is already registered by .*a\.ts/);
      rmSync(path.join(dir, 'c.ts'));
      // A definition made but not exported is reported naming the file, not silently left out.
      writeFileSync(
        path.join(dir, 'd.ts'),
        `import { defineHandler, defineSchedule } from '${define(dir)}';\n` +
          `const forgot = defineHandler('t.d', { async handle() {} });\n` +
          `const alsoForgot = defineSchedule('d-nightly', { cron: '0 0 2 * * *', type: 't.d' });\n` +
          `void forgot; void alsoForgot;\n`,
      );
      const err = await loadHandlerFolder(dir).then(
        () => null,
        (e: Error) => e,
      );
      expect(err?.message).toMatch(/d\.ts defines handler "t\.d" but does not export it/);
      expect(err?.message).toMatch(/d\.ts defines schedule "d-nightly" but does not export it/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a file added to handlers/ is compiled by `npm run build` and registered by the built app', async () => {
    // The copy's handlers/ holds the probe and a test next to it, not the user's own handlers.
    // packages/client: the enqueue rules the app imports from the client package.
    for (const entry of [
      'functions',
      'shared',
      'packages',
      'tsconfig.json',
      'tsconfig.build.json',
      'package.json',
      'host.json',
    ]) {
      cpSync(path.join(root, entry), path.join(project, entry), {
        recursive: true,
        filter: (src) => !src.endsWith('.test.ts'),
      });
    }
    symlinkSync(path.join(root, 'node_modules'), path.join(project, 'node_modules'), 'dir');
    mkdirSync(path.join(project, 'handlers'));
    writeFileSync(
      path.join(project, 'handlers', `probe-${tag}.test.ts`),
      `import { it } from 'vitest';\nit('is a test, not a handler', () => undefined);\n`,
    );
    writeFileSync(
      probeFile,
      `import { defineHandler, defineSchedule, z } from '../shared/handlerApi.js';\n` +
        `export const probe = defineHandler('probe.${tag}', { payload: z.object({ n: z.number() }), queue: 'probes', async handle() {} });\n` +
        `export const every5 = defineSchedule('probe-${tag}', { cron: '*/5 * * * * *', type: 'probe.${tag}', payload: { n: 1 } });\n`,
    );
    // The build exactly as `npm run build` runs it, in the copy (its node_modules link to the project's).
    await run(
      process.execPath,
      [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', outDir],
      { cwd: project },
    );
    const script = `
      const { createRuntime } = await import(${JSON.stringify(path.join(outDir, 'shared/app/runtime.js'))});
      const { parseSettings } = await import(${JSON.stringify(path.join(outDir, 'shared/config/settings.js'))});
      const rt = await createRuntime(parseSettings({ KEEL_PG_URL: 'postgres://u:p@127.0.0.1:1/none' }), {
        store: { engine: 'none', close: async () => {} }, queues: { send: async () => {}, sendPoison: async () => {}, ping: async () => true }, transfers: null });
      console.log(JSON.stringify({ types: rt.registry.types(), queue: rt.registry.get('probe.${tag}')?.options.queue,
        schedules: rt.schedules.map((s) => s.name), source: rt.registry.get('probe.${tag}')?.source }));
      await rt.close();`;
    // The built app's default folder (dist/handlers), not the test run's fixture setting.
    const { KEEL_HANDLERS_DIR: _fixture, ...appEnv } = process.env;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], {
      cwd: project,
      env: appEnv,
    });
    const built = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(built.types).toEqual([`probe.${tag}`]);
    expect(built.queue).toBe('probes');
    expect(built.schedules).toContain(`probe-${tag}`);
    expect(built.source).toBe(path.join('handlers', `probe-${tag}.js`));
    // Tests are not compiled into the app.
    const { existsSync } = await import('node:fs');
    expect(existsSync(path.join(outDir, 'handlers', `probe-${tag}.test.js`))).toBe(false);
    // And the source tree (tsx: npm start, vitest) registers the same file.
    const fromSource = await loadHandlerFolder(path.join(project, 'handlers'));
    expect(fromSource.handlers.map((h) => h.type)).toContain(`probe.${tag}`);
  }, 300_000);
});

// A user's own handlers and schedules cannot break the project's tests: a copy of the tree gets docs/jobs.md's
// walk-through files in its handlers/ (a handler, its helper, its unit test, a schedule) and a nightly schedule, then
// the command the docs give for handler tests, `npx vitest run handlers/` (which runs test/handlers/ too), runs in that copy and must pass. Before,
// those tests loaded the real handlers/ folder, and one schedule there failed the pause test ('idle' instead of
// 'paused'): the project's suites now load test/fixtures/handlers (KEEL_HANDLERS_DIR, vitest.config.ts).
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { adminUrl } from '../support/pg.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const copy = path.join(root, '.tmp', `isolation-${process.pid}`);

afterAll(() => rmSync(copy, { recursive: true, force: true }));

describe('test isolation from handlers/', () => {
  it("docs/jobs.md's handler, its test and schedules added to handlers/ leave the project's handler suites green", async () => {
    mkdirSync(copy, { recursive: true });
    for (const entry of [
      'functions',
      'shared',
      'packages',
      'handlers',
      'dev',
      'test',
      'sql',
      'host.json',
      'package.json',
    ]) {
      cpSync(path.join(root, entry), path.join(copy, entry), { recursive: true });
    }
    for (const file of ['tsconfig.json', 'tsconfig.build.json', 'vitest.config.ts'])
      cpSync(path.join(root, file), path.join(copy, file));
    symlinkSync(path.join(root, 'node_modules'), path.join(copy, 'node_modules'), 'dir');
    rmSync(path.join(copy, 'test', 'handlers', 'isolation.test.ts')); // this file, which would run itself again
    // The handler, its private helper, its unit test and its schedule exactly as docs/jobs.md gives them (each
    // block names its file on its first line), and a nightly schedule beside them.
    const docs = readFileSync(path.join(root, 'docs', 'jobs.md'), 'utf8');
    const files = [...docs.matchAll(/```ts\n\/\/ (handlers\/[\w./-]+\.ts)\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(files).toEqual([
      'handlers/_mailer.ts',
      'handlers/invoiceSend.ts',
      'handlers/invoiceSend.test.ts',
      'handlers/invoiceSchedules.ts',
      'handlers/reportBuild.ts',
    ]);
    for (const m of docs.matchAll(/```ts\n(\/\/ (handlers\/[\w./-]+\.ts)\n[\s\S]*?)```/g))
      writeFileSync(path.join(copy, m[2]!), m[1]!);
    writeFileSync(
      path.join(copy, 'handlers', 'nightly.ts'),
      `import { defineSchedule } from '../shared/handlerApi.js';\n` +
        `export const nightly = defineSchedule('invoice-nightly', {\n` +
        `  cron: '0 0 2 * * *', type: 'invoice.send', payload: { invoiceId: 'INV-2', email: 'a@example.com' },\n` +
        `});\n`,
    );
    // The copy's run uses this run's PostgreSQL server (its globalSetup then starts none) and its own vitest.config.ts.
    // KEEL_TEST_PG (set by .ci/run) would make it start a server of its own: the URL setting replaces it.
    const { KEEL_HANDLERS_DIR: _ours, KEEL_TEST_PG: _kind, KEEL_TEST_PG_URL: _url, ...env } = process.env;
    const run = spawn(
      process.execPath,
      [path.join(root, 'node_modules/vitest/vitest.mjs'), 'run', 'handlers/', '--maxWorkers=1'],
      // detached: its own process group, so a timeout stops the whole run (its vitest workers) with it
      {
        cwd: copy,
        env: { ...env, KEEL_TEST_PG_URL: adminUrl(), KEEL_PG_URL: adminUrl(), CI: 'true' },
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      },
    );
    let output = '';
    run.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    run.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null | 'timeout'>((resolve) => {
      const timer = setTimeout(() => {
        try {
          process.kill(-run.pid!, 'SIGKILL');
        } catch {
          run.kill('SIGKILL');
        }
        resolve('timeout');
      }, 420_000); // the copy's suites include folder.test.ts' full tsc build: 150 s seen on a loaded 2-core machine
      run.once('close', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    const plain = output.replace(/\u001b\[[0-9;]*m/g, '');
    expect(code, plain.slice(-4000)).toBe(0);
    // It really ran the suites that used to read handlers/, and the user's own handler test file too.
    expect(plain).toMatch(/test\/handlers\/schedules\.test\.ts/);
    expect(plain).toMatch(/test\/handlers\/enqueue\.test\.ts/);
    expect(plain).toMatch(/ handlers\/invoiceSend\.test\.ts/);
    expect(plain).not.toMatch(/\bfailed\b/);
  }, 480_000);
});

// Graceful scale-in under the Functions host: the BUILT app (tsconfig.build.json, what `npm run build` compiles) is
// loaded by a bare Node process with a stand-in for @azure/functions-core (the module the host's worker provides), so
// functions/index.ts registers its functions and hooks with the real @azure/functions library. A long job runs through
// the jobRunner function; then the worker's side of a scale-in is played: the appTerminate hooks run in registration
// order as the worker runs them (then it exits), or the process gets SIGTERM. The job must be handed back — pending,
// due at once, its attempt given back — within KEEL_SHUTDOWN_GRACE_MS plus the hand-back write, well before the host
// kills the worker (5 s after WorkerTerminate).
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { startAzuriteQueue, type AzuriteQueue } from '../../dev/azurite.js';

const root = path.resolve(import.meta.dirname, '../..');
// Under the repository (gitignored .tmp/), so the built modules resolve the project's node_modules and package.json.
const build = path.join(root, '.tmp', `terminate-${randomBytes(4).toString('hex')}`);
const GRACE_MS = 1000;
// The Functions host kills the worker this long after asking it to terminate (WorkerTerminate's grace period).
const HOST_KILL_MS = 5000;

const HOST_STANDIN = `
// What the Functions host's Node worker does for @azure/functions: it answers require('@azure/functions-core') and
// keeps the registered hooks, to run them (appTerminate: in registration order, awaiting each) when asked to stop.
const Module = require('node:module');
const hooks = {};
globalThis.__hooks = hooks;
const core = {
  setProgrammingModel() {},
  registerFunction() { return { dispose() {} }; },
  registerHook(name, callback) { (hooks[name] ??= []).push(callback); return { dispose() {} }; },
  log() {},
};
const original = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@azure/functions-core') return '@azure/functions-core';
  return original.call(this, request, ...rest);
};
require.cache['@azure/functions-core'] = { id: '@azure/functions-core', filename: '@azure/functions-core', loaded: true, exports: core };
`;

const SLOW_HANDLER = `
import { defineHandler } from '../shared/jobs/define.js';
// Runs for two minutes unless its signal aborts (cancel, timeout, lost lease, shutdown).
export const slow = defineHandler('terminate.slow', {
  queue: 'terminate',
  async handle(_payload, ctx) {
    await new Promise((resolve, reject) => {
      const t = setTimeout(resolve, 120_000);
      ctx.signal.addEventListener('abort', () => { clearTimeout(t); reject(ctx.signal.reason); }, { once: true });
    });
  },
});
`;

const HARNESS = `
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import azureFunctions from '@azure/functions';
const build = path.resolve(import.meta.dirname, '..');
const load = (p) => import(pathToFileURL(path.join(build, p)).href);
const out = (o) => process.stdout.write('\\n@@' + JSON.stringify(o) + '\\n');
await load('functions/index.js'); // the entry point: registers the functions and the hooks
const { getRuntime } = await load('shared/app/runtime.js');
const { enqueueJobs } = await load('shared/app/enqueue.js');
const { jobRunner } = await load('functions/jobRunner.js');
const rt = await getRuntime();
const quiet = { info() {}, warn() {}, error() {} };
const [job] = await enqueueJobs(rt, { type: 'terminate.slow', payload: {} }, quiet);
const context = new azureFunctions.InvocationContext({ invocationId: 'terminate-test', functionName: 'jobRunner', logHandler: () => {} });
let runner = 'running';
void jobRunner({ jobId: job.id }, context).then(() => (runner = 'returned'), (err) => (runner = 'failed: ' + err.message));
while ((await rt.store.getJob(job.id))?.state !== 'processing') await new Promise((r) => setTimeout(r, 50));
if (process.argv[2] === 'sigterm') {
  out({ ready: true, jobId: job.id });
  setInterval(() => undefined, 1000); // kept alive until the signal
} else {
  const hooks = globalThis.__hooks.appTerminate ?? [];
  const started = Date.now();
  for (const hook of hooks) await hook({ hookData: {}, appHookData: {} });
  out({ jobId: job.id, hooks: hooks.length, elapsedMs: Date.now() - started, runner });
  process.exit(0); // as the worker does after the hooks
}
`;

let azurite: AzuriteQueue;

beforeAll(async () => {
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(
    process.execPath,
    [tsc, '-p', 'tsconfig.build.json', '--outDir', build, '--sourceMap', 'false', '--incremental', 'false'],
    { cwd: root, encoding: 'utf8', timeout: 300_000 },
  );
  if (r.status !== 0) throw new Error(`build failed:\n${r.stdout}${r.stderr}`);
  mkdirSync(path.join(build, 'test-handlers'));
  writeFileSync(path.join(build, 'test-handlers', 'slow.mjs'), SLOW_HANDLER);
  mkdirSync(path.join(build, 'harness'));
  writeFileSync(path.join(build, 'harness', 'host-standin.cjs'), HOST_STANDIN);
  writeFileSync(path.join(build, 'harness', 'run.mjs'), HARNESS);
  azurite = await startAzuriteQueue({ inMemory: true });
}, 360_000);

afterAll(async () => {
  await azurite?.stop();
  rmSync(build, { recursive: true, force: true });
});

async function startApp(mode: 'hook' | 'sigterm') {
  const url = await createTestDatabase(`terminate_${mode}`);
  // A bare, Azure-like environment (no KEEL_TRUST_CLIENT_PRINCIPAL: the Functions host refuses it).
  const child = spawn(
    process.execPath,
    ['--require', path.join(build, 'harness', 'host-standin.cjs'), path.join(build, 'harness', 'run.mjs'), mode],
    {
      cwd: build,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: build,
        KEEL_PG_URL: appUrl(url),
        KEEL_PG_MIGRATE_URL: url,
        AzureWebJobsStorage: azurite.connectionString,
        KEEL_HANDLERS_DIR: path.join(build, 'test-handlers'),
        KEEL_SHUTDOWN_GRACE_MS: String(GRACE_MS),
        KEEL_HEARTBEAT_MS: '500',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const report = async (): Promise<Record<string, unknown>> => {
    const deadline = Date.now() + 60_000;
    while (!/\n@@(\{.*\})\n/.test(output)) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`no report from the app:\n${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return JSON.parse(/\n@@(\{.*\})\n/.exec(output)![1]!) as Record<string, unknown>;
  };
  const row = async (jobId: string) => {
    const pool = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 10_000 });
    try {
      return (
        await pool.query(
          `select state, attempts, last_error, run_at <= now() as due from keel.jobs_hot where id = $1`,
          [jobId],
        )
      ).rows[0] as { state: string; attempts: number; last_error: string | null; due: boolean } | undefined;
    } finally {
      await pool.end();
    }
  };
  return { child, exited, report, row, output: () => output };
}

describe('the built app under the Functions host: scale-in', () => {
  it('appTerminate hands a running job back within the grace period, its attempt not spent', async () => {
    const app = await startApp('hook');
    try {
      const r = await app.report();
      expect((await app.exited).code, app.output()).toBe(0);
      expect(r.hooks).toBe(1); // one hook: processors first, then the telemetry flush
      expect(r.elapsedMs as number).toBeGreaterThanOrEqual(GRACE_MS); // the handler got its grace period first
      expect(r.elapsedMs as number).toBeLessThan(HOST_KILL_MS);
      expect(await app.row(r.jobId as string)).toEqual({
        state: 'pending',
        attempts: 0,
        last_error: 'interrupted by worker shutdown',
        due: true,
      });
      expect(app.output()).toMatch(/stopping 1 job processor/);
    } finally {
      if (app.child.exitCode === null) app.child.kill('SIGKILL');
    }
  }, 120_000);

  it('SIGTERM does the same, then the process ends by the signal', async () => {
    const app = await startApp('sigterm');
    try {
      const r = await app.report();
      const sent = Date.now();
      app.child.kill('SIGTERM');
      const exit = await app.exited;
      const elapsed = Date.now() - sent;
      expect(exit.signal, app.output()).toBe('SIGTERM');
      expect(elapsed).toBeLessThan(HOST_KILL_MS);
      expect(await app.row(r.jobId as string)).toEqual({
        state: 'pending',
        attempts: 0,
        last_error: 'interrupted by worker shutdown',
        due: true,
      });
    } finally {
      if (app.child.exitCode === null && app.child.signalCode === null) app.child.kill('SIGKILL');
    }
  }, 120_000);
});

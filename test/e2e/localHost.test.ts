// End to end through the local host (`npm start`'s scripts/start.ts as a child process): HTTP -> storage queue ->
// job runner -> stats; the host's key check; poison messages; a transfer over HTTP; kill -9 mid-job, restart,
// maintenance rescues the zombie.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { until as untilTrue } from '../support/until.js';
import { freePort } from '../../dev/embeddedPostgres.js';
import { encodeClientPrincipal } from '../../shared/ops/auth.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const OPERATOR = encodeClientPrincipal({ name: 'e2e', roles: ['Keel.Operator'] });

interface Host {
  child: ChildProcess;
  baseUrl: string;
  azurite: string;
  output: string[];
  exited: Promise<number | null>;
}

let dataDir: string;
let env: Record<string, string>;
let host: Host;
let opsKey: string;
let pool: pg.Pool;
let source: pg.Pool;
// A handler and a 1-second schedule in a handlers folder of their own (KEEL_HANDLERS_DIR), before `npm start`:
// nothing else is edited, and the real handlers/ is neither read nor written.
const PROBE_DIR = path.join(ROOT, '.tmp', `e2e-handlers-${process.pid}`);
const PROBE = path.join(PROBE_DIR, 'probe-e2e.ts');

async function startHost(): Promise<Host> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<{ baseUrl: string; azurite: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`host did not start in 60 s:\n${output.join('')}`)), 60_000);
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      output.push(text);
      if (output.length > 400) output.shift();
      buffer += text;
      const m = /KEEL_READY (\{.*\})/.exec(buffer);
      if (m) {
        clearTimeout(timer);
        resolve(JSON.parse(m[1]!));
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`host exited with ${code} before it was ready:\n${output.join('')}`));
    });
  });
  const info = await ready;
  return { child, baseUrl: info.baseUrl, azurite: info.azurite, output, exited };
}

async function stopHost(h: Host | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!h || h.child.exitCode !== null || h.child.signalCode !== null) return;
  h.child.kill(signal);
  const timeout = new Promise((r) => setTimeout(r, 20_000));
  await Promise.race([h.exited, timeout]);
  if (h.child.exitCode === null && h.child.signalCode === null) {
    h.child.kill('SIGKILL');
    await h.exited;
  }
}

async function api(
  method: string,
  route: string,
  opts: { body?: unknown; key?: string | null; operator?: boolean; raw?: string } = {},
) {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const key = opts.key === undefined ? opsKey : opts.key;
  if (key !== null) headers['x-functions-key'] = key;
  if (opts.operator) headers['x-ms-client-principal'] = OPERATOR;
  const res = await fetch(`${host.baseUrl}${route}`, {
    method,
    headers,
    ...(opts.raw !== undefined
      ? { body: opts.raw }
      : opts.body !== undefined
        ? { body: JSON.stringify(opts.body) }
        : {}),
  });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 30_000) =>
  untilTrue(what, probe, {
    timeoutMs,
    pollMs: 50,
    detail: () => `host output:\n${host.output.slice(-40).join('')}`,
  });

// Jobs tables only: the timers legitimately touch nothing else here, but keep the check narrow and exact.
async function jobTables(): Promise<string> {
  const r = await pool.query(`select
      (select count(*) from keel.jobs_hot) || '/' || (select count(*) from keel.jobs_archive) || '/' || (select count(*) from keel.jobs_dlq)
      || '/' || (select coalesce(md5(string_agg(s::text, '|' order by s.queue)), '') from ( -- summed over slots (V014)
           select queue, sum(succeeded), sum(failed), sum(retried), sum(cancelled), sum(zombie), sum(resurrected)
           from keel.stats_summary group by queue) s) as f`);
  return String(r.rows[0].f);
}

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-e2e-'));
  const url = await createTestDatabase('e2e_host');
  const srcUrl = await createTestDatabase('e2e_src');
  const tgtUrl = await createTestDatabase('e2e_tgt');
  source = new pg.Pool({ connectionString: srcUrl, max: 2 });
  await source.query('create table public.parts (id bigint primary key, label text not null)');
  await source.query(`insert into public.parts select n, 'part-' || n from generate_series(1, 400) n`);
  const target = new pg.Client({ connectionString: tgtUrl });
  await target.connect();
  await target.query('create table public.parts (id bigint primary key, label text not null)');
  await target.end();
  pool = new pg.Pool({ connectionString: url, max: 2 });
  env = {
    KEEL_DATA_DIR: dataDir,
    KEEL_HTTP_PORT: String(await freePort()),
    KEEL_AZURITE_PORT: '0',
    KEEL_PG_URL: appUrl(url),
    KEEL_PG_MIGRATE_URL: url,
    KEEL_DEMO_HANDLERS: 'true',
    KEEL_DISPATCH_SCHEDULE: '*/1 * * * * *',
    KEEL_DISPATCH_BUDGET_MS: '800',
    // The probe schedule ticks every second: the scheduler timer must fire as often (its default is a minute).
    KEEL_SCHEDULER_SCHEDULE: '* * * * * *',
    // The dispatcher drains only the zombie test's queue: the other queues' jobs must travel by queue message.
    KEEL_DISPATCH_QUEUES: 'e2e-zombie',
    KEEL_MAINTENANCE_SCHEDULE: '*/1 * * * * *',
    KEEL_TRANSFER_SCHEDULE: '0 0 0 1 1 *',
    KEEL_HEARTBEAT_MS: '300',
    E2E_SRC: srcUrl,
    E2E_TGT: tgtUrl,
    KEEL_TRANSFERS: JSON.stringify([
      {
        name: 'parts',
        source: { engine: 'postgres', connectionSetting: 'E2E_SRC', table: 'public.parts' },
        target: { engine: 'postgres', connectionSetting: 'E2E_TGT', table: 'public.parts' },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns: [
          { source: 'id', target: 'id' },
          { source: 'label', target: 'label' },
        ],
      },
    ]),
  };
  await mkdir(PROBE_DIR, { recursive: true });
  env.KEEL_HANDLERS_DIR = PROBE_DIR;
  await writeFile(
    PROBE,
    `import { defineHandler, defineSchedule, z } from '../../shared/jobs/define.js';\n` +
      `export const probe = defineHandler('probe.e2e', { payload: z.object({ n: z.number() }), queue: 'e2e-probe', async handle() {} });\n` +
      `export const everySecond = defineSchedule('probe-e2e', { cron: '* * * * * *', type: 'probe.e2e', payload: { n: 1 } });\n`,
  );
  host = await startHost();
  opsKey = (await readFile(path.join(dataDir, 'ops-key'), 'utf8')).trim();
}, 120_000);

afterAll(async () => {
  await rm(PROBE_DIR, { recursive: true, force: true });
  await stopHost(host);
  await pool?.end();
  await source?.end();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}, 60_000);

describe('local host', () => {
  it('HTTP enqueue -> queue message -> processed -> visible in stats', async () => {
    const r = await api('POST', '/api/ops/jobs', {
      body: { jobs: [1, 2, 3].map((n) => ({ queue: 'e2e-a', type: 'demo.echo', payload: { n } })) },
    });
    expect(r.status).toBe(201);
    expect(r.json.jobs.every((j: { posted: boolean }) => j.posted)).toBe(true);
    const stats = await until('three jobs succeeded', async () => {
      const s = await api('GET', '/api/ops/stats');
      const q = s.json.queues.find((x: { queue: string }) => x.queue === 'e2e-a');
      return q?.succeeded === 3 ? q : null;
    });
    expect(stats).toMatchObject({ pending: 0, processing: 0, dlq: 0 });
    expect(host.output.join('')).toMatch(/jobRunner information: job \d+: succeeded/);
  });

  it('registers a handler and a schedule added to the handlers folder: listed, validated at enqueue, ticks enqueued and run', async () => {
    const handlers = await api('GET', '/api/ops/handlers');
    const types = handlers.json.items.map((h: { type: string }) => h.type);
    expect(types).toEqual(expect.arrayContaining(['probe.e2e', 'demo.echo']));
    expect(types.filter((t: string) => !t.startsWith('demo.'))).toEqual(['probe.e2e']); // that folder only
    expect(handlers.json.items.find((h: { type: string }) => h.type === 'probe.e2e')).toMatchObject({
      queue: 'e2e-probe',
      source: path.join(path.basename(PROBE_DIR), 'probe-e2e.ts'),
    });
    // npm start lists what it loaded, with the folder, each handler's queue and file, each schedule's job and queue.
    const banner = host.output.join('');
    expect(banner).toContain(`Handlers (from ${path.relative(ROOT, PROBE_DIR)}/):`);
    expect(banner).toMatch(/\n {2}probe\.e2e +queue e2e-probe +e2e-handlers-\d+\/probe-e2e\.ts\n/);
    expect(banner).toMatch(/\n {2}demo\.echo +queue default +\(demo, dev\/\)\n/);
    expect(banner).toMatch(/Schedules:\n {2}probe-e2e +\* \* \* \* \* \* UTC +-> probe\.e2e \(queue e2e-probe\)/);
    const bad = await api('POST', '/api/ops/jobs', { body: { type: 'probe.e2e', payload: { n: 'one' } } });
    expect(bad).toMatchObject({ status: 400, json: { field: 'payload.n' } });
    const done = await until('two scheduled jobs archived', async () => {
      const r = await api('GET', '/api/ops/jobs?location=archive&tag=schedule:probe-e2e&limit=50');
      return r.json.items.length >= 2 ? r.json.items : null;
    });
    const keys = done.map((j: { idempotencyKey: string }) => j.idempotencyKey);
    expect(new Set(keys).size).toBe(keys.length);
    const schedules = await api('GET', '/api/ops/schedules');
    const item = schedules.json.items.find((x: { name: string }) => x.name === 'probe-e2e');
    // Its queue is its handler's (the schedule names none): shown as such, not null.
    expect(item).toMatchObject({ state: 'active', type: 'probe.e2e', cron: '* * * * * *', queue: 'e2e-probe' });
    expect(Date.parse(item.nextTick)).toBeGreaterThan(Date.parse(item.lastTick));
    // Pause it (operator role): no more ticks, so the tests below see a quiet job store.
    expect((await api('POST', '/api/ops/schedules/probe-e2e/pause')).status).toBe(403);
    const paused = await api('POST', '/api/ops/schedules/probe-e2e/pause', { operator: true });
    expect(paused).toMatchObject({ status: 200, json: { state: 'paused', nextTick: null } });
    await until('scheduled jobs drained', async () => {
      const r = await api('GET', '/api/ops/jobs?location=hot&tag=schedule:probe-e2e&limit=50');
      return r.json.items.length === 0;
    });
    const archived = (await api('GET', '/api/ops/jobs?location=archive&tag=schedule:probe-e2e&limit=500')).json.items
      .length;
    await new Promise((r) => setTimeout(r, 2_000));
    expect(
      (await api('GET', '/api/ops/jobs?location=archive&tag=schedule:probe-e2e&limit=500')).json.items.length,
    ).toBe(archived);
  });

  it('enforces the ops key like the Functions host, and the operator role on destructive routes', async () => {
    const before = await jobTables();
    expect((await api('GET', '/api/ops/stats', { key: null })).status).toBe(401);
    expect((await api('GET', '/api/ops/stats', { key: 'wrong-key-wrong-key' })).status).toBe(401);
    expect(
      (await api('POST', '/api/ops/jobs', { key: null, body: { queue: 'e2e-b', type: 'demo.echo' } })).status,
    ).toBe(401);
    const viaCode = await fetch(`${host.baseUrl}/api/ops/health?code=${encodeURIComponent(opsKey)}`);
    expect(viaCode.status).toBe(200);
    expect((await api('GET', '/api/nothing/here')).status).toBe(404);
    expect((await api('GET', '/api/ops/nothing')).json.error).toBe('not_found');
    const purge = await api('POST', '/api/ops/purge', {
      body: { target: 'archive', olderThan: new Date().toISOString(), dryRun: false },
    });
    expect(purge).toMatchObject({ status: 403, json: { error: 'forbidden' } });
    const bad = await api('POST', '/api/ops/jobs', { raw: '{"queue":' });
    expect(bad).toMatchObject({ status: 400, json: { error: 'invalid_json' } });
    const wrong = await api('POST', '/api/ops/jobs', {
      body: { queue: 'e2e-b', type: 'demo.echo', maxAttempts: 'three' },
    });
    expect(wrong).toMatchObject({ status: 400, json: { field: 'maxAttempts' } });
    const big = await api('POST', '/api/ops/jobs', {
      body: { queue: 'e2e-b', type: 'demo.echo', payload: 'x'.repeat(400_000) },
    });
    expect(big.status).toBe(413);
    expect(await jobTables()).toBe(before);
  });

  // The console's key-less path (/api/console-api/ops/...) relays into the same route table; without App Service
  // authentication in front (the local host) every route is refused with 401, never a 500 (under tsx the relay
  // failed to load @azure/functions' HttpRequest: a 500 on every call). Every route of the table, so a new one is
  // covered.
  it("refuses every route of the console's key-less path with 401 without App Service authentication", async () => {
    const { allRoutes } = await import('../../shared/ops/routes.js');
    const last = async () =>
      String((await pool.query(`select coalesce(max(id), 0) as id from keel.ops_audit`)).rows[0].id);
    const from = await last();
    for (const r of allRoutes()) {
      const route = `/api/console-api/ops${r.path.replace(/:(\w+)/g, '1')}`;
      const res = await fetch(`${host.baseUrl}${route}`, {
        method: r.method,
        headers: { 'content-type': 'application/json', 'x-keel-console': '1', 'x-ms-client-principal': OPERATOR },
        ...(r.method === 'GET' ? {} : { body: '{}' }),
      });
      const text = await res.text();
      expect(res.status, `${r.method} ${route}: ${text}`).toBe(401);
      expect(JSON.parse(text), `${r.method} ${route}`).toMatchObject({ error: 'unauthorized' });
    }
    // Each refusal recorded against the route it named (the first of a caller's on a route is never coalesced).
    const rows = await pool.query(
      `select action, outcome, status, channel from keel.ops_audit where id > $1::bigint order by id`,
      [from],
    );
    expect(rows.rows.map((x) => `${x.action} ${x.outcome} ${x.status} ${x.channel}`).sort()).toEqual(
      allRoutes()
        .map((r) => `${r.operationId} refused 401 console`)
        .sort(),
    );
  });

  it('moves malformed and unknown queue messages to the poison queue, changing nothing', async () => {
    const before = await jobTables();
    const svc = QueueServiceClient.fromConnectionString(host.azurite);
    const jobs = svc.getQueueClient('keel-jobs');
    const poison = svc.getQueueClient('keel-jobs-poison');
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    await jobs.sendMessage('this is not base64!');
    await jobs.sendMessage(b64('not json at all'));
    await jobs.sendMessage(b64('{"jobId":"abc"}'));
    await jobs.sendMessage(b64('{"jobId":"424242"}'));
    const peeked = await until('four poison messages', async () => {
      const p = await poison.peekMessages({ numberOfMessages: 32 });
      return p.peekedMessageItems.length >= 4 ? p.peekedMessageItems : null;
    });
    const texts = peeked.map((m) => m.messageText);
    expect(texts).toContain('this is not base64!');
    const reasons = texts
      .filter((t) => t !== 'this is not base64!')
      .map((t) => JSON.parse(Buffer.from(t, 'base64').toString()).reason)
      .sort();
    expect(reasons).toEqual(['malformed', 'malformed', 'unknown_job']);
    expect(host.output.join('')).toMatch(/poison message on keel-jobs \(unknown_job\)/);
    expect(await jobTables()).toBe(before);
    expect(host.child.exitCode).toBeNull();
  });

  it('a transfer started over HTTP commits, and its batch detail says so', async () => {
    const started = await api('POST', '/api/ops/transfers/parts/start', { body: {}, operator: true });
    expect(started.status, JSON.stringify(started.json)).toBe(202);
    const batchId = started.json.batch.batchId as string;
    const detail = await until(
      'the batch to commit',
      async () => {
        const d = await api('GET', `/api/ops/transfers/batches/${batchId}`);
        return d.json.status === 'committed' ? d.json : null;
      },
      45_000,
    );
    expect(detail).toMatchObject({ state: 'committed', appliedCount: 400, rowCount: 400 });
    expect(detail.events.map((e: { event: string }) => e.event)).toEqual(
      expect.arrayContaining(['created', 'manifest_recorded', 'apply_started']),
    );
    const list = await api('GET', '/api/ops/transfers/batches?transfer=parts');
    expect(list.json.items[0]).toMatchObject({ batchId, status: 'committed' });
  });

  it('kill -9 mid-job, restart: maintenance rescues the zombie and the job completes', async () => {
    await api('POST', '/api/ops/jobs', { body: { queue: 'e2e-zombie', type: 'demo.echo' } });
    const patched = await api('PATCH', '/api/ops/queues/e2e-zombie', {
      body: { zombieTimeoutSeconds: 2, zombiePolicy: 'retry' },
      operator: true,
    });
    expect(patched.status, JSON.stringify(patched.json)).toBe(200);
    const slow = await api('POST', '/api/ops/jobs', {
      body: { queue: 'e2e-zombie', type: 'demo.slow', payload: { ms: 5000 } },
    });
    const id = slow.json.id as string;
    await until(
      'the slow job to be processing',
      async () => (await api('GET', `/api/ops/jobs/${id}`)).json.state === 'processing',
    );
    await stopHost(host, 'SIGKILL');
    expect((await pool.query('select state from keel.jobs_hot where id = $1', [id])).rows[0]?.state).toBe('processing');

    host = await startHost();
    const done = await until(
      'the rescued job to finish',
      async () => {
        const j = await api('GET', `/api/ops/jobs/${id}`);
        return j.json.location === 'archive' ? j.json : null;
      },
      45_000,
    );
    expect(done.attempts).toBeGreaterThanOrEqual(2);
    const stats = (await api('GET', '/api/ops/stats')).json.queues.find(
      (q: { queue: string }) => q.queue === 'e2e-zombie',
    );
    expect(stats.zombie).toBeGreaterThanOrEqual(1);
    expect(host.output.join('')).toMatch(/maintenance information: maintenance: .*"retried":1/);
  });
});

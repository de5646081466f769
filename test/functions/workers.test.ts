// The worker registry through the app (issue 30): a runtime registers its processor when it starts working, GET
// /workers lists it with its version, idle or holding jobs, beside lease holders that never registered; a worker
// silent while holding jobs is a warning; maintenance prunes rows past KEEL_WORKER_RETENTION_MS; a graceful stop
// removes the row.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ops } from '../../functions/ops.js';
import { enqueueJobs } from '../../shared/app/enqueue.js';
import { runMaintenancePass, dispatchDueJobs } from '../../shared/app/timerPasses.js';
import { parseSettings } from '../../shared/config/settings.js';
import { context, createTestRuntime, jsonOf, request, type TestRuntime } from './support.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const VERSION = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const quiet = { info() {}, warn() {}, error() {}, debug() {} };

let t: TestRuntime;

beforeAll(async () => {
  t = await createTestRuntime('fn_workers', {
    env: {
      KEEL_WORKER_REFRESH_MS: '60000',
      KEEL_WORKER_RETENTION_MS: '600000',
      KEEL_BUILD_ID: 'build-77',
      KEEL_DISPATCH_QUEUES: 'wk-a,wk-b',
      KEEL_DISPATCH_CONCURRENCY: '12',
    },
  });
});

afterAll(async () => {
  await t?.close();
});

async function call(method: string, p: string) {
  const res = await ops(request(method, p), context('ops'));
  return { status: res.status ?? 200, body: jsonOf(res) };
}

async function registryRow(workerId: string) {
  const r = await t.pool.query('select * from keel.workers where worker_id = $1', [workerId]);
  return r.rows[0] as Record<string, unknown> | undefined;
}

describe('the worker registry', () => {
  it('registers the processor when it starts working, once per refresh interval however many jobs it runs', async () => {
    const rt = t.rt;
    expect(await registryRow(rt.workerId)).toBeUndefined(); // building the runtime wrote nothing
    const jobs = await enqueueJobs(
      rt,
      Array.from({ length: 5 }, () => ({ type: 'demo.echo', queue: 'wk-a', payload: { message: 'x' } })),
      quiet,
    );
    for (const j of jobs) expect(await rt.processor.processById(j.id)).toBe('succeeded');
    await rt.processor.presenceSettled();
    const row = await registryRow(rt.workerId);
    expect(row).toMatchObject({
      app_version: VERSION,
      build_id: 'build-77',
      queues: 'wk-a,wk-b',
      concurrency: 12,
      pid: process.pid,
    });
    // Registered by the first job: five jobs in one interval made one write, so it still says 0 done.
    expect(Number(row!.jobs_done)).toBe(0);
    const seen = row!.last_seen_at as Date;
    // A timer pass within the interval writes nothing either.
    await dispatchDueJobs(rt, quiet);
    await rt.processor.presenceSettled();
    expect(((await registryRow(rt.workerId))!.last_seen_at as Date).getTime()).toBe(seen.getTime());
  });

  it('GET /workers lists the idle live worker with its version, a lease holder that never registered, and the versions', async () => {
    const [job] = await enqueueJobs(t.rt, { type: 'demo.echo', queue: 'wk-held' }, quiet);
    const [claimed] = await t.rt.store.claimNext({ workerId: 'ghost-unregistered', queues: ['wk-held'], limit: 1 });
    expect(claimed!.id).toBe(job!.id);
    try {
      const r = await call('GET', 'workers');
      expect(r.status).toBe(200);
      expect(r.body.thresholds).toMatchObject({ workerSilentMs: 120_000, workerRetentionMs: 600_000 });
      const items = r.body.items as Record<string, unknown>[];
      const me = items.find((w) => w.workerId === t.rt.workerId)!;
      expect(me).toMatchObject({
        status: 'live',
        idle: true,
        jobsHeld: 0,
        appVersion: VERSION,
        buildId: 'build-77',
        queuesServed: ['wk-a', 'wk-b'],
        concurrency: 12,
        pid: process.pid,
      });
      expect(me.lastSeenAgeMs).toBeLessThan(120_000);
      const ghost = items.find((w) => w.workerId === 'ghost-unregistered')!;
      expect(ghost).toMatchObject({ status: 'unregistered', idle: false, jobsHeld: 1, appVersion: null });
      // Lease holders first.
      expect(items.indexOf(ghost)).toBeLessThan(items.indexOf(me));
      expect(r.body.versions).toContainEqual({ appVersion: VERSION, buildId: 'build-77', workers: 1 });
      expect(r.body.counts).toMatchObject({ live: 1, unregistered: 1, idle: 1 });
    } finally {
      await t.rt.store.cancel(job!.id);
    }
  });

  it('warns of a worker silent while it holds jobs, not of a silent idle one; maintenance prunes past the retention', async () => {
    const base = {
      host: 'far-host',
      instanceId: 'inst-far',
      pid: 1,
      appVersion: '0.0.9',
      buildId: null,
      queues: null,
      concurrency: 4,
      startedAt: new Date(),
      jobsDone: 3,
    };
    await t.rt.store.registerWorker({ ...base, workerId: 'silent-holder' });
    await t.rt.store.registerWorker({ ...base, workerId: 'silent-idle' });
    await t.rt.store.registerWorker({ ...base, workerId: 'long-gone' });
    // Their last word, in the past (the owner's connection: the app's role holds no table rights).
    await t.pool.query(
      `update keel.workers set last_seen_at = now() - interval '5 minutes' where worker_id in ('silent-holder', 'silent-idle')`,
    );
    await t.pool.query(
      `update keel.workers set last_seen_at = now() - interval '11 minutes' where worker_id = 'long-gone'`,
    );
    const [job] = await enqueueJobs(t.rt, { type: 'demo.echo', queue: 'wk-silent' }, quiet);
    await t.rt.store.claimNext({ workerId: 'silent-holder', queues: ['wk-silent'], limit: 1 });
    try {
      const w = await call('GET', 'workers');
      const byId = new Map((w.body.items as Record<string, unknown>[]).map((x) => [x.workerId, x]));
      expect(byId.get('silent-holder')).toMatchObject({ status: 'silent', jobsHeld: 1, appVersion: '0.0.9' });
      expect(byId.get('silent-idle')).toMatchObject({ status: 'silent', idle: true });
      // Silent workers are not counted among the live versions.
      expect((w.body.versions as { appVersion: string }[]).map((v) => v.appVersion)).not.toContain('0.0.9');
      const warnings = (await call('GET', 'warnings')).body.items as Record<string, unknown>[];
      const stale = warnings.filter((x) => x.kind === 'stale_worker');
      expect(stale.map((x) => x.workerId)).toEqual(['silent-holder']);
      expect(String(stale[0]!.message)).toMatch(/silent-holder \(far-host, version 0\.0\.9\) holds 1 job/);
      // The maintenance pass's purges prune the row past KEEL_WORKER_RETENTION_MS (10 minutes), only that one.
      const report = await runMaintenancePass(t.rt, quiet);
      expect(report.jobs.workersPruned).toBe(1);
      expect(await registryRow('long-gone')).toBeUndefined();
      expect(await registryRow('silent-idle')).toBeDefined();
    } finally {
      await t.rt.store.cancel(job!.id);
      for (const id of ['silent-holder', 'silent-idle']) await t.rt.store.deregisterWorker(id);
    }
  });

  it('a graceful stop removes the row', async () => {
    const other = await createTestRuntime('fn_workers_stop');
    try {
      const [job] = await enqueueJobs(other.rt, { type: 'demo.echo', queue: 'wk-stop' }, quiet);
      expect(await other.rt.processor.processById(job!.id)).toBe('succeeded');
      await other.rt.processor.presenceSettled();
      const id = other.rt.workerId;
      const rows = async () =>
        (await other.pool.query('select 1 from keel.workers where worker_id = $1', [id])).rowCount;
      expect(await rows()).toBe(1);
      await other.rt.close();
      expect(await rows()).toBe(0);
    } finally {
      await other.pool.end().catch(() => undefined);
      await other.rt.close();
    }
  });

  it('refuses a retention that would prune live workers, naming the setting', () => {
    const base = { KEEL_PG_URL: 'postgres://u:p@127.0.0.1:1/none' };
    expect(() =>
      parseSettings({ ...base, KEEL_WORKER_REFRESH_MS: '600000', KEEL_WORKER_RETENTION_MS: '1200000' }),
    ).toThrow(/KEEL_WORKER_RETENTION_MS: must be more than twice KEEL_WORKER_REFRESH_MS \(600000\)/);
    expect(
      parseSettings({ ...base, KEEL_WORKER_REFRESH_MS: '600000', KEEL_WORKER_RETENTION_MS: '1200001' }),
    ).toMatchObject({
      KEEL_WORKER_REFRESH_MS: 600_000,
      KEEL_WORKER_RETENTION_MS: 1_200_001,
    });
    expect(() => parseSettings({ ...base, KEEL_BUILD_ID: 'b'.repeat(129) })).toThrow(/KEEL_BUILD_ID/);
  });
});

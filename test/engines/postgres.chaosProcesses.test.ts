// Chaos across worker processes (the in-process chaos suite shares one event loop; real hosts do not): several
// worker processes (test/support/chaosWorkerProcess.ts) over one queue, killed with SIGKILL mid-work and replaced,
// every store connection killed now and then, maintenance until the backlog is drained. Safety: every job in exactly
// one place, none finalized twice, counters exact. Liveness: the backlog drains within the window, and probe jobs
// enqueued afterwards complete promptly on the surviving processes. No deadlock on the server.
// Sizes: KEEL_CHAOS_PROCS, KEEL_CHAOS_JOBS, KEEL_CHAOS_KILLS (defaults below keep the file near a minute on 2 cores).
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { PostgresHarness } from './postgres.harness.js';
import { appUrl } from '../support/pg.js';
import { seededRandom } from '../support/seededRandom.js';
import { runMaintenance } from '../../shared/jobs/maintenance.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PROCS = Number(process.env.KEEL_CHAOS_PROCS ?? 3);
const JOBS = Number(process.env.KEEL_CHAOS_JOBS ?? 4000);
const KILLS = Number(process.env.KEEL_CHAOS_KILLS ?? 4);
const PROBES = 50;
const SETTLE_MS = 180_000;
const PROBE_MS = 30_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it(`${PROCS} worker processes, ${JOBS} jobs, ${KILLS} SIGKILLs: drained, probes run promptly, every job once, no deadlock`, async () => {
  const random = seededRandom('chaos processes');
  const h = new PostgresHarness();
  const children = new Set<ChildProcess>();
  try {
    const control = await h.createStore({ poolSize: 4 });
    const queue = `chaosp-${Date.now()}`;
    await control.updateQueue(queue, { zombieTimeoutSeconds: 2, zombiePolicy: 'retry', maxAttempts: 8 });
    const finals = new Map<string, number>();
    const start = () =>
      new Promise<void>((resolve, reject) => {
        const c = spawn(process.execPath, ['--import', 'tsx', 'test/support/chaosWorkerProcess.ts'], {
          cwd: ROOT,
          env: { ...process.env, CHAOS_URL: appUrl(h.url), CHAOS_QUEUE: queue, CHAOS_SEED: String(random.int(0, 1e9)) },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.add(c);
        let buf = '';
        let err = '';
        c.stdout!.on('data', (d: Buffer) => {
          buf += d.toString();
          const lines = buf.split('\n');
          buf = lines.pop()!;
          for (const l of lines) {
            if (l === 'READY') resolve();
            else if (l.startsWith('F ')) finals.set(l.slice(2), (finals.get(l.slice(2)) ?? 0) + 1);
          }
        });
        c.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
        c.once('exit', (code, signal) => {
          children.delete(c);
          reject(new Error(`worker process exited (${code ?? signal}) before it was ready: ${err}`));
        });
      });
    for (let i = 0; i < PROCS; i++) await start();

    const ids: string[] = [];
    for (let i = 0; i < JOBS; i += 1000) {
      const batch = Array.from({ length: Math.min(1000, JOBS - i) }, (_, k) => ({
        queue,
        type: 'chaos',
        payload: { n: i + k },
      }));
      ids.push(...(await control.enqueueMany(batch)).map((r) => r.id));
    }
    // Chaos: SIGKILL a random process (replaced at once), every other time also every store connection.
    for (let k = 0; k < KILLS; k++) {
      await sleep(500 + random.int(0, 1000));
      const victim = random.pick([...children]);
      victim.kill('SIGKILL');
      if (k % 2 === 1) await h.killStoreConnections();
      await start();
    }
    const settleEnd = Date.now() + SETTLE_MS;
    let hot = await h.countRows('hot', queue);
    while (hot > 0 && Date.now() < settleEnd) {
      await runMaintenance(control, { rescueBatch: 200 }).catch(() => undefined);
      await sleep(300);
      hot = await h.countRows('hot', queue);
    }
    const left = await h.hotTruth(queue);
    expect(
      hot,
      `liveness: ${hot} jobs still hot after ${SETTLE_MS / 1000} s (pending ${left.pending}, due ${left.due}, fetched ${left.fetched}, processing ${left.processing})`,
    ).toBe(0);

    // Probes after the chaos: the surviving processes run them without maintenance's help.
    const probeStart = Date.now();
    ids.push(
      ...(
        await control.enqueueMany(
          Array.from({ length: PROBES }, (_, k) => ({ queue, type: 'chaos', payload: { probe: true, k } })),
        )
      ).map((r) => r.id),
    );
    while ((await h.countRows('hot', queue)) > 0 && Date.now() - probeStart < PROBE_MS) await sleep(50);
    expect(await h.countRows('hot', queue), `probes not done within ${PROBE_MS / 1000} s`).toBe(0);

    await Promise.all(
      [...children].map(
        (c) =>
          new Promise<void>((resolve) => {
            c.once('exit', () => resolve());
            c.kill('SIGTERM');
          }),
      ),
    );
    const archive = await h.countRows('archive', queue);
    const dlq = await h.countRows('dlq', queue);
    const stats = await h.statsRow(queue);
    const read = (await control.stats()).find((s) => s.queue === queue);
    await control.close();
    const deadlocks = await h.deadlocks();
    expect.soft(deadlocks, 'deadlocks during the chaos run').toEqual([]);
    expect(archive + dlq).toBe(JOBS + PROBES);
    const archived = new Set(await h.ids('archive'));
    const dead = new Set(await h.ids('dlq'));
    for (const id of ids) expect(Number(archived.has(id)) + Number(dead.has(id))).toBe(1);
    expect([...finals.entries()].filter(([, n]) => n > 1)).toEqual([]);
    expect(stats.succeeded).toBe(archive);
    expect(stats.failed).toBe(dlq);
    expect(read).toMatchObject({ pending: 0, due: 0, fetched: 0, processing: 0, waiting: 0, dlq, succeeded: archive });
  } finally {
    for (const c of children) c.kill('SIGKILL');
    await h.close();
  }
}, 300_000);

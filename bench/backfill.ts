// Backfill benchmark (issue 26): a table of --rows rows (default 10,000,000) moved by one transfer with the default
// settings (batchSize 100,000, KEEL_TRANSFER_CATCHUP_ROWS, KEEL_TRANSFER_CATCHUP_MS), as the Functions app runs it:
// ONE transfer timer tick (functions/transferTimer.ts), then only the stage and apply queue steps
// (functions/transferStage.ts, transferApply.ts) delivering what they post, in order, until nothing is posted. No
// further tick: catch-up alone must carry the table to its end. The storage queue is an in-memory recorder (the
// host's delivery is not what is measured); a message posted with a delay (a retry) is reported and delivered.
// The app runs in a child process, so its peak RSS is its own. Checks at the end: the target holds every row, every
// batch committed, every batch after the first created by catch-up, the source and target tables equal (count and
// a keel-v1 checksum of both computed by the server).
// Usage: npx tsx bench/backfill.ts [--rows 10000000] [--pg-url URL] (or KEEL_BENCH_PG_URL; embedded by default)
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Timer } from '@azure/functions';
import { benchPgUrl, describeServer, openBenchServer } from './server.js';
import { withClient } from '../dev/pgAdmin.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');

const TABLE_DDL = (name: string) => `create table ${name} (
  id bigint primary key,
  customer text not null,
  amount numeric(12,2),
  placed_at timestamptz not null,
  flag boolean not null,
  note varchar(200))`;
const COLUMNS = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note'];

interface ChildArgs {
  sourceUrl: string;
  targetUrl: string;
  controlUrl: string;
}

// Runs in the child: the app's runtime with the default settings, one timer tick, then the queue steps.
async function appChild(a: ChildArgs): Promise<Record<string, unknown>> {
  const { parseSettings } = await import('../shared/config/settings.js');
  const { createRuntime, setRuntime } = await import('../shared/app/runtime.js');
  const { InvocationContext } = await import('../dev/azureFunctions.js');
  const { transferTimer } = await import('../functions/transferTimer.js');
  const { transferStage } = await import('../functions/transferStage.js');
  const { transferApply } = await import('../functions/transferApply.js');
  const env: Record<string, string> = {
    KEEL_PG_URL: a.controlUrl,
    KEEL_PG_MIGRATE_URL: a.controlUrl,
    BENCH_SOURCE: a.sourceUrl,
    BENCH_TARGET: a.targetUrl,
    KEEL_SCHEDULED_TRANSFERS: '*',
    // No batchSize, chunkSize or catch-up setting: the defaults.
    KEEL_TRANSFERS: JSON.stringify([
      {
        name: 'backfill',
        source: { engine: 'postgres', connectionSetting: 'BENCH_SOURCE', table: 'public.orders' },
        target: { engine: 'postgres', connectionSetting: 'BENCH_TARGET', table: 'public.orders' },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns: COLUMNS.map((c) => ({ source: c, target: c })),
      },
    ]),
  };
  const settings = parseSettings(env);
  const sent: { queue: string; message: unknown; delaySeconds: number }[] = [];
  const queues = {
    async send(queue: string, message: unknown, opts: { delaySeconds?: number } = {}) {
      sent.push({ queue, message: JSON.parse(JSON.stringify(message)), delaySeconds: opts.delaySeconds ?? 0 });
    },
    async sendPoison(queue: string, entry: unknown) {
      throw new Error(`poisoned on ${queue}: ${JSON.stringify(entry)}`);
    },
    async ping() {
      return true;
    },
  };
  const rt = await createRuntime(settings, { queues, env });
  setRuntime(rt);
  const problems: string[] = [];
  const ctx = (functionName: string) =>
    new InvocationContext({
      invocationId: `bench-${Math.random().toString(36).slice(2)}`,
      functionName,
      logHandler: (level: string, ...args: unknown[]) => {
        if (level === 'error' || level === 'warning') problems.push(`${functionName}: ${args.map(String).join(' ')}`);
      },
    });
  const timer: Timer = {
    isPastDue: false,
    schedule: { adjustForDST: true },
    scheduleStatus: { last: '', next: '', lastUpdated: '' },
  };
  const started = performance.now();
  await transferTimer(timer, ctx('transferTimer'));
  let delivered = 0;
  let delayed = 0;
  for (;;) {
    const m = sent.shift();
    if (!m) break;
    if (m.delaySeconds > 0) delayed++;
    delivered++;
    if (m.queue === settings.KEEL_TRANSFER_STAGE_QUEUE) await transferStage(m.message, ctx('transferStage'));
    else if (m.queue === settings.KEEL_TRANSFER_APPLY_QUEUE) await transferApply(m.message, ctx('transferApply'));
    else throw new Error(`unexpected queue ${m.queue}`);
  }
  const ms = performance.now() - started;
  const batches = await rt.transfers!.listBatches({ transfer: 'backfill', limit: 1000 });
  const committed = batches.filter((b) => b.state === 'committed');
  const rows = committed.reduce((n, b) => n + (b.appliedCount ?? 0), 0);
  const result = {
    ms: Math.round(ms),
    rows,
    rowsPerSec: Math.round(rows / (ms / 1000)),
    batches: batches.length,
    committedBatches: committed.length,
    timerTicks: 1,
    messagesDelivered: delivered,
    delayedMessages: delayed,
    problems: problems.slice(0, 10),
    settings: {
      batchSize: rt.transfers!.listTransfers()[0]!.batchSize,
      KEEL_TRANSFER_CATCHUP_ROWS: settings.KEEL_TRANSFER_CATCHUP_ROWS,
      KEEL_TRANSFER_CATCHUP_MS: settings.KEEL_TRANSFER_CATCHUP_MS,
    },
    peakRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
  };
  setRuntime(undefined);
  await rt.close();
  return result;
}

function runChild(args: ChildArgs): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', JSON.stringify(args)],
      { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`backfill child exited ${code}: ${out}`));
      resolve(JSON.parse(out.trim().split('\n').pop() ?? ''));
    });
  });
}

const TABLE_CHECKSUM = `select count(*)::bigint as n,
  sum(('x' || left(md5(row(id, customer, amount, placed_at, flag, note)::text), 16))::bit(64)::bigint)::text as h
  from public.orders`;

export async function runBackfillBench(opts: {
  rows: number;
  pgUrl?: string;
  log?: (s: string) => void;
}): Promise<Record<string, unknown>> {
  const log = opts.log ?? ((s: string) => process.stderr.write(`${s}\n`));
  const server = await openBenchServer({ label: 'backfill', pgUrl: opts.pgUrl, fastUnsafe: true });
  log(describeServer(server.info));
  try {
    const sourceUrl = await server.createDatabase('backfill_source');
    const targetUrl = await server.createDatabase('backfill_target');
    const controlUrl = await server.createDatabase('backfill_control');
    log(`backfill bench: generating ${opts.rows} source rows`);
    const genStarted = performance.now();
    await withClient(sourceUrl, async (c) => {
      await c.query(TABLE_DDL('public.orders'));
      await c.query(
        `insert into public.orders select n, 'customer-' || (n % 9973), round((n % 100000) * 1.37, 2), timestamptz '2026-01-01' + n * interval '1 second', n % 2 = 0,
                case when n % 7 = 0 then null else 'order note ' || n end
           from generate_series(1, $1::bigint) n`,
        [opts.rows],
      );
      await c.query('vacuum analyze public.orders');
    });
    await withClient(targetUrl, (c) => c.query(TABLE_DDL('public.orders')));
    log(
      `backfill bench: source ready in ${Math.round((performance.now() - genStarted) / 1000)} s; one timer tick, then catch-up`,
    );
    const r = await runChild({ sourceUrl, targetUrl, controlUrl });
    log(`backfill bench: ${JSON.stringify(r)}`);
    const [src, tgt] = await Promise.all([
      withClient(sourceUrl, async (c) => (await c.query(TABLE_CHECKSUM)).rows[0]),
      withClient(targetUrl, async (c) => (await c.query(TABLE_CHECKSUM)).rows[0]),
    ]);
    const equal = String(src.n) === String(tgt.n) && src.h === tgt.h;
    if (!equal) throw new Error(`source and target differ: ${JSON.stringify({ src, tgt })}`);
    if (r.rows !== opts.rows) throw new Error(`${String(r.rows)} rows committed, ${opts.rows} at the source`);
    return {
      benchmark: 'transfer backfill: one timer tick, then catch-up alone, default settings',
      rows: opts.rows,
      machine: { cpus: os.cpus().length, node: process.version, loadAverage: os.loadavg() },
      server: server.info,
      ...r,
      sourceEqualsTarget: equal,
    };
  } finally {
    await server.close();
  }
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const argv = process.argv.slice(2);
  if (argv[0] === '--child') {
    appChild(JSON.parse(argv[1]!) as ChildArgs)
      .then((r) => {
        process.stdout.write(`${JSON.stringify(r)}\n`);
        process.exit(0);
      })
      .catch((err) => {
        process.stderr.write(`${(err as Error).stack}\n`);
        process.exit(1);
      });
  } else {
    const arg = (name: string) => {
      const i = argv.indexOf(name);
      return i >= 0 ? argv[i + 1] : undefined;
    };
    runBackfillBench({ rows: Number(arg('--rows') ?? 10_000_000), pgUrl: benchPgUrl({ 'pg-url': arg('--pg-url') }) })
      .then((r) => {
        process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
        process.exit(0);
      })
      .catch((err) => {
        process.stderr.write(`${(err as Error).stack}\n`);
        process.exit(1);
      });
  }
}

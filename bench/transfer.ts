// Transfer benchmark, side by side in one run on one server: rows/s of a PostgreSQL -> PostgreSQL transfer through
// Keel's full lifecycle (extract with manifest, then the direct apply as the app runs it, or stage with verification,
// apply, purge) in one batch and in 10, and of the row path (the canonical text feed a SQL Server source and an
// Oracle target use: no bulk stream, keel-v1, rows as canonical text in chunks), against the machine's physical
// limit (COPY ... TO STDOUT piped into COPY ... FROM STDIN, measured again before every Keel run; a CHECKPOINT
// before each measured run) and a naive row-by-row insert loop (on a sample, extrapolated). Every Keel run is in a
// child process, so its peak RSS is its own. Usage: npx tsx bench/transfer.ts --rows 1000000 [--pg-url URL] (a
// running server to use instead of the embedded one; or KEEL_BENCH_PG_URL) [--only bulk,bulk-staged,rows,rows-node,rows-once]
// [--batches 1,10] [--naive-sample N] (rows of the naive loop, default 20,000) [--read-ahead on,after,off] (the next
// window's manifest read ahead beside a COPY, TransferService's readAhead: `on` beside the COPY; `after` (the default,
// DEFAULT_READ_AHEAD): read once the COPY has sent its last row, readAhead 'afterCopy'; several = each run once per value, back to back). KEEL_BENCH_TIMELINE=1: every traced phase's start and end per batch in the output.
import pg from 'pg';
import { to as copyTo, from as copyFrom } from 'pg-copy-streams';
import { pipeline } from 'node:stream/promises';
import { spawn } from 'node:child_process';
import os from 'node:os';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchPgUrl, describeServer, localPostmaster, openBenchServer, postgresCpuSeconds } from './server.js';
import { migrateJournal } from '../test/support/journalMigrations.js';
import { PostgresTransferJournal } from '../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../shared/engines/postgres/transferTarget.js';
import { parseTransfers } from '../shared/transfer/config.js';
import { transferEngineRules } from '../shared/engines/registry.js';
import { migratePostgresTarget } from '../shared/engines/postgres/transferEndpoints.js';
import { DEFAULT_READ_AHEAD, TransferService } from '../shared/transfer/service.js';
import { withClient } from '../dev/pgAdmin.js';
import { ChecksumAccumulator } from '../shared/transfer/checksum.js';
import type { SourceAdapter } from '../shared/transfer/types.js';

const TRANSFER_RULES = transferEngineRules();

type ReadAhead = boolean | 'afterCopy'; // TransferService's readAhead
// A run's name and title say its read ahead only when it is not the service's default.
const readAheadLabel = (r: ReadAhead, beside: string, after: string, off: string): string =>
  r === DEFAULT_READ_AHEAD ? '' : r === true ? beside : r ? after : off;

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');

export const TABLE_DDL = (name: string) => `create table ${name} (
  id bigint primary key,
  customer text not null,
  amount numeric(12,2),
  placed_at timestamptz not null,
  flag boolean not null,
  note varchar(200))`;

// The bench's source rows ($1 of them).
export const ORDERS_FILL = `insert into public.orders select n, 'customer-' || (n % 9973), round((n % 100000) * 1.37, 2), timestamptz '2026-01-01' + n * interval '1 second', n % 2 = 0,
                case when n % 7 = 0 then null else 'order note ' || n end
           from generate_series(1, $1::bigint) n`;

// How the source is offered to the target:
// - bulk: as the app runs PostgreSQL -> PostgreSQL (COPY stream, the engine's own checksum, direct apply: each key
//   window written into the table in the one target transaction that verifies it and writes its completion row);
// - bulk-staged: the same without direct apply (staged, verified, then applied by keel_transfer.apply_batch), as a
//   non-PostgreSQL target or a window with existing rows runs;
// - rows: the row path, as the Oracle target sees every source: canonical rows in chunks, keel-v1, the manifest
//   computed by the source's server;
// - rows-node: the row path with the manifest as a SQL Server source computes it when it cannot read a snapshot: the
//   window streamed into Node and checksummed there (shared/engines/sqlserver/transferSource.ts), then streamed
//   again for the staging;
// - rows-once: the row path with one source read (docs/transfer.md "One source read", what a SQL Server source
//   under READ_COMMITTED_SNAPSHOT or SNAPSHOT does): the rows checksummed in Node as they stream into the staging,
//   the manifest recorded when they end.
// Every row mode drops the COPY text a PostgreSQL source's chunks carry (checksum.ts COPY_TEXT): a SQL Server source
// has none, so the target formats every row, as it would for that source.
export type BenchMode = 'bulk' | 'bulk-staged' | 'rows' | 'rows-node' | 'rows-once';
export const BENCH_MODES: readonly BenchMode[] = ['bulk', 'bulk-staged', 'rows', 'rows-node', 'rows-once'];

interface ChildArgs {
  sourceUrl: string;
  targetUrl: string;
  controlUrl: string;
  batchSize: number;
  table: string;
  mode: BenchMode;
  readAhead: ReadAhead;
  postmasterPid: number | null; // the bench server's postmaster when it is a local process (KEEL_BENCH_CPU)
}

// KEEL_BENCH_CPU=1 (with a local server): every 10 ms, the CPU the server's processes (the postmaster's children
// alive at the sample: backends, parallel workers, autovacuum, ...; /proc/<pid>/schedstat, ns) and this process used
// since the sample before. Per batch it gives the CPU beside the wall time, and so the core time left idle (cores x
// wall - CPU; on a quiet machine, time where fewer processes could run than there are cores); per run, the CPU of
// the server's processes by kind (what autovacuum or a checkpoint took beside the transfer). A process that exits
// between two samples loses its last interval (< 10 ms).
function cpuSampler(postmasterPid: number): {
  stop: () => { samples: [number, number, number][]; byKind: Record<string, number> };
} {
  const samples: [number, number, number][] = []; // [ms since start, server ms, node ms] of the interval ending then
  const seen = new Map<number, { ns: number; kind: string }>();
  const byKind: Record<string, number> = {};
  const kindOf = (pid: string) => {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmd.startsWith('postgres:')) return 'starting';
      if (/parallel worker/.test(cmd)) return 'parallel worker';
      if (/autovacuum/.test(cmd)) return 'autovacuum';
      // a backend's title: postgres: [cluster: ]user database host(port) ...; the bench's databases end in their role
      const db = /^postgres: (?:\S+: )?\S+ (\S+) (?:\d+\.\d+\.\d+\.\d+\(\d+\)|\[local\])/.exec(cmd)?.[1];
      if (db !== undefined) return `backend ${/(source|target|control)/.exec(db)?.[1] ?? 'other'}`;
      return (
        cmd
          .replace(/^postgres: (\S+: )?/, '')
          .trim()
          .split(' ')[0] ?? 'other'
      );
    } catch {
      return 'other';
    }
  };
  const read = (): number => {
    let ns = 0;
    let kids: string[] = [];
    try {
      kids = readFileSync(`/proc/${postmasterPid}/task/${postmasterPid}/children`, 'utf8').trim().split(' ');
    } catch {
      return 0;
    }
    for (const k of kids) {
      if (!k) continue;
      try {
        const now = Number(readFileSync(`/proc/${k}/schedstat`, 'utf8').split(' ')[0]);
        const pid = Number(k);
        const was = seen.get(pid) ?? { ns: now, kind: 'starting' };
        // A process's title is set once it has started: read (again) until it is.
        const kind = was.kind === 'starting' ? kindOf(k) : was.kind;
        ns += now - was.ns;
        byKind[kind] = (byKind[kind] ?? 0) + (now - was.ns) / 1e6;
        seen.set(pid, { ns: now, kind });
      } catch {
        // exited meanwhile
      }
    }
    return ns / 1e6;
  };
  read();
  const t0 = performance.now();
  let node0 = process.cpuUsage();
  const timer = setInterval(() => {
    const server = read();
    const node = process.cpuUsage(node0);
    node0 = process.cpuUsage();
    samples.push([performance.now() - t0, server, (node.user + node.system) / 1000]);
  }, 10);
  return {
    stop: () => {
      clearInterval(timer);
      for (const k of Object.keys(byKind)) byKind[k] = Math.round(byKind[k]!);
      return { samples, byKind };
    },
  };
}

function asMode(source: SourceAdapter, mode: BenchMode): SourceAdapter {
  if (mode === 'bulk' || mode === 'bulk-staged') return source;
  return {
    engine: source.engine,
    readSchema: () => source.readSchema(),
    nextWindow: (low, maxRows) => source.nextWindow(low, maxRows),
    checksumAlgorithms: async () => ['keel-v1'],
    manifest:
      mode !== 'rows-node'
        ? (w, schema, algorithm) => source.manifest(w, schema, algorithm)
        : async (w, schema) => {
            const acc = new ChecksumAccumulator();
            for await (const chunk of source.streamRows(w, schema, 5000)) for (const row of chunk) acc.add(row);
            return { rowCount: acc.count, checksum: acc.checksum };
          },
    streamRows: async function* (w, schema, chunkSize, facts) {
      for await (const chunk of source.streamRows(w, schema, chunkSize, facts)) yield chunk.slice(); // no COPY_TEXT
    },
    ...(mode === 'rows-once' ? { readsSnapshot: async () => true } : {}),
    close: () => source.close(),
  };
}

// Times every method call of an adapter or the journal into `trace` (phase `<label>.<method>`), so the per-batch
// costs the adapters do not trace themselves (journal moves, catalog reads, windows) show in the breakdown.
function timed<T extends object>(label: string, o: T, trace: (phase: string, ms: number) => void): T {
  return new Proxy(o, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function' || typeof prop !== 'string' || prop === 'constructor') return v;
      return (...args: unknown[]) => {
        const t0 = performance.now();
        const r = (v as (...a: unknown[]) => unknown).apply(target, args);
        if (r instanceof Promise) return r.finally(() => trace(`${label}.${prop}`, performance.now() - t0));
        trace(`${label}.${prop}`, performance.now() - t0);
        return r;
      };
    },
  });
}

// Runs in the child: the whole lifecycle for every row, batch after batch.
async function keelChild(a: ChildArgs): Promise<Record<string, unknown>> {
  const source = new pg.Pool({ connectionString: a.sourceUrl, max: 2 });
  const target = new pg.Pool({ connectionString: a.targetUrl, max: 2 });
  const control = new pg.Pool({ connectionString: a.controlUrl, max: 2 });
  const [t] = parseTransfers(
    [
      {
        name: `bench_${a.table}`,
        source: { engine: 'postgres', connectionSetting: 'BENCH_SOURCE', table: 'public.orders' },
        target: { engine: 'postgres', connectionSetting: 'BENCH_TARGET', table: `public.${a.table}` },
        keyColumns: ['id'],
        boundary: { column: 'id', kind: 'key' },
        columns: ['id', 'customer', 'amount', 'placed_at', 'flag', 'note'].map((c) => ({ source: c, target: c })),
        batchSize: a.batchSize,
      },
    ],
    TRANSFER_RULES,
  );
  const breakdownMs: Record<string, number> = {};
  // Every traced phase with its end (ms since the first batch started): KEEL_BENCH_TIMELINE=1 returns them, to see
  // where one batch waits on the next.
  const timeline: [string, number, number][] = [];
  let t00 = performance.now();
  const trace = (phase: string, ms: number) => {
    breakdownMs[phase] = Math.round((breakdownMs[phase] ?? 0) + ms);
    const end = performance.now() - t00;
    timeline.push([phase, Math.round((end - ms) * 10) / 10, Math.round(end * 10) / 10]);
  };
  // Statements sent per pool (source, target, journal): the round trips a batch costs, which the load does not move.
  const statements = { source: 0, target: 0, control: 0 };
  for (const [name, pool] of [
    ['source', source],
    ['target', target],
    ['control', control],
  ] as const) {
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        statements[name]++;
        if (process.env.KEEL_BENCH_STATEMENTS) {
          const q = args[0] as string | { text?: string } | undefined;
          const text = typeof q === 'string' ? q : (q?.text ?? q?.constructor?.name ?? '?');
          process.stderr.write(
            `${(performance.now() - t00).toFixed(1)} ${name}: ${String(text).replace(/\s+/g, ' ').slice(0, 110)}\n`,
          );
        }
        return query(...args);
      };
    });
  }
  const svc = new TransferService({
    journal: timed('journal', new PostgresTransferJournal(control), trace),
    directApply: a.mode !== 'bulk-staged', // as composeTransferService (the app) sets it
    readAhead: a.readAhead,
    transfers: [t!],
    connect: (tc) => ({
      source: timed('source', asMode(new PostgresTransferSource(tc, source, { trace }), a.mode), trace),
      target: timed('target', new PostgresTransferTarget(tc, target, { trace }), trace),
    }),
  });
  const phases = { extractMs: 0, stageAndApplyMs: 0 };
  let rows = 0;
  let batches = 0;
  const cpu0 = process.cpuUsage();
  const mainCpu0 = process.threadCpuUsage();
  const started = performance.now();
  t00 = started;
  timeline.length = 0;
  const sampler = process.env.KEEL_BENCH_CPU && a.postmasterPid !== null ? cpuSampler(a.postmasterPid) : null;
  for (;;) {
    const t0 = performance.now();
    const b = await svc.tryCreateBatch(t!.name);
    if (!b) break;
    const t1 = performance.now();
    const v = await svc.run(b.batchId);
    const t2 = performance.now();
    if (v.state !== 'committed') throw new Error(`batch ${b.batchId} ended ${v.state}: ${v.lastError}`);
    phases.extractMs += t1 - t0;
    phases.stageAndApplyMs += t2 - t1;
    rows += v.appliedCount ?? 0;
    batches++;
    timeline.push([`batch ${batches}`, Math.round((t0 - started) * 10) / 10, Math.round((t2 - started) * 10) / 10]);
  }
  const ms = performance.now() - started;
  const cpuSamples = sampler?.stop();
  const cpu = process.cpuUsage(cpu0);
  const mainCpu = process.threadCpuUsage(mainCpu0);
  await svc.close();
  await Promise.all([source.end(), target.end(), control.end()]);
  return {
    rows,
    batches,
    ms: Math.round(ms),
    rowsPerSec: Math.round(rows / (ms / 1000)),
    extractMs: Math.round(phases.extractMs),
    stageAndApplyMs: Math.round(phases.stageAndApplyMs),
    breakdownMs,
    nodeCpuMs: Math.round((cpu.user + cpu.system) / 1000),
    // of it, the main thread's (the rest: worker threads, the garbage collector's helper threads, libuv's pool)
    nodeMainThreadCpuMs: Math.round((mainCpu.user + mainCpu.system) / 1000),
    peakRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
    statements,
    ...(process.env.KEEL_BENCH_TIMELINE ? { timeline } : {}),
    ...(cpuSamples
      ? {
          cpuSamples: cpuSamples.samples.map((x) => x.map((v) => Math.round(v * 10) / 10)),
          serverCpuMsByKind: cpuSamples.byKind,
        }
      : {}),
  };
}

// CPU of the server's processes that ended (its backends and parallel workers, reaped by the postmaster: cutime and
// cstime of /proc/<postmaster>/stat), in ms; null when the server is not a local process this user can read. Read
// around a run whose connections have closed, it is the server CPU the run cost, comparable between runs on a loaded
// machine where wall time is not.
function serverCpuMs(postmaster: { pid: number; clusterName: string } | null): number | null {
  if (postmaster === null) return null;
  const exited = postgresCpuSeconds(postmaster).exited;
  return exited === undefined ? null : Math.round(exited * 1000);
}

function runChild(args: ChildArgs): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        // e.g. KEEL_BENCH_CHILD_NODE_OPTIONS="--cpu-prof --cpu-prof-dir=/tmp/prof" to profile the Keel child
        ...(process.env.KEEL_BENCH_CHILD_NODE_OPTIONS?.split(' ').filter(Boolean) ?? []),
        '--import',
        'tsx',
        fileURLToPath(import.meta.url),
        '--child',
        JSON.stringify(args),
      ],
      {
        cwd: repo,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`keel bench child exited ${code}: ${out}`));
      const line = out.trim().split('\n').pop() ?? '';
      resolve(JSON.parse(line));
    });
  });
}

export async function runTransferBench(opts: {
  rows: number;
  batches?: number[]; // batch counts per mode (default 1 and 10)
  readAhead?: ReadAhead[]; // the runs with TransferService's readAhead on, after the COPY and/or off (default: the service's default only)
  modes?: BenchMode[]; // default every mode
  naiveSample?: number;
  pgUrl?: string; // an external server (bench/server.ts); absent: the embedded one, fsync off
  log?: (s: string) => void;
}): Promise<Record<string, unknown>> {
  const log = opts.log ?? ((s: string) => process.stderr.write(`${s}\n`));
  const rows = opts.rows;
  const modes = opts.modes ?? [...BENCH_MODES];
  const batchCounts = opts.batches ?? [1, 10];
  const runs = modes.flatMap((mode) =>
    batchCounts.flatMap((batches) =>
      (opts.readAhead ?? [DEFAULT_READ_AHEAD]).map((readAhead) => ({ mode, batches, readAhead })),
    ),
  );
  const tableOf = (r: (typeof runs)[number]) =>
    `keel_${r.mode.replace('-', '_')}_${r.batches}${readAheadLabel(r.readAhead, '_beside_copy', '_after_copy', '_no_ahead')}`;
  const server = await openBenchServer({ label: 'transfer', pgUrl: opts.pgUrl, fastUnsafe: true });
  log(describeServer(server.info));
  try {
    const sourceUrl = await server.createDatabase('transfer_source');
    const targetUrl = await server.createDatabase('transfer_target');
    const controlUrl = await server.createDatabase('transfer_control');
    log(`transfer bench: generating ${rows} source rows`);
    await withClient(sourceUrl, async (c) => {
      await c.query(TABLE_DDL('public.orders'));
      await c.query(ORDERS_FILL, [rows]);
      await c.query('vacuum analyze public.orders');
    });
    await withClient(targetUrl, async (c) => {
      await c.query(TABLE_DDL('public.naive'));
      for (const r of runs) await c.query(TABLE_DDL(`public.${tableOf(r)}`));
    });
    const controlPool = new pg.Pool({ connectionString: controlUrl, max: 1 });
    await migrateJournal(controlPool, 'keel.transfer_bench_migrations');
    await controlPool.end();
    const targetPool = new pg.Pool({ connectionString: targetUrl, max: 1 });
    await migratePostgresTarget(targetPool);
    await targetPool.end();

    // A CHECKPOINT before every measured run: the WAL of the runs before it (1M rows each) otherwise triggers a
    // checkpoint in the middle of whichever run comes next, and its I/O lands on that run alone.
    const checkpoint = () => withClient(server.adminUrl, async (c) => void (await c.query('checkpoint')));
    // 1. The physical limit: COPY TO STDOUT piped into COPY FROM STDIN (same target table definition), measured
    // again right before every Keel run (the machine's load drifts); ratios are to the median of these runs.
    const postmaster = await localPostmaster(server.adminUrl);
    // The server CPU of what ran since `from` (connections closed; the postmaster reaps their processes at once).
    const serverCpuSince = async (from: number | null) => {
      await new Promise((r) => setTimeout(r, 300));
      const now = serverCpuMs(postmaster);
      return from === null || now === null ? null : now - from;
    };
    let pipes = 0;
    const copyPipe = async () => {
      const table = `public.copy_pipe_${pipes++}`;
      await withClient(targetUrl, async (c) => void (await c.query(TABLE_DDL(table))));
      await checkpoint();
      const src = new pg.Client({ connectionString: sourceUrl });
      const dst = new pg.Client({ connectionString: targetUrl });
      const cpu0 = serverCpuMs(postmaster);
      const node0 = process.cpuUsage();
      await src.connect();
      await dst.connect();
      const t0 = performance.now();
      await pipeline(
        src.query(copyTo('copy public.orders to stdout')),
        dst.query(copyFrom(`copy ${table} from stdin`)),
      );
      const ms = performance.now() - t0;
      const node = process.cpuUsage(node0);
      await src.end();
      await dst.end();
      const serverCpu = await serverCpuSince(cpu0);
      const copied = await withClient(targetUrl, async (c) =>
        Number((await c.query(`select count(*)::bigint as n from ${table}`)).rows[0].n),
      );
      if (copied !== rows) throw new Error(`${table}: ${copied} rows, ${rows} at the source`);
      await withClient(targetUrl, async (c) => void (await c.query(`drop table ${table}`)));
      return {
        rows,
        ms: Math.round(ms),
        rowsPerSec: Math.round(rows / (ms / 1000)),
        nodeCpuMs: Math.round((node.user + node.system) / 1000),
        serverCpuMs: serverCpu,
      };
    };
    log('transfer bench: COPY pipe');
    const pipeRuns = [await copyPipe()];

    // 2. Naive: read rows, insert them one statement at a time (autocommit), on a sample.
    const sample = Math.min(rows, opts.naiveSample ?? 20_000);
    log(`transfer bench: naive row-by-row insert (${sample} rows, extrapolated)`);
    const naive = await (async () => {
      const src = new pg.Client({ connectionString: sourceUrl });
      const dst = new pg.Client({ connectionString: targetUrl });
      await src.connect();
      await dst.connect();
      const t0 = performance.now();
      const res = await src.query(
        `select id, customer, amount, placed_at, flag, note from public.orders order by id limit $1`,
        [sample],
      );
      for (const r of res.rows) {
        await dst.query(
          `insert into public.naive (id, customer, amount, placed_at, flag, note) values ($1, $2, $3, $4, $5, $6)`,
          [r.id, r.customer, r.amount, r.placed_at, r.flag, r.note],
        );
      }
      const ms = performance.now() - t0;
      await src.end();
      await dst.end();
      const rowsPerSec = Math.round(sample / (ms / 1000));
      return {
        sampleRows: sample,
        sampleMs: Math.round(ms),
        rowsPerSec,
        extrapolatedMsForAllRows: Math.round((rows / rowsPerSec) * 1000),
      };
    })();

    // 3. Keel, in a child process per mode and batch count (peak RSS measured there).
    const keel: Record<string, unknown>[] = [];
    // Statements the Keel child sent per batch (source / target / journal): its round trips, whatever the load.
    const perBatch = (res: Record<string, unknown>) => {
      const st = res.statements as { source: number; target: number; control: number };
      const n = Number(res.batches) || 1;
      return [st.source, st.target, st.control].map((x) => (x / n).toFixed(1)).join(' / ');
    };
    for (const r of runs) {
      const batchSize = Math.max(1, Math.ceil(rows / r.batches));
      const table = tableOf(r);
      log('transfer bench: COPY pipe');
      const pipe = await copyPipe();
      pipeRuns.push(pipe);
      log(`  ${pipe.rowsPerSec} rows/s`);
      log(
        `transfer bench: Keel ${r.mode}, ${r.batches} batch(es) of ${batchSize}${readAheadLabel(r.readAhead, ', read ahead beside the COPY', ', read ahead after the COPY', ', no read ahead')}`,
      );
      await checkpoint();
      const cpu0 = serverCpuMs(postmaster);
      const res = await runChild({
        sourceUrl,
        targetUrl,
        controlUrl,
        batchSize,
        table,
        mode: r.mode,
        readAhead: r.readAhead,
        postmasterPid: postmaster?.pid ?? null,
      });
      const serverCpu = await serverCpuSince(cpu0);
      const counted = await withClient(targetUrl, async (c) =>
        Number((await c.query(`select count(*)::bigint as n from public.${table}`)).rows[0].n),
      );
      if (counted !== rows) throw new Error(`${table}: ${counted} rows on the target, ${rows} at the source`);
      const rps = Number(res.rowsPerSec);
      keel.push({
        mode: r.mode,
        readAhead: r.readAhead,
        batchSize,
        ...res,
        serverCpuMs: serverCpu,
        // CPU per row against the COPY pipe's (server + Node): what a loaded machine does not distort.
        cpuVsCopyBefore:
          serverCpu === null || pipe.serverCpuMs === null
            ? null
            : Math.round(((serverCpu + Number(res.nodeCpuMs)) / (pipe.serverCpuMs + pipe.nodeCpuMs)) * 100) / 100,
        copyPipeBefore: pipe.rowsPerSec,
        vsCopyBefore: Math.round((rps / pipe.rowsPerSec) * 1000) / 1000,
        vsCopy: rps, // the ratio to the median pipe, set below
        vsNaive: Math.round((rps / naive.rowsPerSec) * 10) / 10,
      });
      log(
        `  ${rps} rows/s, ${(rps / pipe.rowsPerSec).toFixed(3)}x the COPY pipe before it, ${(rps / naive.rowsPerSec).toFixed(1)}x naive, peak RSS ${String(res.peakRssMB)} MB, CPU ms server ${serverCpu} node ${String(res.nodeCpuMs)} (pipe: ${pipe.serverCpuMs} + ${pipe.nodeCpuMs}), statements a batch (source / target / journal) ${perBatch(res)}`,
      );
    }
    const sortedPipes = pipeRuns.map((p) => p.rowsPerSec).sort((x, y) => x - y);
    const copy = { ...pipeRuns[0]!, rowsPerSec: sortedPipes[Math.floor(sortedPipes.length / 2)]!, runs: pipeRuns };
    for (const k of keel) k.vsCopy = Math.round((Number(k.rowsPerSec) / copy.rowsPerSec) * 1000) / 1000;
    // The targets are the app's defaults' (DEFAULT_READ_AHEAD); runs with other read aheads are reported beside them.
    const of = (mode: BenchMode) => keel.filter((k) => k.mode === mode && k.readAhead === DEFAULT_READ_AHEAD);
    const worst = (list: Record<string, unknown>[], key: string) =>
      list.length ? Math.min(...list.map((k) => Number(k[key]))) : null;
    const pgToPg = worst(of('bulk'), 'vsCopy');
    // The row path as a SQL Server source with row versioning runs it (one source read) when measured, else 'rows'.
    const rowPathMode: BenchMode = of('rows-once').length ? 'rows-once' : 'rows';
    const rowPath = worst(of(rowPathMode), 'vsCopy');
    const rowPathNaive = worst(of(rowPathMode), 'vsNaive');
    const peakRssMB = Math.max(...keel.map((k) => Number(k.peakRssMB)));
    // The RSS target is PostgreSQL -> PostgreSQL's (the bulk runs); the row path's is reported beside it.
    const rss = (mode: BenchMode) => (of(mode).length ? Math.max(...of(mode).map((k) => Number(k.peakRssMB))) : null);
    const pgToPgRss = rss('bulk');
    const targets = {
      pgToPgVsCopyAtLeast: 0.75,
      peakRssUnderMB: 300,
      rowPathVsCopyAtLeast: 0.5,
      rowPathVsNaiveAtLeast: 5,
    };
    return {
      benchmark: 'transfer pg->pg and the row path',
      rows,
      machine: { cpus: os.cpus().length, node: process.version },
      server: { ...server.info, layout: 'source, target and control: separate databases on this one server' },
      copyPipe: copy,
      naiveRowByRow: naive,
      keel,
      // The worst of the batch counts per mode.
      ratios: {
        rowPathMode,
        pgToPgVsCopy: pgToPg,
        rowPathVsCopy: rowPath,
        rowPathVsNaive: rowPathNaive,
        rowPathNodeManifestVsCopy: worst(of('rows-node'), 'vsCopy'),
        rowPathOneReadVsCopy: worst(of('rows-once'), 'vsCopy'),
      },
      peakRssMB,
      peakRssMBByMode: { bulk: pgToPgRss, rows: rss('rows'), rowsNode: rss('rows-node'), rowsOnce: rss('rows-once') },
      targets,
      met: {
        pgToPg: pgToPg === null ? null : pgToPg >= targets.pgToPgVsCopyAtLeast,
        pgToPgRss: pgToPgRss === null ? null : pgToPgRss < targets.peakRssUnderMB,
        rowPathVsCopy: rowPath === null ? null : rowPath >= targets.rowPathVsCopyAtLeast,
        rowPathVsNaive: rowPathNaive === null ? null : rowPathNaive >= targets.rowPathVsNaiveAtLeast,
      },
    };
  } finally {
    await server.close();
  }
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const argv = process.argv.slice(2);
  if (argv[0] === '--child') {
    keelChild(JSON.parse(argv[1]!) as ChildArgs)
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
    const rows = Number(arg('--rows') ?? 1_000_000);
    const naiveSample = arg('--naive-sample');
    const only = arg('--only')?.split(',') as BenchMode[] | undefined;
    for (const m of only ?? [])
      if (!BENCH_MODES.includes(m)) throw new Error(`--only: ${m} is not one of ${BENCH_MODES.join(', ')}`);
    const batches = arg('--batches')?.split(',').map(Number);
    const readAhead = arg('--read-ahead')
      ?.split(',')
      .map((v) => {
        if (v !== 'on' && v !== 'off' && v !== 'after') throw new Error(`--read-ahead: ${v} is not on, after or off`);
        return v === 'on' ? true : v === 'after' ? ('afterCopy' as const) : false;
      });
    runTransferBench({
      rows,
      ...(only ? { modes: only } : {}),
      ...(batches ? { batches } : {}),
      ...(readAhead ? { readAhead } : {}),
      ...(naiveSample ? { naiveSample: Number(naiveSample) } : {}),
      pgUrl: benchPgUrl({ 'pg-url': arg('--pg-url') }),
    })
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

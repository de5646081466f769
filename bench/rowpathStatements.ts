// The row path's server CPU by statement (issue 26, bench/README.md runs 840–859): the statements one batch of
// `bench/transfer.ts --only rows-once` runs on the server, each alone on one connection, with that backend's CPU from
// /proc/<pid>/stat and its parallel workers' from the postmaster's reaped children, in µs per row. The SQL is built by
// the helpers the adapters use (pgCanonical as the PostgreSQL source's streamRows selects, pgChecksumQuery and the
// direct apply's pricing as its check runs), so the figures follow the code. Beside each statement, what the COPY
// pipe runs for the same rows, and the pieces of the target's keel-v1 check (one process; each piece's figure
// includes the scan). Needs a server on this machine whose processes this user can read.
//
//   npx tsx bench/rowpathStatements.ts --pg-url postgres://postgres@127.0.0.1:5432/postgres [--rows 1000000] [--reps 3]
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { to as copyTo, from as copyFrom } from 'pg-copy-streams';
import { PG_URL_OPTION, benchPgUrl, describeServer, localPostmaster, openBenchServer } from './server.js';
import { ORDERS_FILL, TABLE_DDL } from './transfer.js';
import {
  PG_CHECKSUM_SETTINGS_SQL,
  pgCanonical,
  pgChecksumQuery,
  pgReadBackSums,
} from '../shared/engines/postgres/transferSql.js';
import { sumsPricing } from '../shared/engines/postgres/directApply.js';
import type { LogicalType } from '../shared/transfer/checksum.js';

const { values } = parseArgs({
  options: { rows: { type: 'string', default: '1000000' }, reps: { type: 'string', default: '3' }, ...PG_URL_OPTION },
  allowPositionals: true,
});

// The bench table's columns as the row path maps them (logical type, declared type).
const COLUMNS: { name: string; logical: LogicalType; declared: string }[] = [
  { name: 'id', logical: 'int', declared: 'bigint' },
  { name: 'customer', logical: 'text', declared: 'text' },
  { name: 'amount', logical: 'decimal', declared: 'numeric(12,2)' },
  { name: 'placed_at', logical: 'timestamptz', declared: 'timestamp with time zone' },
  { name: 'flag', logical: 'bool', declared: 'boolean' },
  { name: 'note', logical: 'text', declared: 'character varying(200)' },
];

const ticksMs = (pid: number, fields: [number, number]): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[fields[0]]) + Number(f[fields[1]])) * 10; // USER_HZ 100
};

async function main(): Promise<void> {
  const rows = Number(values.rows);
  const reps = Number(values.reps);
  const server = await openBenchServer({ label: 'rowpath-statements', pgUrl: benchPgUrl(values), fastUnsafe: true });
  console.error(describeServer(server.info));
  try {
    const url = await server.createDatabase('rowpath_statements');
    const postmaster = await localPostmaster(server.adminUrl);
    if (!postmaster) throw new Error('the server is not a local process this user can read');
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    const pid = Number((await c.query('select pg_backend_pid() as p')).rows[0].p);
    await c.query(TABLE_DDL('public.orders'));
    await c.query(ORDERS_FILL, [rows]);
    await c.query('vacuum analyze public.orders');
    await c.query(TABLE_DDL('public.target'));

    const cols = COLUMNS.map((k) => `"${k.name}"`).join(', ');
    const canonicalCopy = `copy (select ${COLUMNS.map((k) => pgCanonical(`"${k.name}"`, k.logical, k.declared)).join(', ')} from public.orders where id <= ${rows}) to stdout`;
    const check = pgChecksumQuery(
      COLUMNS.map((k) => ({ ref: `t."${k.name}"`, type: k.logical, declared: k.declared })),
      'public.target t',
      't.id <= $1::bigint',
      'keel-v1',
    );
    // The check's pieces: each one over the same scan, one process.
    const scan = 'from public.target t where t.id <= $1::bigint';
    const texts = COLUMNS.map((k) => pgCanonical(`t."${k.name}"`, k.logical, k.declared));
    const pieces: Record<string, string> = {
      'scan (count)': `select count(*) ${scan}`,
      'canonical texts': `select count(*), ${texts.map((t) => `sum(length(${t}))`).join(' + ')} ${scan}`,
      'record literal': `select count(*), sum(length(row(${texts.join(', ')})::text)) ${scan}`,
      'md5 of it': `select count(*), sum(length(md5(row(${texts.join(', ')})::text))) ${scan}`,
      'keel-v1 (whole)': check,
    };

    const measure = async (fn: () => Promise<unknown>): Promise<{ backend: number; workers: number }> => {
      const b0 = ticksMs(pid, [11, 12]);
      const w0 = ticksMs(postmaster.pid, [13, 14]);
      await fn();
      await new Promise((r) => setTimeout(r, 100)); // parallel workers reaped
      return { backend: ticksMs(pid, [11, 12]) - b0, workers: ticksMs(postmaster.pid, [13, 14]) - w0 };
    };
    const copyOut = async (sql: string): Promise<Buffer> => {
      const parts: Buffer[] = [];
      await pipeline(
        c.query(copyTo(sql)),
        new Writable({
          write(chunk: Buffer, _e, cb) {
            parts.push(chunk);
            cb();
          },
        }),
      );
      return Buffer.concat(parts);
    };
    const copyIn = (text: Buffer) =>
      pipeline(Readable.from([text]), c.query(copyFrom(`copy public.target (${cols}) from stdin`)));

    const results: Record<string, number[]> = {};
    const add = (k: string, m: { backend: number; workers: number }) =>
      (results[k] ??= []).push(Math.round(((m.backend + m.workers) * 100_000) / rows) / 100); // µs a row
    let canonicalText: Buffer = Buffer.alloc(0);
    let plainText: Buffer = Buffer.alloc(0);
    for (let i = 0; i < reps; i++) {
      add(
        'pipe: source COPY TO (the table)',
        await measure(async () => (plainText = await copyOut('copy public.orders to stdout'))),
      );
      add(
        'row path: source COPY TO (canonical texts)',
        await measure(async () => (canonicalText = await copyOut(canonicalCopy))),
      );
      for (const [label, text] of [
        ['pipe: target COPY FROM (its text)', plainText],
        ['row path: target COPY FROM (canonical text)', canonicalText],
      ] as const) {
        await c.query('truncate public.target');
        await c.query(`begin; ${PG_CHECKSUM_SETTINGS_SQL}`);
        add(label, await measure(() => copyIn(text)));
        await c.query('rollback');
      }
      // The direct apply's transaction: the rows written, then the check as it runs it (planned parallel).
      await c.query('truncate public.target');
      await c.query(`begin; ${PG_CHECKSUM_SETTINGS_SQL}; ${sumsPricing(rows)}`);
      await copyIn(canonicalText);
      add('row path: target keel-v1 check in SQL (before runs 1200–1229)', await measure(() => c.query(check, [rows])));
      // What the target runs now: the rows read back (dates and times printed, one process) and hashed in Node.
      const node0 = process.cpuUsage();
      let back: { rowCount: number; checksum: string } | undefined;
      add(
        'row path: target keel-v1 read back (server)',
        await measure(async () => {
          back = await pgReadBackSums(
            c,
            COLUMNS.map((k) => ({ ref: `t."${k.name}"`, type: k.logical, declared: k.declared })),
            'public.target t',
            `t.id <= current_setting('keel.rb_high')::bigint`,
            { 'keel.rb_high': String(rows) },
          );
        }),
      );
      const node = process.cpuUsage(node0);
      (results['row path: target keel-v1 read back (Node)'] ??= []).push(
        Math.round(((node.user + node.system) * 100) / rows) / 100,
      );
      if (back?.rowCount !== rows) throw new Error(`read back ${back?.rowCount} rows`);
      await c.query(`select set_config('max_parallel_workers_per_gather', '0', true)`);
      for (const [label, sql] of Object.entries(pieces))
        add(`  check, one process: ${label}`, await measure(() => c.query(sql, [rows])));
      await c.query('rollback');
    }
    await c.end();
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const out = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, `${median(v)} (${v.join(', ')})`]));
    process.stdout.write(
      `${JSON.stringify({ rows, reps, server: server.info, cpuUsPerRowMedianAndRuns: out }, null, 2)}\n`,
    );
  } finally {
    await server.close();
  }
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});

// Deadlocks on the run's PostgreSQL server, for the chaos, contract and race suites: none may happen. Counted twice:
// by pg_stat_database.deadlocks of the databases under test, and — when the run can read the server's log
// (inject('pgServerLog')) — by the `deadlock detected` errors logged since the watch began.
import pg from 'pg';
import { inject } from 'vitest';
import { open, stat } from 'node:fs/promises';
import { withClient } from '../../dev/pgAdmin.js';
import { adminUrl } from './pg.js';

export interface DeadlockWatch {
  // What deadlocked since the watch began, one description per finding; empty when nothing did.
  // Call it once the sessions under test have ended (pools closed): a backend's counters reach pg_stat_database when
  // it exits, or up to ~10 s after it goes idle, so the check waits (bounded) until the databases have no sessions.
  findings(): Promise<string[]>;
  // Throws with every finding when there is one.
  assertNone(): Promise<void>;
}

export interface WatchOptions {
  // Sessions that may stay connected while the check waits (e.g. a harness's inspection client, which runs no moves).
  ignoreApplicationNames?: string[];
  // Upper bound for the wait described above.
  settleMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const LOG_PATTERN = /deadlock detected/;
const MAX_EXCERPTS = 5;

export function databaseOf(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1));
}

function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  return withClient(adminUrl(), fn, { statement_timeout: 10_000, application_name: 'keel-deadlock-watch' });
}

async function readCounters(client: pg.Client, databases: string[], ignore: string[]) {
  await client.query('select pg_stat_clear_snapshot()'); // this session's cached statistics are not reused
  const { rows } = await client.query<{ datname: string; deadlocks: string }>(
    'select datname, deadlocks from pg_stat_database where datname = any($1::text[])',
    [databases],
  );
  const sessions = await client.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
     where datname = any($1::text[]) and backend_type = 'client backend' and application_name <> all($2::text[])`,
    [databases, ignore],
  );
  return {
    counts: new Map(rows.map((r) => [r.datname, Number(r.deadlocks)])),
    sessions: sessions.rows[0]!.n,
  };
}

async function sizeOf(file: string): Promise<number> {
  return (await stat(file).catch(() => null))?.size ?? 0;
}

async function readFrom(file: string, offset: number): Promise<string> {
  const handle = await open(file, 'r');
  try {
    const { size } = await handle.stat();
    if (size <= offset) return '';
    const buffer = Buffer.alloc(size - offset);
    await handle.read(buffer, 0, buffer.length, offset);
    return buffer.toString('utf8');
  } finally {
    await handle.close();
  }
}

// Each `deadlock detected` error with the lines the server logs after it (DETAIL with both processes, CONTEXT, the
// statement): continuation lines are tab-indented or carry the same "[pid]" as the error.
export function deadlockExcerpts(text: string): string[] {
  const lines = text.split('\n');
  const excerpts: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!LOG_PATTERN.test(lines[i]!)) continue;
    const pid = /\[(\d+)\]/.exec(lines[i]!)?.[1];
    const excerpt = [lines[i]!];
    for (let j = i + 1; j < lines.length && excerpt.length < 12; j++) {
      const line = lines[j]!;
      if (line.startsWith('\t') || (pid && line.includes(`[${pid}]`) && !LOG_PATTERN.test(line))) excerpt.push(line);
      else break;
    }
    excerpts.push(excerpt.map((l) => (l.length > 400 ? `${l.slice(0, 400)}…` : l)).join('\n'));
  }
  return excerpts;
}

// Starts watching `databases` (names on the run's server): the counters and the log's end are taken now.
export async function watchDeadlocks(databases: string[], opts: WatchOptions = {}): Promise<DeadlockWatch> {
  const ignore = opts.ignoreApplicationNames ?? [];
  const settleMs = opts.settleMs ?? 15_000;
  const logFile = inject('pgServerLog');
  const logOffset = logFile ? await sizeOf(logFile) : 0;
  const before = await withAdmin(async (client) => (await readCounters(client, databases, ignore)).counts);

  const findings = async (): Promise<string[]> => {
    const found: string[] = [];
    await withAdmin(async (client) => {
      const deadline = Date.now() + settleMs;
      let quietSince: number | null = null;
      let after = before;
      for (;;) {
        const read = await readCounters(client, databases, ignore);
        after = read.counts;
        const sessions = read.sessions;
        const grew = databases.some((d) => (after.get(d) ?? 0) > (before.get(d) ?? 0));
        const now = Date.now();
        if (sessions === 0) quietSince ??= now;
        else quietSince = null;
        // A session's last counters land just after it leaves pg_stat_activity: one more second once all have left.
        if (grew || (quietSince !== null && now - quietSince >= 1000) || now >= deadline) break;
        await sleep(250);
      }
      for (const d of databases) {
        const was = before.get(d) ?? 0;
        const is = after.get(d) ?? 0;
        if (is > was) found.push(`pg_stat_database.deadlocks of ${d}: ${was} -> ${is} (+${is - was})`);
      }
    });
    if (logFile) {
      const excerpts = deadlockExcerpts(await readFrom(logFile, logOffset).catch(() => ''));
      if (excerpts.length) {
        found.push(
          `server log ${logFile}: ${excerpts.length} "deadlock detected" error(s) since the watch began ` +
            '(the log is shared by the test files running at the same time; the counters above are per database):\n' +
            excerpts.slice(0, MAX_EXCERPTS).join('\n---\n') +
            (excerpts.length > MAX_EXCERPTS ? `\n… and ${excerpts.length - MAX_EXCERPTS} more` : ''),
        );
      }
    }
    return found;
  };

  return {
    findings,
    async assertNone() {
      const found = await findings();
      if (found.length) throw new Error(`deadlocks on ${databases.join(', ')}:\n${found.join('\n')}`);
    },
  };
}

// A chaos run's verdict (the report of test/support/chaosMix.ts and this watch): every violated property and every
// deadlock finding in one error message on one line, which CI's closing summary prints whole (an assertion's diff of
// the arrays printed there as "[ Array(1) ]").
export async function expectCleanRun(report: { problems: string[] }, watch: DeadlockWatch): Promise<void> {
  const found = [...report.problems, ...(await watch.findings())];
  if (found.length)
    throw new Error(
      `chaos: ${found.length} problem(s): ${found.map((f) => f.replace(/\s*\n\s*/g, ' / ')).join(' | ')}`,
    );
}

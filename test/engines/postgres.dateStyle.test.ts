// A database whose DateStyle a DBA set (ALTER DATABASE / ALTER ROLE … SET datestyle = 'SQL, DMY', the server's
// configuration: a European default). node-postgres parses a timestamptz from its text only in the ISO style, and
// asks for none as it connects, so under 'SQL, DMY' every time read back was an Invalid Date (or null): a job's
// createdAt and runAt, the store's clock that maintenance reads for its retention cutoffs (every pass failed: the
// cutoff was no time), a schedule's last tick (every pass after the first answered 'lost': it never fired again).
// Found by chaos hunt 6. Now the store's and the journal's sessions ask for DateStyle ISO as they connect
// (shared/engines/postgres/readCommitted.ts), as JDBC and psycopg do.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { createJournalPool } from '../../shared/engines/postgres/transferJournal.js';
import { runMaintenance, storeClock } from '../../shared/jobs/maintenance.js';
import { runSchedules } from '../../shared/jobs/scheduler.js';
import { defineSchedule } from '../../shared/jobs/define.js';
import { HandlerRegistry } from '../../shared/jobs/registry.js';
import { withClient } from '../../dev/pgAdmin.js';
import { appUrl, createTestDatabase } from '../support/pg.js';

let url = ''; // the schema owner's
let store: PostgresJobStore;

beforeAll(async () => {
  url = await createTestDatabase('datestyle');
  const db = decodeURIComponent(new URL(url).pathname.slice(1));
  await (await PostgresJobStore.connect(appUrl(url), { poolSize: 1, migrateUrl: url })).close();
  // A time zone whose offset is not whole hours, too: what the ISO style writes must still be read back right.
  await withClient(url, (c) => c.query(`alter database "${db}" set datestyle = 'SQL, DMY'`));
  await withClient(url, (c) => c.query(`alter database "${db}" set timezone = 'Asia/Kathmandu'`));
  store = await PostgresJobStore.connect(appUrl(url), { poolSize: 2, migrate: false });
}, 60_000);

afterAll(async () => {
  await store?.close();
});

const near = (d: Date | null | undefined, ms: number, slack = 60_000) => {
  expect(d).toBeInstanceOf(Date);
  expect(Math.abs(d!.getTime() - ms)).toBeLessThan(slack);
};

it("reads a job's times back as they were written", async () => {
  const runAt = new Date(Date.now() + 3_600_000);
  const { id } = await store.enqueue({ queue: 'ds', type: 't', payload: {}, runAt });
  const job = await store.getJob(id);
  near(job?.createdAt, Date.now());
  expect(job?.runAt?.getTime()).toBe(runAt.getTime());
});

it("maintenance reads the store's clock and purges by it", async () => {
  near(await storeClock(store), Date.now());
  await expect(runMaintenance(store)).resolves.toBeDefined();
});

it('a schedule fires its ticks after its first pass, reading its last tick back', async () => {
  // Unreadable, the last tick read as none: every pass after the first found the schedule moved on by another and
  // answered 'lost', and the schedule never fired again.
  const registry = new HandlerRegistry().register('tick', async () => undefined);
  const def = defineSchedule('ds-every-second', { cron: '* * * * * *', type: 'tick', queue: 'ds-sched' });
  const now = Date.now();
  const [first] = await runSchedules(store, registry, [def], new Date(now));
  expect(first?.status, JSON.stringify(first)).toBe('fired');
  const [next] = await runSchedules(store, registry, [def], new Date(now + 2000));
  expect(next?.status, JSON.stringify(next)).toBe('fired');
  expect(next?.enqueued.length, JSON.stringify(next)).toBeGreaterThan(0);
  const [state] = (await store.listSchedules()).filter((s) => s.name === def.name);
  near(state?.updatedAt, Date.now());
});

it("the journal's sessions read times in the ISO style too", async () => {
  const pool = createJournalPool(appUrl(url), { max: 1 });
  try {
    const { rows } = await pool.query<{ now: Date }>('select now() as now');
    near(rows[0]?.now, Date.now());
  } finally {
    await pool.end();
  }
});

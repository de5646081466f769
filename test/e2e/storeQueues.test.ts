// npm start against another database than last time: the in-process Azurite's messages of the last run name jobs of the
// other store. The local host records which store its queues serve and clears Keel's queues (and their poison queues)
// when a start finds another (dev/storeQueues.ts). A message for a job the store does not know is poisoned, never
// retried (test/functions/queueAndTimers.test.ts, 'unknown_job'); an id the new store also has would name another job.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { QueueServiceClient } from '@azure/storage-queue';
import { afterAll, describe, expect, it } from 'vitest';
import { bootLocal } from '../../dev/boot.js';
import { startAzuriteQueue } from '../../dev/azurite.js';
import { clearQueuesOfAnotherStore, STORE_STATE_FILE, storeIdentity } from '../../dev/storeQueues.js';
import { definitions } from '../../functions/definitions.js';
import { encodeMessage } from '../../shared/app/queues.js';
import { adminUrl, createTestDatabase } from '../support/pg.js';
import { databaseOf } from '../support/deadlocks.js';

const dirs: string[] = [];
const tempDir = async (label: string) => {
  const d = await mkdtemp(path.join(os.tmpdir(), `keel-${label}-`));
  dirs.push(d);
  return d;
};

afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function count(service: QueueServiceClient, name: string): Promise<number> {
  const q = service.getQueueClient(name);
  if (!(await q.exists())) return 0;
  return (await q.getProperties()).approximateMessagesCount ?? 0;
}

describe("the local host's queues follow its store", () => {
  it('a store is told apart by URL, database and its recreation; its queues are cleared only when the store changed', async () => {
    const a = await createTestDatabase('storeq_a');
    const b = await createTestDatabase('storeq_b');
    const idA = await storeIdentity({ KEEL_PG_URL: a });
    expect(await storeIdentity({ KEEL_PG_URL: a })).toEqual(idA);
    expect((await storeIdentity({ KEEL_PG_URL: b })).key).not.toBe(idA.key);
    expect(idA.label).toMatch(/^postgres 127\.0\.0\.1:\d+\/keel_storeq_a_/);
    expect(JSON.stringify(idA)).not.toMatch(/password|:[^@/]*@/);
    // The same name dropped and created again is another store (its jobs' ids start over).
    const admin = new pg.Client({ connectionString: adminUrl() });
    await admin.connect();
    try {
      await admin.query(`drop database ${databaseOf(a)}`);
      await admin.query(`create database ${databaseOf(a)}`);
    } finally {
      await admin.end();
    }
    const idA2 = await storeIdentity({ KEEL_PG_URL: a });
    expect(idA2.label).toBe(idA.label);
    expect(idA2.key).not.toBe(idA.key);
    // SQL Server: the connection string without its password.
    const ss = (pwd: string) =>
      storeIdentity({ KEEL_STORE_ENGINE: 'sqlserver', KEEL_SQL_CONNECTION: `Server=h;Database=d;Password=${pwd}` });
    expect((await ss('x')).key).toBe((await ss('y')).key);

    const azurite = await startAzuriteQueue({ inMemory: true });
    try {
      const service = QueueServiceClient.fromConnectionString(azurite.connectionString);
      const stateFile = path.join(await tempDir('storeq'), STORE_STATE_FILE);
      const queues = ['keel-jobs', 'keel-transfer-stage'];
      const post = async (name: string, n: number) => {
        const q = service.getQueueClient(name);
        await q.createIfNotExists();
        for (let i = 0; i < n; i++) await q.sendMessage(encodeMessage({ jobId: String(100 + i) }));
      };
      await post('keel-jobs', 3);
      await post('keel-jobs-poison', 1);
      await post('other-app-queue', 2);
      const clear = (identity: typeof idA) => clearQueuesOfAnotherStore({ service, stateFile, identity, queues });
      // No record: the messages' store is unknown, so they go.
      expect(await clear(idA)).toEqual({ previous: null, cleared: { 'keel-jobs': 3, 'keel-jobs-poison': 1 } });
      await post('keel-jobs', 2);
      // The recorded store again: nothing is touched.
      expect(await clear(idA)).toEqual({ previous: idA.label, cleared: {} });
      expect(await count(service, 'keel-jobs')).toBe(2);
      // Another store: Keel's queues are cleared, nobody else's.
      expect(await clear(idA2)).toEqual({ previous: idA.label, cleared: { 'keel-jobs': 2 } });
      expect(await count(service, 'keel-jobs')).toBe(0);
      expect(await count(service, 'other-app-queue')).toBe(2);
    } finally {
      await azurite.stop();
    }
  }, 120_000);

  it('npm start against another database finds no message of the last run', async () => {
    const dataDir = await tempDir('storeq-boot');
    const saved = { ...process.env };
    const restore = () => {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    };
    // bootLocal copies its settings into process.env (the first one's Azurite connection among them): each start
    // begins from the environment as it was.
    const boot = async (url: string) => {
      restore();
      Object.assign(process.env, { KEEL_PG_URL: url, KEEL_AZURITE_PORT: '0' });
      return bootLocal({ definitions, dataDir, port: 0, log: () => undefined, wakeups: false });
    };
    try {
      const first = await boot(await createTestDatabase('storeq_boot_a'));
      let service: QueueServiceClient;
      try {
        service = QueueServiceClient.fromConnectionString(first.storageConnection);
        // A retry's message posted for later, as the last run leaves them: it outlives the host in <data>/azurite.
        const q = service.getQueueClient(first.settings.KEEL_JOBS_QUEUE);
        await q.createIfNotExists();
        await q.sendMessage(encodeMessage({ jobId: '1' }), { visibilityTimeout: 3600 });
        expect(await count(service, first.settings.KEEL_JOBS_QUEUE)).toBe(1);
      } finally {
        await first.stop();
      }
      const second = await boot(await createTestDatabase('storeq_boot_b'));
      try {
        service = QueueServiceClient.fromConnectionString(second.storageConnection);
        expect(await count(service, second.settings.KEEL_JOBS_QUEUE)).toBe(0);
        expect(second.notes.join('\n')).toMatch(
          /queues cleared: they were for another store \(postgres [^)]*storeq_boot_a[^)]*\).*storeq_boot_b.*keel-jobs: 1/,
        );
      } finally {
        await second.stop();
      }
    } finally {
      restore();
    }
  }, 240_000);
});

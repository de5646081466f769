// npm start's queues belong to one job store. Its in-process Azurite keeps its messages under <data>/azurite across
// restarts, and a message carries only a job or batch id: after a start against another database (KEEL_PG_URL changed,
// the embedded cluster wiped and created again) the messages left from the last run name jobs of the other store. The
// jobs runner poisons an id the store does not know ('unknown_job': no retry loop), but an id the new store also has
// names another job, and the poison queue fills with warnings about jobs nobody enqueued here. So the local host
// records which store its queues serve (<data>/azurite/keel-store.json) and, when a start finds another one (or no
// record), clears Keel's queues and their poison queues before any trigger runs. Nothing is lost by clearing: the row
// is the truth, and the dispatcher (jobs) and the transfer timer (batches) find due work without messages.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import pg from 'pg';
import type { QueueServiceClient } from '@azure/storage-queue';
import { poisonQueueName } from '../shared/app/queues.js';

export interface StoreIdentity {
  key: string; // a digest of what tells one store from another (never a password)
  label: string; // for the log: engine, host and database
}

// What tells one database from another: the engine, host, port and name, and, for PostgreSQL, the database's OID and
// the cluster's system identifier (a database dropped and created again, or a cluster initialised again, under the
// same URL is another store).
export async function storeIdentity(env: Record<string, string | undefined>): Promise<StoreIdentity> {
  const digest = (parts: unknown) => createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
  if ((env.KEEL_STORE_ENGINE ?? 'postgres') !== 'postgres') {
    // SQL Server: the connection string without its secrets.
    const conn = (env.KEEL_SQL_CONNECTION ?? '')
      .split(';')
      .map((p) => p.trim())
      .filter((p) => p !== '' && !/^(password|pwd)\s*=/i.test(p))
      .map((p) => p.toLowerCase())
      .sort();
    return { key: digest(['sqlserver', conn]), label: 'sqlserver (KEEL_SQL_CONNECTION)' };
  }
  const url = env.KEEL_PG_MIGRATE_URL || env.KEEL_PG_URL;
  if (!url) throw new Error('storeIdentity: no KEEL_PG_URL');
  const u = new URL(url);
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000, query_timeout: 15_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const db = await client.query<{ name: string; oid: string }>(
      'select current_database() as name, oid::text as oid from pg_database where datname = current_database()',
    );
    // pg_control_system() is for superusers and pg_monitor members by default: without it, the OID alone.
    let system: string | null = null;
    try {
      system = (await client.query<{ s: string }>('select system_identifier::text as s from pg_control_system()'))
        .rows[0]!.s;
    } catch {
      system = null;
    }
    const { name, oid } = db.rows[0]!;
    return {
      key: digest(['postgres', u.hostname, u.port || '5432', name, oid, system]),
      label: `postgres ${u.hostname}:${u.port || '5432'}/${name}`,
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}

// Beside the queue data it describes, under <data>/azurite.
export const STORE_STATE_FILE = 'keel-store.json';

interface Recorded {
  store: string;
  label: string;
  at: string;
}

// Clears `queues` and their poison queues when the state file names another store than `identity` (or none), then
// records `identity`. Returns the messages cleared by queue (empty when the store is the recorded one).
export async function clearQueuesOfAnotherStore(opts: {
  service: QueueServiceClient;
  stateFile: string;
  identity: StoreIdentity;
  queues: readonly string[];
}): Promise<{ previous: string | null; cleared: Record<string, number> }> {
  let recorded: Recorded | null = null;
  if (existsSync(opts.stateFile)) {
    try {
      recorded = JSON.parse(await readFile(opts.stateFile, 'utf8')) as Recorded;
    } catch {
      recorded = null; // unreadable: as if absent
    }
  }
  const cleared: Record<string, number> = {};
  if (recorded?.store === opts.identity.key) return { previous: recorded.label, cleared };
  for (const name of opts.queues.flatMap((q) => [q, poisonQueueName(q)])) {
    const queue = opts.service.getQueueClient(name);
    if (!(await queue.exists())) continue;
    const count = (await queue.getProperties()).approximateMessagesCount ?? 0;
    await queue.clearMessages();
    if (count > 0) cleared[name] = count;
  }
  const state: Recorded = { store: opts.identity.key, label: opts.identity.label, at: new Date().toISOString() };
  await writeFile(opts.stateFile, `${JSON.stringify(state, null, 2)}\n`);
  return { previous: recorded?.label ?? null, cleared };
}

// Helpers for invoking the functions' handlers directly: a real PostgreSQL database per file, an in-memory
// recorder for queue posts (the storage queue is the host's business; here we check what was posted), and the
// @azure/functions request/context objects.
import pg from 'pg';
import { expect } from 'vitest';
import type { HttpResponseInit, LogLevel, Timer } from '@azure/functions';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { parseSettings } from '../../shared/config/settings.js';
import { registerDemoHandlers } from '../../dev/demoHandlers.js';
import { createRuntime, setRuntime, type Runtime, type RuntimeOverrides } from '../../shared/app/runtime.js';
import type { PoisonEntry, QueueGateway } from '../../shared/app/queues.js';
import { HttpRequest, InvocationContext } from '../../dev/azureFunctions.js';
import { encodeClientPrincipal } from '../../shared/ops/auth.js';
import type { HandlerRegistry } from '../../shared/jobs/registry.js';

export class RecordingQueues implements QueueGateway {
  readonly sent: { queue: string; message: unknown; delaySeconds: number }[] = [];
  readonly poisoned: { queue: string; entry: PoisonEntry }[] = [];
  failSends = false;

  async send(queue: string, message: unknown, opts: { delaySeconds?: number } = {}): Promise<void> {
    if (this.failSends) throw new Error('storage unavailable (test)');
    this.sent.push({ queue, message: JSON.parse(JSON.stringify(message)), delaySeconds: opts.delaySeconds ?? 0 });
  }

  async sendPoison(queue: string, entry: PoisonEntry): Promise<void> {
    if (this.failSends) throw new Error('storage unavailable (test)');
    this.poisoned.push({ queue, entry });
  }

  async ping(): Promise<boolean> {
    return !this.failSends;
  }

  take(queue: string): unknown[] {
    const out: unknown[] = [];
    for (let i = this.sent.length - 1; i >= 0; i--) {
      if (this.sent[i]!.queue === queue) out.unshift(this.sent.splice(i, 1)[0]!.message);
    }
    return out;
  }

  clear(): void {
    this.sent.length = 0;
    this.poisoned.length = 0;
  }
}

export interface TestRuntime {
  rt: Runtime;
  queues: RecordingQueues;
  url: string;
  pool: pg.Pool;
  close(): Promise<void>;
}

export async function createTestRuntime(
  prefix: string,
  opts: {
    env?: Record<string, string>;
    register?: (r: HandlerRegistry) => void;
    transfers?: RuntimeOverrides['transfers'];
    schedules?: RuntimeOverrides['schedules'];
  } = {},
): Promise<TestRuntime> {
  const url = await createTestDatabase(prefix);
  const env = {
    KEEL_PG_URL: appUrl(url),
    KEEL_PG_MIGRATE_URL: url,
    KEEL_DEMO_HANDLERS: 'true',
    KEEL_HEARTBEAT_MS: '200',
    KEEL_DISPATCH_BUDGET_MS: '3000',
    ...opts.env,
  };
  const settings = parseSettings(env);
  const queues = new RecordingQueues();
  const rt = await createRuntime(settings, {
    queues,
    env,
    // The demo job types (dev/, registered by the local host) are the tests' sample handlers too.
    register: (r: HandlerRegistry) => {
      registerDemoHandlers(r);
      opts.register?.(r);
    },
    ...(opts.transfers !== undefined ? { transfers: opts.transfers } : {}),
    ...(opts.schedules !== undefined ? { schedules: opts.schedules } : {}),
  });
  setRuntime(rt);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  return {
    rt,
    queues,
    url,
    pool,
    async close() {
      setRuntime(undefined);
      await rt.close();
      await pool.end();
    },
  };
}

export interface CapturedLog {
  level: LogLevel;
  text: string;
}

export function context(functionName = 'test', triggerMetadata?: Record<string, unknown>) {
  const logs: CapturedLog[] = [];
  const ctx = new InvocationContext({
    invocationId: `test-${Math.random().toString(36).slice(2)}`,
    functionName,
    logHandler: (level, ...args) => logs.push({ level, text: args.map(String).join(' ') }),
    ...(triggerMetadata ? { triggerMetadata } : {}),
  });
  return Object.assign(ctx, { logs });
}

export const OPERATOR = encodeClientPrincipal({ name: 'test-operator', roles: ['Keel.Operator'] });
export const READER = encodeClientPrincipal({ name: 'test-reader', roles: ['Keel.Reader'] });

export function request(
  method: string,
  path: string,
  opts: { body?: unknown; raw?: string | Uint8Array; headers?: Record<string, string>; operator?: boolean } = {},
) {
  const url = new URL(`http://localhost:7071/api/ops/${path.replace(/^\//, '')}`);
  const tail = url.pathname.replace(/^\/api\/ops\/?/, '');
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  const bytes =
    opts.raw !== undefined
      ? typeof opts.raw === 'string'
        ? new TextEncoder().encode(opts.raw)
        : opts.raw
      : opts.body !== undefined
        ? new TextEncoder().encode(JSON.stringify(opts.body))
        : undefined;
  return new HttpRequest({
    method,
    url: url.toString(),
    headers: {
      // Every write is sent as JSON, even without a body (the API refuses it otherwise, as the console sends it).
      ...(method.toUpperCase() !== 'GET' ? { 'content-type': 'application/json' } : {}),
      ...(bytes ? { 'content-type': 'application/json', 'content-length': String(bytes.length) } : {}),
      ...(opts.operator ? { 'x-ms-client-principal': OPERATOR } : {}),
      ...opts.headers,
    },
    query,
    params: { path: decodeURIComponent(tail) },
    ...(bytes ? { body: { bytes } } : {}),
  });
}

// What the host passes a timer trigger on an ordinary (not past-due) tick.
export const timer: Timer = {
  isPastDue: false,
  schedule: { adjustForDST: true },
  scheduleStatus: { last: '', next: '', lastUpdated: '' },
};

export function jsonOf(res: HttpResponseInit): any {
  return res.jsonBody;
}

// A fingerprint of every Keel table but the ledger and the ops audit trail (a refused call is recorded there, by
// design: auditRows): equal before and after means nothing in the database changed.
export async function snapshot(pool: pg.Pool): Promise<Record<string, string>> {
  const tables = (
    await pool.query(`select table_schema || '.' || table_name as t from information_schema.tables
                      where table_schema in ('keel') and table_type = 'BASE TABLE'
                        and table_name not in ('schema_migrations', 'ops_audit') order by 1`)
  ).rows.map((r) => String(r.t));
  const out: Record<string, string> = {};
  for (const t of tables) {
    const r = await pool.query(
      `select count(*)::text || ':' || coalesce(md5(string_agg(x::text, '|' order by x::text)), '') as f from ${t} x`,
    );
    out[t] = String(r.rows[0].f);
  }
  return out;
}

// The ops audit records after id `afterId` (the owner's connection), oldest first.
export async function auditRows(pool: pg.Pool, afterId = '0'): Promise<Record<string, unknown>[]> {
  const { rows } = await pool.query(`select * from keel.ops_audit where id > $1::bigint order by id`, [afterId]);
  return rows;
}

export async function lastAuditId(pool: pg.Pool): Promise<string> {
  const { rows } = await pool.query(`select coalesce(max(id), 0)::text as id from keel.ops_audit`);
  return String(rows[0].id);
}

// An ops call as a test file makes it (through functions/ops.ts, or one instance's handler).
export type OpsCall = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;

// POST /jobs: the new job's id (201 expected).
export async function enqueueJob(call: OpsCall, job: Record<string, unknown>): Promise<string> {
  const r = await call('POST', 'jobs', job);
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.id as string;
}

// A job in the DLQ: enqueued as demo.fatal through the ops API and run once by this runtime's processor.
export async function deadLetteredJob(call: OpsCall, rt: Runtime, queue: string): Promise<string> {
  const id = await enqueueJob(call, { queue, type: 'demo.fatal' });
  expect(await rt.processor.processById(id)).toBe('dead_lettered');
  return id;
}

// How many answers had each status: {200: 1, 409: 3}.
export function tally(rs: readonly { status: number }[]): Record<number, number> {
  const by: Record<number, number> = {};
  for (const r of rs) by[r.status] = (by[r.status] ?? 0) + 1;
  return by;
}

export { until } from '../support/until.js';

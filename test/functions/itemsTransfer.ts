// The fixture the transfer function tests share: two throwaway PostgreSQL databases (source and target) with a
// `public.items` table, and a test runtime configured with one `items` transfer between them (key and boundary
// `id`), plus an ops caller and a pump that delivers the recorded queue posts through the real queue steps.
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { QueueServiceClient } from '@azure/storage-queue';
import { ops } from '../../functions/ops.js';
import { definitions } from '../../functions/definitions.js';
import { startLocalHost, type RunningLocalHost } from '../../dev/localHost.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { transferStage } from '../../functions/transferStage.js';
import { transferApply } from '../../functions/transferApply.js';
import { createTestDatabase } from '../support/pg.js';
import type { RuntimeOverrides } from '../../shared/app/runtime.js';
import { context, createTestRuntime, jsonOf, OPERATOR, request, type TestRuntime } from './support.js';

export const ITEMS_DDL = `create table public.items (id bigint primary key, name text not null)`;

export interface ItemsTransferOptions {
  /** Names the databases (`<label>_src`, `<label>_tgt`), the runtime, and the settings `<LABEL>_SOURCE|_TARGET`. */
  label: string;
  /** Statements run on the source; default: ITEMS_DDL. */
  sourceDdl?: string[];
  /** Statements run on the target; default: the source's. */
  targetDdl?: string[];
  /** Rows (n, 'item-' || n) for n in 1..rows inserted into the source before the runtime starts. */
  rows?: number;
  /** Other seeding of the source, after `rows`. */
  seed?: (source: pg.Pool) => Promise<void>;
  /** Columns mapped to the same name on the target; default: id and name. */
  columns?: string[];
  batchSize?: number;
  chunkSize?: number;
  /** More settings (KEEL_TRANSFERS and the two connection settings are set here). */
  env?: Record<string, string>;
  /** More transfers, built from the `items` one (its source, target, keys and columns; no sizes). */
  moreTransfers?: (items: TransferConfig) => Record<string, unknown>[];
  /** Recurring schedules of the runtime (their job types must be registered: the demo types are). */
  schedules?: RuntimeOverrides['schedules'];
  /** Attached to both pools (an idle client's error is otherwise thrown). */
  onPoolError?: (err: Error) => void;
  /** Calls go over real HTTP to the local host (dev/localHost.ts) serving Keel's HTTP functions, with this key. */
  http?: { opsKey: string };
}

export interface TransferConfig {
  name: string;
  source: { engine: string; connectionSetting: string; table: string };
  target: { engine: string; connectionSetting: string; table: string };
  keyColumns: string[];
  boundary: { column: string; kind: string };
  columns: { source: string; target: string }[];
}

/** Another transfer like `items` on table public.<name>, batches of 10, comparing key sets at 02:30 UTC. */
export function keyCompareTransfer(
  items: TransferConfig,
  name: string,
  keyCompare: 'apply' | 'report' = 'apply',
): Record<string, unknown> {
  return {
    ...items,
    name,
    source: { ...items.source, table: `public.${name}` },
    target: { ...items.target, table: `public.${name}` },
    batchSize: 10,
    keyCompare,
    keyCompareSchedule: '0 30 2 * * *',
  };
}

export interface ItemsTransfer {
  t: TestRuntime;
  source: pg.Pool;
  target: pg.Pool;
  /** An ops request, as operator unless `headers` are given (then exactly those). */
  call(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: any; headers: Record<string, string> }>;
  /** Delivers every recorded queue post, oldest first, to the stage or apply step until none is left. */
  pump(): Promise<void>;
  /** With `http`: the local host the calls go to. */
  host?: RunningLocalHost;
}

/** Registers the suite's beforeAll/afterAll; the fields are usable from the tests (after beforeAll). */
export function useItemsTransfer(opts: ItemsTransferOptions): ItemsTransfer {
  const fx = {
    async call(method: string, path: string, body?: unknown, headers?: Record<string, string>) {
      if (opts.http && fx.host) {
        const res = await fetch(`${fx.host.baseUrl}/api/ops/${path.replace(/^\//, '')}`, {
          method,
          headers: {
            'x-functions-key': opts.http.opsKey,
            ...(method.toUpperCase() !== 'GET' ? { 'content-type': 'application/json' } : {}),
            ...(headers ?? { 'x-ms-client-principal': OPERATOR }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        const text = await res.text();
        return {
          status: res.status,
          body: text ? JSON.parse(text) : undefined,
          headers: Object.fromEntries(res.headers.entries()),
        };
      }
      const res = await ops(
        request(method, path, {
          ...(body === undefined ? {} : { body }),
          ...(headers ? { headers } : { operator: true }),
        }),
        context('ops'),
      );
      return { status: res.status ?? 200, body: jsonOf(res), headers: (res.headers ?? {}) as Record<string, string> };
    },
    async pump() {
      for (;;) {
        const m = fx.t.queues.sent.shift() as { queue: string; message: unknown } | undefined;
        if (!m) return;
        if (m.queue === 'keel-transfer-stage') await transferStage(m.message, context('transferStage'));
        else await transferApply(m.message, context('transferApply'));
      }
    },
  } as ItemsTransfer;

  beforeAll(async () => {
    const srcUrl = await createTestDatabase(`${opts.label}_src`);
    const tgtUrl = await createTestDatabase(`${opts.label}_tgt`);
    fx.source = new pg.Pool({ connectionString: srcUrl, max: 2 });
    fx.target = new pg.Pool({ connectionString: tgtUrl, max: 2 });
    if (opts.onPoolError) for (const p of [fx.source, fx.target]) p.on('error', opts.onPoolError);
    const sourceDdl = opts.sourceDdl ?? [ITEMS_DDL];
    for (const sql of sourceDdl) await fx.source.query(sql);
    for (const sql of opts.targetDdl ?? sourceDdl) await fx.target.query(sql);
    if (opts.rows) {
      await fx.source.query(`insert into public.items select n, 'item-' || n from generate_series(1, $1::int) n`, [
        opts.rows,
      ]);
    }
    await opts.seed?.(fx.source);
    const setting = opts.label.toUpperCase();
    const items: TransferConfig = {
      name: 'items',
      source: { engine: 'postgres', connectionSetting: `${setting}_SOURCE`, table: 'public.items' },
      target: { engine: 'postgres', connectionSetting: `${setting}_TARGET`, table: 'public.items' },
      keyColumns: ['id'],
      boundary: { column: 'id', kind: 'key' },
      columns: (opts.columns ?? ['id', 'name']).map((c) => ({ source: c, target: c })),
    };
    const sizes = {
      ...(opts.batchSize !== undefined ? { batchSize: opts.batchSize } : {}),
      ...(opts.chunkSize !== undefined ? { chunkSize: opts.chunkSize } : {}),
    };
    fx.t = await createTestRuntime(opts.label, {
      env: {
        [`${setting}_SOURCE`]: srcUrl,
        [`${setting}_TARGET`]: tgtUrl,
        ...opts.env,
        KEEL_TRANSFERS: JSON.stringify([{ ...items, ...sizes }, ...(opts.moreTransfers?.(items) ?? [])]),
      },
      ...(opts.schedules ? { schedules: opts.schedules } : {}),
    });
    if (opts.http) {
      // Only the HTTP functions: the queue and timer triggers are this fixture's pump() and the tests' own calls.
      fx.host = await startLocalHost({
        definitions: definitions.filter((d) => d.kind === 'http'),
        settings: fx.t.rt.settings,
        hostConfig: hostConfigFrom({ version: '2.0' }),
        queueService: QueueServiceClient.fromConnectionString('UseDevelopmentStorage=true'), // unused: no queues
        timerLocks: false,
        opsKey: opts.http.opsKey,
        port: 0,
        log: () => undefined,
      });
    }
  });

  afterAll(async () => {
    await fx.host?.stop();
    await fx.t?.close();
    await fx.source?.end();
    await fx.target?.end();
  });

  return fx;
}

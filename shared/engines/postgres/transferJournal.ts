// PostgreSQL implementation of the transfer journal. Every read and write is one call of a keel.transfer_batch_*
// function (sql/postgres/R__030_transfer_journal_functions.sql): no table SQL here, so the app role needs only EXECUTE, and
// every call is one statement in its own implicit transaction through pool.query. No pool client is ever held
// between statements: a lost connection fails one call (pool.query owns the client's error listener and discards
// it), and nothing waits on the pool while holding one of its clients.
import pg from 'pg';
import {
  insertOutcome,
  type BatchEvent,
  type BatchFilter,
  type BatchPatch,
  type BatchRecord,
  type NewBatch,
  type TransferControl,
  type TransferJournal,
} from '../../transfer/journal.js';
import type { BatchState, SchemaColumn } from '../../transfer/types.js';
import { OPEN_STATES } from '../../transfer/lifecycle.js';
import { countPoolError } from '../poolErrors.js';

const STAMPS = new Set(['extracted_at', 'staged_at', 'apply_started_at', 'committed_at', 'failed_at']);

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

function rowToControl(r: Record<string, unknown>): TransferControl {
  return {
    transferName: String(r.transfer_name),
    paused: r.paused === true,
    reason: (r.reason as string | null) ?? null,
    changedBy: (r.changed_by as string | null) ?? null,
    changedAt: r.changed_at as Date,
  };
}

export function rowToBatch(r: Record<string, unknown>): BatchRecord {
  return {
    batchId: String(r.batch_id),
    transferName: String(r.transfer_name),
    state: r.state as BatchState,
    attempts: Number(r.attempts),
    boundaryKind: r.boundary_kind as BatchRecord['boundaryKind'],
    boundaryLow: (r.boundary_low as string | null) ?? null,
    boundaryHigh: String(r.boundary_high),
    schemaHash: String(r.schema_hash),
    schemaColumns: (typeof r.schema_columns === 'string'
      ? JSON.parse(r.schema_columns)
      : r.schema_columns) as SchemaColumn[],
    rowCount: num(r.row_count),
    checksum: (r.checksum as string | null) ?? null,
    stagedCount: num(r.staged_count),
    stagedChecksum: (r.staged_checksum as string | null) ?? null,
    appliedCount: num(r.applied_count),
    lastError: (r.last_error as string | null) ?? null,
    lastErrorCode: (r.last_error_code as string | null) ?? null,
    targetReconcileToken: (r.target_reconcile_token as string | null) ?? null,
    createdAt: r.created_at as Date,
    updatedAt: r.updated_at as Date,
    extractedAt: (r.extracted_at as Date | null) ?? null,
    stagedAt: (r.staged_at as Date | null) ?? null,
    applyStartedAt: (r.apply_started_at as Date | null) ?? null,
    committedAt: (r.committed_at as Date | null) ?? null,
    failedAt: (r.failed_at as Date | null) ?? null,
  };
}

// Connection limits of the journal's pool. Defaults sit well inside the Functions 10-minute timeout: a journal
// call never waits longer than connect + query timeout (~45 s) for a database that stopped answering.
export interface JournalTimeouts {
  connectTimeoutMs: number; // TCP connect + startup; a pool checkout also waits at most this long
  statementTimeoutMs: number; // server side: statement_timeout of every journal session
  idleInTransactionTimeoutMs: number; // server side: a session left idle inside a transaction is ended
  queryTimeoutMs?: number; // client side: a reply that never comes (default statement timeout + 5 s)
}

export const DEFAULT_JOURNAL_TIMEOUTS: JournalTimeouts = {
  connectTimeoutMs: 10_000,
  statementTimeoutMs: 30_000,
  idleInTransactionTimeoutMs: 60_000,
};

export type JournalLog = (message: string, err: Error) => void;
const defaultLog: JournalLog = (message, err) => console.warn(`${message}: ${err.message}`);

// The control database pool for the journal: timeouts on every connection, TCP keepalive (a half-open
// connection is noticed), and an error listener that logs with context (an idle client that dies is
// replaced by the pool on the next checkout).
export function createJournalPool(
  connectionString: string,
  opts: Partial<JournalTimeouts> & { max?: number; applicationName?: string; log?: JournalLog; options?: string } = {},
): pg.Pool {
  const t = { ...DEFAULT_JOURNAL_TIMEOUTS, ...opts };
  const app = opts.applicationName ?? 'keel-transfer-journal';
  const pool = new pg.Pool({
    connectionString,
    max: opts.max ?? 4,
    application_name: app,
    connectionTimeoutMillis: t.connectTimeoutMs,
    statement_timeout: t.statementTimeoutMs,
    idle_in_transaction_session_timeout: t.idleInTransactionTimeoutMs,
    query_timeout: t.queryTimeoutMs ?? t.statementTimeoutMs + 5_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    idleTimeoutMillis: 30_000,
    ...(opts.options ? { options: opts.options } : {}),
  });
  const log = opts.log ?? defaultLog;
  pool.on('error', (err) => {
    countPoolError('postgres', 'control');
    log(`${app}: idle control-database connection lost (the pool replaces it)`, err);
  });
  return pool;
}

// Only defined keys of the patch reach the function (an absent key leaves its column as it is).
function patchJson(
  patch: Partial<
    Pick<
      BatchPatch,
      | 'rowCount'
      | 'checksum'
      | 'stagedCount'
      | 'stagedChecksum'
      | 'appliedCount'
      | 'lastError'
      | 'lastErrorCode'
      | 'targetReconcileToken'
    >
  >,
): string {
  const out: Record<string, unknown> = {};
  for (const k of [
    'rowCount',
    'checksum',
    'stagedCount',
    'stagedChecksum',
    'appliedCount',
    'lastError',
    'lastErrorCode',
    'targetReconcileToken',
  ] as const) {
    if (patch[k] !== undefined) out[k] = patch[k];
  }
  return JSON.stringify(out);
}

export class PostgresTransferJournal implements TransferJournal {
  constructor(
    private readonly pool: pg.Pool,
    private readonly opts: { ownsPool?: boolean } = {},
  ) {
    // A pool made elsewhere without an error listener would crash the process when an idle client dies.
    if (pool.listenerCount('error') === 0)
      pool.on('error', (err) => {
        countPoolError('postgres', 'control');
        defaultLog('keel-transfer-journal: idle control-database connection lost (the pool replaces it)', err);
      });
  }

  async insertBatch(b: NewBatch): Promise<BatchRecord> {
    const res = await this.pool.query(
      `select r.outcome, r.conflict_batch_id::text as conflict_batch_id, r.conflict_state, (r.batch).*
         from keel.transfer_batch_insert($1, $2, $3, $4, $5, $6, $7::jsonb) r`,
      [
        b.batchId,
        b.transferName,
        b.boundaryKind,
        b.boundaryLow,
        b.boundaryHigh,
        b.schemaHash,
        JSON.stringify(b.schemaColumns),
      ],
    );
    const r = res.rows[0] as Record<string, unknown> | undefined;
    if (!r) throw new Error(`keel.transfer_batch_insert returned no row for batch ${b.batchId}`);
    return insertOutcome(
      b,
      String(r.outcome),
      r.conflict_batch_id as string | null,
      r.conflict_state as string | null,
      () => rowToBatch(r),
    );
  }

  async lastForTransfer(transferName: string) {
    const res = await this.pool.query(`select * from keel.transfer_batch_last($1)`, [transferName]);
    const rows = res.rows.map(rowToBatch);
    return {
      open: rows.find((x) => OPEN_STATES.includes(x.state)) ?? null,
      lastCommitted: rows.find((x) => x.state === 'committed') ?? null,
    };
  }

  async get(batchId: string): Promise<BatchRecord | null> {
    const res = await this.pool.query(`select * from keel.transfer_batch_get($1)`, [batchId]);
    return res.rows[0] ? rowToBatch(res.rows[0]) : null;
  }

  async list(f: BatchFilter): Promise<BatchRecord[]> {
    const res = await this.pool.query(`select * from keel.transfer_batch_list($1, $2, $3, $4)`, [
      f.transfer ?? null,
      f.state ?? null,
      f.afterId ?? null,
      Math.max(1, Math.min(f.limit, 1000)),
    ]);
    return res.rows.map(rowToBatch);
  }

  async events(batchId: string): Promise<BatchEvent[]> {
    const res = await this.pool.query(`select * from keel.transfer_batch_events($1)`, [batchId]);
    return res.rows.map((r) => ({
      eventId: Number(r.event_id),
      batchId: String(r.batch_id),
      at: r.at,
      fromState: r.from_state,
      toState: r.to_state,
      event: r.event,
      detail: r.detail,
    }));
  }

  async transition(
    batchId: string,
    from: readonly BatchState[],
    to: BatchState,
    patch: BatchPatch,
    event: string,
    detail?: Record<string, unknown>,
  ) {
    if (patch.stamp && !STAMPS.has(patch.stamp)) throw new Error(`unknown stamp ${patch.stamp}`);
    const res = await this.pool.query(
      `select * from keel.transfer_batch_transition($1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb)`,
      [
        batchId,
        [...from],
        to,
        patchJson(patch),
        !!patch.incrementAttempts,
        patch.stamp ?? null,
        event,
        JSON.stringify(detail ?? null),
      ],
    );
    return res.rows[0] ? rowToBatch(res.rows[0]) : null;
  }

  async note(
    batchId: string,
    event: string,
    detail?: Record<string, unknown>,
    patch?: Pick<BatchPatch, 'lastError' | 'lastErrorCode' | 'targetReconcileToken'>,
  ) {
    await this.pool.query(`select keel.transfer_batch_note($1, $2, $3::jsonb, $4::jsonb)`, [
      batchId,
      event,
      JSON.stringify(detail ?? null),
      patchJson(patch ?? {}),
    ]);
  }

  async stale(states: readonly BatchState[], olderThanMs: number, limit: number): Promise<BatchRecord[]> {
    const res = await this.pool.query(`select * from keel.transfer_batch_stale($1, $2, $3)`, [
      [...states],
      Math.max(0, Math.floor(olderThanMs)),
      Math.max(1, Math.min(limit, 1000)),
    ]);
    return res.rows.map(rowToBatch);
  }

  async setPaused(
    transferName: string,
    paused: boolean,
    reason: string | null,
    changedBy: string | null,
  ): Promise<TransferControl> {
    const res = await this.pool.query(`select * from keel.transfer_control_set($1, $2, $3, $4)`, [
      transferName,
      paused,
      reason,
      changedBy,
    ]);
    return rowToControl(res.rows[0]);
  }

  async controls(): Promise<TransferControl[]> {
    const res = await this.pool.query(`select * from keel.transfer_control_list()`);
    return res.rows.map(rowToControl);
  }

  async close(): Promise<void> {
    if (this.opts.ownsPool) await this.pool.end();
  }
}

// PostgreSQL dialect of the transfer journal (shared/transfer/procedureJournal.ts): every read and write is one
// call of a keel.transfer_* function (sql/postgres/R__030_transfer_journal_functions.sql) through the typed table
// below, so no table SQL here and the app role needs only EXECUTE. Every call is one statement in its own implicit
// transaction through pool.query. No pool client is ever held between statements: a lost connection fails one call
// (pool.query owns the client's error listener and discards it), and nothing waits on the pool while holding one
// of its clients.
import pg from 'pg';
import { ProcedureJournal } from '../../transfer/procedureJournal.js';
import type { JournalArgs, JournalParam, JournalProcedure } from '../../transfer/journalProcedures.js';
import type { JournalRow } from '../../transfer/journalRows.js';
import { countPoolError } from '../poolErrors.js';
import { readCommittedOptions } from './readCommitted.js';
import { pgStatement, type PgSignature } from './procedures.js';

// The PostgreSQL side of JOURNAL_PROCEDURES: the type of each parameter of keel.<name>(p_<param>, ...) in
// declaration order, and what the function returns (test/engines/parity.test.ts checks it against pg_proc).
const PATCH_TYPES = {
  set_last_error: 'boolean',
  last_error: 'text',
  set_last_error_code: 'boolean',
  last_error_code: 'text',
  set_target_reconcile_token: 'boolean',
  target_reconcile_token: 'text',
} as const;

export const JOURNAL_POSTGRES_FUNCTIONS: { [P in JournalProcedure]: PgSignature<JournalParam<P>> } = {
  transfer_batch_insert: {
    params: {
      batch_id: 'uuid',
      transfer_name: 'text',
      boundary_kind: 'text',
      boundary_low: 'text',
      boundary_high: 'text',
      schema_hash: 'text',
      schema_columns: 'jsonb',
      detail: 'jsonb',
    },
    returns: 'rows',
    // outcome, conflict_batch_id, conflict_state and the inserted row's columns (batch is a keel.transfer_batches).
    select: 'r.outcome, r.conflict_batch_id, r.conflict_state, (r.batch).*',
  },
  transfer_batch_transition: {
    params: {
      batch_id: 'uuid',
      from_states: 'text[]',
      to_state: 'text',
      set_row_count: 'boolean',
      row_count: 'bigint',
      set_checksum: 'boolean',
      checksum: 'text',
      set_staged_count: 'boolean',
      staged_count: 'bigint',
      set_staged_checksum: 'boolean',
      staged_checksum: 'text',
      set_applied_count: 'boolean',
      applied_count: 'bigint',
      ...PATCH_TYPES,
      increment_attempts: 'boolean',
      stamp: 'text',
      event: 'text',
      detail: 'jsonb',
      if_version: 'bigint',
    },
    returns: 'rows',
  },
  transfer_batch_note: {
    params: { batch_id: 'uuid', event: 'text', detail: 'jsonb', ...PATCH_TYPES, if_version: 'bigint' },
    returns: 'boolean',
  },
  transfer_batch_get: { params: { batch_id: 'uuid' }, returns: 'rows' },
  transfer_batch_last: { params: { transfer_name: 'text' }, returns: 'rows' },
  transfer_batch_list: {
    params: { transfer_name: 'text', state: 'text', after_id: 'uuid', limit: 'integer' },
    returns: 'rows',
  },
  transfer_batch_event_list: { params: { batch_id: 'uuid' }, returns: 'rows' },
  transfer_batch_stale: { params: { states: 'text[]', older_than_ms: 'bigint', limit: 'integer' }, returns: 'rows' },
  transfer_control_set: {
    params: { transfer_name: 'text', paused: 'boolean', reason: 'text', changed_by: 'text' },
    returns: 'rows',
  },
  transfer_control_list: { params: {}, returns: 'rows' },
  transfer_journal_now: { params: {}, returns: 'rows' },
};

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
    // READ COMMITTED (and ISO dates) whatever the database's default: its transitions wait for and re-read batch rows as the job
    // store's moves do (readCommitted.ts)
    ...readCommittedOptions(connectionString, opts.options),
    max: opts.max ?? 4,
    application_name: app,
    connectionTimeoutMillis: t.connectTimeoutMs,
    statement_timeout: t.statementTimeoutMs,
    idle_in_transaction_session_timeout: t.idleInTransactionTimeoutMs,
    query_timeout: t.queryTimeoutMs ?? t.statementTimeoutMs + 5_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    idleTimeoutMillis: 30_000,
  });
  const log = opts.log ?? defaultLog;
  pool.on('error', (err) => {
    countPoolError('postgres', 'control');
    log(`${app}: idle control-database connection lost (the pool replaces it)`, err);
  });
  return pool;
}

export class PostgresTransferJournal extends ProcedureJournal {
  constructor(
    private readonly pool: pg.Pool,
    private readonly opts: { ownsPool?: boolean } = {},
  ) {
    super();
    // A pool made elsewhere without an error listener would crash the process when an idle client dies.
    if (pool.listenerCount('error') === 0)
      pool.on('error', (err) => {
        countPoolError('postgres', 'control');
        defaultLog('keel-transfer-journal: idle control-database connection lost (the pool replaces it)', err);
      });
  }

  protected procedureName(proc: JournalProcedure): string {
    return `keel.${proc}`;
  }

  protected async execute<P extends JournalProcedure>(proc: P, args: JournalArgs<P>): Promise<JournalRow[][]> {
    const { text, values } = pgStatement(proc, JOURNAL_POSTGRES_FUNCTIONS[proc] as PgSignature, args);
    const res = await this.pool.query<JournalRow>(text, values); // columns: the table's snake_case names
    return [res.rows];
  }

  async close(): Promise<void> {
    if (this.opts.ownsPool) await this.pool.end();
  }
}

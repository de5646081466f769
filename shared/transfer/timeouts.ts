// Timeouts of every transfer source and target connection (the journal's connections have their own). Each one is an
// app setting with a safe default well inside the Functions timeout (host.json: 10 minutes), so that a lost reply,
// a peer that stops answering or a session left idle in a transaction ends the step with a recorded, retryable
// error instead of blocking it until the host kills the invocation. docs/transfer.md ("Timeouts") explains each.
import type pg from 'pg';
import type { SettingDeclaration } from '../config/declaration.js';
import { TransferError } from './errors.js';

export interface TransferTimeouts {
  connectMs: number; // opening a connection (and waiting for a pooled one)
  statementMs: number; // server side: PostgreSQL statement_timeout; SQL Server: the request timeout
  queryMs: number; // client side: no reply to a statement for this long -> error, connection discarded
  idleInTransactionMs: number; // PostgreSQL idle_in_transaction_session_timeout: a session whose client vanished mid-transaction
  lockMs: number; // PostgreSQL lock_timeout for transfer statements (reconcile's claim probe uses reconcileWaitMs)
  stallMs: number; // staging: no data moved between source and target for this long -> error
}

export const FUNCTION_TIMEOUT_MS = 10 * 60_000;

export const DEFAULT_TRANSFER_TIMEOUTS: Readonly<TransferTimeouts> = Object.freeze({
  connectMs: 15_000,
  statementMs: 5 * 60_000,
  queryMs: 5 * 60_000 + 15_000,
  idleInTransactionMs: 60_000,
  lockMs: 30_000,
  stallMs: 60_000,
});

const SETTINGS: [keyof TransferTimeouts, string][] = [
  ['connectMs', 'KEEL_TRANSFER_CONNECT_TIMEOUT_MS'],
  ['statementMs', 'KEEL_TRANSFER_STATEMENT_TIMEOUT_MS'],
  ['queryMs', 'KEEL_TRANSFER_QUERY_TIMEOUT_MS'],
  ['idleInTransactionMs', 'KEEL_TRANSFER_IDLE_IN_TRANSACTION_TIMEOUT_MS'],
  ['lockMs', 'KEEL_TRANSFER_LOCK_TIMEOUT_MS'],
  ['stallMs', 'KEEL_TRANSFER_STALL_TIMEOUT_MS'],
];

const TIMEOUT_DOCS: Record<keyof TransferTimeouts, string> = {
  connectMs: 'opening a transfer connection (and waiting for a pooled one)',
  statementMs: 'server side: PostgreSQL statement_timeout, SQL Server request timeout',
  queryMs: 'client side: no reply to a statement for this long ends it; must exceed the statement timeout',
  idleInTransactionMs: 'PostgreSQL idle_in_transaction_session_timeout of transfer sessions',
  lockMs: 'PostgreSQL lock_timeout of transfer statements',
  stallMs: 'staging: no data moved between source and target for this long ends the step',
};

// The settings transferTimeouts parses (shared/app/settingsIndex.ts).
export const TRANSFER_TIMEOUT_SETTINGS: readonly SettingDeclaration[] = SETTINGS.map(([key, name]) => ({
  name,
  type: `whole milliseconds, 1 to ${FUNCTION_TIMEOUT_MS - 1}`,
  default: key === 'queryMs' ? 'the statement timeout + 15000' : String(DEFAULT_TRANSFER_TIMEOUTS[key]),
  doc: TIMEOUT_DOCS[key],
}));

// Reads the settings; an invalid value fails at startup naming the setting. Every value must stay below the
// function timeout, and the client-side query timeout must exceed the server-side statement timeout (so that the
// server's own cancel, with its error, normally arrives first).
export function transferTimeouts(env: NodeJS.ProcessEnv): TransferTimeouts {
  const out: TransferTimeouts = { ...DEFAULT_TRANSFER_TIMEOUTS };
  for (const [key, name] of SETTINGS) {
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') continue;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1 || n >= FUNCTION_TIMEOUT_MS) {
      throw new TransferError(
        'config_invalid',
        `invalid transfer configuration: ${name}: expected whole milliseconds from 1 to ${FUNCTION_TIMEOUT_MS - 1}, got ${JSON.stringify(raw)}`,
      );
    }
    out[key] = n;
  }
  if (env.KEEL_TRANSFER_QUERY_TIMEOUT_MS === undefined || env.KEEL_TRANSFER_QUERY_TIMEOUT_MS.trim() === '') {
    out.queryMs = Math.min(FUNCTION_TIMEOUT_MS - 1, out.statementMs + 15_000);
  }
  if (out.queryMs <= out.statementMs) {
    throw new TransferError(
      'config_invalid',
      `invalid transfer configuration: KEEL_TRANSFER_QUERY_TIMEOUT_MS (${out.queryMs}) must exceed KEEL_TRANSFER_STATEMENT_TIMEOUT_MS (${out.statementMs})`,
    );
  }
  return out;
}

// pg pool settings for a transfer source or target: every timeout above, TCP keepalive, a bounded pool.
export function pgTransferPoolConfig(
  connectionString: string,
  t: TransferTimeouts = DEFAULT_TRANSFER_TIMEOUTS,
  max = 4,
): pg.PoolConfig {
  return {
    connectionString,
    max,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: t.connectMs,
    query_timeout: t.queryMs,
    statement_timeout: t.statementMs,
    idle_in_transaction_session_timeout: t.idleInTransactionMs,
    lock_timeout: t.lockMs,
  };
}

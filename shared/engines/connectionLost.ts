// Whether an error says the database was out of reach or the connection broke under the call (its outcome unknown),
// rather than something the statement itself refused. Read from the error's shape only (codes, numbers, the texts the
// drivers use), through `cause` / `originalError`, so it needs no driver: PostgreSQL (pg), SQL Server (mssql/tedious)
// and Oracle (oracledb). The ops API answers these 503 `unavailable` instead of 500 (shared/ops/router.ts).

// PostgreSQL SQLSTATEs: class 08 (connection exception), the server shutting down or not yet accepting (57P01-57P03),
// a connection closed by the login's idle_session_timeout (57P05: the pool may hand one out as the server closes it),
// and too many connections (53300).
const PG_STATES = /^(08[0-9A-Z]{3}|57P0[1235]|53300)$/;
// Node's socket and name-resolution errors, and mssql/tedious's connection codes.
const SOCKET_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ESOCKET',
  'ECONNCLOSED',
  'ENOTOPEN',
  'ECLOSE',
  'EINSTLOOKUP',
]);
// SQL Server: cannot open database, database unavailable or moving, connection-level transport errors.
const MSSQL_NUMBERS: ReadonlySet<number> = new Set([4060, 40613, 40197, 40501, 10053, 10054, 10060, 233, 64]);
// pg's own words for a connection that ended or a connect that timed out, and PostgreSQL's refusal of a connect to a
// database closed to connections (ALTER DATABASE ... ALLOW_CONNECTIONS false; SQLSTATE 55000, a class too broad to
// take whole), the counterpart of SQL Server's 4060; Oracle's end-of-file on the channel, not connected, no
// listener, and the connection closed under the call.
const TEXTS =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|^database ".*" is not currently accepting connections$|^ORA-(03113|03114|03135|12514|12541|12170)|^DPI-1080|^NJS-(003|500|501|503)/;

interface ErrorShape {
  code?: unknown;
  number?: unknown;
  message?: unknown;
  cause?: unknown;
  originalError?: unknown;
}

export function isConnectionLost(err: unknown, depth = 0): boolean {
  const e = err as ErrorShape | null;
  if (!e || typeof e !== 'object' || depth > 5) return false;
  if (typeof e.code === 'string' && (PG_STATES.test(e.code) || SOCKET_CODES.has(e.code))) return true;
  if (typeof e.number === 'number' && MSSQL_NUMBERS.has(e.number)) return true;
  if (typeof e.message === 'string' && TEXTS.test(e.message)) return true;
  return isConnectionLost(e.cause, depth + 1) || isConnectionLost(e.originalError, depth + 1);
}

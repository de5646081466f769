// The Oracle target's connections (node-oracledb thin mode): the pool, the one-time setup of each of its sessions
// (server version, NLS), and every call under a watchdog (OracleSession), since thin mode's callTimeout does not
// bound a silent peer.
import oracledb from 'oracledb';

// The call's outcome is unknown because the connection is gone (the node-oracledb Transaction Guard guide: "Check
// error.isRecoverable ... If not, do not proceed with Transaction Guard"): lost contact, end of file, a connection
// closed under the call, or the watchdog below.
const CONNECTION_LOST_CODES = new Set(['NJS-500', 'NJS-501', 'NJS-503', 'NJS-521']);
export function isConnectionLost(err: unknown): boolean {
  const e = err as { isRecoverable?: unknown; code?: unknown } | null;
  if (e?.isRecoverable === true) return true;
  return typeof e?.code === 'string' && (CONNECTION_LOST_CODES.has(e.code) || e.code === ORACLE_CALL_ABANDONED);
}

// oracle://user:password@host:1521/service  ->  pool attributes for thin mode.
export function parseOracleUrl(url: string): { user: string; password: string; connectString: string } {
  const u = new URL(url);
  if (u.protocol !== 'oracle:') throw new Error('Oracle connection: expected oracle://user:password@host:port/service');
  const service = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (!u.hostname || !service || !u.username)
    throw new Error(
      'Oracle connection: user, host and service are required (oracle://user:password@host:port/service)',
    );
  return {
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    connectString: `${u.hostname}:${u.port || '1521'}/${service}`,
  };
}

export const ORACLE_CALL_TIMEOUT_MS = 9 * 60_000;

// Thin mode's callTimeout only sends a break marker and keeps waiting for the reply (oracle/node-oracledb#1626):
// over a path that drops packets without a reset (a dead NAT flow, a vanished VM) the call ends only when TCP gives
// up, 11 to 16 minutes later, past the function's 10-minute budget; RECV_TIMEOUT is parsed but not applied by thin
// 6.10, and expireTime only sets keepalive. So every call also runs under a watchdog this much longer than its
// callTimeout (the break gets its chance first): when it fires, the call is abandoned (its promise settles on its
// own), the connection is dropped from the pool in the background, and the caller gets an error that counts as a
// lost connection (ORACLE_CALL_ABANDONED, isRecoverable).
export const ORACLE_WATCHDOG_GRACE_MS = 15_000;
export const ORACLE_CALL_ABANDONED = 'KEEL-ORA-ABANDONED';

function abandonedError(what: string, ms: number): Error {
  return Object.assign(
    new Error(
      `Oracle ${what}: no reply within ${Math.round(ms / 1000)} s (call timeout plus ${ORACLE_WATCHDOG_GRACE_MS / 1000} s); the connection was abandoned and is dropped from the pool, the outcome on the server is unknown`,
    ),
    { code: ORACLE_CALL_ABANDONED, isRecoverable: true },
  );
}

// One checked-out connection under the watchdog. release() returns it to the pool, or drops it; a session whose
// call was abandoned is never used again.
export class OracleSession {
  private gone = false;
  private callTimeoutMs: number;

  constructor(
    readonly c: oracledb.Connection,
    callTimeoutMs: number,
  ) {
    this.callTimeoutMs = callTimeoutMs;
    c.callTimeout = callTimeoutMs;
  }

  setCallTimeout(ms: number): void {
    this.callTimeoutMs = ms;
    this.c.callTimeout = ms;
  }

  async run<T>(what: string, call: (c: oracledb.Connection) => Promise<T>): Promise<T> {
    const limit = this.callTimeoutMs + ORACLE_WATCHDOG_GRACE_MS;
    if (this.gone) throw abandonedError(what, limit);
    const pending = call(this.c);
    let timer: NodeJS.Timeout | undefined;
    const watchdog = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.drop();
        reject(abandonedError(what, limit));
      }, limit);
    });
    try {
      return await Promise.race([pending, watchdog]);
    } finally {
      clearTimeout(timer);
      pending.catch(() => undefined); // an abandoned call's late error has nobody to go to
    }
  }

  // Closing can hang on a silent peer like any call (rollback, logoff): it is bounded the same way and left to
  // finish in the background.
  async release(opts: { drop: boolean }): Promise<void> {
    if (this.gone) return;
    this.gone = true;
    const closing = this.c.close({ drop: opts.drop }).catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      closing,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, ORACLE_WATCHDOG_GRACE_MS))),
    ]);
    clearTimeout(timer);
  }

  private drop(): void {
    if (this.gone) return;
    this.gone = true;
    this.c.close({ drop: true }).catch(() => undefined);
  }
}

// Oracle 12.2 or later: staging objects are named KEEL_STG_<transfer> and <that>_B, up to 51 characters, and names
// longer than 30 bytes need 12.2's 128-byte identifiers. LISTAGG ... ON OVERFLOW is 12.2 too.
export const ORACLE_MIN_VERSION = { major: 12, minor: 2, number: 1202000000 };

// Every session of a Keel pool is set up once, when the pool creates it (node-oracledb calls the pool's
// sessionCallback for a new session, or when the tag a caller asks for differs from the session's), instead of an
// ALTER SESSION on every checkout:
// - the server must be 12.2 or later (ORACLE_MIN_VERSION), else the connection is refused with a message saying so;
// - canonical decimals use '.' and dates the Gregorian calendar: TO_NUMBER/TO_CHAR follow the session's NLS settings
//   (every date/time conversion names its format explicitly, so NLS_DATE_FORMAT & co. do not matter); name lists
//   are sorted and compared byte-wise (key check in prepare, column check in ENSURE_STAGING).
export const KEEL_SESSION_TAG = 'KEEL_NLS=1';
export const KEEL_SESSION_SQL = `ALTER SESSION SET NLS_NUMERIC_CHARACTERS = '.,' NLS_CALENDAR = 'GREGORIAN' NLS_SORT = 'BINARY' NLS_COMP = 'BINARY'`;

type SessionConnection = Pick<oracledb.Connection, 'execute'> & {
  tag?: string;
  oracleServerVersion?: number;
  oracleServerVersionString?: string;
  maxIdentifierLength?: number;
};

export function oracleSessionCallback(
  conn: SessionConnection,
  _requestedTag: string,
  done: (err?: Error) => void,
): void {
  const v = conn.oracleServerVersion;
  if (typeof v === 'number' && v > 0 && v < ORACLE_MIN_VERSION.number) {
    done(
      new Error(
        `Oracle ${conn.oracleServerVersionString ?? v} is not supported as a transfer target: Keel needs ${ORACLE_MIN_VERSION.major}.${ORACLE_MIN_VERSION.minor} or later (staging object names up to 51 characters, LISTAGG ... ON OVERFLOW); see docs/oracle.md`,
      ),
    );
    return;
  }
  // A 12.2+ server running with COMPATIBLE below 12.2 still has 30-byte identifiers (KEEL_STG_<name>_B would fail
  // with ORA-00972); thin mode reads the limit from the logon (AUTH_MAX_IDEN_LENGTH).
  const idLength = conn.maxIdentifierLength;
  if (typeof idLength === 'number' && idLength > 0 && idLength < 128) {
    done(
      new Error(
        `Oracle ${conn.oracleServerVersionString ?? v ?? ''} allows identifiers of ${idLength} bytes (COMPATIBLE below 12.2): Keel needs 128 (staging object names up to 51 characters); see docs/oracle.md`,
      ),
    );
    return;
  }
  conn.execute(KEEL_SESSION_SQL).then(
    () => {
      conn.tag = KEEL_SESSION_TAG;
      done();
    },
    (err: Error) => done(err),
  );
}

export interface OracleCredentials {
  user: string;
  password: string;
  connectString: string; // host:port/service (EZConnect) or a TNS alias
}

// From an oracle://user:password@host:port/service URL, or from separate settings (connect string, user, password).
// connectTimeoutMs: opening a connection (thin mode connectTimeout / transportConnectTimeout, in seconds) and waiting
// for a pooled one (queueTimeout). Statements are bounded by ORACLE_CALL_TIMEOUT_MS (callTimeout); expireTime sends
// keepalive probes so a dead peer is noticed between calls.
export async function createOraclePool(
  connection: string | OracleCredentials,
  connectTimeoutMs = 15_000,
): Promise<oracledb.Pool> {
  const a = typeof connection === 'string' ? parseOracleUrl(connection) : connection;
  const seconds = Math.max(1, Math.ceil(connectTimeoutMs / 1000));
  return oracledb.createPool({
    ...a,
    poolMin: 0,
    poolMax: 4,
    poolIncrement: 1,
    poolPingInterval: 30,
    connectTimeout: seconds,
    transportConnectTimeout: seconds,
    queueTimeout: connectTimeoutMs,
    expireTime: 1,
    sessionCallback: oracleSessionCallback,
  });
}

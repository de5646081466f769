// Pool and client `error` events. A pooled connection that dies while idle (server restart, failover, a dropped
// network path) emits `error` on the pool; unhandled, Node would crash the process. The pool discards that
// connection and the next checkout opens a new one, so the event is not fatal, but it is often the first sign of
// an outage: it is logged with what the pool serves, never swallowed, and counted (keel.db.pool_errors, by engine
// and pool role) so an alert can see a burst of them.
import { telemetry, type PoolRole } from '../telemetry/index.js';

export type ConnectionErrorLog = (line: string) => void;

export function countPoolError(engine: string, role: PoolRole): void {
  telemetry.poolError({ engine, role });
}

export function poolErrorLogger(
  engine: string,
  role: PoolRole,
  what: string,
  log: ConnectionErrorLog = console.warn,
): (err: unknown) => void {
  return (err) => {
    countPoolError(engine, role);
    const e = err as { message?: string; code?: string } | undefined;
    log(
      `keel ${engine} ${what}: connection error${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(err)} (the pool replaces the connection)`,
    );
  };
}

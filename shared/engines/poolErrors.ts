// Pool and client `error` events. A pooled connection that dies while idle (server restart, failover, a dropped
// network path) emits `error` on the pool; unhandled, Node would crash the process. The pool discards that
// connection and the next checkout opens a new one, so the event is not fatal, but it is often the first sign of
// an outage: it is logged with what the pool serves, never swallowed.
export type ConnectionErrorLog = (line: string) => void;

export function poolErrorLogger(
  engine: string,
  what: string,
  log: ConnectionErrorLog = console.warn,
): (err: unknown) => void {
  return (err) => {
    const e = err as { message?: string; code?: string } | undefined;
    log(
      `keel ${engine} ${what}: connection error${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(err)} (the pool replaces the connection)`,
    );
  };
}

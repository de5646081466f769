// The store's pool validates a pooled connection by its socket, not by a `SELECT 1` round trip on every acquire
// (mssql's default `validateConnection: true`; review F6). No server needed: the pool is created, never connected,
// and the driver's own validation hook is called with a stand-in tedious connection.
import { afterEach, describe, expect, it } from 'vitest';
import { SqlServerPool } from '../../shared/engines/sqlserver/pool.js';

interface ValidatingPool {
  config: { validateConnection?: unknown };
  _poolValidate(connection: unknown): boolean | Promise<boolean>;
}

function standInConnection(overrides: Record<string, unknown> = {}) {
  const state = { LOGGED_IN: { name: 'LoggedIn' }, FINAL: { name: 'Final' } };
  let sqlBatches = 0;
  const connection = {
    closed: false,
    hasError: false,
    STATE: state,
    state: state.LOGGED_IN,
    socket: { destroyed: false, writable: true },
    execSql: () => {
      sqlBatches++;
    },
    ...overrides,
  };
  return { connection, sqlBatches: () => sqlBatches };
}

describe('sqlserver pool: connection validation', () => {
  let pool: SqlServerPool | undefined;
  afterEach(async () => {
    await pool?.close().catch(() => undefined);
    pool = undefined;
  });

  it('validates by socket state: no SELECT 1 per acquire, and a dead socket or session is refused', async () => {
    pool = SqlServerPool.create('mssql://keel:secret@127.0.0.1:1/keel');
    const driver = pool.pool as unknown as ValidatingPool;
    expect(driver.config.validateConnection).toBe('socket');

    const healthy = standInConnection();
    expect(await driver._poolValidate(healthy.connection)).toBe(true);
    expect(healthy.sqlBatches()).toBe(0);

    const destroyed = standInConnection({ socket: { destroyed: true, writable: false } });
    expect(await driver._poolValidate(destroyed.connection)).toBe(false);
    const loggedOut = standInConnection();
    loggedOut.connection.state = loggedOut.connection.STATE.FINAL;
    expect(await driver._poolValidate(loggedOut.connection)).toBe(false);
    expect(destroyed.sqlBatches() + loggedOut.sqlBatches()).toBe(0);
  });
});

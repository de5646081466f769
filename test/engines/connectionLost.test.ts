// isConnectionLost: the error shapes of each driver that say the database was out of reach or the connection broke
// under the call, and those that do not (the statement's own refusals, bugs).
import { describe, expect, it } from 'vitest';
import { isConnectionLost } from '../../shared/engines/connectionLost.js';

const err = (message: string, extra: Record<string, unknown> = {}) => Object.assign(new Error(message), extra);

describe('isConnectionLost', () => {
  it.each([
    ['pg: the server closed the connection', err('Connection terminated unexpectedly')],
    ['pg: a connect that timed out', err('timeout exceeded when trying to connect')],
    ['pg: admin shutdown (57P01)', err('terminating connection due to administrator command', { code: '57P01' })],
    ['pg: cannot connect now (57P03)', err('the database system is starting up', { code: '57P03' })],
    // A login's idle_session_timeout (PostgreSQL 14+) closes a pooled connection the moment the pool hands it out:
    // the call gets the server's FATAL (chaos hunt 6: claims, completions, a scheduler pass; an ops call answered 500).
    ['pg: idle-session timeout (57P05)', err('terminating connection due to idle-session timeout', { code: '57P05' })],
    ['pg: connection failure (08006)', err('connection failure', { code: '08006' })],
    ['pg: too many connections (53300)', err('sorry, too many clients already', { code: '53300' })],
    [
      'pg: a database closed to connections (55000)',
      err('database "keel_src" is not currently accepting connections', { code: '55000' }),
    ],
    ['node: refused', err('connect ECONNREFUSED 127.0.0.1:5432', { code: 'ECONNREFUSED' })],
    ['mssql: socket', err('Connection lost - read ECONNRESET', { code: 'ESOCKET' })],
    ['mssql: closed under the request', err('Connection closed before request completed.', { code: 'ECLOSE' })],
    ['mssql: database unavailable (40613)', err('Database is not currently available', { number: 40613 })],
    ['mssql: the cause inside a RequestError', err('request failed', { originalError: err('x', { code: 'ESOCKET' }) })],
    ['oracle: end-of-file on the channel', err('ORA-03113: end-of-file on communication channel')],
    ['oracle: the connection closed', err('DPI-1080: connection was closed by ORA-3113')],
    ['a cause chain', err('stage failed', { cause: err('Connection terminated unexpectedly') })],
  ])('%s', (_what, e) => expect(isConnectionLost(e)).toBe(true));

  it.each([
    ['pg: unique violation', err('duplicate key value violates unique constraint', { code: '23505' })],
    ['pg: statement timeout', err('canceling statement due to statement timeout', { code: '57014' })],
    ['pg: deadlock', err('deadlock detected', { code: '40P01' })],
    ['pg: another 55000', err('cannot drop the currently open database', { code: '55000' })],
    ['mssql: deadlock victim', err('Transaction was deadlocked', { number: 1205 })],
    ['oracle: unique constraint', err('ORA-00001: unique constraint violated')],
    ['a bug', new TypeError('Cannot read properties of undefined')],
    ['not an error', 'Connection terminated'],
    ['nothing', undefined],
  ])('not %s', (_what, e) => expect(isConnectionLost(e)).toBe(false));

  it('stops on a cause cycle', () => {
    const a = err('a') as Error & { cause?: unknown };
    a.cause = a;
    expect(isConnectionLost(a)).toBe(false);
  });
});

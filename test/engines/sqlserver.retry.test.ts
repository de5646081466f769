// retry.ts reads every error of a request, not only the last one: mssql throws the last server error and keeps the
// earlier ones in `precedingErrors` (node_modules/mssql/lib/tedious/request.js), so a deadlock's 1205 followed by
// 3915 (ROLLBACK inside INSERT ... EXEC) or 266 must still be recognised as a rolled-back, retryable request
// (review F8). No server needed: the errors are built the way mssql builds them.
import { describe, expect, it } from 'vitest';
import sql from 'mssql';
import {
  isOutcomeUnknown,
  isRolledBackSqlError,
  isTransientSqlError,
  withSqlRetry,
} from '../../shared/engines/sqlserver/retry.js';

// Built as mssql's tedious request builds them (lib/tedious/request.js, handleError and done): an Error carrying
// tedious' message info, wrapped in a RequestError (which copies info.number), the request's earlier errors
// attached as precedingErrors.
function serverError(number: number, message: string, preceding: Error[] = []): Error {
  const original = Object.assign(new Error(message), { info: { number, message, class: 16, state: 1 } });
  const err = new sql.RequestError(original, 'EREQUEST') as sql.RequestError & { precedingErrors?: Error[] };
  err.precedingErrors = preceding;
  return err;
}

const deadlock = () => serverError(1205, 'Transaction (Process ID 61) was deadlocked on lock resources');
const insertExecRollback = (preceding: Error[]) =>
  serverError(3915, 'Cannot use the ROLLBACK statement within an INSERT-EXEC statement.', preceding);
const tranCountMismatch = (preceding: Error[]) =>
  serverError(266, 'Transaction count after EXECUTE indicates a mismatching number of BEGIN and COMMIT', preceding);
const constraint = (preceding: Error[] = []) => serverError(547, 'The INSERT statement conflicted', preceding);

describe('sqlserver retry: every error of a request is classified (precedingErrors)', () => {
  it('builds errors the way mssql does: the number is on the RequestError itself', () => {
    const e = deadlock() as Error & { number?: number; code?: string };
    expect(e.number).toBe(1205);
    expect(e.code).toBe('EREQUEST');
  });

  it('a 1205 before a masking 3915 or 266 means rolled back and transient', () => {
    for (const masked of [insertExecRollback([deadlock()]), tranCountMismatch([deadlock()])]) {
      expect(isRolledBackSqlError(masked)).toBe(true);
      expect(isTransientSqlError(masked)).toBe(true);
      expect(isOutcomeUnknown(masked)).toBe(false);
    }
  });

  it('a transient number among the preceding errors makes the request transient, not rolled back', () => {
    const busyThenOther = constraint([serverError(40501, 'The service is currently busy.')]);
    expect(isTransientSqlError(busyThenOther)).toBe(true);
    expect(isRolledBackSqlError(busyThenOther)).toBe(false);
  });

  it('no transient number anywhere in the chain: neither transient nor rolled back', () => {
    const plain = insertExecRollback([constraint()]);
    expect(isTransientSqlError(plain)).toBe(false);
    expect(isRolledBackSqlError(plain)).toBe(false);
    expect(isTransientSqlError(constraint([]))).toBe(false);
  });

  it("'once' retries a request whose 1205 was masked by 3915, and gives up on a masked constraint error", async () => {
    const noSleep = { sleep: async () => undefined, attempts: 4 };
    let calls = 0;
    const masked = insertExecRollback([deadlock()]);
    const result = await withSqlRetry(
      'once',
      async () => {
        calls++;
        if (calls === 1) throw masked;
        return 'fired';
      },
      noSleep,
    );
    expect(result).toBe('fired');
    expect(calls).toBe(2);

    let fatalCalls = 0;
    const fatal = insertExecRollback([constraint()]);
    await expect(
      withSqlRetry(
        'once',
        async () => {
          fatalCalls++;
          throw fatal;
        },
        noSleep,
      ),
    ).rejects.toBe(fatal);
    expect(fatalCalls).toBe(1);
  });

  it('survives an error chain that refers back to itself', () => {
    const loop = serverError(3915, 'loop') as Error & { precedingErrors?: unknown[] };
    loop.precedingErrors = [loop];
    expect(isRolledBackSqlError(loop)).toBe(false);
    const cause = Object.assign(new Error('outer'), {}) as Error & { cause?: unknown };
    cause.cause = cause;
    expect(isTransientSqlError(cause)).toBe(false);
  });
});

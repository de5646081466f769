// Oracle target, reconcile with Transaction Guard and deterministic data errors, against the model of the server and
// the thin pool in ./oracleFake.ts (no Oracle server here; the real-server suites are test/transfer/oracle.test.ts
// and test/engines/oracle.targetAdapter.test.ts). The service-level cases use the run's PostgreSQL for the journal
// and the source. Issue 23 / docs/oracle.md, "Reconcile and Transaction Guard".
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { dataError, ORA_DATA_ERRORS } from '../../shared/engines/oracle/dataErrors.js';
import {
  ORACLE_CALL_ABANDONED,
  ORACLE_CALL_TIMEOUT_MS,
  ORACLE_WATCHDOG_GRACE_MS,
} from '../../shared/engines/oracle/session.js';
import { OracleTransferTarget } from '../../shared/engines/oracle/transferTarget.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError, TransferError } from '../../shared/transfer/errors.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { StageRequest } from '../../shared/transfer/types.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { createTestDatabase } from '../support/pg.js';
import { migrateJournal } from '../support/journalMigrations.js';
import { FakeOracle, oraError } from './oracleFake.js';

const RULES = transferEngineRules();

function oracleTransfer(name: string, transactionGuard: boolean, keyColumns = ['id']): TransferConfig {
  return parseTransfers(
    [
      {
        name,
        source: { engine: 'postgres', connectionSetting: 'S', table: 'public.items' },
        target: { engine: 'oracle', connectionSetting: 'T', table: 'ITEMS', transactionGuard },
        keyColumns,
        boundary: { column: 'id', kind: 'key' },
        columns: [
          { source: 'id', target: 'ID' },
          { source: 'name', target: 'NAME' },
          { source: 'amount', target: 'AMOUNT' },
          { source: 'born', target: 'BORN' },
        ],
        batchSize: 100,
        chunkSize: 50,
        reconcileWaitMs: 1000,
      },
    ],
    RULES,
  )[0]!;
}

// ALL_TAB_COLUMNS of the target: column_name, data_type, data_scale, data_precision, data_length, char_length,
// char_used, nullable.
const ITEMS_COLUMNS = [
  ['ID', 'NUMBER', 0, 19, 22, 0, null, 'N'],
  ['NAME', 'VARCHAR2', null, null, 40, 10, 'C', 'N'],
  ['AMOUNT', 'NUMBER', 2, 6, 22, 0, null, 'Y'],
  ['BORN', 'DATE', null, null, 7, 0, null, 'Y'],
];
// As the service records it: the key and boundary columns flagged.
const ITEMS_SCHEMA = {
  hash: 'h',
  columns: [
    {
      name: 'id',
      type: 'bigint',
      logical: 'int' as const,
      nullable: false,
      key: true as const,
      boundary: true as const,
    },
    { name: 'name', type: 'text', logical: 'text' as const, nullable: false },
    { name: 'amount', type: 'numeric', logical: 'decimal' as const, nullable: true },
    { name: 'born', type: 'date', logical: 'date' as const, nullable: true },
  ],
};

async function prepared(transactionGuard: boolean) {
  const fake = new FakeOracle();
  fake.columns = ITEMS_COLUMNS;
  const target = new OracleTransferTarget(oracleTransfer('items', transactionGuard), fake.pool);
  await target.prepare(ITEMS_SCHEMA as never);
  // A batch staged on the target (as stage() leaves it): registry row committed, two rows.
  const req: StageRequest = {
    batchId: '00000000-0000-4000-8000-000000000001',
    transfer: 'items',
    manifest: { rowCount: 2, checksum: 'v1:abc' } as never,
    schema: ITEMS_SCHEMA as never,
  };
  fake.registry.set(req.batchId, { state: 'STAGED', count: 2, checksum: 'v1:abc' });
  fake.stagedRows.push([req.batchId, '1', 'a', '1.5', null!], [req.batchId, '2', 'b', null!, null!]);
  fake.calls.length = 0;
  return { fake, target, req };
}

async function applyWithToken(target: OracleTransferTarget, req: StageRequest, attempt = 1) {
  let token: string | null = null;
  const outcome = await target
    .apply(req, {
      attempt,
      onReconcileToken: async (t) => {
        token = t;
      },
    })
    .then(
      (r) => ({ ok: r }),
      (e: unknown) => ({ err: e }),
    );
  return { token: token as string | null, outcome };
}

describe('Oracle reconcile with Transaction Guard (model of the server and the LIFO thin pool)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('drops the session of a failed apply: no pooled session holds the recorded LTXID, and reconcile does not ask Transaction Guard after an error the server returned', async () => {
    const { fake, target, req } = await prepared(true);
    fake.failNext.set('APPLY_BATCH', oraError(30006, 'resource busy; acquire with WAIT timeout expired'));
    const { token, outcome } = await applyWithToken(target, req);
    expect(isTransferError((outcome as { err: unknown }).err, 'target_busy')).toBe(true);
    const applySession = fake.callsOf('APPLY_BATCH')[0]!.session;
    expect(fake.released).toContainEqual({ session: applySession, drop: true });
    expect(fake.free.map((s) => s.ltxid.toString('hex'))).not.toContain(token);

    // The service reconciles at once; the pool is LIFO, yet the apply's session cannot come back.
    const verdict = await target.reconcile(req, 1000, 1, token);
    expect(verdict).toEqual({ outcome: 'not_applied', staged: true, via: 'claim_obtained' });
    expect(fake.callsOf('GET_LTXID_OUTCOME')).toEqual([]);
    expect(fake.callsOf('TRY_CLAIM')[0]!.session).not.toBe(applySession);
    // The fence consumed the reconcile session's own LTXID, never the recorded one.
    expect(fake.ltxids.get(token!)).toBeUndefined();

    // Later, from another process (a fresh adapter, nothing known about the apply's error), with the token still
    // passed in: the FENCED completion row is not a commit, and Transaction Guard is not asked.
    const other = new OracleTransferTarget(oracleTransfer('items', true), fake.pool);
    await other.prepare(ITEMS_SCHEMA as never);
    fake.expireIdle();
    expect(await other.reconcile(req, 1000, 1, token)).toMatchObject({ outcome: 'not_applied' });
    expect(fake.callsOf('GET_LTXID_OUTCOME')).toEqual([]);
    expect(fake.completions.get(req.batchId)).toMatchObject({ state: 'FENCED', rows: null });
  });

  it('after a lost connection asks Transaction Guard once, on another session, and fences when it says "not committed"', async () => {
    const { fake, target, req } = await prepared(true);
    fake.failNext.set(
      'APPLY_BATCH',
      Object.assign(new Error('NJS-500: connection to the Oracle Database was broken'), {
        code: 'NJS-500',
        isRecoverable: true,
      }),
    );
    const { token, outcome } = await applyWithToken(target, req);
    expect((outcome as { err: { code: string } }).err.code).toBe('NJS-500');
    const applySession = fake.callsOf('APPLY_BATCH')[0]!.session;

    expect(await target.reconcile(req, 1000, 1, token)).toMatchObject({ outcome: 'not_applied', staged: true });
    const asked = fake.callsOf('GET_LTXID_OUTCOME');
    expect(asked).toHaveLength(1);
    expect(asked[0]!.session).not.toBe(applySession);
    expect(fake.ltxids.get(token!)).toBe('blocked'); // the lost apply can no longer commit
    expect(fake.completions.get(req.batchId)).toMatchObject({ state: 'FENCED', fenced: 1 });

    // Asked once: the next reconcile decides by the completion row and the fence alone.
    await target.reconcile(req, 1000, 1, token);
    expect(fake.callsOf('GET_LTXID_OUTCOME')).toHaveLength(1);
  });

  it('accepts Transaction Guard\'s "committed" only with a COMMITTED completion row', async () => {
    // Committed on the server, reply lost: Transaction Guard and the COMMITTED row agree.
    const a = await prepared(true);
    a.fake.loseReplyOfApply = true;
    const lost = await applyWithToken(a.target, a.req);
    expect((lost.outcome as { err: { code: string } }).err.code).toBe('NJS-500');
    expect(await a.target.reconcile(a.req, 1000, 1, lost.token)).toEqual({
      outcome: 'committed',
      rowCount: 2,
      checksum: 'v1:abc',
      via: 'transaction_guard',
    });

    // "Committed" for the LTXID, but the completion row is a FENCED one (issue 23: the LTXID consumed by the
    // fence's commit): not a commit; the claim decides.
    const b = await prepared(true);
    b.fake.failNext.set(
      'APPLY_BATCH',
      Object.assign(new Error('NJS-501: connection to the Oracle Database lost contact'), {
        code: 'NJS-501',
        isRecoverable: false,
      }),
    );
    const failed = await applyWithToken(b.target, b.req);
    b.fake.expireIdle(); // reconcile on a session other than the apply's, whatever the pool kept
    b.fake.ltxids.set(failed.token!, 'committed');
    b.fake.completions.set(b.req.batchId, { state: 'FENCED', rows: null, checksum: null, fenced: 1 });
    expect(await b.target.reconcile(b.req, 1000, 2, failed.token)).toEqual({
      outcome: 'not_applied',
      staged: true,
      via: 'claim_obtained',
    });
    expect(b.fake.callsOf('GET_LTXID_OUTCOME')).toHaveLength(1);
  });

  it('reports a Transaction Guard error (ORA-14906) instead of turning it into a verdict, and fences nothing', async () => {
    const { fake, target, req } = await prepared(true);
    fake.failNext.set(
      'APPLY_BATCH',
      Object.assign(new Error('NJS-500: connection to the Oracle Database was broken'), {
        code: 'NJS-500',
        isRecoverable: true,
      }),
    );
    const { token } = await applyWithToken(target, req);
    fake.failNext.set(
      'GET_LTXID_OUTCOME',
      oraError(14906, 'Executing GET_LTXID_OUTCOME is not permitted on the current session'),
    );
    await expect(target.reconcile(req, 1000, 1, token)).rejects.toSatisfy(
      (e) =>
        (e as { errorNum?: number }).errorNum === 14906 &&
        /Transaction Guard could not tell the outcome .* no verdict taken/.test((e as Error).message),
    );
    expect(fake.callsOf('TRY_CLAIM')).toEqual([]);
    expect(fake.completions.has(req.batchId)).toBe(false);
    // The next reconcile decides by the completion row and the fence.
    expect(await target.reconcile(req, 1000, 1, token)).toMatchObject({ outcome: 'not_applied' });
    expect(fake.callsOf('GET_LTXID_OUTCOME')).toHaveLength(1);
  });

  it('a call to a silent peer is abandoned by the watchdog after its call timeout plus the grace, and its session dropped', async () => {
    vi.useFakeTimers();
    const { fake, target, req } = await prepared(true);
    fake.hang.set('APPLY_BATCH', true);
    const pending = applyWithToken(target, req);
    await vi.advanceTimersByTimeAsync(ORACLE_CALL_TIMEOUT_MS); // the driver's callTimeout break is unanswered
    expect(fake.released).toEqual([{ session: 1, drop: false }]); // only prepare's session so far
    await vi.advanceTimersByTimeAsync(ORACLE_WATCHDOG_GRACE_MS);
    const { token, outcome } = await pending;
    const err = (outcome as { err: Error & { code?: string; isRecoverable?: boolean } }).err;
    expect(err.code).toBe(ORACLE_CALL_ABANDONED);
    expect(err.isRecoverable).toBe(true);
    const applySession = fake.callsOf('APPLY_BATCH')[0]!.session;
    expect(fake.released).toContainEqual({ session: applySession, drop: true });
    vi.useRealTimers();
    // The outcome is unknown, so reconcile asks Transaction Guard (on another session) before the claim.
    expect(await target.reconcile(req, 1000, 1, token)).toMatchObject({ outcome: 'not_applied' });
    expect(fake.callsOf('GET_LTXID_OUTCOME')[0]!.session).not.toBe(applySession);
  });
});

describe('Oracle deterministic data errors are terminal, naming the column and the row key', () => {
  // NAME with byte length semantics here, as ORA-12899 reports it
  const cols = ITEMS_COLUMNS.map((r) => (r[0] === 'NAME' ? ['NAME', 'VARCHAR2', null, null, 10, 10, 'B', 'N'] : r)).map(
    (r, i) => ({
      source: ITEMS_SCHEMA.columns[i]!.name,
      target: r[0] as string,
      logical: ITEMS_SCHEMA.columns[i]!.logical,
      dataType: r[1] as string,
      scale: r[2] as number | null,
      precision: r[3] as number | null,
      dataLength: r[4] as number | null,
      charLength: r[5] as number | null,
      charUsed: r[6] as string | null,
      nullable: r[7] !== 'N',
    }),
  );
  const ok = ['1', 'a', '1.5', '2024-01-01'];
  // Per error: the row that causes it (second of two), the message Oracle gives, and the column it must name.
  const cases: [number, (string | null)[], string, string][] = [
    [
      12899,
      ['7', '€€€€', '1', null],
      'value too large for column "KEEL"."KEEL_STG_ITEMS"."NAME" (actual: 12, maximum: 10)',
      'name',
    ],
    [1401, ['7', 'abcdefghijk', '1', null], 'inserted value too large for column', 'name'],
    [1400, ['7', null, '1', null], 'cannot insert NULL into ("KEEL"."KEEL_STG_ITEMS"."NAME")', 'name'],
    [1407, ['7', null, '1', null], 'cannot update ("KEEL"."ITEMS"."NAME") to NULL', 'name'],
    [1438, ['7', 'x', '123456.5', null], 'value larger than specified precision allowed for this column', 'amount'],
    [1426, ['7', 'x', '1e200', null], 'numeric overflow', 'amount'],
    [1722, ['7', 'x', 'NaN', null], 'invalid number', 'amount'],
    [1461, ['7', 'y'.repeat(4001), null, null], 'can bind a LONG value only for insert into a LONG column', 'name'],
    [997, ['7', 'y'.repeat(4001), null, null], 'illegal use of LONG datatype', 'name'],
    [1839, ['7', 'x', null, '1582-10-10'], 'date not valid for month specified', 'born'],
    [1841, ['7', 'x', null, '0000-01-01'], '(full) year must be between -4713 and +9999, and not be 0', 'born'],
    [1847, ['7', 'x', null, '0000-02-30'], 'day of month must be between 1 and last day of month', 'born'],
    [1843, ['7', 'x', null, '0000-13-01'], 'not a valid month', 'born'],
    [1850, ['7', 'x', null, '0000-01-01'], 'hour must be between 0 and 23', 'born'],
    [1851, ['7', 'x', null, '0000-01-01'], 'minutes must be between 0 and 59', 'born'],
    [1852, ['7', 'x', null, '0000-01-01'], 'seconds must be between 0 and 59', 'born'],
    [1858, ['7', 'x', null, 'XXXX-01-01'], 'a non-numeric character was found where a numeric was expected', 'born'],
    [1861, ['7', 'x', null, 'XXXX-01-01'], 'literal does not match format string', 'born'],
    [1830, ['7', 'x', null, 'XXXX-01-01'], 'date format picture ends before converting entire input string', 'born'],
  ];

  it('every error of the list has a case here', () => {
    expect(new Set(cases.map((c) => c[0]))).toEqual(new Set([...ORA_DATA_ERRORS.keys()].filter((n) => n !== 2290)));
  });

  it.each(cases)('ORA-%i names the column and the key', (num, row, text, column) => {
    const rows = [ok, row];
    // From executeMany's batch errors (message only, row in offset), and as a thrown error with errorNum and no row.
    for (const [err, offset] of [
      [new Error(`ORA-${String(num).padStart(5, '0')}: ${text}`), 1],
      [oraError(num, text), null],
    ] as const) {
      const e = dataError('b1', err, offset, rows, cols, ['id']);
      expect(e).toBeInstanceOf(TransferError);
      expect(e!.code).toBe('unsupported_type');
      expect(e!.detail).toEqual({ errorNum: num, column, key: 'id=7' });
      expect(e!.message).toContain(
        `ORA-${String(num).padStart(5, '0')} (${ORA_DATA_ERRORS.get(num)}) at column ${column}`,
      );
    }
  });

  it('ORA-02290 (check constraint) is terminal; Oracle does not name a column there, the message says so', () => {
    const e = dataError('b1', oraError(2290, 'check constraint (KEEL.CK_ITEMS) violated'), null, [ok], cols, ['id']);
    expect(e?.code).toBe('unsupported_type');
    expect(e?.message).toMatch(/at a column Oracle did not name, a row Oracle did not name/);
  });

  it('errors that can pass on a retry are not data errors', () => {
    for (const err of [
      oraError(60, 'deadlock detected while waiting for resource'),
      oraError(30006, 'resource busy; acquire with WAIT timeout expired'),
      oraError(1, 'unique constraint (KEEL.PK_ITEMS) violated'),
      Object.assign(new Error('NJS-500: connection to the Oracle Database was broken'), { code: 'NJS-500' }),
    ])
      expect(dataError('b1', err, null, [ok], cols, ['id'])).toBeNull();
  });

  it("stage() refuses the batch from executeMany's batch error, naming the column and the key", async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const target = new OracleTransferTarget(oracleTransfer('items', false), fake.pool);
    await target.prepare(ITEMS_SCHEMA as never);
    fake.rowErrors.push({
      message: 'ORA-12899: value too large for column "KEEL"."KEEL_STG_ITEMS"."NAME" (actual: 12, maximum: 10)',
      offset: 1,
    });
    const rows = [
      ['1', 'a', null, null],
      ['2', '€€€€', null, null],
    ];
    const err = await target
      .stage(
        {
          batchId: 'b1',
          transfer: 'items',
          manifest: { rowCount: 2, checksum: 'keel-v1:x' } as never,
          schema: ITEMS_SCHEMA as never,
        },
        {
          kind: 'rows',
          rows: (async function* () {
            yield rows;
          })(),
        } as never,
      )
      .catch((e: unknown) => e);
    expect(isTransferError(err, 'unsupported_type')).toBe(true);
    expect((err as TransferError).detail).toEqual({ errorNum: 12899, column: 'name', key: 'id=2' });
    expect(fake.registry.has('b1')).toBe(false); // rolled back
  });
});

// The stage refused NULL and repeated keys under the key columns of its time. Under a new key a staged NULL part
// raises nothing at APPLY_BATCH (the MERGE matches no row and inserts it beside the target's): the batch's recorded
// schema says it was staged under other key columns, so its staged keys are asked first -- only then.
describe('Oracle apply of a batch staged under other key columns', () => {
  const nullableName = ITEMS_COLUMNS.map((c) => (c[0] === 'NAME' ? [...c.slice(0, 7), 'Y'] : c));
  // key null: a batch journalled before the flags were recorded (none).
  const recordedUnder = (key: string | null) => ({
    hash: 'h',
    columns: ITEMS_SCHEMA.columns.map(({ key: _k, boundary: _b, ...c }) => ({
      ...c,
      ...(c.name === 'name' ? { nullable: true } : {}),
      ...(c.name === key ? { key: true as const } : {}),
      ...(c.name === 'id' && key !== null ? { boundary: true as const } : {}),
    })),
  });
  const staged = async (recordedKey: string | null) => {
    const fake = new FakeOracle();
    fake.columns = nullableName;
    const target = new OracleTransferTarget(oracleTransfer('items', false, ['name']), fake.pool);
    const schema = recordedUnder(recordedKey);
    await target.prepare(schema as never);
    const req: StageRequest = {
      batchId: '00000000-0000-4000-8000-000000000002',
      transfer: 'items',
      manifest: { rowCount: 3, checksum: 'v1:abc' } as never,
      schema: schema as never,
    };
    fake.registry.set(req.batchId, { state: 'STAGED', count: 3, checksum: 'v1:abc' });
    fake.stagedRows.push(
      [req.batchId, '1', 'a', null!, null!],
      [req.batchId, '2', null!, null!, null!],
      [req.batchId, '3', 'c', null!, null!],
    );
    fake.calls.length = 0;
    return { fake, target, req };
  };

  it('a staged NULL part of the new key fails the apply duplicate_keys, naming the key columns, before APPLY_BATCH', async () => {
    const { fake, target, req } = await staged('id');
    const err = await target.apply(req, { attempt: 1 }).catch((e: unknown) => e);
    expect(isTransferError(err, 'duplicate_keys'), String(err)).toBe(true);
    expect((err as Error).message).toMatch(/under the key columns \(name\) \(\(NULL\)\)/);
    expect(fake.callsOf('APPLY_BATCH')).toEqual([]);
    expect(fake.completions.size).toBe(0);
    expect(fake.applied.size).toBe(0);
  });

  // Its key columns not known (an older version journalled it): asked like a changed one.
  it('recorded before the flags: its staged keys are asked first, a NULL part of the key refused before APPLY_BATCH', async () => {
    const { fake, target, req } = await staged(null);
    const err = await target.apply(req, { attempt: 1 }).catch((e: unknown) => e);
    expect(isTransferError(err, 'duplicate_keys'), String(err)).toBe(true);
    expect(fake.callsOf('APPLY_BATCH')).toEqual([]);
    expect(fake.applied.size).toBe(0);
  });

  it('staged under the same key columns: nothing more is asked before APPLY_BATCH', async () => {
    const { fake, target, req } = await staged('name');
    expect((await target.apply(req, { attempt: 1 })).outcome).toBe('applied');
    expect(fake.callsOf('duplicate check')).toEqual([]);
    expect(fake.callsOf('APPLY_BATCH')).toHaveLength(1);
  });
});

describe('Oracle staging with a source that stops answering', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('ends with the retryable stream_stalled after stallMs without rows, rolls back and tells the source to stop', async () => {
    vi.useFakeTimers();
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const target = new OracleTransferTarget(oracleTransfer('items', false), fake.pool, { stallMs: 5_000 });
    await target.prepare(ITEMS_SCHEMA as never);
    let stopped = false;
    const rows: AsyncIterator<(string | null)[][]> = {
      next: (() => {
        let first = true;
        return () => {
          if (!first) return new Promise<never>(() => undefined); // the source's next chunk never comes
          first = false;
          return Promise.resolve({ done: false, value: [['1', 'a', null, null]] });
        };
      })(),
      return: () => {
        stopped = true;
        return new Promise<never>(() => undefined); // a stalled source does not answer this either
      },
    };
    const staging = target
      .stage(
        {
          batchId: 'b1',
          transfer: 'items',
          manifest: { rowCount: 2, checksum: 'keel-v1:x' } as never,
          schema: ITEMS_SCHEMA as never,
        },
        { kind: 'rows', rows: { [Symbol.asyncIterator]: () => rows } },
      )
      .catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(4_999);
    expect(fake.callsOf('staging insert')).toHaveLength(1);
    expect(fake.callsOf('rollback')).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    const err = await staging;
    expect(isTransferError(err, 'stream_stalled')).toBe(true);
    expect(stopped).toBe(true);
    expect(fake.callsOf('rollback')).toHaveLength(1);
    expect(fake.registry.has('b1')).toBe(false);
    expect(fake.released.at(-1)).toEqual({ session: 1, drop: false }); // rolled back, so back to the pool
  });
});

describe('the service with the Oracle target (journal and source on PostgreSQL)', () => {
  let control: pg.Pool;
  let source: pg.Pool;

  beforeAll(async () => {
    control = new pg.Pool({ connectionString: await createTestDatabase('tr_orafake_ctl'), max: 3 });
    source = new pg.Pool({ connectionString: await createTestDatabase('tr_orafake_src'), max: 3 });
    for (const p of [control, source]) p.on('error', poolErrorLogger('postgres', 'transfer', 'test pool'));
    await migrateJournal(control);
    await source.query(
      `create table public.items (id bigint primary key, name varchar(10) not null, amount numeric(6,2), born date)`,
    );
    await source.query(
      `insert into public.items select n, 'n' || n, n * 1.25, date '2024-01-01' + n::int from generate_series(1, 20) n`,
    );
  });
  afterAll(async () => {
    await control?.end();
    await source?.end();
  });

  function service(fake: FakeOracle, t: TransferConfig) {
    return new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t],
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, source),
        target: new OracleTransferTarget(tc, fake.pool),
      }),
    });
  }

  it("issue 23's sequence (failed apply, LIFO pool, idle-out, stale reconcile, abandon) never marks the batch committed", async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const t = oracleTransfer('tg_lifo', true);
    const svc = service(fake, t);
    const b = await svc.createBatch(t.name);
    // 1. The apply fails with an error the server returned (its transaction rolled back); reconcile follows at once.
    fake.failNext.set('APPLY_BATCH', oraError(30006, 'resource busy; acquire with WAIT timeout expired'));
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('staged');
    const d = (await svc.getBatch(b.batchId))!;
    expect(d.events.some((e) => e.event === 'reconcile_token_recorded')).toBe(true);
    // 2. The apply's session idles out of the pool; maintenance reconciles the staged batch, then an operator
    //    abandons it.
    fake.expireIdle();
    const [stale] = await svc.reconcileStale(0, 10);
    expect(stale).toMatchObject({ batchId: b.batchId, state: 'staged' });
    expect((await svc.abandon(b.batchId, 'test')).state).toBe('failed');
    expect(fake.completions.get(b.batchId)?.state).toBe('FENCED');
    expect(fake.applied.size).toBe(0);
    expect(fake.callsOf('GET_LTXID_OUTCOME')).toEqual([]);
    // The first not-applied verdict spent the token; no later reconcile gets it.
    const events = (await svc.getBatch(b.batchId))!.events;
    expect(events.filter((e) => e.event === 'reconciled_not_applied').length).toBeGreaterThanOrEqual(2);
    expect((await svc.getBatch(b.batchId))!.targetReconcileToken).toBeNull();
    await svc.close();
  });

  it('a reconcile token arriving after a reconcile ruled its attempt out is not written back, and that apply is not sent', async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const t = oracleTransfer('tg_stale_token', true);
    // Process A's journal: its note of the token waits until process B has reconciled the batch (B read it
    // 'applying' with no token: the attempt is ruled out by a fence and the batch moved back to 'staged').
    let beforeTokenNote: (() => Promise<void>) | null = null;
    class SlowNoteJournal extends PostgresTransferJournal {
      override async note(...args: Parameters<PostgresTransferJournal['note']>): Promise<boolean> {
        if (args[1] === 'reconcile_token_recorded' && beforeTokenNote) {
          const hook = beforeTokenNote;
          beforeTokenNote = null;
          await hook();
        }
        return super.note(...args);
      }
    }
    const connect = (tc: TransferConfig) => ({
      source: new PostgresTransferSource(tc, source),
      target: new OracleTransferTarget(tc, fake.pool),
    });
    const a = new TransferService({ journal: new SlowNoteJournal(control), transfers: [t], connect });
    const b = service(fake, t);
    const batch = await a.createBatch(t.name);
    expect((await a.stage(batch.batchId)).state).toBe('staged');
    let verdictOfB: string | null = null;
    beforeTokenNote = async () => {
      verdictOfB = (await b.reconcile(batch.batchId)).state;
    };
    const v = await a.apply(batch.batchId);
    expect(verdictOfB).toBe('staged');
    expect(v.state).toBe('staged');
    const d = (await a.getBatch(batch.batchId))!;
    // The stale token was not written back: no later reconcile asks Transaction Guard about it.
    expect(d.targetReconcileToken).toBeNull();
    expect(d.attempts).toBe(1);
    // A's apply never went out (its attempt was fenced on the target anyway: it would have failed there).
    expect(fake.callsOf('APPLY_BATCH')).toEqual([]);
    expect(fake.completions.get(batch.batchId)).toMatchObject({ state: 'FENCED' });
    // The next run applies under a new attempt.
    expect((await a.run(batch.batchId)).state).toBe('committed');
    expect(fake.applied.size).toBe(20);
    await a.close();
    await b.close();
  });

  it('maintenance purges the staged rows a failed purge left (STAGED_BATCHES, then PURGE_STAGED)', async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const t = oracleTransfer('mt_purge', false);
    const svc = service(fake, t);
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    fake.failNext.set('PURGE_STAGED', new Error('NJS-500: connection to the Oracle Database was broken'));
    expect((await svc.abandon(b.batchId, 'test')).state).toBe('failed');
    expect(fake.registry.has(b.batchId)).toBe(true);
    expect(fake.stagedRows.length).toBe(20);
    expect(await svc.purgeTerminalStaging()).toEqual({ purged: [b.batchId], errors: 0 });
    expect(fake.registry.size).toBe(0);
    expect(fake.stagedRows.length).toBe(0);
    expect(await svc.purgeTerminalStaging()).toEqual({ purged: [], errors: 0 });
    await svc.close();
  });

  it('a deterministic data error fails the batch once instead of leaving it to be staged again', async () => {
    const fake = new FakeOracle();
    fake.columns = ITEMS_COLUMNS;
    const t = oracleTransfer('data_err', false);
    const svc = service(fake, t);
    const b = await svc.createBatch(t.name);
    fake.rowErrors.push({
      message: 'ORA-01438: value larger than specified precision allowed for this column',
      offset: 3,
    });
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('failed');
    const d = (await svc.getBatch(b.batchId))!;
    expect(d.lastErrorCode).toBe('unsupported_type');
    expect(d.lastError).toMatch(/ORA-01438 .* row with key id=4/);
    await svc.close();
  });
});

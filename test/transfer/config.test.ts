// Transfer configuration: invalid settings fail at startup and name the setting at fault.
import { describe, expect, it } from 'vitest';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { loadTransfers, parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import type { EngineDescriptor } from '../../shared/engines/descriptor.js';
import { quotePg, quoteOracle, quoteMssql } from '../../shared/transfer/identifiers.js';
import {
  DEFAULT_TRANSFER_TIMEOUTS,
  FUNCTION_TIMEOUT_MS,
  pgTransferPoolConfig,
  transferTimeouts,
} from '../../shared/transfer/timeouts.js';

const TRANSFER_RULES = transferEngineRules();

const valid = {
  name: 'orders',
  source: { engine: 'postgres', connectionSetting: 'SRC_URL', table: 'public.orders' },
  target: { engine: 'postgres', connectionSetting: 'TGT_URL', table: 'public.orders' },
  keyColumns: ['id'],
  boundary: { column: 'id', kind: 'key' },
  columns: [
    { source: 'id', target: 'id' },
    { source: 'note', target: 'note' },
  ],
};

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  return '';
}

describe('transfer configuration', () => {
  it('accepts a valid declaration and fills defaults', () => {
    const [t] = parseTransfers([valid], TRANSFER_RULES);
    expect(t).toMatchObject({
      name: 'orders',
      batchSize: 100_000,
      chunkSize: 5_000,
      reconcileWaitMs: 2_000,
      boundary: { settleMs: 0 },
    });
  });

  it('names the setting at fault', () => {
    const { keyColumns: _k, ...noKeys } = valid;
    expect(messageOf(() => loadTransfers(TRANSFER_RULES, { KEEL_TRANSFERS: JSON.stringify([noKeys]) }))).toMatch(
      /KEEL_TRANSFERS\[0\]\.keyColumns: Required/,
    );
    expect(messageOf(() => parseTransfers([{ ...valid, keyColumns: ['id; drop table x'] }], TRANSFER_RULES))).toMatch(
      /KEEL_TRANSFERS\[0\]\.keyColumns\[0\]: must be a plain identifier/,
    );
    expect(
      messageOf(() => parseTransfers([{ ...valid, target: { ...valid.target, table: 'a.b.c' } }], TRANSFER_RULES)),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.target\.table/);
    expect(messageOf(() => parseTransfers([{ ...valid, keyColumns: ['missing'] }], TRANSFER_RULES))).toMatch(
      /KEEL_TRANSFERS\[0\]\.keyColumns\[0\]: key column missing is not in columns\[\]\.source/,
    );
    expect(
      messageOf(() => parseTransfers([{ ...valid, boundary: { column: 'id', kind: 'rowversion' } }], TRANSFER_RULES)),
    ).toMatch(/boundary\.kind: rowversion windows need a sqlserver source/);
    // change windows (docs/transfer.md "Deletes"): no column, a table, and a key window needs its column
    expect(parseTransfers([{ ...valid, boundary: { kind: 'changes' } }], TRANSFER_RULES)[0]!.boundary).toEqual({
      kind: 'changes',
      settleMs: 0,
    });
    expect(
      messageOf(() => parseTransfers([{ ...valid, boundary: { column: 'id', kind: 'changes' } }], TRANSFER_RULES)),
    ).toMatch(/boundary\.column: changes windows run over the change-tracking versions/);
    expect(messageOf(() => parseTransfers([{ ...valid, boundary: { kind: 'key' } }], TRANSFER_RULES))).toMatch(
      /boundary\.column: Required \(a key window runs over a column\)/,
    );
    expect(
      messageOf(() =>
        parseTransfers(
          [
            {
              ...valid,
              source: { engine: 'postgres', connectionSetting: 'S', query: 'select 1' },
              boundary: { kind: 'changes' },
            },
          ],
          TRANSFER_RULES,
        ),
      ),
    ).toMatch(/source\.query: changes windows read a table's change tracking/);
    expect(messageOf(() => parseTransfers([valid, valid], TRANSFER_RULES))).toMatch(
      /KEEL_TRANSFERS\[1\]\.name: "orders" is declared twice/,
    );
    expect(
      messageOf(() => parseTransfers([{ ...valid, source: { ...valid.source, query: 'select 1' } }], TRANSFER_RULES)),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.source: exactly one of table or query/);
    expect(messageOf(() => parseTransfers([{ ...valid, extra: 1 }], TRANSFER_RULES))).toMatch(
      /KEEL_TRANSFERS\[0\]: Unrecognized key/,
    );
    expect(messageOf(() => loadTransfers(TRANSFER_RULES, { KEEL_TRANSFERS: '[{' }))).toMatch(
      /KEEL_TRANSFERS: not valid JSON/,
    );
    const oracle = { engine: 'oracle', connectionSetting: 'KEEL_ORACLE_CONNECT_STRING', table: 'KEEL.ORDERS' };
    expect(
      messageOf(() =>
        parseTransfers([{ ...valid, target: { ...oracle, userSetting: 'KEEL_ORACLE_USER' } }], TRANSFER_RULES),
      ),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.target\.passwordSetting: userSetting and passwordSetting go together/);
    expect(
      messageOf(() =>
        parseTransfers(
          [{ ...valid, target: { ...valid.target, userSetting: 'U', passwordSetting: 'P' } }],
          TRANSFER_RULES,
        ),
      ),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.target\.userSetting: only for a target that takes credential settings \(oracle\)/);
    const [t] = parseTransfers(
      [{ ...valid, target: { ...oracle, userSetting: 'KEEL_ORACLE_USER', passwordSetting: 'KEEL_ORACLE_PASSWORD' } }],
      TRANSFER_RULES,
    );
    expect(t!.target).toMatchObject({ userSetting: 'KEEL_ORACLE_USER', passwordSetting: 'KEEL_ORACLE_PASSWORD' });
  });

  it("engine rules come from the engines' descriptors, not from names in the configuration code", () => {
    expect(
      messageOf(() => parseTransfers([{ ...valid, source: { ...valid.source, engine: 'oracle' } }], TRANSFER_RULES)),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.source\.engine: must be one of postgres, sqlserver/);
    expect(
      messageOf(() => parseTransfers([{ ...valid, target: { ...valid.target, engine: 'sqlserver' } }], TRANSFER_RULES)),
    ).toMatch(/KEEL_TRANSFERS\[0\]\.target\.engine: must be one of postgres, oracle/);
    // A new engine declares its rules on its descriptor; the same configuration check then applies them.
    const made = (name: string, rules: Partial<EngineDescriptor>): EngineDescriptor => ({
      name,
      capabilities: { jobStore: false, journal: false, transferSource: true, transferTarget: true },
      telemetryDriver: 'pg',
      transferSourceRules: { boundaryKinds: ['key'] },
      transferTargetRules: { credentialSettings: false, transactionGuard: false },
      ...rules,
    });
    const rules = transferEngineRules([
      made('alpha', { transferSourceRules: { boundaryKinds: ['key', 'rowversion'] } }),
      made('beta', { transferTargetRules: { credentialSettings: true, transactionGuard: false } }),
    ]);
    const alpha = {
      ...valid,
      source: { ...valid.source, engine: 'alpha' },
      target: { ...valid.target, engine: 'beta' },
    };
    expect(parseTransfers([{ ...alpha, boundary: { column: 'id', kind: 'rowversion' } }], rules)).toHaveLength(1);
    expect(
      messageOf(() =>
        parseTransfers(
          [{ ...alpha, source: { ...alpha.source, engine: 'beta' }, boundary: { column: 'id', kind: 'rowversion' } }],
          rules,
        ),
      ),
    ).toMatch(/boundary\.kind: rowversion windows need a alpha source/);
    expect(
      parseTransfers([{ ...alpha, target: { ...alpha.target, userSetting: 'U', passwordSetting: 'P' } }], rules)[0]!
        .target,
    ).toMatchObject({ userSetting: 'U' });
    expect(
      messageOf(() => parseTransfers([{ ...alpha, target: { ...alpha.target, transactionGuard: true } }], rules)),
    ).toMatch(/target\.transactionGuard: only for a target with Transaction Guard \(\); a beta target/);
    expect(
      messageOf(() =>
        parseTransfers([{ ...valid, target: { ...valid.target, transactionGuard: true } }], TRANSFER_RULES),
      ),
    ).toMatch(/target\.transactionGuard: only for a target with Transaction Guard \(oracle\)/);
    expect(() => transferEngineRules([made('gamma', { transferTargetRules: undefined })])).toThrow(
      /gamma is a transfer target but declares no transferTargetRules/,
    );
  });

  it('reads KEEL_TRANSFERS_FILE and refuses both settings at once', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'keel-cfg-'));
    const file = path.join(dir, 'transfers.json');
    await writeFile(file, JSON.stringify([{ ...valid, batchSize: 0 }]));
    expect(messageOf(() => loadTransfers(TRANSFER_RULES, { KEEL_TRANSFERS_FILE: file }))).toMatch(
      /KEEL_TRANSFERS_FILE\(.*\)\[0\]\.batchSize/,
    );
    await writeFile(file, JSON.stringify([valid]));
    expect(loadTransfers(TRANSFER_RULES, { KEEL_TRANSFERS_FILE: file })).toHaveLength(1);
    expect(messageOf(() => loadTransfers(TRANSFER_RULES, { KEEL_TRANSFERS_FILE: file, KEEL_TRANSFERS: '[]' }))).toMatch(
      /not both/,
    );
    expect(loadTransfers(TRANSFER_RULES, {})).toEqual([]);
  });

  it('quotes only validated identifiers', () => {
    expect(quotePg('Orders_1')).toBe('"Orders_1"');
    expect(quoteMssql('x')).toBe('[x]');
    expect(quoteOracle('ID')).toBe('"ID"');
    expect(() => quotePg('a"b')).toThrow(/plain identifier/);
    expect(() => quoteMssql('a]b')).toThrow(/plain identifier/);
  });

  it('transfer timeouts: safe defaults inside the function timeout, settings validated and named, all applied to pg pools', () => {
    const d = transferTimeouts({});
    expect(d).toEqual(DEFAULT_TRANSFER_TIMEOUTS);
    for (const v of Object.values(d)) expect(v).toBeLessThan(FUNCTION_TIMEOUT_MS);
    expect(d.queryMs).toBeGreaterThan(d.statementMs);
    // The client-side read timeout follows the statement timeout unless set.
    expect(transferTimeouts({ KEEL_TRANSFER_STATEMENT_TIMEOUT_MS: '60000' }).queryMs).toBe(75_000);
    expect(messageOf(() => transferTimeouts({ KEEL_TRANSFER_STALL_TIMEOUT_MS: 'soon' }))).toMatch(
      /KEEL_TRANSFER_STALL_TIMEOUT_MS/,
    );
    expect(
      messageOf(() => transferTimeouts({ KEEL_TRANSFER_STATEMENT_TIMEOUT_MS: String(FUNCTION_TIMEOUT_MS) })),
    ).toMatch(/KEEL_TRANSFER_STATEMENT_TIMEOUT_MS/);
    expect(
      messageOf(() =>
        transferTimeouts({ KEEL_TRANSFER_STATEMENT_TIMEOUT_MS: '60000', KEEL_TRANSFER_QUERY_TIMEOUT_MS: '60000' }),
      ),
    ).toMatch(/must exceed/);
    const cfg = pgTransferPoolConfig('postgres://h/db', { ...d, lockMs: 1234 });
    expect(cfg).toMatchObject({
      connectionTimeoutMillis: d.connectMs,
      statement_timeout: d.statementMs,
      query_timeout: d.queryMs,
      idle_in_transaction_session_timeout: d.idleInTransactionMs,
      lock_timeout: 1234,
      keepAlive: true,
    });
  });
});

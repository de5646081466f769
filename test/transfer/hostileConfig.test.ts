// Bad or hostile transfer configuration meets real databases: each mistake is refused before anything is written
// (no batch in the journal, nothing on the target), with a TransferError whose code the ops API maps to a 4xx
// and whose message names what is wrong -- never a raw database error (a 500).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTransferError } from '../../shared/transfer/errors.js';
import { parseTransfers, type TransferInput } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { makeService, ordersTransfer, setupDatabases, ORDERS_DDL, type Env } from './helpers.js';

describe('hostile transfer configuration against real databases', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_hostile');
    await env.source.query(ORDERS_DDL);
    await env.source.query(`insert into public.orders (id, customer) select n, 'c' || n from generate_series(1, 20) n`);
    await env.target.query(ORDERS_DDL.replace('id bigint primary key', 'id bigint'));
    await env.target.query(ORDERS_DDL.replace('public.orders', 'public.orders_keyed'));
    await env.target.query(`create table public.orders_textkey (id text primary key, customer text)`);
  });
  afterAll(async () => {
    await env?.close();
  });

  const cols = (names: string[]) => names.map((c) => ({ source: c, target: c }));
  const cases: { name: string; input: Partial<TransferInput>; names: RegExp }[] = [
    { name: 'no unique key index on the target', input: {}, names: /unique index|primary key/i },
    {
      name: 'a target table that does not exist',
      input: { target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.nowhere' } },
      names: /nowhere/,
    },
    {
      name: 'a source table that does not exist',
      input: { source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: 'public.nowhere' } },
      names: /nowhere/,
    },
    {
      name: 'a mapped source column that does not exist',
      input: {
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders_keyed' },
        columns: cols(['id', 'customer', 'nosuch']),
      },
      names: /nosuch/,
    },
    {
      name: 'a mapped target column that does not exist',
      input: {
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders_keyed' },
        columns: [...cols(['id']), { source: 'customer', target: 'nosuch' }],
      },
      names: /nosuch/,
    },
    {
      name: 'a key column of another type on the target',
      input: {
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders_textkey' },
        columns: cols(['id', 'customer']),
      },
      names: /\bid\b/,
    },
    {
      name: 'a boundary column that is not an integer',
      input: {
        target: { engine: 'postgres', connectionSetting: 'TEST_TARGET', table: 'public.orders_keyed' },
        boundary: { column: 'customer', kind: 'key' },
      },
      names: /customer/,
    },
  ];
  for (const c of cases)
    it(`${c.name}: refused with a transfer error naming it, nothing written`, async () => {
      const name = `hostile_${cases.indexOf(c)}`;
      const svc = makeService(env, [ordersTransfer(name, c.input)]);
      let err: unknown;
      try {
        await svc.createBatch(name);
      } catch (e) {
        err = e;
      }
      await svc.close();
      expect(isTransferError(err), `${c.name}: ${String(err)}`).toBe(true);
      expect((err as Error).message).toMatch(c.names);
      const j = await env.control.query(
        `select count(*)::int as n from keel.transfer_batches where transfer_name = $1`,
        [name],
      );
      expect(j.rows[0].n).toBe(0);
    });

  it('identifiers with quotes, a huge batchSize: refused at startup naming the field', () => {
    const rules = transferEngineRules();
    const base = {
      name: 'x',
      source: { engine: 'postgres', connectionSetting: 'S', table: 'public.t' },
      target: { engine: 'postgres', connectionSetting: 'T', table: 'public.t' },
      keyColumns: ['id'],
      boundary: { column: 'id', kind: 'key' },
      columns: [{ source: 'id', target: 'id' }],
    };
    const refused = (patch: Record<string, unknown>) => {
      try {
        parseTransfers([{ ...base, ...patch }], rules);
        return null;
      } catch (e) {
        return (e as Error).message;
      }
    };
    expect(refused({ target: { ...base.target, table: 'public."t; drop table x"' } })).toMatch(
      /KEEL_TRANSFERS\[0\]\.target\.table/,
    );
    expect(refused({ columns: [{ source: 'id"--', target: 'id' }] })).toMatch(
      /KEEL_TRANSFERS\[0\]\.columns\.0\.source|columns\[0\]\.source/,
    );
    expect(refused({ keyColumns: ["id'"] })).toMatch(/keyColumns/);
    expect(refused({ batchSize: 1e12 })).toMatch(/batchSize/);
    expect(refused({ chunkSize: 0 })).toMatch(/chunkSize/);
  });
});

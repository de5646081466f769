// A NULL in a key column: the apply merges on the key, and a NULL never equals anything, so the target's earlier
// copy of such a row is never matched -- every apply that carries it again (a replay, a later timestamp window after
// the row changed) inserts it once more beside the earlier copy (a unique index lets NULL keys repeat). Refused at
// staging like a duplicate key (duplicate_keys, terminal: the window is released), before anything reaches the
// table; once the source is fixed a new batch covers the window and a replay of it updates, never adds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTransfers, type TransferInput } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { makeService, setupDatabases, type Env } from './helpers.js';

function itemsTransfer(name: string, overrides: Partial<TransferInput>) {
  return parseTransfers(
    [
      {
        name,
        source: { engine: 'postgres', connectionSetting: 'S', table: `public.${name}` },
        target: { engine: 'postgres', connectionSetting: 'T', table: `public.${name}` },
        keyColumns: ['code'],
        boundary: { column: 'id', kind: 'key' },
        columns: ['id', 'code', 'part', 'v'].map((c) => ({ source: c, target: c })),
        batchSize: 5,
        chunkSize: 2,
        reconcileWaitMs: 300,
        ...overrides,
      },
    ],
    transferEngineRules(),
  )[0]!;
}

describe('NULL in a key column', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_nullkey');
  });
  afterAll(async () => {
    await env?.close();
  });

  it('a NULL key stops its batch (duplicate_keys), nothing applied; fixed at the source, a replay updates the row once', async () => {
    // The target's only key is the nullable unique code (no primary key on id): NULL codes may repeat there.
    for (const db of [env.source, env.target])
      await db.query(`create table public.nk_one (id bigint not null, code text unique, part int, v text)`);
    await env.source.query(
      `insert into public.nk_one select n, case when n = 3 then null else 'c' || n end, 0, 'v' || n from generate_series(1, 8) n`,
    );
    const t = itemsTransfer('nk_one', {});
    const svc = makeService(env, [t]);
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    expect([v.state, v.lastErrorCode]).toEqual(['failed', 'duplicate_keys']);
    expect(v.lastError).toMatch(/\(NULL\)/);
    expect((await env.target.query(`select count(*)::int as n from public.nk_one`)).rows[0].n).toBe(0);

    // Fixed at the source: the released window is covered again, then replayed (as an operator would).
    await env.source.query(`update public.nk_one set code = 'c3' where id = 3`);
    const again = await svc.createBatch(t.name);
    expect([again.boundary.low, again.boundary.high]).toEqual([b.boundary.low, b.boundary.high]);
    expect((await svc.run(again.batchId)).state).toBe('committed');
    await env.source.query(`update public.nk_one set v = 'changed' where id = 3`);
    const { batch } = await svc.replay(t.name, null, again.boundary.high!, false);
    expect((await svc.run(batch!.batchId)).state).toBe('committed');
    const rows = await env.target.query(`select id::int, v from public.nk_one order by id`);
    expect(rows.rows.map((r) => r.id)).toEqual([1, 2, 3, 4, 5]);
    expect(rows.rows[2].v).toBe('changed');
    await svc.close();
  });

  it('a composite key with one NULL part is refused the same way, on the row path (a query source) too', async () => {
    for (const db of [env.source, env.target]) {
      await db.query(`create table public.nk_two (id bigint not null, code text, part int, v text)`);
      await db.query(`create unique index on public.nk_two (code, part)`);
    }
    await env.source.query(
      `insert into public.nk_two select n, 'c' || n, case when n = 2 then null else n end, 'v' || n from generate_series(1, 4) n`,
    );
    const t = itemsTransfer('nk_two', {
      keyColumns: ['code', 'part'],
      source: { engine: 'postgres', connectionSetting: 'S', query: 'select id, code, part, v from public.nk_two' },
    });
    const svc = makeService(env, [t]);
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    expect([v.state, v.lastErrorCode]).toEqual(['failed', 'duplicate_keys']);
    expect(v.lastError).toMatch(/\(c2, NULL\)/);
    expect((await env.target.query(`select count(*)::int as n from public.nk_two`)).rows[0].n).toBe(0);
    await svc.close();
  });
});

// What the service negotiates without knowing engine names (docs/architecture.md, "Transfer adapters are
// engine-neutral"): the checksum both sides compute, the row stream both sides speak, and the opaque reconcile token
// a target hands out, recorded in the journal before the apply call and passed back to reconcile unchanged.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import type { ChecksumAlgorithm } from '../../shared/transfer/checksum.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { negotiateChecksum, negotiateFeed } from '../../shared/transfer/negotiate.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { Adapters, SourceAdapter, TargetAdapter } from '../../shared/transfer/types.js';
import { insertSourceRows, ORDERS_DDL, ordersTransfer, setupDatabases, TARGET_DDL, type Env } from './helpers.js';

// Only what negotiation reads; anything else it touched would fail the test.
function sides(
  source: { algorithms: ChecksumAlgorithm[]; bulkFormat?: string },
  target: { algorithms: ChecksumAlgorithm[]; bulkFormat?: string },
): Adapters {
  const s = {
    engine: 'alpha',
    checksumAlgorithms: async () => source.algorithms,
    bulkFormat: source.bulkFormat,
    bulkOut: async () => {
      throw new Error('opened only by the target');
    },
    streamRows: () => (async function* () {})(),
  } as unknown as SourceAdapter;
  const t = {
    engine: 'beta',
    checksumAlgorithms: async () => target.algorithms,
    bulkFormat: target.bulkFormat,
  } as unknown as TargetAdapter;
  return { source: s, target: t };
}

describe('negotiation between a source and a target', () => {
  it("takes the source's first checksum the target computes too; none in common is refused", async () => {
    expect(
      await negotiateChecksum(
        sides({ algorithms: ['keel-pg2', 'keel-pg1', 'keel-v1'] }, { algorithms: ['keel-pg2', 'keel-pg1', 'keel-v1'] }),
      ),
    ).toBe('keel-pg2');
    expect(
      await negotiateChecksum(
        sides({ algorithms: ['keel-pg2', 'keel-pg1', 'keel-v1'] }, { algorithms: ['keel-pg1', 'keel-v1'] }),
      ),
    ).toBe('keel-pg1');
    expect(
      await negotiateChecksum(
        sides({ algorithms: ['keel-pg1', 'keel-v1'] }, { algorithms: ['keel-pg2', 'keel-pg1', 'keel-v1'] }),
      ),
    ).toBe('keel-pg1');
    expect(
      await negotiateChecksum(sides({ algorithms: ['keel-v1'] }, { algorithms: ['keel-pg2', 'keel-pg1', 'keel-v1'] })),
    ).toBe('keel-v1');
    await expect(negotiateChecksum(sides({ algorithms: ['keel-pg2'] }, { algorithms: ['keel-v1'] }))).rejects.toSatisfy(
      (e) =>
        isTransferError(e, 'target_incompatible') &&
        /alpha source computes keel-pg2, the beta target keel-v1/.test((e as Error).message),
    );
  });

  it("hands the source's bulk stream only to a target of the same bulk format", () => {
    const w = { kind: 'key' as const, low: null, high: '1' };
    const schema = { columns: [], hash: 'h' };
    expect(
      negotiateFeed(
        sides({ algorithms: [], bulkFormat: 'x-copy' }, { algorithms: [], bulkFormat: 'x-copy' }),
        w,
        schema,
        10,
      ),
    ).toMatchObject({ kind: 'bulk', format: 'x-copy' });
    expect(
      negotiateFeed(
        sides({ algorithms: [], bulkFormat: 'x-copy' }, { algorithms: [], bulkFormat: 'y-copy' }),
        w,
        schema,
        10,
      ).kind,
    ).toBe('rows');
    expect(negotiateFeed(sides({ algorithms: [], bulkFormat: 'x-copy' }, { algorithms: [] }), w, schema, 10).kind).toBe(
      'rows',
    );
    expect(negotiateFeed(sides({ algorithms: [] }, { algorithms: [] }), w, schema, 10).kind).toBe('rows');
  });
});

describe('the reconcile token', () => {
  let env: Env;

  beforeAll(async () => {
    env = await setupDatabases('tr_token');
    await env.source.query(ORDERS_DDL);
    await env.target.query(TARGET_DDL);
    await insertSourceRows(env.source, 1, 60);
  });
  afterAll(async () => {
    await env?.close();
  });

  it('is recorded in the journal before the apply call goes out, passed back to reconcile unchanged, and cleared by the next attempt', async () => {
    const t = ordersTransfer('token', { batchSize: 30 });
    const real = new PostgresTransferTarget(t, env.target);
    const journal = new PostgresTransferJournal(env.control);
    const seen: { token: string | null; fenceThrough: number }[] = [];
    let loseFirstReply = true;
    // A PostgreSQL target that hands out a token per attempt, and loses the reply of the first apply call after it
    // committed (the caller learns nothing; the target knows).
    const target: TargetAdapter = {
      engine: 'tokened',
      prepare: (schema) => real.prepare(schema),
      stage: (req, feed) => real.stage(req, feed),
      apply: async (req, ctx) => {
        const token = `attempt-${ctx.attempt}:${'ab'.repeat(40)}`;
        await ctx.onReconcileToken?.(token);
        // Durable before the call: the journal holds it already.
        expect((await journal.get(req.batchId))?.targetReconcileToken).toBe(token);
        const res = await real.apply(req, ctx);
        if (loseFirstReply) {
          loseFirstReply = false;
          throw new Error('connection lost after the call');
        }
        return res;
      },
      reconcile: (req, waitMs, fenceThrough, token) => {
        seen.push({ token, fenceThrough });
        return real.reconcile(req, waitMs, fenceThrough, token);
      },
      purgeStaged: (id) => real.purgeStaged(id),
      checksumAlgorithms: () => real.checksumAlgorithms(),
      bulkFormat: real.bulkFormat,
      close: async () => undefined,
    };
    const svc = new TransferService({
      journal,
      transfers: [t],
      connect: (tc) => ({ source: new PostgresTransferSource(tc, env.source), target }),
    });
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    // The reply was lost; reconcile asked the target with the recorded token and read "committed".
    expect(v.state).toBe('committed');
    const token1 = `attempt-1:${'ab'.repeat(40)}`;
    expect(seen).toEqual([{ token: token1, fenceThrough: 1 }]);
    const d = (await svc.getBatch(b.batchId))!;
    expect(d.targetReconcileToken).toBe(token1);
    expect(d.events.find((e) => e.event === 'reconcile_token_recorded')?.detail).toEqual({ token: token1, attempt: 1 });
    // A new attempt starts without the old token: the journal clears it when the apply starts.
    const b2 = await svc.createBatch(t.name);
    expect((await svc.stage(b2.batchId)).state).toBe('staged');
    const started = await journal.transition(
      b2.batchId,
      ['staged'],
      'applying',
      { incrementAttempts: true, targetReconcileToken: null },
      'apply_started',
    );
    expect(started?.targetReconcileToken).toBeNull();
    // Reconcile of an attempt that never handed out a token gets null, and rules the attempt out.
    expect((await svc.reconcile(b2.batchId)).state).toBe('staged');
    expect(seen.at(-1)).toEqual({ token: null, fenceThrough: 1 });
    const done = await svc.run(b2.batchId);
    expect(done).toMatchObject({ state: 'committed', attempts: 2 });
    expect((await svc.getBatch(b2.batchId))!.targetReconcileToken).toBe(`attempt-2:${'ab'.repeat(40)}`);
  });
});

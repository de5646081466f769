// A stage run's error noted after another run ended the batch (found by test/transfer/chaos.test.ts: a duplicate
// stage message whose source connection was cut after the rival run had failed the batch with manifest_mismatch).
// The failed batch's last error is why it failed -- what the operator, the runbook and the batch_failed alert go by.
// The stage error was written unfenced, so the late run replaced "manifest_mismatch" (or an operator's abandon
// reason) with its own "Connection terminated unexpectedly" (code 'error'). Now the note is fenced on the batch's
// version and written only while the batch is open; the event is still kept.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import type { SourceAdapter } from '../../shared/transfer/types.js';
import { batchEvents, createLane, LANE_WRITES_DDL, laneTransfer, setupDatabases, type Env } from './helpers.js';

describe('a stage error noted after another run ended the batch', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_stale_stage');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  it("keeps the failed batch's reason (an abandon while the stage ran); the stage error is an event only", async () => {
    const table = 'sse';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 20, chunkSize: 10 });
    const target = (tc: typeof t) => new PostgresTransferTarget(tc, env.target);
    const a = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({ source: new PostgresTransferSource(tc, env.source), target: target(tc) }),
    });
    const created = await a.createBatch(table);
    // Process B's stage step: it has read the batch (extracting) when the operator abandons it through process A,
    // and then its source connection is cut.
    const cut = (tc: typeof t): SourceAdapter => {
      const real = new PostgresTransferSource(tc, env.source);
      return Object.assign(Object.create(real) as SourceAdapter, {
        readSchema: async () => {
          await a.abandon(created.batchId, 'operator gave up');
          throw new Error('Connection terminated unexpectedly');
        },
      });
    };
    const b = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      connect: (tc) => ({ source: cut(tc), target: target(tc) }),
    });
    await expect(b.stage(created.batchId)).rejects.toThrow(/Connection terminated/);
    const now = await a.getBatch(created.batchId);
    expect(now).toMatchObject({ state: 'failed', lastErrorCode: 'invalid_state' });
    expect(now?.lastError).toMatch(/abandoned by operator: operator gave up/);
    expect(await batchEvents(env, created.batchId)).toEqual(['created', 'manifest_recorded', 'failed', 'stage_error']);
    await a.close();
    await b.close();
  });
});

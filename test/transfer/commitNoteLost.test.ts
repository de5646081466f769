// The journal's `commit` note after the target committed: its connection dies before the note reaches the journal
// (lost), or after the journal committed it (its reply lost). The target's answer stands either way: the batch ends
// committed, read back from the target where the journal missed it, with no error left on the committed batch (the
// journal's fault is not the apply's), and the call that applied it says so (committedByCall), so that the queue
// step continues the catch-up chain once -- not zero times. Staged apply and direct apply alike.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { PostgresTransferTarget } from '../../shared/engines/postgres/transferTarget.js';
import { TransferService } from '../../shared/transfer/service.js';
import {
  batchEvents,
  createLane,
  LANE_WRITES_DDL,
  laneProblems,
  laneTransfer,
  setupDatabases,
  type Env,
} from './helpers.js';

type Fault = 'lost' | 'reply_lost';

describe("the journal's commit note lost after the target committed", () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_commit_lost');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  const cases: { direct: boolean; fault: Fault }[] = [
    { direct: false, fault: 'lost' },
    { direct: false, fault: 'reply_lost' },
    { direct: true, fault: 'lost' },
    { direct: true, fault: 'reply_lost' },
  ];
  it("a second step of the batch records the commit while the first one's note is lost: exactly one continues", async () => {
    const table = 'cl_race';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 20, chunkSize: 10 });
    const connect = (tc: typeof t) => ({
      source: new PostgresTransferSource(tc, env.source),
      target: new PostgresTransferTarget(tc, env.target),
    });
    const other = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect,
    });
    const journal = new PostgresTransferJournal(env.control);
    const transition = journal.transition.bind(journal);
    let second: Awaited<ReturnType<TransferService['apply']>> | null = null;
    journal.transition = async (id, from, to, patch, event, detail) => {
      if (to === 'committed' && second === null) {
        // The redelivered step runs now (it finds the batch 'applying' and reconciles: committed on the target).
        second = await other.apply(id);
        throw new Error('Connection terminated unexpectedly');
      }
      return transition(id, from, to, patch, event, detail);
    };
    const svc = new TransferService({ journal, transfers: [t], directApply: false, connect });
    const b = await svc.createBatch(t.name);
    const v = await svc.run(b.batchId);
    expect(v.state).toBe('committed');
    expect(second!.state).toBe('committed');
    expect([svc.committedByCall(v), other.committedByCall(second!)].filter(Boolean)).toEqual([true]);
    expect(await laneProblems(env, table, 20)).toEqual([]);
    await svc.close();
    await other.close();
  });

  for (const { direct, fault } of cases) {
    it(`${direct ? 'direct apply' : 'staged apply'}, note ${fault === 'lost' ? 'lost' : 'committed, reply lost'}: committed, no error on it, continued once`, async () => {
      const table = `cl_${direct ? 'd' : 's'}_${fault}`;
      await createLane(env, table, 40);
      const t = laneTransfer(table, { batchSize: 20, chunkSize: 10 });
      const journal = new PostgresTransferJournal(env.control);
      const transition = journal.transition.bind(journal);
      let cut = 0;
      journal.transition = async (id, from, to, patch, event, detail) => {
        if (to === 'committed' && cut === 0) {
          cut++;
          if (fault === 'reply_lost') await transition(id, from, to, patch, event, detail);
          throw Object.assign(new Error('Connection terminated unexpectedly'), { code: undefined });
        }
        return transition(id, from, to, patch, event, detail);
      };
      const svc = new TransferService({
        journal,
        transfers: [t],
        directApply: direct,
        connect: (tc) => ({
          source: new PostgresTransferSource(tc, env.source),
          target: new PostgresTransferTarget(tc, env.target),
        }),
      });
      const b = await svc.createBatch(t.name);
      const v = await svc.run(b.batchId);
      expect(cut).toBe(1);
      expect(v.state).toBe('committed');
      expect(v.lastError).toBeNull();
      expect(svc.committedByCall(v)).toBe(true);
      const d = (await svc.getBatch(b.batchId))!;
      expect(d.state).toBe('committed');
      expect(d.lastError).toBeNull();
      expect(d.lastErrorCode).toBeNull();
      expect(await batchEvents(env, b.batchId)).not.toContain('apply_error');
      // A second step of the same batch (the message redelivered) finds it committed and does not continue it.
      const again = await svc.run(b.batchId);
      expect(again.state).toBe('committed');
      expect(svc.committedByCall(again)).toBe(false);
      const next = await svc.createBatch(t.name);
      expect((await svc.run(next.batchId)).state).toBe('committed');
      expect(await laneProblems(env, table, 40)).toEqual([]);
      await svc.close();
    });
  }
});

describe('an abandon racing an apply on its way to the target', () => {
  let env: Env;
  beforeAll(async () => {
    env = await setupDatabases('tr_abandon_race');
    await env.target.query(LANE_WRITES_DDL);
  });
  afterAll(async () => {
    await env?.close();
  });

  // The apply's attempt is counted, then the operator abandons (final fence committed, batch failed, window
  // released) before the call reaches the target: the apply is refused there (attempt_fenced). The failed batch keeps
  // the operator's reason as its last error -- the late apply's refusal does not replace it -- and nothing is applied.
  it("the late apply's refusal is not written over the abandon's reason", async () => {
    const table = 'ab_race';
    await createLane(env, table, 20);
    const t = laneTransfer(table, { batchSize: 20, chunkSize: 10 });
    const operator = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect: (tc) => ({
        source: new PostgresTransferSource(tc, env.source),
        target: new PostgresTransferTarget(tc, env.target),
      }),
    });
    let abandoned = false;
    const worker = new TransferService({
      journal: new PostgresTransferJournal(env.control),
      transfers: [t],
      directApply: false,
      connect: (tc) => {
        const target = new PostgresTransferTarget(tc, env.target);
        const apply = target.apply.bind(target);
        target.apply = async (req, ctx) => {
          abandoned = (await operator.abandonOnce(req.batchId, 'operator gave up')).abandoned;
          return apply(req, ctx);
        };
        return { source: new PostgresTransferSource(tc, env.source), target };
      },
    });
    const b = await worker.createBatch(t.name);
    const v = await worker.run(b.batchId);
    expect(abandoned).toBe(true);
    expect(v.state).toBe('failed');
    const d = (await worker.getBatch(b.batchId))!;
    expect(d.lastError).toMatch(/abandoned by operator: operator gave up/);
    expect(d.lastErrorCode).toBe('invalid_state');
    expect(await batchEvents(env, b.batchId)).toContain('apply_error'); // the refusal is kept as an event
    const written = await env.target.query(`select count(*)::int as n from public.lane_writes where tbl = $1`, [table]);
    expect(written.rows[0].n).toBe(0);
    await operator.close();
    await worker.close();
  });
});

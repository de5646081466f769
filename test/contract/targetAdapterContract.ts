// The TargetAdapter contract, written once and run per engine (test/engines/<engine>.targetAdapter.test.ts): stage
// validation (manifest, duplicate keys, restaging), apply idempotency under a repeated batch id, two processes on
// one batch, reconcile's verdicts with the fence, an apply held open (unresolved, never guessed), and a connection
// cut mid-apply whose outcome reconcile reads from the target. Rows come from a PostgreSQL source and the journal
// is PostgreSQL's, both on the run's embedded server, so the target is the only engine that varies.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PostgresTransferJournal } from '../../shared/engines/postgres/transferJournal.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import { transferEngineRules } from '../../shared/engines/registry.js';
import { ChecksumAccumulator, type CanonicalRow } from '../../shared/transfer/checksum.js';
import { parseTransfers, type TransferConfig } from '../../shared/transfer/config.js';
import { isTransferError } from '../../shared/transfer/errors.js';
import { FINAL_FENCE, type StageRequest, type TargetAdapter, type Window } from '../../shared/transfer/types.js';
import { TransferService, type BatchView } from '../../shared/transfer/service.js';
import { createTestDatabase } from '../support/pg.js';
import { insertSourceRows, migrateJournal, ORDERS_DDL } from '../transfer/helpers.js';
import type { TargetHarness } from './transferHarness.js';

const COLUMNS = ['id', 'customer', 'amount', 'placed_at', 'flag', 'note', 'payload'];
const ROWS = 2000; // source rows 1..2000; each test takes windows of its own transfer from the start

export function defineTargetAdapterContract(makeHarness: () => TargetHarness): void {
  let h: TargetHarness;
  let source: pg.Pool;
  let control: pg.Pool;
  const targets: TargetAdapter[] = [];

  beforeAll(async () => {
    h = makeHarness();
    source = new pg.Pool({ connectionString: await createTestDatabase('tc_src'), max: 4 });
    control = new pg.Pool({ connectionString: await createTestDatabase('tc_ctl'), max: 8 });
    for (const p of [source, control]) p.on('error', poolErrorLogger('postgres', 'transfer', 'target contract pool'));
    await migrateJournal(control);
    await source.query(ORDERS_DDL);
    // Oracle stores '' as NULL, so the contract's rows hold no empty strings.
    await insertSourceRows(source, 1, ROWS);
  });
  afterAll(async () => {
    for (const t of targets) await t.close().catch(() => undefined);
    await h?.close();
    await source?.end();
    await control?.end();
  });

  // A new target table and a transfer into it; batchSize rows per batch. changes: a 'changes' transfer (rows carry
  // their operation; docs/transfer.md "Deletes").
  async function transfer(batchSize: number, opts: { changes?: boolean } = {}): Promise<TransferConfig> {
    const { target, column } = await h.createTable();
    const [t] = parseTransfers(
      [
        {
          name: `tc_${randomBytes(4).toString('hex')}`,
          source: { engine: 'postgres', connectionSetting: 'TEST_SOURCE', table: 'public.orders' },
          target,
          keyColumns: ['id'],
          boundary: opts.changes ? { kind: 'changes' } : { column: 'id', kind: 'key' },
          columns: COLUMNS.map((c) => ({ source: c, target: column(c) })),
          batchSize,
          chunkSize: 64,
          reconcileWaitMs: 1000,
        },
      ],
      transferEngineRules(),
    );
    return t!;
  }

  async function target(t: TransferConfig): Promise<TargetAdapter> {
    const a = await h.openTarget(t);
    targets.push(a);
    return a;
  }

  // A service as one process sees it: its own target adapter, the shared journal and source.
  async function service(t: TransferConfig): Promise<{ svc: TransferService; target: TargetAdapter }> {
    const tgt = await target(t);
    const svc = new TransferService({
      journal: new PostgresTransferJournal(control),
      transfers: [t],
      connect: (tc) => ({ source: new PostgresTransferSource(tc, source), target: tgt }),
    });
    return { svc, target: tgt };
  }

  async function request(svc: TransferService, b: BatchView): Promise<StageRequest> {
    const d = (await svc.getBatch(b.batchId))!;
    return {
      batchId: b.batchId,
      transfer: b.transfer,
      manifest: { rowCount: d.rowCount!, checksum: d.checksum! },
      schema: { columns: d.schemaColumns, hash: d.schemaHash },
    };
  }

  // Canonical rows of a window, as the source streams them.
  async function rowsOf(t: TransferConfig, w: Window): Promise<CanonicalRow[]> {
    const s = new PostgresTransferSource(t, source);
    const schema = await s.readSchema();
    const out: CanonicalRow[] = [];
    for await (const chunk of s.streamRows(w, schema, 100)) out.push(...chunk);
    return out;
  }

  function feedOf(rows: CanonicalRow[]) {
    return {
      kind: 'rows' as const,
      rows: (async function* () {
        for (let i = 0; i < rows.length; i += 50) yield rows.slice(i, i + 50);
      })(),
    };
  }

  function manifestOf(rows: CanonicalRow[]) {
    const acc = new ChecksumAccumulator();
    for (const r of rows) acc.add(r);
    return { rowCount: acc.count, checksum: acc.checksum };
  }

  // The source rows 1..n in the target exactly once, each written by one apply.
  async function expectExactlyOnce(t: TransferConfig, upTo: number): Promise<void> {
    expect(await h.countRows(t)).toBe(upTo);
  }

  it('stage verifies before anything counts: manifest mismatch, duplicate keys, restaging same and different content', async () => {
    const t = await transfer(100);
    const tgt = await target(t);
    const s = new PostgresTransferSource(t, source);
    const schema = await s.readSchema();
    await tgt.prepare(schema);
    const rows = await rowsOf(t, { kind: 'key', low: null, high: '40' });
    const req = (batchId: string, r: CanonicalRow[]): StageRequest => ({
      batchId,
      transfer: t.name,
      manifest: manifestOf(r),
      schema,
    });
    const id = randomUUID;
    // Count and checksum differ from the manifest: refused, nothing staged under that id.
    const wrong = id();
    await expect(
      tgt.stage({ ...req(wrong, rows), manifest: { rowCount: 40, checksum: '1' } }, feedOf(rows)),
    ).rejects.toSatisfy((e) => isTransferError(e, 'manifest_mismatch'));
    // The same key twice in a batch: refused.
    const dup = [...rows, rows[3]!];
    await expect(tgt.stage(req(id(), dup), feedOf(dup))).rejects.toSatisfy((e) => isTransferError(e, 'duplicate_keys'));
    // A good staging; the same content again is already staged; other content under the same id is a conflict.
    const good = id();
    expect(await tgt.stage(req(good, rows), feedOf(rows))).toMatchObject({ outcome: 'staged', rowCount: 40 });
    expect((await tgt.stage(req(good, rows), feedOf(rows))).outcome).toBe('already_staged');
    const other = rows.slice(0, 39);
    await expect(tgt.stage(req(good, other), feedOf(other))).rejects.toSatisfy((e) =>
      isTransferError(e, 'staging_conflict'),
    );
    // The refused stagings left nothing to apply, the good one applies.
    await expect(tgt.apply(req(wrong, rows), { attempt: 1 })).rejects.toSatisfy((e) =>
      isTransferError(e, 'not_staged'),
    );
    expect(await tgt.apply(req(good, rows), { attempt: 1 })).toMatchObject({ outcome: 'applied', rowCount: 40 });
    await expectExactlyOnce(t, 40);
  });

  // The staged rows were verified in the staging table's types (the target's at prepare): an apply into a column
  // altered since would convert them (here: round the amounts) and commit rows that are not the source's.
  it('a target column altered after staging: apply refuses the batch as target_incompatible and writes nothing', async () => {
    const t = await transfer(100);
    const tgt = await target(t);
    const schema = await new PostgresTransferSource(t, source).readSchema();
    await tgt.prepare(schema);
    const rows = await rowsOf(t, { kind: 'key', low: null, high: '40' });
    const req: StageRequest = { batchId: randomUUID(), transfer: t.name, manifest: manifestOf(rows), schema };
    expect(await tgt.stage(req, feedOf(rows))).toMatchObject({ outcome: 'staged', rowCount: 40 });
    await h.narrowAmountScale(t);
    await expect(tgt.apply(req, { attempt: 1 })).rejects.toSatisfy((e) => isTransferError(e, 'target_incompatible'));
    expect(await h.countRows(t)).toBe(0);
    expect((await h.completion(req.batchId))?.state).not.toBe('committed');
  });

  it('apply is idempotent under a repeated batch id: re-applying a committed batch is a no-op that says so', async () => {
    const t = await transfer(300);
    const { svc, target: tgt } = await service(t);
    let total = 0;
    for (let i = 0; i < 2; i++) {
      const b = await svc.createBatch(t.name);
      const v = await svc.run(b.batchId);
      expect(v.state, v.lastError ?? '').toBe('committed');
      total += v.appliedCount!;
      const req = await request(svc, b);
      for (const attempt of [1, 2, 7]) {
        const again = await tgt.apply(req, { attempt });
        expect(again).toMatchObject({ outcome: 'already_committed', rowCount: b.rowCount, checksum: b.checksum });
      }
      expect(await tgt.reconcile(req, 1000, v.attempts, null)).toMatchObject({
        outcome: 'committed',
        rowCount: b.rowCount,
      });
      expect(await h.completion(b.batchId)).toMatchObject({ state: 'committed' });
    }
    expect(total).toBe(600);
    await expectExactlyOnce(t, 600);
  });

  it('change rows: deletes by key and upserts in the apply transaction, a mirror deletes the rest, a re-apply says so', async () => {
    const t = await transfer(100, { changes: true });
    const keyed = await transfer(100); // reads the canonical rows of a key window
    const tgt = await target(t);
    const schema = await new PostgresTransferSource(t, source).readSchema();
    await tgt.prepare(schema);
    const upsert = (r: CanonicalRow): CanonicalRow => [...r, 'U'];
    const del = (id: number): CanonicalRow => [String(id), ...COLUMNS.slice(1).map(() => null), 'D'];
    const run = async (rows: CanonicalRow[], changes: 'ops' | 'mirror', attempt = 1) => {
      const req: StageRequest = {
        batchId: randomUUID(),
        transfer: t.name,
        manifest: manifestOf(rows),
        schema,
        changes,
      };
      await tgt.stage(req, feedOf(rows));
      return { req, res: await tgt.apply(req, { attempt }) };
    };
    // a baseline of rows 1..40 (mirror: nothing else there)
    const base = (await rowsOf(keyed, { kind: 'key', low: null, high: '40' })).map(upsert);
    expect((await run(base, 'mirror')).res).toMatchObject({ outcome: 'applied', rowCount: 40, deleted: 0 });
    await expectExactlyOnce(t, 40);
    // a change window: 1..5 deleted, 6 updated, 41 inserted, 99 deleted but never there
    const six = (await rowsOf(keyed, { kind: 'key', low: '5', high: '6' }))[0]!;
    const changed = upsert([six[0]!, 'changed', ...six.slice(2)]);
    const fortyOne = (await rowsOf(keyed, { kind: 'key', low: '40', high: '41' })).map(upsert);
    const window = [1, 2, 3, 4, 5, 99].map(del).concat([changed], fortyOne);
    const { req, res } = await run(window, 'ops');
    expect(res).toMatchObject({ outcome: 'applied', rowCount: 8, deleted: 5 });
    expect(await h.countRows(t)).toBe(36);
    // the same batch id again: already committed, nothing deleted twice
    for (const attempt of [1, 2]) {
      expect(await tgt.apply(req, { attempt })).toMatchObject({
        outcome: 'already_committed',
        rowCount: 8,
        deleted: 5,
      });
    }
    expect(await h.countRows(t)).toBe(36);
    // the checksum covers the operation: a delete staged as an upsert is refused
    const tampered = window.map((r) => (r[0] === '1' ? [...r.slice(0, -1), 'U'] : r));
    const bad: StageRequest = {
      batchId: randomUUID(),
      transfer: t.name,
      manifest: manifestOf(window),
      schema,
      changes: 'ops',
    };
    const err = await tgt.stage(bad, feedOf(tampered)).catch((e: unknown) => e);
    expect(isTransferError(err, 'manifest_mismatch'), String(err)).toBe(true);
    // a re-baseline holding 10..20 only: the mirror deletes every other row in the same transaction
    const rebase = (await rowsOf(keyed, { kind: 'key', low: '9', high: '20' })).map(upsert);
    expect((await run(rebase, 'mirror')).res).toMatchObject({ outcome: 'applied', rowCount: 11, deleted: 25 });
    expect(await h.countRows(t)).toBe(11);
  });

  it('two processes on one batch: exactly one apply commits, the other learns it; the journal ends committed once', async () => {
    const t = await transfer(150);
    const p1 = await service(t);
    const p2 = await service(t);
    for (let round = 0; round < 10; round++) {
      const b = await p1.svc.createBatch(t.name);
      expect((await p1.svc.stage(b.batchId)).state).toBe('staged');
      const req = await request(p1.svc, b);
      if (round === 0) await p2.target.prepare(req.schema); // p1's target was prepared by its service
      // Straight at the target, both at once: the target serializes them.
      const results = await Promise.all([p1.target.apply(req, { attempt: 1 }), p2.target.apply(req, { attempt: 1 })]);
      expect(results.map((r) => r.outcome).sort()).toEqual(['already_committed', 'applied']);
      expect(results.every((r) => r.rowCount === b.rowCount && r.checksum === b.checksum)).toBe(true);
      // Through both services at once (two hosts): the journal lets one apply through, reconcile reads the verdict.
      const [v1, v2] = await Promise.all([p1.svc.apply(b.batchId), p2.svc.apply(b.batchId)]);
      expect([v1.state, v2.state]).toContain('committed');
      expect((await p1.svc.reconcile(b.batchId)).state).toBe('committed');
    }
    await expectExactlyOnce(t, 1500);
  });

  it('reconcile verdicts and the fence: "not applied" is final for the attempts so far; abandon fences every attempt', async () => {
    const t = await transfer(60);
    const { svc, target: tgt } = await service(t);
    const journal = new PostgresTransferJournal(control);
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    const req = await request(svc, b);
    // Nothing was ever sent (fence 0): a probe, which keeps nothing.
    expect(await tgt.reconcile(req, 1000, 0, null)).toMatchObject({ outcome: 'not_applied', staged: true });
    expect(await h.completion(b.batchId)).toBeNull();
    // Attempt 1 is started in the journal and its call is "on its way"; a rival reconcile rules it out first.
    await journal.transition(b.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
    expect((await svc.reconcile(b.batchId)).state).toBe('staged');
    expect(await h.completion(b.batchId)).toEqual({ state: 'fenced', fencedThrough: 1 });
    // The late call arrives: refused, nothing applied; the verdict stays.
    await expect(tgt.apply(req, { attempt: 1 })).rejects.toSatisfy((e) => isTransferError(e, 'attempt_fenced'));
    expect(await h.countRows(t)).toBe(0);
    expect(await tgt.reconcile(req, 1000, 1, null)).toMatchObject({ outcome: 'not_applied', staged: true });
    // A later attempt takes the fence over and commits -- behind the journal's back, as a process whose reply was
    // lost would. The journal still says staged; reconcile asks the target and records committed.
    expect((await tgt.apply(req, { attempt: 2 })).outcome).toBe('applied');
    expect((await svc.getBatch(b.batchId))!.state).toBe('staged');
    const ab = await svc.abandon(b.batchId, 'contract test');
    expect(ab).toMatchObject({ state: 'committed', appliedCount: b.rowCount });
    // Abandon of a batch that was not applied: the final fence, failed, and no attempt can commit it afterwards.
    const b2 = await svc.createBatch(t.name);
    expect((await svc.stage(b2.batchId)).state).toBe('staged');
    expect((await svc.abandon(b2.batchId, 'contract test')).state).toBe('failed');
    expect(await h.completion(b2.batchId)).toEqual({ state: 'fenced', fencedThrough: FINAL_FENCE });
    const req2 = { ...req, batchId: b2.batchId, manifest: { rowCount: b2.rowCount!, checksum: b2.checksum! } };
    await expect(tgt.apply(req2, { attempt: 1_000_000 })).rejects.toSatisfy((e) =>
      isTransferError(e, 'attempt_fenced'),
    );
    // Its window is released: a new batch covers it and commits.
    const b3 = await svc.createBatch(t.name);
    expect(b3.boundary).toEqual(b2.boundary);
    expect((await svc.run(b3.batchId)).state).toBe('committed');
    await expectExactlyOnce(t, 120);
  });

  it('an apply still open on the target makes the batch unresolved, never guessed; once it rolls back, the retry commits', async () => {
    const t = await transfer(50);
    const { svc } = await service(t);
    const journal = new PostgresTransferJournal(control);
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    const held = await h.holdClaim(b.batchId, t.name);
    try {
      await journal.transition(b.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
      const v = await svc.reconcile(b.batchId);
      expect(v).toMatchObject({ state: 'unresolved', status: 'unresolved', lastErrorCode: 'claim_blocked' });
      expect(v.nextAction).toMatch(/Reconcile again later/);
      // Maintenance asks again and gets the same answer.
      const stale = await svc.reconcileStale(0, 100);
      expect(stale.find((x) => x.batchId === b.batchId)?.state).toBe('unresolved');
    } finally {
      await held.release();
    }
    expect((await svc.reconcile(b.batchId)).state).toBe('staged');
    const done = await svc.run(b.batchId);
    expect(done).toMatchObject({ state: 'committed', attempts: 2 });
    await expectExactlyOnce(t, 50);
  });

  it('a connection cut mid-apply: reconcile reads the outcome from the target, the cut attempt can never commit, the retry applies once', async () => {
    const t = await transfer(80);
    const { svc, target: tgt } = await service(t);
    const b = await svc.createBatch(t.name);
    expect((await svc.stage(b.batchId)).state).toBe('staged');
    const req = await request(svc, b);
    // The apply waits behind a held claim, so it is surely running on the server when its connection is cut.
    const held = await h.holdClaim(b.batchId, t.name);
    let applying: Promise<BatchView> | undefined;
    try {
      applying = svc.apply(b.batchId);
      const deadline = Date.now() + 20_000;
      while ((await svc.getBatch(b.batchId))!.state !== 'applying' && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      // The call reaches the server and waits there (seen, where the engine can show it; a slow machine's is late).
      if (h.untilApplyWaits) await h.untilApplyWaits();
      else await new Promise((r) => setTimeout(r, 500));
      await h.cutApplies();
      // The service reconciles after the lost call: the claim is still held, so it cannot say -- unresolved.
      const v = await applying;
      expect(v.state).toBe('unresolved');
    } finally {
      await held.release();
      await applying?.catch(() => undefined);
    }
    // Now the target answers: nothing was applied, and that verdict is fenced on the target.
    expect((await svc.reconcile(b.batchId)).state).toBe('staged');
    await expect(tgt.apply(req, { attempt: 1 })).rejects.toSatisfy((e) => isTransferError(e, 'attempt_fenced'));
    const done = await svc.run(b.batchId);
    expect(done).toMatchObject({ state: 'committed', attempts: 2, appliedCount: 80 });
    expect(await h.completion(b.batchId)).toMatchObject({ state: 'committed' });
    await expectExactlyOnce(t, 80);
  });
}

// The TransferJournal contract, written once and run per engine (test/engines/<engine>.transferJournal.test.ts):
// refusals told apart, the compare-and-set state machine with its patch rules and events, the text bounds,
// attempt numbering under concurrent starts, the reconcile token kept unchanged, and concurrent inserts for one
// window on a small pool.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { isTransferError } from '../../shared/transfer/errors.js';
import type { NewBatch, TransferJournal } from '../../shared/transfer/journal.js';
import { JOURNAL_TEXT_MAX } from '../../shared/transfer/journalProcedures.js';
import type { JournalHarness } from './transferHarness.js';

const codeOf = (e: unknown) => (isTransferError(e) ? e.code : `not a transfer error: ${String(e)}`);

export function defineTransferJournalContract(makeHarness: () => JournalHarness): void {
  let h: JournalHarness;
  let j: TransferJournal;
  // Transfers of one run share the harness's database: every test uses names of its own.
  const unique = (prefix: string) => `${prefix}_${randomBytes(4).toString('hex')}`;
  const base = (name: string): Omit<NewBatch, 'batchId' | 'boundaryLow' | 'boundaryHigh'> => ({
    transferName: name,
    boundaryKind: 'key',
    schemaHash: 'h'.repeat(64),
    schemaColumns: [{ name: 'id', type: 'bigint', logical: 'int' }],
  });

  beforeAll(async () => {
    h = makeHarness();
    j = await h.openJournal();
  });
  afterAll(async () => {
    await j?.close();
    await h?.close();
  });

  it("now() is the clock of the journal's stamps: a batch's createdAt and updatedAt are not after it, it moves on", async () => {
    const before = await j.now();
    const b = await j.insertBatch({
      ...base(unique('now')),
      batchId: randomUUID(),
      boundaryLow: null,
      boundaryHigh: '1',
    });
    const after = await j.now();
    expect(after.getTime()).toBeGreaterThanOrEqual(before.getTime());
    // SQL Server's datetime2 stamps and SYSUTCDATETIME() are read to the millisecond alike.
    expect(b.createdAt.getTime()).toBeLessThanOrEqual(after.getTime());
    expect(b.updatedAt.getTime()).toBeGreaterThanOrEqual(before.getTime() - 1);
  });

  it('refusals say which rule refused: duplicate_batch_id, window_taken, open_batch_exists', async () => {
    const name = unique('dup');
    const id = randomUUID();
    const first = await j.insertBatch({ ...base(name), batchId: id, boundaryLow: null, boundaryHigh: '10' });
    expect(first).toMatchObject({ batchId: id, state: 'extracting', attempts: 0, boundaryHigh: '10', rowCount: null });
    // Same id while it is open: the id is the problem, not the open batch (also in another letter case).
    for (const same of [id, id.toUpperCase()])
      await expect(
        j.insertBatch({ ...base(name), batchId: same, boundaryLow: '10', boundaryHigh: '20' }),
      ).rejects.toSatisfy((e) => codeOf(e) === 'duplicate_batch_id');
    // Same id once committed, for a free window: still the id, with the state it has.
    await j.transition(id, ['extracting'], 'committed', { appliedCount: 0, stamp: 'committed_at' }, 'test');
    const err = await j
      .insertBatch({ ...base(name), batchId: id, boundaryLow: '10', boundaryHigh: '20' })
      .catch((e: unknown) => e);
    expect(codeOf(err)).toBe('duplicate_batch_id');
    expect(isTransferError(err) && err.detail).toEqual({ batchId: id, state: 'committed' });
    // Same id under another transfer: also the id.
    await expect(
      j.insertBatch({ ...base(unique('dup_other')), batchId: id, boundaryLow: null, boundaryHigh: '5' }),
    ).rejects.toSatisfy((e) => codeOf(e) === 'duplicate_batch_id');
    // A fresh id for a covered window: the window; for the next window: accepted; another while it is open: refused.
    const taken = await j
      .insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '30' })
      .catch((e: unknown) => e);
    expect(codeOf(taken)).toBe('window_taken');
    const next = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: '10', boundaryHigh: '20' });
    const open = await j
      .insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: '20', boundaryHigh: '30' })
      .catch((e: unknown) => e);
    expect(codeOf(open)).toBe('open_batch_exists');
    expect(isTransferError(open) && open.detail).toEqual({ batchId: next.batchId });
    // Nothing of the refused inserts was recorded.
    expect((await j.events(id)).map((e) => e.event)).toEqual(['created', 'test']);
    expect((await j.list({ transfer: name, limit: 10 })).map((b) => b.batchId)).toEqual([next.batchId, id]);
    // A failed batch releases its window: a new batch may cover it.
    await j.transition(next.batchId, ['extracting'], 'failed', { stamp: 'failed_at' }, 'failed');
    const again = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: '10', boundaryHigh: '20' });
    expect(again.state).toBe('extracting');
  });

  // Timestamp and rowversion windows: an update moves a row into the next window, so a replay's staged range and the
  // transfer's own window may hold two versions of one row: never open at once (test/transfer/replayLiveWindow.test.ts).
  // Key windows share no row with a replay's range: both may be open.
  it("a replay and the transfer's own window wait for each other (timestamp, rowversion); key windows do not", async () => {
    for (const kind of ['timestamp', 'rowversion', 'key'] as const) {
      const name = unique(`rw_${kind.slice(0, 3)}`);
      const b = (low: string | null, high: string, transferName = name): NewBatch => ({
        ...base(name),
        transferName,
        boundaryKind: kind,
        batchId: randomUUID(),
        boundaryLow: low,
        boundaryHigh: high,
      });
      const first = await j.insertBatch(b(null, '10'));
      await j.transition(
        first.batchId,
        ['extracting'],
        'committed',
        { appliedCount: 0, stamp: 'committed_at' },
        'test',
      );
      const live = await j.insertBatch(b('10', '20'));
      const replayWhileLive = await j.insertBatch(b(null, '10', `${name}@replay-1`)).catch((e: unknown) => e);
      if (kind === 'key') {
        expect((replayWhileLive as { state: string }).state).toBe('extracting');
        continue;
      }
      expect(codeOf(replayWhileLive)).toBe('open_batch_exists');
      expect(isTransferError(replayWhileLive) && replayWhileLive.detail).toEqual({ batchId: live.batchId });
      await j.transition(live.batchId, ['extracting'], 'committed', { appliedCount: 0, stamp: 'committed_at' }, 'test');
      const replay = await j.insertBatch(b(null, '10', `${name}@replay-2`));
      const liveWhileReplay = await j.insertBatch(b('20', '30')).catch((e: unknown) => e);
      expect(codeOf(liveWhileReplay)).toBe('open_batch_exists');
      expect(isTransferError(liveWhileReplay) && liveWhileReplay.detail).toEqual({ batchId: replay.batchId });
      await j.transition(replay.batchId, ['extracting'], 'failed', { stamp: 'failed_at' }, 'failed');
      expect((await j.insertBatch(b('20', '30'))).state).toBe('extracting');
    }
  });

  it('the state machine: compare-and-set transitions, patch rules, stamps, events, reads', async () => {
    const name = unique('sm');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '50' });
    const m = await j.transition(
      a.batchId,
      ['extracting'],
      'extracting',
      { rowCount: 50, checksum: 'c1', stamp: 'extracted_at' },
      'manifest_recorded',
      { rowCount: 50 },
    );
    expect(m).toMatchObject({ rowCount: 50, checksum: 'c1', state: 'extracting' });
    expect(m?.extractedAt).toBeInstanceOf(Date);
    // A state that does not match moves nothing and records nothing.
    expect(await j.transition(a.batchId, ['staged'], 'applying', {}, 'nope')).toBeNull();
    await j.note(a.batchId, 'stage_error', { code: 'E1' }, { lastError: 'boom', lastErrorCode: 'E1' });
    expect(await j.get(a.batchId)).toMatchObject({ state: 'extracting', lastError: 'boom', lastErrorCode: 'E1' });
    const s = await j.transition(
      a.batchId,
      ['extracting'],
      'staged',
      { stagedCount: 50, stagedChecksum: 'c1', lastError: null, stamp: 'staged_at' },
      'staged',
    );
    // null clears a column; an absent key leaves it as it was.
    expect(s).toMatchObject({ state: 'staged', stagedCount: 50, stagedChecksum: 'c1', lastError: null });
    expect(s?.lastErrorCode).toBe('E1');
    expect(s?.stagedAt).toBeInstanceOf(Date);
    const ap = await j.transition(
      a.batchId,
      ['staged'],
      'applying',
      { incrementAttempts: true, stamp: 'apply_started_at' },
      'apply_started',
      { attempt: 1 },
    );
    expect(ap).toMatchObject({ state: 'applying', attempts: 1 });
    expect(ap?.applyStartedAt).toBeInstanceOf(Date);
    expect((await j.stale(['applying'], 0, 1000)).map((b) => b.batchId)).toContain(a.batchId);
    expect((await j.stale(['applying'], 3_600_000, 1000)).map((b) => b.batchId)).not.toContain(a.batchId);
    const done = await j.transition(
      a.batchId,
      ['applying'],
      'committed',
      { appliedCount: 50, stamp: 'committed_at' },
      'applied',
    );
    expect(done).toMatchObject({ state: 'committed', appliedCount: 50, attempts: 1 });
    expect(done?.committedAt).toBeInstanceOf(Date);
    const b = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: '50', boundaryHigh: '90' });
    const last = await j.lastForTransfer(name);
    expect(last.open?.batchId).toBe(b.batchId);
    expect(last.lastCommitted).toMatchObject({ batchId: a.batchId, appliedCount: 50, boundaryHigh: '50' });
    expect((await j.list({ transfer: name, limit: 1 })).map((x) => x.batchId)).toEqual([b.batchId]);
    expect((await j.list({ transfer: name, limit: 5, afterId: b.batchId })).map((x) => x.batchId)).toEqual([a.batchId]);
    expect((await j.list({ transfer: name, state: 'committed', limit: 5 })).map((x) => x.batchId)).toEqual([a.batchId]);
    expect(await j.get(randomUUID())).toBeNull();
    const ev = await j.events(a.batchId);
    expect(ev.map((e) => [e.event, e.fromState, e.toState])).toEqual([
      ['created', null, 'extracting'],
      ['manifest_recorded', 'extracting', 'extracting'],
      ['stage_error', 'extracting', 'extracting'],
      ['staged', 'extracting', 'staged'],
      ['apply_started', 'staged', 'applying'],
      ['applied', 'applying', 'committed'],
    ]);
    expect(ev[0]!.detail).toEqual({ low: null, high: '50', schemaHash: 'h'.repeat(64) });
    expect(ev[1]!.detail).toEqual({ rowCount: 50 });
    expect(ev[4]!.detail).toEqual({ attempt: 1 });
  });

  it('the manifest is written once: two runs recording it at the same time both get the first one back', async () => {
    const name = unique('mf');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '10' });
    const record = (rowCount: number, checksum: string) =>
      j.transition(a.batchId, ['extracting'], 'extracting', { rowCount, checksum }, 'manifest_recorded', { rowCount });
    // Both runs read "no manifest", counted the window (the source changed in between) and record what they saw.
    const [first, second] = await Promise.all([record(10, 'c-first'), record(11, 'c-second')]);
    expect(first).toMatchObject({ rowCount: second!.rowCount, checksum: second!.checksum });
    const kept = await j.get(a.batchId);
    expect([first!.checksum, second!.checksum]).toEqual([kept!.checksum, kept!.checksum]);
    expect(['c-first', 'c-second']).toContain(kept!.checksum);
    expect(kept!.rowCount).toBe(kept!.checksum === 'c-first' ? 10 : 11);
    // A later record changes nothing either.
    expect(await record(12, 'c-late')).toMatchObject({ rowCount: kept!.rowCount, checksum: kept!.checksum });
  });

  it('a note fenced on the version its writer read: written while the row is unchanged, kept out once it moved', async () => {
    const name = unique('ver');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '10' });
    expect(a.version).toBe(0);
    // Every transition and every note that writes a column raises the version; an event-only note does not.
    const m = await j.transition(
      a.batchId,
      ['extracting'],
      'extracting',
      { rowCount: 10, checksum: 'c' },
      'manifest_recorded',
    );
    expect(m!.version).toBe(1);
    expect(await j.note(a.batchId, 'purge_error', { code: 'x' })).toBe(true);
    expect((await j.get(a.batchId))!.version).toBe(1);
    expect(await j.note(a.batchId, 'stage_error', { code: 'E1' }, { lastError: 'first', lastErrorCode: 'E1' }, 1)).toBe(
      true,
    );
    const read = (await j.get(a.batchId))!;
    expect([read.version, read.lastError]).toEqual([2, 'first']);
    // Another writer notes a newer error: a writer that read version 2 no longer writes, but its event is kept.
    await j.note(a.batchId, 'apply_error', { code: 'E2' }, { lastError: 'newer', lastErrorCode: 'E2' });
    expect(
      await j.note(
        a.batchId,
        'reconcile_error',
        { code: 'E3' },
        { lastError: 'stale', lastErrorCode: 'E3' },
        read.version,
      ),
    ).toBe(false);
    const now = (await j.get(a.batchId))!;
    expect([now.version, now.lastError, now.lastErrorCode]).toEqual([3, 'newer', 'E2']);
    const ev = await j.events(a.batchId);
    expect(ev.at(-1)).toMatchObject({ event: 'reconcile_error', detail: { code: 'E3', stale: true, version: 3 } });
    // A move made meanwhile fences it the same way; a note of an unknown batch answers false.
    await j.transition(a.batchId, ['extracting'], 'staged', { stagedCount: 10 }, 'staged');
    expect(await j.note(a.batchId, 'reconciled_not_applied', null as never, { lastError: 'newer' }, now.version)).toBe(
      false,
    );
    expect((await j.events(a.batchId)).at(-1)!.detail).toEqual({ stale: true, version: 4 });
    expect(await j.note(randomUUID(), 'stage_error', {}, { lastError: 'x' }, 0)).toBe(false);
  });

  it('a transition fenced on the version its writer read: moves while the row is unchanged, none once it moved', async () => {
    const name = unique('tver');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '10' });
    const staged = (await j.transition(a.batchId, ['extracting'], 'staged', { stagedCount: 1 }, 'staged', {}, 0))!;
    expect([staged.state, staged.version]).toEqual(['staged', 1]);
    // Another run starts an apply: a move decided on version 1 moves nothing, its event kept on the row, marked.
    await j.transition(a.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
    const stale = await j.transition(
      a.batchId,
      ['staged', 'applying'],
      'extracting',
      { targetReconcileToken: null },
      'reconciled_not_applied',
      { fencedThrough: 0 },
      staged.version,
    );
    expect(stale).toBeNull();
    const now = (await j.get(a.batchId))!;
    expect([now.state, now.attempts, now.version]).toEqual(['applying', 1, 2]);
    expect((await j.events(a.batchId)).at(-1)).toMatchObject({
      fromState: 'applying',
      toState: 'applying',
      event: 'reconciled_not_applied',
      detail: { fencedThrough: 0, stale: true, version: 2 },
    });
    // Unfenced, the state alone decides, as before; an unknown batch moves nothing.
    expect((await j.transition(a.batchId, ['applying'], 'unresolved', {}, 'reconcile_error'))!.state).toBe(
      'unresolved',
    );
    expect(await j.transition(randomUUID(), ['staged'], 'applying', {}, 'x', {}, 0)).toBeNull();
  });

  it("a new replay chain is named by the journal: '<name>@replay-' completed with a number it issues, in order", async () => {
    const name = unique('chain');
    const b = (low: string | null, high: string): NewBatch => ({
      ...base(name),
      transferName: `${name}@replay-`,
      batchId: randomUUID(),
      boundaryLow: low,
      boundaryHigh: high,
    });
    const r1 = await j.insertBatch(b(null, '10'));
    const r2 = await j.insertBatch(b('10', '20')); // another range, open beside the first
    const n = [r1, r2].map((r) => {
      expect(r.transferName).toMatch(new RegExp(`^${name}@replay-\\d+$`));
      return BigInt(r.transferName.slice(name.length + '@replay-'.length));
    });
    expect(n[0]! < n[1]!).toBe(true);
    // Every record carries its seq, the number the chain was named with (openReplays orders by it).
    expect([r1.seq, r2.seq].map(BigInt)).toEqual(n);
    expect((await j.get(r2.batchId))!.seq).toBe(r2.seq);
    // Chains of their own: the same range again is refused while its replay is open, whatever the names.
    expect(codeOf(await j.insertBatch(b(null, '10')).catch((e: unknown) => e))).toBe('open_batch_exists');
    // A name with its number already (an older version's) is kept as it is.
    const old = await j.insertBatch({ ...b('20', '30'), transferName: `${name}@replay-1700000000000` });
    expect(old.transferName).toBe(`${name}@replay-1700000000000`);
  });

  it(`texts keep the same bound on every engine: last_error ${JOURNAL_TEXT_MAX.last_error} characters, cut whole`, async () => {
    const max = JOURNAL_TEXT_MAX.last_error;
    const name = unique('bound');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '5' });
    await j.note(a.batchId, 'stage_error', { code: 'E1' }, { lastError: 'first', lastErrorCode: 'E1' });
    // Characters, not bytes: 3,000 two-byte characters keep 2,000 of them. Only lastError is named: the code stays.
    await j.note(a.batchId, 'stage_error', undefined, { lastError: 'é'.repeat(max + 1000) });
    expect(await j.get(a.batchId)).toMatchObject({ lastError: 'é'.repeat(max), lastErrorCode: 'E1' });
    // Exactly the bound is kept whole; past it, a transition cuts the same way.
    const exact = await j.transition(a.batchId, ['extracting'], 'extracting', { lastError: 'x'.repeat(max) }, 'e');
    expect(exact?.lastError).toBe('x'.repeat(max));
    const cut = await j.transition(a.batchId, ['extracting'], 'extracting', { lastError: 'y'.repeat(5 * max) }, 'e');
    expect(cut).toMatchObject({ lastError: 'y'.repeat(max), lastErrorCode: 'E1' });
    // A character outside the BMP (two UTF-16 units) across the bound is dropped whole, never split in half.
    const emoji = await j.transition(
      a.batchId,
      ['extracting'],
      'extracting',
      { lastError: `${'z'.repeat(max - 1)}\u{1F600}tail` },
      'e',
    );
    expect(emoji?.lastError).toBe('z'.repeat(max - 1));
    // The code has its own bound (a driver's code never comes near it; a cut one still beats a refused write).
    const code = await j.transition(a.batchId, ['extracting'], 'extracting', { lastErrorCode: 'C'.repeat(100) }, 'e');
    expect(code?.lastErrorCode).toBe('C'.repeat(JOURNAL_TEXT_MAX.last_error_code));
    // The operator's name on a control keeps JOURNAL_TEXT_MAX.changed_by characters.
    const c = await j.setPaused(unique('bound_ctl'), true, 'r', 'o'.repeat(JOURNAL_TEXT_MAX.changed_by + 50));
    expect(c.changedBy).toBe('o'.repeat(JOURNAL_TEXT_MAX.changed_by));
  });

  it('the reconcile token is kept unchanged until the next apply starts, and then cleared', async () => {
    const name = unique('tok');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '5' });
    await j.transition(a.batchId, ['extracting'], 'staged', { rowCount: 5, checksum: 'c', stagedCount: 5 }, 'staged');
    await j.transition(a.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started');
    // Opaque: any text the target hands out (Oracle's is a long hex string) comes back exactly.
    const token = `${'0a'.repeat(120)}:Zz-_/+=`;
    await j.note(a.batchId, 'reconcile_token_recorded', { token }, { targetReconcileToken: token });
    expect((await j.get(a.batchId))?.targetReconcileToken).toBe(token);
    const back = await j.transition(a.batchId, ['applying'], 'staged', {}, 'reconciled_not_applied');
    expect(back?.targetReconcileToken).toBe(token);
    const again = await j.transition(
      a.batchId,
      ['staged'],
      'applying',
      { incrementAttempts: true, targetReconcileToken: null },
      'apply_started',
    );
    expect(again).toMatchObject({ attempts: 2, targetReconcileToken: null });
    expect((await j.events(a.batchId)).find((e) => e.event === 'reconcile_token_recorded')?.detail).toEqual({ token });
  });

  it('concurrent starts of one apply: exactly one compare-and-set wins, and attempts count each start once', async () => {
    const name = unique('cas');
    const a = await j.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '5' });
    await j.transition(a.batchId, ['extracting'], 'staged', { rowCount: 5, checksum: 'c', stagedCount: 5 }, 'staged');
    for (let round = 1; round <= 3; round++) {
      const results = await Promise.all(
        Array.from({ length: 8 }, () =>
          j.transition(a.batchId, ['staged'], 'applying', { incrementAttempts: true }, 'apply_started'),
        ),
      );
      const winners = results.filter((r) => r !== null);
      expect(winners).toHaveLength(1);
      expect(winners[0]!.attempts).toBe(round);
      // Reconcile's "not applied" moves it back; the next start is a new attempt.
      expect(await j.transition(a.batchId, ['applying'], 'staged', {}, 'reconciled_not_applied')).not.toBeNull();
    }
    const starts = (await j.events(a.batchId)).filter((e) => e.event === 'apply_started');
    expect(starts).toHaveLength(3);
  });

  it('20 concurrent inserts for one window on a 4-connection journal: one batch, 19 open_batch_exists, no hang', async () => {
    const small = await h.openJournal({ poolSize: 4 });
    try {
      const name = unique('storm');
      const results = await Promise.race([
        Promise.allSettled(
          Array.from({ length: 20 }, () =>
            small.insertBatch({ ...base(name), batchId: randomUUID(), boundaryLow: null, boundaryHigh: '100' }),
          ),
        ),
        new Promise<never>((_r, reject) =>
          setTimeout(() => reject(new Error('journal inserts hung (pool starvation)')), 30_000),
        ),
      ]);
      const ok = results.filter((r) => r.status === 'fulfilled');
      const codes = results
        .filter((r): r is PromiseRejectedResult => r.status === 'rejected')
        .map((r) => codeOf(r.reason));
      expect(ok).toHaveLength(1);
      expect(codes).toEqual(Array(19).fill('open_batch_exists'));
      // The pool is not starved afterwards.
      expect((await small.lastForTransfer(name)).open?.state).toBe('extracting');
    } finally {
      await small.close();
    }
  });

  it('transfer controls: pause and resume persist, the last call wins, names are exact', async () => {
    const name = unique('ctl');
    expect((await j.controls()).find((c) => c.transferName === name)).toBeUndefined();
    const paused = await j.setPaused(name, true, 'target maintenance', 'ops-a');
    expect(paused).toMatchObject({
      transferName: name,
      paused: true,
      reason: 'target maintenance',
      changedBy: 'ops-a',
    });
    expect(paused.changedAt).toBeInstanceOf(Date);
    expect((await j.controls()).filter((c) => c.transferName === name)).toEqual([paused]);
    // The other case of the name is another transfer (names are compared exactly, like the batches').
    expect((await j.controls()).find((c) => c.transferName === name.toUpperCase())).toBeUndefined();
    const resumed = await j.setPaused(name, false, null, 'ops-b');
    expect(resumed).toMatchObject({ transferName: name, paused: false, reason: null, changedBy: 'ops-b' });
    expect(resumed.changedAt.getTime()).toBeGreaterThanOrEqual(paused.changedAt.getTime());
    // Concurrent first pauses of a new transfer: one row, every call answered.
    const other = unique('ctl_race');
    const all = await Promise.all(Array.from({ length: 8 }, (_, i) => j.setPaused(other, i % 2 === 0, `r${i}`, null)));
    expect(all).toHaveLength(8);
    const rows = (await j.controls()).filter((c) => c.transferName === other);
    expect(rows).toHaveLength(1);
  });
}

// The SQL Server lock order, checked statically on the procedure bodies of sql/sqlserver (no server here): counters
// last and once per transaction through keel.ApplyCounters, no counter table written anywhere else, ApplyCounters in
// table order, the triggers deferring, and table variables joined to themselves through an index. The rules and
// the limits of a text-level check: test/engines/sqlserver.lockOrder.ts. Each rule is also shown failing on a
// deliberately broken copy of a real procedure, so a check that finds nothing cannot pass unnoticed.
import { describe, expect, it } from 'vitest';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { SQLSERVER_SQL_DIR } from '../../shared/engines/sqlserver/jobStore.js';
import { JOB_PROCEDURES } from '../../shared/jobs/procedures.js';
import {
  COUNTER_WRITE_ALLOWED,
  TsqlShapeError,
  checkLockOrder,
  parseModules,
  writeTargets,
  tokenize,
} from './sqlserver.lockOrder.js';

async function scripts(): Promise<Array<{ file: string; text: string }>> {
  const names = (await readdir(SQLSERVER_SQL_DIR)).filter((f) => /^(V\d+|R)__.*\.sql$/.test(f)).sort();
  return Promise.all(
    names.map(async (file) => ({ file, text: await readFile(path.join(SQLSERVER_SQL_DIR, file), 'utf8') })),
  );
}

// One procedure's batch (CREATE OR ALTER ... up to its GO) from a script.
function procedureText(text: string, name: string): string {
  const start = text.indexOf(`CREATE OR ALTER PROCEDURE ${name}\n`);
  if (start < 0) throw new Error(`${name} not found`);
  const end = text.indexOf('\nGO\n', start);
  return `${text.slice(start, end)}\nGO\n`;
}

// A copy of a real procedure with one exact change; fails loudly when the procedure no longer has that text.
function broken(text: string, name: string, from: string, to: string): string {
  const body = procedureText(text, name);
  if (!body.includes(from)) throw new Error(`${name} no longer contains the text this mutation changes: ${from}`);
  return body.replace(from, to);
}

const messages = (r: ReturnType<typeof checkLockOrder>) => r.violations.map((v) => `${v.module}: ${v.message}`);

describe('sqlserver lock order (static check of the procedure bodies)', () => {
  it('the scripts follow the lock order: counters last and once, only through ApplyCounters and the triggers', async () => {
    const all = await scripts();
    const report = checkLockOrder(all);
    expect(messages(report)).toEqual([]);

    // Not vacuous: every job procedure was parsed, and the multi-statement movers were recognised as such.
    const parsed = new Set(report.modules.map((m) => m.name));
    // The SQL Server naming convention (shared/jobs/procedures.ts): snake_name -> keel.PascalName.
    for (const op of Object.keys(JOB_PROCEDURES)) {
      const pascal = op.replace(/(^|_)([a-z])/g, (_, __, c: string) => c.toUpperCase());
      expect(parsed, op).toContain(`keel.${pascal.toLowerCase()}`);
    }
    expect(report.deltasProcedures).toEqual(
      [
        'keel.cancel',
        'keel.cancelmany',
        'keel.completemany',
        'keel.enqueueflowjobs',
        'keel.fail',
        'keel.handback',
        'keel.rescuezombies',
        'keel.resurrect',
      ].sort(),
    );
    expect(Object.fromEntries([...report.counterWriters].map(([m, t]) => [m, [...t].sort()]))).toEqual({
      'keel.applycounters': ['dlqcounts', 'hotcounts', 'metricbuckets', 'statssummary'],
      'keel.jobshot_counted': ['hotcounts'],
      'keel.jobsdlq_counted': ['dlqcounts'],
      'keel.purge': ['metricbuckets'], // retention of old buckets: COUNTER_WRITE_ALLOWED says why
    });
    expect(COUNTER_WRITE_ALLOWED.every((a) => a.why.length > 40)).toBe(true);
  });

  it("the pause barrier is one procedure: every claim takes its queues' claim applocks through keel.TakeClaimLocks, first in its transaction", async () => {
    const modules = (await scripts()).flatMap((s) => parseModules(s.file, s.text));
    const byName = new Map(modules.map((m) => [m.name, m]));
    // keel.claim:<queue> is named only where it is taken: shared by TakeClaimLocks, exclusive by a pause.
    const naming = modules.filter((m) => m.tokens.some((t) => t.kind === 'string' && t.text.startsWith('keel.claim:')));
    expect(naming.map((m) => m.name).sort()).toEqual(['keel.takeclaimlocks', 'keel.updatequeue']);
    const take = byName.get('keel.takeclaimlocks')!.tokens.map((t) => t.upper);
    expect(take).toContain('SHARED');
    for (const name of ['keel.claimnext', 'keel.claimandstart', 'keel.claimbyid', 'keel.pickdue']) {
      const tokens = byName.get(name)!.tokens;
      const at = (pred: (i: number) => boolean) => tokens.findIndex((_, i) => pred(i));
      const begin = at((i) => tokens[i]!.upper === 'BEGIN' && tokens[i + 1]?.upper === 'TRANSACTION');
      const calls = tokens.flatMap((t, i) =>
        (t.upper === 'EXEC' || t.upper === 'EXECUTE') && tokens[i + 1]?.upper === 'KEEL.TAKECLAIMLOCKS' ? [i] : [],
      );
      expect(calls, name).toHaveLength(1);
      // Inside the transaction (held to its commit), before any settings or job row of it is read or locked (here,
      // or through keel.PickClaimable, which reads and locks them for the caller).
      const firstTable = at((i) => i > begin && /^KEEL\.(QUEUES|JOBSHOT|PICKCLAIMABLE)$/.test(tokens[i]!.upper));
      expect(begin, name).toBeGreaterThan(-1);
      expect(calls[0]!, name).toBeGreaterThan(begin);
      expect(firstTable, name).toBeGreaterThan(-1);
      expect(calls[0]!, name).toBeLessThan(firstTable);
    }
  });

  it('the choice of a claim over many queues is one procedure: ClaimNext, ClaimAndStart and PickDue run keel.PickClaimable', async () => {
    const modules = (await scripts()).flatMap((s) => parseModules(s.file, s.text));
    const execs = (m: (typeof modules)[number], proc: string) =>
      m.tokens.filter((t, i) => (t.upper === 'EXEC' || t.upper === 'EXECUTE') && m.tokens[i + 1]?.upper === proc)
        .length;
    const callers = modules.filter((m) => execs(m, 'KEEL.PICKCLAIMABLE') > 0).map((m) => m.name);
    expect(callers.sort()).toEqual(['keel.claimandstart', 'keel.claimnext', 'keel.pickdue']);
    for (const m of modules.filter((x) => callers.includes(x.name))) {
      expect(execs(m, 'KEEL.PICKCLAIMABLE'), m.name).toBe(1);
      // The callers pick nothing themselves: no pending row is read through the claim index outside PickClaimable.
      expect(
        m.tokens.some((t) => t.upper === 'IX_JOBSHOT_PENDINGDUE'),
        m.name,
      ).toBe(false);
    }
    // The barrier is the caller's: PickClaimable takes no applock of its own.
    const pick = modules.find((m) => m.name === 'keel.pickclaimable')!;
    expect(execs(pick, 'KEEL.TAKECLAIMLOCKS')).toBe(0);
  });

  it('resolves the write targets of aliases, CTEs, OUTPUT INTO and INSERT ... EXEC', () => {
    const targets = (sql: string) => writeTargets(tokenize(sql)).map((t) => t.toLowerCase());
    expect(
      targets('DELETE h OUTPUT deleted.Id INTO @Moved (Id) FROM keel.JobsHot AS h WITH (ROWLOCK) WHERE 1 = 1'),
    ).toEqual(['keel.jobshot', '@moved']);
    expect(targets('WITH c AS (SELECT TOP (5) h.* FROM keel.JobsHot AS h) UPDATE c SET State = 1')).toEqual([
      'keel.jobshot',
    ]);
    expect(
      targets('UPDATE c WITH (UPDLOCK) SET N = c.N + d.N FROM keel.DlqCounts AS c INNER JOIN @Delta AS d ON 1 = 1'),
    ).toEqual(['keel.dlqcounts']);
    expect(targets("INSERT @Counters (Queue) EXEC keel.DeadLetter @Reason = 'x'")).toEqual(['@counters']);
    expect(targets("UPDATE [keel].[StatsSummary] SET Failed = 1 WHERE Queue = N'q;--'")).toEqual(['keel.statssummary']);
  });

  describe('fails on broken copies of real procedures', () => {
    it('ApplyCounters on only some paths before COMMIT (Fail: only when a row moved)', async () => {
      const r030 = (await scripts()).find((s) => s.file === 'R__030_owner_and_moves.sql')!.text;
      const bad = broken(
        r030,
        'keel.Fail',
        'EXEC keel.ApplyCounters @Counters = @Counters; -- once, last',
        'IF @Moved > 0 EXEC keel.ApplyCounters @Counters = @Counters;',
      );
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: bad }]))).toEqual([
        'keel.Fail: COMMIT reachable on a path that did not call keel.ApplyCounters in this transaction',
      ]);
    });

    it('ApplyCounters in one branch only (HandBack: the retry branch, not the interruption)', async () => {
      const r030 = (await scripts()).find((s) => s.file === 'R__030_owner_and_moves.sql')!.text;
      const bad = broken(
        r030,
        'keel.HandBack',
        '        IF @Interrupted = 0 INSERT @Counters (Queue, Retried) VALUES (@Queue, 1);\n',
        '        IF @Interrupted = 0 INSERT @Counters (Queue, Retried) VALUES (@Queue, 1);\n' +
          '        EXEC keel.ApplyCounters @Counters = @Counters;\n',
      ).replace(
        '    -- Once, last, on every path: an interruption still changes HotCounts (processing -> pending).\n    EXEC keel.ApplyCounters @Counters = @Counters;\n',
        '',
      );
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: bad }]))).toContain(
        'keel.HandBack: COMMIT reachable on a path that did not call keel.ApplyCounters in this transaction',
      );
    });

    it('a counted statement after ApplyCounters, and ApplyCounters twice (CompleteMany)', async () => {
      const r030 = (await scripts()).find((s) => s.file === 'R__030_owner_and_moves.sql')!.text;
      const after = broken(
        r030,
        'keel.CompleteMany',
        '    IF EXISTS (SELECT 1 FROM @Cancelled)\n',
        '    EXEC keel.ApplyCounters @Counters = @Counters;\n    IF EXISTS (SELECT 1 FROM @Cancelled)\n',
      );
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: after }]))).toEqual([
        'keel.CompleteMany: COMMIT after keel.ApplyCounters ran more than once in one transaction',
      ]);
      const early = after.replace(
        '    EXEC keel.ApplyCounters @Counters = @Counters; -- once, after every move: HotCounts, DlqCounts, StatsSummary, buckets\n',
        '',
      );
      expect(early).not.toBe(after);
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: early }]))).toEqual([
        'keel.CompleteMany: COMMIT after a counted statement that followed keel.ApplyCounters (its deltas are lost)',
      ]);
    });

    it('a direct write of a counter table (StatsSummary from Cancel)', async () => {
      const r030 = (await scripts()).find((s) => s.file === 'R__030_owner_and_moves.sql')!.text;
      const bad = broken(
        r030,
        'keel.Cancel',
        "      SET @Status = 'cancel_requested';\n",
        "      SET @Status = 'cancel_requested';\n      UPDATE keel.StatsSummary SET Cancelled = Cancelled + 1 WHERE Queue = N'q';\n",
      );
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: bad }]))).toEqual([
        'keel.Cancel: writes keel.statssummary directly: only keel.ApplyCounters and the counter triggers may (lock order step 4)',
      ]);
    });

    it('the old Resurrect: DLQ delete then hot insert, each trigger writing its counter mid-transaction (review F1)', () => {
      const old = `
CREATE OR ALTER PROCEDURE keel.Resurrect
  @JobIds NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  DECLARE @Moved TABLE (Id bigint NOT NULL PRIMARY KEY, Queue nvarchar(128) NOT NULL);
  DECLARE @Counters keel.CounterRows;
  BEGIN TRY
    BEGIN TRANSACTION;
    DELETE d OUTPUT deleted.Id, deleted.Queue INTO @Moved (Id, Queue)
    FROM keel.JobsDLQ AS d WHERE d.Id IN (SELECT TRY_CONVERT(bigint, j.[value]) FROM OPENJSON(@JobIds) AS j);
    INSERT keel.JobsHot (Id, Queue) SELECT m.Id, m.Queue FROM @Moved AS m;
    INSERT @Counters (Queue, Resurrected) SELECT m.Queue, 1 FROM @Moved AS m;
    EXEC keel.ApplyCounters @Counters = @Counters;
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;
END;
GO
`;
      expect(messages(checkLockOrder([{ file: 'old.sql', text: old }]))).toEqual([
        'keel.Resurrect: more than one counted statement without #KeelCountDeltas: a trigger would write the read ' +
          'counters before a later statement of the transaction',
        'keel.Resurrect: calls keel.ApplyCounters without creating #KeelCountDeltas',
      ]);
    });

    it('a counted statement outside the transaction, and a RETURN that leaves it open (RescueZombies)', async () => {
      const r040 = (await scripts()).find((s) => s.file === 'R__040_maintenance.sql')!.text;
      const outside = broken(
        r040,
        'keel.RescueZombies',
        '    BEGIN TRANSACTION;\n    WITH c AS (',
        '    WITH c AS (',
      ).replace('    EXEC keel.ApplyCounters @Counters = @Counters; -- HotCounts, last\n    COMMIT TRANSACTION;\n', '');
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: outside }]))).toEqual([
        'keel.RescueZombies: counted statement outside a transaction: its deltas would never be applied',
      ]);
      const open = broken(
        r040,
        'keel.RescueZombies',
        '    SET @Released = @@ROWCOUNT;\n',
        '    SET @Released = @@ROWCOUNT;\n    IF @Released = 0 RETURN;\n',
      );
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: open }]))).toEqual([
        'keel.RescueZombies: RETURN inside an open transaction',
      ]);
    });

    it('ApplyCounters out of table order, and a trigger that writes before deferring', async () => {
      const all = await scripts();
      const r010 = all.find((s) => s.file === 'R__010_counters.sql')!.text;
      const hot = r010.slice(r010.indexOf('  -- Step 4a'), r010.indexOf('  -- Step 4b'));
      const dlq = r010.slice(r010.indexOf('  -- Step 4b'), r010.indexOf('  -- Applied:'));
      const swapped = procedureText(r010, 'keel.ApplyCounters').replace(hot + dlq, dlq + hot);
      expect(swapped).not.toBe(procedureText(r010, 'keel.ApplyCounters'));
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: swapped }]))).toEqual([
        'keel.ApplyCounters: writes keel.hotcounts after keel.dlqcounts: the order is hotcounts -> dlqcounts -> statssummary -> metricbuckets',
        'keel.ApplyCounters: writes keel.hotcounts after keel.dlqcounts: the order is hotcounts -> dlqcounts -> statssummary -> metricbuckets',
      ]);

      const r015 = all.find((s) => s.file === 'R__015_read_counters.sql')!.text;
      const trigger = r015.slice(r015.indexOf('CREATE OR ALTER TRIGGER keel.JobsDLQ_Counted'));
      const deferral = trigger.slice(trigger.indexOf('  IF OBJECT_ID('), trigger.indexOf('  UPDATE c WITH'));
      const writesFirst = trigger.replace(deferral, '');
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: writesFirst }]))).toEqual([
        'keel.JobsDLQ_Counted: does not defer to #KeelCountDeltas (IF OBJECT_ID(...) IS NOT NULL: append the delta, RETURN)',
      ]);
    });

    it('EnqueueJobs (EnqueueMany) joining @In to itself on the key without an index (review F4)', async () => {
      const r020 = (await scripts()).find((s) => s.file === 'R__020_enqueue_claim.sql')!.text;
      const bad = broken(r020, 'keel.EnqueueJobs', '    INDEX IX_In_Key (ScopeKey, Ord),\n', '');
      expect(messages(checkLockOrder([{ file: 'bad.sql', text: bad }]))).toEqual([
        'keel.EnqueueJobs: joins @in to itself on scopekey, which neither its primary key nor an index of it ' +
          'leads with (a plan cached for a small table variable would scan it once per row)',
      ]);
    });

    it('refuses to guess a statement boundary: a missing semicolon is an error, not a skipped statement', () => {
      const text = `CREATE OR ALTER PROCEDURE keel.X AS
BEGIN
  UPDATE keel.JobsHot SET State = 'pending' WHERE Id = 1
  IF @@ROWCOUNT = 0 THROW 50000, N'x', 1;
END;
GO
`;
      expect(() => parseModules('x.sql', text)).toThrow(TsqlShapeError);
      expect(() => parseModules('x.sql', text)).toThrow(/x\.sql \(keel\.X\):4: .*no terminating ';' before IF/);
    });
  });
});

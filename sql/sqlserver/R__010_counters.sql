-- keel.ApplyCounters over the table types in V002__counter_types.sql. Repeatable (sql/README.md).
--
-- The one lock order every job transaction follows (docs/sqlserver.md, "Lock order"):
--   0. the queues' claim applocks (keel.claim:<queue>; shared by claims through keel.TakeClaimLocks, exclusive by a
--      pause or a limit set), by name;
--   1. Queues rows, by name;   2. job rows by id (claims skip locked rows, READPAST, instead of waiting);
--   3. destination inserts of exactly the captured rows (archive, DLQ, hot);
--   4. counters last, each counter table written at most once per transaction, its rows in queue order (then slot),
--      tables in the order HotCounts -> DlqCounts -> StatsSummary -> MetricBuckets.
-- A transaction never waits for a job row after it has written a counter row. keel.ApplyCounters is step 4 for every
-- transaction with more than one counted statement.
--
-- #KeelCountDeltas: the read-counter deltas a transaction has made so far. The triggers on JobsHot and JobsDLQ
-- (R__015_read_counters.sql) append to it instead of writing HotCounts / DlqCounts whenever it exists in the session,
-- which is when a keel procedure created it before its transaction:
--   CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
--     Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
--     Waiting bigint NOT NULL DEFAULT (0));
-- (a temp table because a trigger cannot see its caller's table variables; it is dropped when the procedure that
-- created it returns, error or not, and its rows roll back with the transaction). Without it (one-statement
-- procedures, a DBA's ad-hoc DML) the triggers write the counters at the end of their statement, which is then the
-- last thing, and the only counted one, of its transaction.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- ApplyCounters(@Counters): step 4 of the lock order, called once, inside the transaction, after every job row of
-- the transaction has been locked, moved and inserted. Applies and empties #KeelCountDeltas (which the caller must
-- have created: otherwise the triggers would already have written the read counters mid-transaction), then adds
-- @Counters (one row per moved job) to StatsSummary and MetricBuckets. Each table's rows are upserted one at a time
-- in key order (queue, then slot / outcome / reason), so the order does not depend on a plan.
CREATE OR ALTER PROCEDURE keel.ApplyCounters
  @Counters keel.CounterRows READONLY
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0
    THROW 50010, N'keel.ApplyCounters must run inside the transaction of the move it counts', 1;
  IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NULL
    THROW 50013, N'keel.ApplyCounters: the calling procedure must create #KeelCountDeltas before its transaction', 1;

  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Epoch datetime2(3) = '2000-01-01T00:00:00';
  DECLARE @Bucket datetime2(3) = DATEADD(minute, DATEDIFF(minute, @Epoch, @Now), @Epoch); -- @Now truncated to the minute
  DECLARE @Slot smallint = @@SPID % 16; -- this session's HotCounts, StatsSummary and MetricBuckets slot (V013), as the trigger's
  DECLARE @I int, @N int, @Q nvarchar(128);

  -- Step 4a: HotCounts, one row per queue (this session's slot), in queue order.
  -- IDENTITY values of INSERT ... SELECT ... ORDER BY follow the ORDER BY: Seq is the lock order.
  DECLARE @Hot TABLE (
    Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Waiting bigint NOT NULL);
  INSERT @Hot (Queue, Pending, Fetched, Processing, Waiting)
  SELECT d.Queue, SUM(d.Pending), SUM(d.Fetched), SUM(d.Processing), SUM(d.Waiting)
  FROM #KeelCountDeltas AS d
  GROUP BY d.Queue
  HAVING SUM(d.Pending) <> 0 OR SUM(d.Fetched) <> 0 OR SUM(d.Processing) <> 0 OR SUM(d.Waiting) <> 0
  ORDER BY d.Queue;

  DECLARE @Pe bigint, @Fe bigint, @Pr bigint, @Wa bigint;
  SELECT @I = 1, @N = (SELECT COUNT(*) FROM @Hot);
  WHILE @I <= @N
  BEGIN
    SELECT @Q = Queue, @Pe = Pending, @Fe = Fetched, @Pr = Processing, @Wa = Waiting FROM @Hot WHERE Seq = @I;
    -- UPDLOCK + SERIALIZABLE: a missing (queue, slot) row's key range stays locked until it is inserted.
    UPDATE keel.HotCounts WITH (UPDLOCK, SERIALIZABLE)
    SET Pending = Pending + @Pe, Fetched = Fetched + @Fe, Processing = Processing + @Pr, Waiting = Waiting + @Wa
    WHERE Queue = @Q AND Slot = @Slot;
    IF @@ROWCOUNT = 0
      INSERT keel.HotCounts (Queue, Slot, Pending, Fetched, Processing, Waiting) VALUES (@Q, @Slot, @Pe, @Fe, @Pr, @Wa);
    SET @I += 1;
  END;

  -- Step 4b: DlqCounts, one row per queue, in queue order.
  DECLARE @Dlq TABLE (
    Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    N bigint NOT NULL);
  INSERT @Dlq (Queue, N)
  SELECT d.Queue, SUM(d.Dlq)
  FROM #KeelCountDeltas AS d
  GROUP BY d.Queue
  HAVING SUM(d.Dlq) <> 0
  ORDER BY d.Queue;

  DECLARE @Dn bigint;
  SELECT @I = 1, @N = (SELECT COUNT(*) FROM @Dlq);
  WHILE @I <= @N
  BEGIN
    SELECT @Q = Queue, @Dn = N FROM @Dlq WHERE Seq = @I;
    UPDATE keel.DlqCounts WITH (UPDLOCK, SERIALIZABLE) SET N = N + @Dn WHERE Queue = @Q;
    IF @@ROWCOUNT = 0
      INSERT keel.DlqCounts (Queue, N) VALUES (@Q, @Dn);
    SET @I += 1;
  END;

  -- Applied: a later transaction of the same procedure (RescueZombies runs three) starts from nothing.
  DELETE FROM #KeelCountDeltas;

  -- Step 4c: StatsSummary, one row per queue (this session's slot), in queue order.
  DECLARE @Stats TABLE (
    Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Succeeded bigint NOT NULL, Failed bigint NOT NULL, Retried bigint NOT NULL,
    Cancelled bigint NOT NULL, Zombie bigint NOT NULL, Resurrected bigint NOT NULL);
  INSERT @Stats (Queue, Succeeded, Failed, Retried, Cancelled, Zombie, Resurrected)
  SELECT c.Queue, SUM(CONVERT(bigint, c.Succeeded)), SUM(CONVERT(bigint, c.Failed)), SUM(CONVERT(bigint, c.Retried)),
         SUM(CONVERT(bigint, c.Cancelled)), SUM(CONVERT(bigint, c.Zombie)), SUM(CONVERT(bigint, c.Resurrected))
  FROM @Counters AS c
  GROUP BY c.Queue
  ORDER BY c.Queue;

  DECLARE @S bigint, @F bigint, @R bigint, @C bigint, @Z bigint, @Rs bigint;
  SELECT @I = 1, @N = (SELECT COUNT(*) FROM @Stats);
  WHILE @I <= @N
  BEGIN
    SELECT @Q = Queue, @S = Succeeded, @F = Failed, @R = Retried, @C = Cancelled, @Z = Zombie, @Rs = Resurrected
    FROM @Stats WHERE Seq = @I;
    -- UPDLOCK + SERIALIZABLE: when the row does not exist yet the key range stays locked, so two first moves of a
    -- new queue cannot both insert (the second waits, then updates).
    UPDATE keel.StatsSummary WITH (UPDLOCK, SERIALIZABLE)
    SET Succeeded = Succeeded + @S, Failed = Failed + @F, Retried = Retried + @R, Cancelled = Cancelled + @C,
        Zombie = Zombie + @Z, Resurrected = Resurrected + @Rs, UpdatedAt = @Now
    WHERE Queue = @Q AND Slot = @Slot;
    IF @@ROWCOUNT = 0
      INSERT keel.StatsSummary (Queue, Slot, Succeeded, Failed, Retried, Cancelled, Zombie, Resurrected, UpdatedAt)
      VALUES (@Q, @Slot, @S, @F, @R, @C, @Z, @Rs, @Now);
    SET @I += 1;
  END;

  -- Step 4d: MetricBuckets of this minute (this session's slot), in key order (queue, outcome, reason).
  DECLARE @Buckets TABLE (
    Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Outcome varchar(10) NOT NULL, Reason varchar(16) NOT NULL,
    Cnt bigint NOT NULL, Total bigint NOT NULL, Mx bigint NOT NULL);
  INSERT @Buckets (Queue, Outcome, Reason, Cnt, Total, Mx)
  SELECT c.Queue, c.Outcome, c.Reason, COUNT_BIG(*), SUM(c.DurationMs), MAX(c.DurationMs)
  FROM @Counters AS c
  WHERE c.Outcome IS NOT NULL
  GROUP BY c.Queue, c.Outcome, c.Reason
  ORDER BY c.Queue, c.Outcome, c.Reason;

  DECLARE @O varchar(10), @Rn varchar(16), @Cnt bigint, @Total bigint, @Mx bigint;
  SELECT @I = 1, @N = (SELECT COUNT(*) FROM @Buckets);
  WHILE @I <= @N
  BEGIN
    SELECT @Q = Queue, @O = Outcome, @Rn = Reason, @Cnt = Cnt, @Total = Total, @Mx = Mx FROM @Buckets WHERE Seq = @I;
    UPDATE keel.MetricBuckets WITH (UPDLOCK, SERIALIZABLE)
    SET [Count] = [Count] + @Cnt,
        TotalDurationMs = TotalDurationMs + @Total,
        MaxDurationMs = IIF(MaxDurationMs > @Mx, MaxDurationMs, @Mx)
    WHERE BucketStart = @Bucket AND Queue = @Q AND Outcome = @O AND Reason = @Rn AND Slot = @Slot;
    IF @@ROWCOUNT = 0
      INSERT keel.MetricBuckets (BucketStart, Queue, Outcome, Reason, Slot, [Count], TotalDurationMs, MaxDurationMs)
      VALUES (@Bucket, @Q, @O, @Rn, @Slot, @Cnt, @Total, @Mx);
    SET @I += 1;
  END;
END;
GO

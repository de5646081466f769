-- keel.ApplyCounters over the table types in V002__counter_types.sql. Repeatable (sql/README.md).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

CREATE OR ALTER PROCEDURE keel.ApplyCounters
  @Counters keel.CounterRows READONLY
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0
    THROW 50010, N'keel.ApplyCounters must run inside the transaction of the move it counts', 1;

  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Epoch datetime2(3) = '2000-01-01T00:00:00';
  DECLARE @Bucket datetime2(3) = DATEADD(minute, DATEDIFF(minute, @Epoch, @Now), @Epoch); -- @Now truncated to the minute

  DECLARE @Stats TABLE (
    Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Succeeded bigint NOT NULL, Failed bigint NOT NULL, Retried bigint NOT NULL,
    Cancelled bigint NOT NULL, Zombie bigint NOT NULL, Resurrected bigint NOT NULL);
  -- IDENTITY values of INSERT ... SELECT ... ORDER BY follow the ORDER BY: Seq is the lock order.
  INSERT @Stats (Queue, Succeeded, Failed, Retried, Cancelled, Zombie, Resurrected)
  SELECT c.Queue, SUM(CONVERT(bigint, c.Succeeded)), SUM(CONVERT(bigint, c.Failed)), SUM(CONVERT(bigint, c.Retried)),
         SUM(CONVERT(bigint, c.Cancelled)), SUM(CONVERT(bigint, c.Zombie)), SUM(CONVERT(bigint, c.Resurrected))
  FROM @Counters AS c
  GROUP BY c.Queue
  ORDER BY c.Queue;

  DECLARE @I int = 1, @N int = (SELECT COUNT(*) FROM @Stats);
  DECLARE @Q nvarchar(128), @S bigint, @F bigint, @R bigint, @C bigint, @Z bigint, @Rs bigint;
  WHILE @I <= @N
  BEGIN
    SELECT @Q = Queue, @S = Succeeded, @F = Failed, @R = Retried, @C = Cancelled, @Z = Zombie, @Rs = Resurrected
    FROM @Stats WHERE Seq = @I;
    -- UPDLOCK + SERIALIZABLE: when the row does not exist yet the key range stays locked, so two first moves of a
    -- new queue cannot both insert (the second waits, then updates).
    UPDATE keel.StatsSummary WITH (UPDLOCK, SERIALIZABLE)
    SET Succeeded = Succeeded + @S, Failed = Failed + @F, Retried = Retried + @R, Cancelled = Cancelled + @C,
        Zombie = Zombie + @Z, Resurrected = Resurrected + @Rs, UpdatedAt = @Now
    WHERE Queue = @Q;
    IF @@ROWCOUNT = 0
      INSERT keel.StatsSummary (Queue, Succeeded, Failed, Retried, Cancelled, Zombie, Resurrected, UpdatedAt)
      VALUES (@Q, @S, @F, @R, @C, @Z, @Rs, @Now);
    SET @I += 1;
  END;

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
    WHERE BucketStart = @Bucket AND Queue = @Q AND Outcome = @O AND Reason = @Rn;
    IF @@ROWCOUNT = 0
      INSERT keel.MetricBuckets (BucketStart, Queue, Outcome, Reason, [Count], TotalDurationMs, MaxDurationMs)
      VALUES (@Bucket, @Q, @O, @Rn, @Cnt, @Total, @Mx);
    SET @I += 1;
  END;
END;
GO

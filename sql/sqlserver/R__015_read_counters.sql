-- The triggers that keep keel.HotCounts and keel.DlqCounts (V003__read_counters.sql) exact: one per table, for every
-- insert, update and delete, in the transaction of the statement. Repeatable (sql/README.md). The twin of the
-- statement triggers in sql/postgres/V003__read_counters.sql and V001 (dlq_counts).
-- A trigger's own row counts do not reach the caller: SET NOCOUNT ON, and the statement's @@ROWCOUNT is its own.
--
-- Lock order (R__010_counters.sql, docs/sqlserver.md): counters come last in a transaction, each counter table
-- written once. A trigger runs at the end of its statement, which is not the end of a transaction that has more
-- statements to run, so when the session has #KeelCountDeltas (created by the keel procedure running the
-- transaction) a trigger only appends its statement's net change there and keel.ApplyCounters writes the counters
-- once, after every job row of the transaction. Without it (a one-statement procedure, ad-hoc DML) the trigger
-- writes the counters itself: the statement is the transaction's only counted one, and nothing follows it.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

CREATE OR ALTER TRIGGER keel.JobsHot_Counted ON keel.JobsHot
AFTER INSERT, UPDATE, DELETE
AS
BEGIN
  SET NOCOUNT ON;
  -- An UPDATE that sets neither State nor Queue (a heartbeat, a cancel request) changes no counter: return before
  -- building @Delta. (UPDATE(col) is true for every column of an INSERT; a DELETE has no inserted rows.)
  IF NOT (UPDATE(State) OR UPDATE(Queue)) AND EXISTS (SELECT 1 FROM inserted) AND EXISTS (SELECT 1 FROM deleted)
    RETURN;
  -- One statement's net change per queue; rows whose state did not change cancel out.
  DECLARE @Delta TABLE (
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Waiting bigint NOT NULL);
  INSERT @Delta (Queue, Pending, Fetched, Processing, Waiting)
  SELECT c.Queue, SUM(c.Pending), SUM(c.Fetched), SUM(c.Processing), SUM(c.Waiting)
  FROM (
    SELECT i.Queue, IIF(i.State = 'pending', 1, 0) AS Pending, IIF(i.State = 'fetched', 1, 0) AS Fetched,
           IIF(i.State = 'processing', 1, 0) AS Processing, IIF(i.State = 'waiting', 1, 0) AS Waiting
    FROM inserted AS i
    UNION ALL
    SELECT d.Queue, -IIF(d.State = 'pending', 1, 0), -IIF(d.State = 'fetched', 1, 0), -IIF(d.State = 'processing', 1, 0),
           -IIF(d.State = 'waiting', 1, 0)
    FROM deleted AS d
  ) AS c
  GROUP BY c.Queue
  HAVING SUM(c.Pending) <> 0 OR SUM(c.Fetched) <> 0 OR SUM(c.Processing) <> 0 OR SUM(c.Waiting) <> 0;
  IF NOT EXISTS (SELECT 1 FROM @Delta) RETURN;

  IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NOT NULL
  BEGIN
    -- Deferred: keel.ApplyCounters writes HotCounts once, last in the transaction.
    INSERT #KeelCountDeltas (Queue, Pending, Fetched, Processing, Dlq, Waiting)
    SELECT d.Queue, d.Pending, d.Fetched, d.Processing, 0, d.Waiting FROM @Delta AS d;
    RETURN;
  END;

  DECLARE @Slot smallint = @@SPID % 16;
  -- UPDLOCK + SERIALIZABLE: a missing (queue, slot) row's key range stays locked until it is inserted. FORCESEEK:
  -- under SERIALIZABLE every range the plan reads stays locked, and a scan would lock every queue's and slot's row.
  UPDATE c WITH (UPDLOCK, SERIALIZABLE, FORCESEEK)
  SET Pending = c.Pending + d.Pending, Fetched = c.Fetched + d.Fetched, Processing = c.Processing + d.Processing,
      Waiting = c.Waiting + d.Waiting
  FROM keel.HotCounts AS c
  INNER JOIN @Delta AS d ON d.Queue = c.Queue AND c.Slot = @Slot;
  INSERT keel.HotCounts (Queue, Slot, Pending, Fetched, Processing, Waiting)
  SELECT d.Queue, @Slot, d.Pending, d.Fetched, d.Processing, d.Waiting
  FROM @Delta AS d
  WHERE NOT EXISTS (SELECT 1 FROM keel.HotCounts AS c WITH (UPDLOCK, SERIALIZABLE, FORCESEEK)
                    WHERE c.Queue = d.Queue AND c.Slot = @Slot);
END;
GO

CREATE OR ALTER TRIGGER keel.JobsDLQ_Counted ON keel.JobsDLQ
AFTER INSERT, DELETE
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Delta TABLE (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, N bigint NOT NULL);
  INSERT @Delta (Queue, N)
  SELECT c.Queue, SUM(c.N)
  FROM (SELECT i.Queue, CONVERT(bigint, 1) AS N FROM inserted AS i
        UNION ALL
        SELECT d.Queue, CONVERT(bigint, -1) FROM deleted AS d) AS c
  GROUP BY c.Queue
  HAVING SUM(c.N) <> 0;
  IF NOT EXISTS (SELECT 1 FROM @Delta) RETURN;

  IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NOT NULL
  BEGIN
    -- Deferred: keel.ApplyCounters writes DlqCounts once, after HotCounts, last in the transaction.
    INSERT #KeelCountDeltas (Queue, Pending, Fetched, Processing, Dlq)
    SELECT d.Queue, 0, 0, 0, d.N FROM @Delta AS d;
    RETURN;
  END;

  UPDATE c WITH (UPDLOCK, SERIALIZABLE, FORCESEEK)
  SET N = c.N + d.N
  FROM keel.DlqCounts AS c
  INNER JOIN @Delta AS d ON d.Queue = c.Queue;
  INSERT keel.DlqCounts (Queue, N)
  SELECT d.Queue, d.N
  FROM @Delta AS d
  WHERE NOT EXISTS (SELECT 1 FROM keel.DlqCounts AS c WITH (UPDLOCK, SERIALIZABLE, FORCESEEK) WHERE c.Queue = d.Queue);
END;
GO

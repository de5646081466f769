-- The worker registry's procedures over keel.Workers (V012), the twins of sql/postgres/R__050_workers_functions.sql.
-- Repeatable (sql/README.md). The table stands alone: each procedure touches only its rows, in one statement (or one
-- short transaction), so it takes no place in the lock order. ListWorkers, which joins the registry with the hot
-- rows' leases, is in R__050_reads_and_settings.sql with the other console reads.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- RegisterWorker(...): adds the worker's row or refreshes it (everything it reports, and LastSeenAt: the server's
-- clock, returned as Result). A row pruned while its process lived comes back at the next refresh. The update takes
-- the key range (UPDLOCK, SERIALIZABLE) so two calls for one worker id never both insert.
CREATE OR ALTER PROCEDURE keel.RegisterWorker
  @WorkerId NVARCHAR(200),
  @Host NVARCHAR(256),
  @InstanceId NVARCHAR(128),
  @Pid INT,
  @AppVersion NVARCHAR(64),
  @BuildId NVARCHAR(128),
  @Queues NVARCHAR(MAX),
  @Concurrency INT,
  @StartedAt DATETIME2(3),
  @JobsDone BIGINT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  BEGIN TRANSACTION;
  UPDATE keel.Workers WITH (UPDLOCK, SERIALIZABLE)
  SET Host = @Host, InstanceId = @InstanceId, Pid = @Pid, AppVersion = @AppVersion, BuildId = @BuildId,
      Queues = @Queues, Concurrency = @Concurrency, JobsDone = ISNULL(@JobsDone, 0), StartedAt = @StartedAt,
      LastSeenAt = @Now
  WHERE WorkerId = @WorkerId;
  IF @@ROWCOUNT = 0
    INSERT keel.Workers (WorkerId, Host, InstanceId, Pid, AppVersion, BuildId, Queues, Concurrency, JobsDone,
                         StartedAt, LastSeenAt)
    VALUES (@WorkerId, @Host, @InstanceId, @Pid, @AppVersion, @BuildId, @Queues, @Concurrency, ISNULL(@JobsDone, 0),
            @StartedAt, @Now);
  COMMIT TRANSACTION;
  SELECT @Now AS Result;
END;
GO

-- DeregisterWorker(@WorkerId): a graceful stop removes its row; Result 0 when there was none.
CREATE OR ALTER PROCEDURE keel.DeregisterWorker
  @WorkerId NVARCHAR(200)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DELETE FROM keel.Workers WHERE WorkerId = @WorkerId;
  SELECT CAST(CASE WHEN @@ROWCOUNT = 1 THEN 1 ELSE 0 END AS bit) AS Result;
END;
GO

-- PruneWorkers(@OlderThan): deletes the rows not seen since the cutoff (processes that died without stopping);
-- Result: how many. The table holds a row per live or recently seen process: a scan of it is small.
CREATE OR ALTER PROCEDURE keel.PruneWorkers
  @OlderThan DATETIME2(3)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DELETE FROM keel.Workers WHERE LastSeenAt < @OlderThan;
  SELECT CONVERT(bigint, @@ROWCOUNT) AS Result;
END;
GO

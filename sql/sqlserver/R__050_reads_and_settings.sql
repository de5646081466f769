-- Reads and queue settings.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- Stats: one row per queue known to Queues, StatsSummary or JobsHot (name order): hot counts per state, due pending
-- jobs and the age of the oldest due one (queue lag), DLQ size, and the StatsSummary counters.
CREATE OR ALTER PROCEDURE keel.Stats
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();

  WITH hot AS (
    SELECT h.Queue,
           SUM(IIF(h.State = 'pending', 1, 0)) AS Pending,
           SUM(IIF(h.State = 'pending' AND h.RunAt <= @Now, 1, 0)) AS Due,
           SUM(IIF(h.State = 'fetched', 1, 0)) AS Fetched,
           SUM(IIF(h.State = 'processing', 1, 0)) AS Processing,
           MIN(IIF(h.State = 'pending' AND h.RunAt <= @Now, h.RunAt, NULL)) AS OldestDue
    FROM keel.JobsHot AS h
    GROUP BY h.Queue
  ), dead AS (
    SELECT d.Queue, COUNT_BIG(*) AS N FROM keel.JobsDLQ AS d GROUP BY d.Queue
  ), names AS (
    SELECT q.Name FROM keel.Queues AS q
    UNION SELECT s.Queue FROM keel.StatsSummary AS s
    UNION SELECT hot.Queue FROM hot
  )
  SELECT n.Name AS Queue,
         CONVERT(bigint, ISNULL(hot.Pending, 0)) AS Pending,
         CONVERT(bigint, ISNULL(hot.Due, 0)) AS Due,
         CONVERT(bigint, ISNULL(hot.Fetched, 0)) AS Fetched,
         CONVERT(bigint, ISNULL(hot.Processing, 0)) AS Processing,
         ISNULL(dead.N, 0) AS Dlq,
         CASE WHEN hot.OldestDue IS NULL THEN NULL
              WHEN hot.OldestDue > @Now THEN CONVERT(bigint, 0)
              ELSE DATEDIFF_BIG(millisecond, hot.OldestDue, @Now) END AS OldestDueAgeMs,
         ISNULL(s.Succeeded, 0) AS Succeeded, ISNULL(s.Failed, 0) AS Failed, ISNULL(s.Retried, 0) AS Retried,
         ISNULL(s.Cancelled, 0) AS Cancelled, ISNULL(s.Zombie, 0) AS Zombie, ISNULL(s.Resurrected, 0) AS Resurrected
  FROM names AS n
  LEFT JOIN hot ON hot.Queue = n.Name
  LEFT JOIN dead ON dead.Queue = n.Name
  LEFT JOIN keel.StatsSummary AS s ON s.Queue = n.Name
  ORDER BY n.Name;
END;
GO

-- Metrics(@WindowMinutes, @Queue NULL = all): the metric buckets of the last @WindowMinutes minutes including the
-- current one (default 60), in (BucketStart, Queue, Outcome, Reason) order.
CREATE OR ALTER PROCEDURE keel.Metrics
  @WindowMinutes INT,
  @Queue NVARCHAR(128)
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Window int = ISNULL(@WindowMinutes, 60);
  IF @Window < 1 SET @Window = 1;
  DECLARE @Epoch datetime2(3) = '2000-01-01T00:00:00';
  DECLARE @From datetime2(3) = DATEADD(minute, DATEDIFF(minute, @Epoch, SYSUTCDATETIME()) - (@Window - 1), @Epoch);

  SELECT b.BucketStart, b.Queue, b.Outcome, b.Reason, b.[Count], b.TotalDurationMs, b.MaxDurationMs
  FROM keel.MetricBuckets AS b
  WHERE b.BucketStart >= @From AND (@Queue IS NULL OR b.Queue = @Queue)
  ORDER BY b.BucketStart, b.Queue, b.Outcome, b.Reason
  OPTION (RECOMPILE);
END;
GO

-- ListQueues(@Name NULL = all): queue settings rows in name order.
CREATE OR ALTER PROCEDURE keel.ListQueues
  @Name NVARCHAR(128)
AS
BEGIN
  SET NOCOUNT ON;
  SELECT q.Name, q.Paused, q.MaxConcurrency, q.ZombieTimeoutSeconds, q.ZombiePolicy, q.MaxAttempts,
         q.ArchiveRetentionSeconds, q.DlqRetentionSeconds, q.MetricsRetentionSeconds, q.UpdatedAt
  FROM keel.Queues AS q
  WHERE @Name IS NULL OR q.Name = @Name
  ORDER BY q.Name
  OPTION (RECOMPILE);
END;
GO

-- UpdateQueue(...): creates the queue with default settings when it does not exist, then applies every non-NULL
-- argument (NULL = unchanged); @ClearMaxConcurrency = 1 makes the queue unlimited. Returns the settings row.
CREATE OR ALTER PROCEDURE keel.UpdateQueue
  @Name NVARCHAR(128),
  @Paused BIT,
  @MaxConcurrency INT,
  @ClearMaxConcurrency BIT,
  @ZombieTimeoutSeconds INT,
  @ZombiePolicy VARCHAR(8),
  @MaxAttempts INT,
  @ArchiveRetentionSeconds INT,
  @DlqRetentionSeconds INT,
  @MetricsRetentionSeconds INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Name IS NULL OR LEN(@Name) = 0
    THROW 50040, N'UpdateQueue: @Name is required', 1;

  BEGIN TRY
    BEGIN TRANSACTION;
    UPDATE keel.Queues WITH (UPDLOCK, SERIALIZABLE)
    SET Paused = ISNULL(@Paused, Paused),
        MaxConcurrency = CASE WHEN ISNULL(@ClearMaxConcurrency, 0) = 1 THEN NULL
                              ELSE ISNULL(@MaxConcurrency, MaxConcurrency) END,
        ZombieTimeoutSeconds = ISNULL(@ZombieTimeoutSeconds, ZombieTimeoutSeconds),
        ZombiePolicy = ISNULL(@ZombiePolicy, ZombiePolicy),
        MaxAttempts = ISNULL(@MaxAttempts, MaxAttempts),
        ArchiveRetentionSeconds = ISNULL(@ArchiveRetentionSeconds, ArchiveRetentionSeconds),
        DlqRetentionSeconds = ISNULL(@DlqRetentionSeconds, DlqRetentionSeconds),
        MetricsRetentionSeconds = ISNULL(@MetricsRetentionSeconds, MetricsRetentionSeconds),
        UpdatedAt = SYSUTCDATETIME()
    WHERE Name = @Name;

    IF @@ROWCOUNT = 0
    BEGIN
      -- New queue: the table defaults, overridden by the given arguments.
      INSERT keel.Queues (Name) VALUES (@Name);
      UPDATE keel.Queues
      SET Paused = ISNULL(@Paused, Paused),
          MaxConcurrency = CASE WHEN ISNULL(@ClearMaxConcurrency, 0) = 1 THEN NULL
                                ELSE ISNULL(@MaxConcurrency, MaxConcurrency) END,
          ZombieTimeoutSeconds = ISNULL(@ZombieTimeoutSeconds, ZombieTimeoutSeconds),
          ZombiePolicy = ISNULL(@ZombiePolicy, ZombiePolicy),
          MaxAttempts = ISNULL(@MaxAttempts, MaxAttempts),
          ArchiveRetentionSeconds = ISNULL(@ArchiveRetentionSeconds, ArchiveRetentionSeconds),
          DlqRetentionSeconds = ISNULL(@DlqRetentionSeconds, DlqRetentionSeconds),
          MetricsRetentionSeconds = ISNULL(@MetricsRetentionSeconds, MetricsRetentionSeconds)
      WHERE Name = @Name;
    END;
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  EXEC keel.ListQueues @Name = @Name;
END;
GO

-- GetJob(@JobId): the job wherever it is (hot, archive or dlq), as one JobRecord row, or no row. One statement,
-- which under READ_COMMITTED_SNAPSHOT reads one committed snapshot, so a job moving concurrently is seen in exactly
-- one place. Without RCSI (locking READ COMMITTED) each UNION ALL branch reads at its own moment and a job moving
-- Hot -> Archive between them is returned twice or not at all: RCSI is required, and the store checks it when it
-- connects (shared/engines/sqlserver/startupCheck.ts).
CREATE OR ALTER PROCEDURE keel.GetJob
  @JobId BIGINT
AS
BEGIN
  SET NOCOUNT ON;
  SELECT h.Id AS JobId, 'hot' AS Location, h.Queue, h.Type, h.Payload, h.Priority, CONVERT(varchar(10), h.State) AS State,
         h.Attempts, h.IdempotencyKey, h.Tags, h.CreatedAt, h.RunAt, h.StartedAt, CONVERT(datetime2(3), NULL) AS FinishedAt,
         CONVERT(bigint, NULL) AS DurationMs, CONVERT(varchar(16), NULL) AS Reason, h.LastError, h.CancelRequested,
         h.LeaseId, h.WorkerId
  FROM keel.JobsHot AS h WHERE h.Id = @JobId
  UNION ALL
  SELECT a.Id, 'archive', a.Queue, a.Type, a.Payload, a.Priority, 'succeeded', a.Attempts, a.IdempotencyKey, a.Tags,
         a.CreatedAt, NULL, a.StartedAt, a.FinishedAt, a.DurationMs, NULL, NULL, CONVERT(bit, 0), NULL, a.WorkerId
  FROM keel.JobsArchive AS a WHERE a.Id = @JobId
  UNION ALL
  SELECT d.Id, 'dlq', d.Queue, d.Type, d.Payload, d.Priority, 'dead', d.Attempts, d.IdempotencyKey, d.Tags,
         d.CreatedAt, NULL, d.StartedAt, d.FailedAt, d.DurationMs, d.Reason, d.Error, CONVERT(bit, 0), NULL, d.WorkerId
  FROM keel.JobsDLQ AS d WHERE d.Id = @JobId;
END;
GO

-- SearchJobs(...): newest first (Id descending) with keyset paging (@AfterId: ids below it), at most @Limit rows
-- (1..1000, default 50). @From/@To bound CreatedAt (hot), FinishedAt (archive) or FailedAt (dlq), [from, to).
-- @Text is a case-insensitive substring of the payload text or the last error; @Tag an exact tag.
CREATE OR ALTER PROCEDURE keel.SearchJobs
  @Location VARCHAR(10),
  @Queue NVARCHAR(128),
  @Type NVARCHAR(256),
  @Tag NVARCHAR(64),
  @State VARCHAR(10),
  @Reason VARCHAR(16),
  @From DATETIME2(3),
  @To DATETIME2(3),
  @Text NVARCHAR(400),
  @AfterId BIGINT,
  @Limit INT
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Top int = ISNULL(@Limit, 50);
  IF @Top < 1 SET @Top = 1;
  IF @Top > 1000 SET @Top = 1000;
  DECLARE @Like nvarchar(900) = CASE WHEN @Text IS NULL THEN NULL
    ELSE N'%' + REPLACE(REPLACE(REPLACE(REPLACE(@Text, N'\', N'\\'), N'%', N'\%'), N'_', N'\_'), N'[', N'\[') + N'%' END;

  IF @Location = 'hot'
    SELECT TOP (@Top) h.Id AS JobId, 'hot' AS Location, h.Queue, h.Type, h.Payload, h.Priority,
           CONVERT(varchar(10), h.State) AS State, h.Attempts, h.IdempotencyKey, h.Tags, h.CreatedAt, h.RunAt, h.StartedAt,
           CONVERT(datetime2(3), NULL) AS FinishedAt, CONVERT(bigint, NULL) AS DurationMs,
           CONVERT(varchar(16), NULL) AS Reason, h.LastError, h.CancelRequested, h.LeaseId, h.WorkerId
    FROM keel.JobsHot AS h
    WHERE (@Queue IS NULL OR h.Queue = @Queue) AND (@Type IS NULL OR h.Type = @Type)
      AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(h.Tags) AS t
                                   WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
      AND (@State IS NULL OR h.State = @State)
      AND (@From IS NULL OR h.CreatedAt >= @From) AND (@To IS NULL OR h.CreatedAt < @To)
      AND (@Like IS NULL OR h.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
           OR ISNULL(h.LastError, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
      AND (@AfterId IS NULL OR h.Id < @AfterId)
    ORDER BY h.Id DESC
    OPTION (RECOMPILE);
  ELSE IF @Location = 'archive'
    SELECT TOP (@Top) a.Id AS JobId, 'archive' AS Location, a.Queue, a.Type, a.Payload, a.Priority,
           CONVERT(varchar(10), 'succeeded') AS State, a.Attempts, a.IdempotencyKey, a.Tags, a.CreatedAt,
           CONVERT(datetime2(3), NULL) AS RunAt, a.StartedAt, a.FinishedAt, a.DurationMs,
           CONVERT(varchar(16), NULL) AS Reason, CONVERT(nvarchar(max), NULL) AS LastError,
           CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId, a.WorkerId
    FROM keel.JobsArchive AS a
    WHERE (@Queue IS NULL OR a.Queue = @Queue) AND (@Type IS NULL OR a.Type = @Type)
      AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(a.Tags) AS t
                                   WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
      AND (@From IS NULL OR a.FinishedAt >= @From) AND (@To IS NULL OR a.FinishedAt < @To)
      AND (@Like IS NULL OR a.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
      AND (@AfterId IS NULL OR a.Id < @AfterId)
    ORDER BY a.Id DESC
    OPTION (RECOMPILE);
  ELSE IF @Location = 'dlq'
    SELECT TOP (@Top) d.Id AS JobId, 'dlq' AS Location, d.Queue, d.Type, d.Payload, d.Priority,
           CONVERT(varchar(10), 'dead') AS State, d.Attempts, d.IdempotencyKey, d.Tags, d.CreatedAt,
           CONVERT(datetime2(3), NULL) AS RunAt, d.StartedAt, d.FailedAt AS FinishedAt, d.DurationMs, d.Reason,
           d.Error AS LastError, CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId,
           d.WorkerId
    FROM keel.JobsDLQ AS d
    WHERE (@Queue IS NULL OR d.Queue = @Queue) AND (@Type IS NULL OR d.Type = @Type)
      AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(d.Tags) AS t
                                   WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
      AND (@Reason IS NULL OR d.Reason = @Reason)
      AND (@From IS NULL OR d.FailedAt >= @From) AND (@To IS NULL OR d.FailedAt < @To)
      AND (@Like IS NULL OR d.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
           OR ISNULL(d.Error, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
      AND (@AfterId IS NULL OR d.Id < @AfterId)
    ORDER BY d.Id DESC
    OPTION (RECOMPILE);
  ELSE
    THROW 50041, N'SearchJobs: @Location must be hot, archive or dlq', 1;
END;
GO

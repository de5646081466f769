-- Recurring-job procedures over keel.Schedules (V011). Repeatable (sql/README.md).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- ListSchedules(@Name NULL = all): schedule state rows in name order.
CREATE OR ALTER PROCEDURE keel.ListSchedules
  @Name NVARCHAR(100)
AS
BEGIN
  SET NOCOUNT ON;
  SELECT s.Name, s.Paused, s.LastTick, s.ResumedAt, s.LastJobId, s.UpdatedAt
  FROM keel.Schedules AS s
  WHERE @Name IS NULL OR s.Name = @Name
  ORDER BY s.Name
  OPTION (RECOMPILE);
END;
GO

-- SetSchedulePaused(@Name, @Paused): pause, or resume (recording ResumedAt so the paused ticks are never run).
-- Creates the row on first use. Returns the state after the change.
CREATE OR ALTER PROCEDURE keel.SetSchedulePaused
  @Name NVARCHAR(100),
  @Paused BIT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Name IS NULL OR LEN(@Name) = 0 OR @Paused IS NULL
    THROW 50060, N'SetSchedulePaused: @Name and @Paused are required', 1;
  BEGIN TRY
    BEGIN TRANSACTION;
    UPDATE keel.Schedules WITH (UPDLOCK, SERIALIZABLE)
    SET ResumedAt = CASE WHEN Paused = 1 AND @Paused = 0 THEN SYSUTCDATETIME() ELSE ResumedAt END,
        Paused = @Paused,
        UpdatedAt = SYSUTCDATETIME()
    WHERE Name = @Name;
    IF @@ROWCOUNT = 0
      INSERT keel.Schedules (Name, Paused) VALUES (@Name, @Paused);
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;
  SELECT s.Name, s.Paused, s.LastTick, s.ResumedAt, s.LastJobId, s.UpdatedAt
  FROM keel.Schedules AS s
  WHERE s.Name = @Name;
END;
GO

-- FireSchedule(@Name, @ExpectedTick, @Tick, @Jobs): if the schedule is not paused and its LastTick is still
-- @ExpectedTick, move it to @Tick and enqueue @Jobs (an EnqueueMany array; may be empty) in the same transaction.
-- Returns Status 'fired' with one row per job (JobId, Duplicate), or one row with Status 'lost' (another instance
-- moved LastTick first) or 'paused'. Only here may a job carry a key starting "schedule:" (EnqueueMany refuses them),
-- and a tick is never counted as fired on a job that is not the schedule's: a hot job holding the tick's key with
-- another payload (EnqueueJobs: 50025), another priority or tags, or delayed past now without having run (a
-- squatter's job from before keys were reserved, V005) refuses the tick with 50025; nothing is recorded.
CREATE OR ALTER PROCEDURE keel.FireSchedule
  @Name NVARCHAR(100),
  @ExpectedTick DATETIME2(3),
  @Tick DATETIME2(3),
  @Jobs NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Name IS NULL OR LEN(@Name) = 0 OR @Tick IS NULL
    THROW 50061, N'FireSchedule: @Name and @Tick are required', 1;
  IF @ExpectedTick IS NOT NULL AND @Tick <= @ExpectedTick
    THROW 50062, N'FireSchedule: @Tick must be after @ExpectedTick', 1;

  DECLARE @Enqueued TABLE (Ord int NOT NULL PRIMARY KEY, JobId bigint NULL, Duplicate bit NOT NULL);
  DECLARE @Status varchar(8);
  BEGIN TRY
    BEGIN TRANSACTION;
    IF NOT EXISTS (SELECT 1 FROM keel.Schedules WITH (UPDLOCK, SERIALIZABLE) WHERE Name = @Name)
      INSERT keel.Schedules (Name) VALUES (@Name);
    UPDATE keel.Schedules WITH (UPDLOCK, ROWLOCK)
    SET LastTick = @Tick, UpdatedAt = SYSUTCDATETIME()
    WHERE Name = @Name AND Paused = 0
      AND ((LastTick IS NULL AND @ExpectedTick IS NULL) OR LastTick = @ExpectedTick);
    IF @@ROWCOUNT = 0
      SET @Status = CASE WHEN EXISTS (SELECT 1 FROM keel.Schedules WHERE Name = @Name AND Paused = 1) THEN 'paused' ELSE 'lost' END;
    ELSE
    BEGIN
      SET @Status = 'fired';
      IF @Jobs IS NOT NULL AND ISJSON(@Jobs) = 1 AND EXISTS (SELECT 1 FROM OPENJSON(@Jobs))
      BEGIN
        INSERT @Enqueued (Ord, JobId, Duplicate)
        EXEC keel.EnqueueJobs @Jobs = @Jobs, @Scheduler = 1;
        DECLARE @Foreign int = (
          SELECT MIN(e.Ord)
          FROM @Enqueued AS e
          INNER JOIN keel.JobsHot AS h ON h.Id = e.JobId
          INNER JOIN (SELECT CONVERT(int, j.[key]) AS Ord, ISNULL(v.priority, 0) AS Priority, ISNULL(v.tags, N'[]') AS Tags
                      FROM OPENJSON(@Jobs) AS j
                      CROSS APPLY OPENJSON(j.[value]) WITH (priority int '$.priority', tags nvarchar(max) '$.tags' AS JSON) AS v) AS r
            ON r.Ord = e.Ord
          WHERE e.Duplicate = 1
            AND ((h.Attempts = 0 AND h.RunAt > SYSUTCDATETIME()) OR h.Priority <> r.Priority
                 OR h.Tags COLLATE Latin1_General_100_BIN2 <> r.Tags COLLATE Latin1_General_100_BIN2));
        IF @Foreign IS NOT NULL
        BEGIN
          DECLARE @Msg nvarchar(2048) = (
            SELECT CONCAT(N'jobs[', @Foreign, N'].idempotencyKey: held by a hot job that schedule ', @Name,
                          N' did not enqueue ',
                          (SELECT @Foreign AS [index], v.queue, v.type, v.idempotencyKey
                           FOR JSON PATH, WITHOUT_ARRAY_WRAPPER))
            FROM OPENJSON(@Jobs) AS j
            CROSS APPLY OPENJSON(j.[value]) WITH (queue nvarchar(128) '$.queue', type nvarchar(256) '$.type',
                                                  idempotencyKey nvarchar(400) '$.idempotencyKey') AS v
            WHERE j.[key] = CONVERT(nvarchar(10), @Foreign));
          THROW 50025, @Msg, 1;
        END;
        UPDATE keel.Schedules
        SET LastJobId = (SELECT TOP (1) e.JobId FROM @Enqueued AS e ORDER BY e.Ord DESC)
        WHERE Name = @Name;
      END;
    END;
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  IF EXISTS (SELECT 1 FROM @Enqueued)
    SELECT @Status AS Status, e.JobId, e.Duplicate FROM @Enqueued AS e ORDER BY e.Ord;
  ELSE
    SELECT @Status AS Status, CAST(NULL AS bigint) AS JobId, CAST(NULL AS bit) AS Duplicate;
END;
GO

-- Reads and queue settings.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- Stats: one row per queue known to Queues, StatsSummary or HotCounts (name order). Every field is a maintained
-- counter or a bounded index read (never a table scan), whatever the size of the three pillars:
--   Pending, Fetched, Processing: keel.HotCounts (trigger on JobsHot), summed over 16 slots; Dlq: keel.DlqCounts
--   (trigger on JobsDLQ); Succeeded ... Resurrected: keel.StatsSummary, summed over its 16 slots (V013);
--   OldestDueAgeMs: the first entry of IX_JobsHot_PendingRunAt, when it is due;
--   Due: exact when fewer than 1,000 pending rows of the queue are due or fewer than 1,000 are not yet due (it counts
--   at most 1,000 entries of one side of IX_JobsHot_PendingRunAt; the other is Pending minus it). Past that Due is
--   1,000 and DueExact 0: "at least 1,000". The twin of keel.stats() on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.Stats
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Cap int = 1000;

  DECLARE @Q TABLE (
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Waiting bigint NOT NULL,
    OldestRunAt datetime2(3) NULL, DueSeen bigint NULL, NotDueSeen bigint NULL);
  WITH counts AS (
    SELECT c.Queue, SUM(c.Pending) AS Pending, SUM(c.Fetched) AS Fetched, SUM(c.Processing) AS Processing,
           SUM(c.Waiting) AS Waiting
    FROM keel.HotCounts AS c GROUP BY c.Queue
  ), names AS (
    SELECT q.Name FROM keel.Queues AS q
    UNION SELECT s.Queue FROM keel.StatsSummary AS s
    UNION SELECT c.Queue FROM counts AS c WHERE c.Pending <> 0 OR c.Fetched <> 0 OR c.Processing <> 0 OR c.Waiting <> 0
  )
  INSERT @Q (Queue, Pending, Fetched, Processing, Waiting, OldestRunAt)
  SELECT n.Name, ISNULL(c.Pending, 0), ISNULL(c.Fetched, 0), ISNULL(c.Processing, 0), ISNULL(c.Waiting, 0),
         (SELECT TOP (1) h.RunAt FROM keel.JobsHot AS h WITH (INDEX(IX_JobsHot_PendingRunAt))
          WHERE h.Queue = n.Name AND h.State = 'pending' ORDER BY h.RunAt)
  FROM names AS n
  LEFT JOIN counts AS c ON c.Queue = n.Name;

  UPDATE q
  SET DueSeen = (SELECT COUNT_BIG(*) FROM (
                   SELECT TOP (@Cap) h.Id FROM keel.JobsHot AS h WITH (INDEX(IX_JobsHot_PendingRunAt))
                   WHERE h.Queue = q.Queue AND h.State = 'pending' AND h.RunAt <= @Now) AS x)
  FROM @Q AS q
  WHERE q.OldestRunAt <= @Now;
  UPDATE q
  SET NotDueSeen = (SELECT COUNT_BIG(*) FROM (
                      SELECT TOP (@Cap) h.Id FROM keel.JobsHot AS h WITH (INDEX(IX_JobsHot_PendingRunAt))
                      WHERE h.Queue = q.Queue AND h.State = 'pending' AND h.RunAt > @Now) AS y)
  FROM @Q AS q
  WHERE q.DueSeen >= @Cap;

  SELECT q.Queue, q.Pending,
         CASE WHEN ISNULL(q.DueSeen, 0) < @Cap THEN ISNULL(q.DueSeen, 0)
              WHEN q.NotDueSeen < @Cap THEN q.Pending - q.NotDueSeen
              ELSE CONVERT(bigint, @Cap) END AS Due,
         CONVERT(bit, IIF(ISNULL(q.DueSeen, 0) < @Cap OR q.NotDueSeen < @Cap, 1, 0)) AS DueExact,
         q.Fetched, q.Processing, ISNULL(dead.N, 0) AS Dlq,
         CASE WHEN q.OldestRunAt <= @Now THEN DATEDIFF_BIG(millisecond, q.OldestRunAt, @Now) END AS OldestDueAgeMs,
         ISNULL(s.Succeeded, 0) AS Succeeded, ISNULL(s.Failed, 0) AS Failed, ISNULL(s.Retried, 0) AS Retried,
         ISNULL(s.Cancelled, 0) AS Cancelled, ISNULL(s.Zombie, 0) AS Zombie, ISNULL(s.Resurrected, 0) AS Resurrected,
         q.Waiting
  FROM @Q AS q
  LEFT JOIN keel.DlqCounts AS dead ON dead.Queue = q.Queue
  LEFT JOIN (SELECT x.Queue, SUM(x.Succeeded) AS Succeeded, SUM(x.Failed) AS Failed, SUM(x.Retried) AS Retried,
                    SUM(x.Cancelled) AS Cancelled, SUM(x.Zombie) AS Zombie, SUM(x.Resurrected) AS Resurrected
             FROM keel.StatsSummary AS x GROUP BY x.Queue) AS s ON s.Queue = q.Queue
  ORDER BY q.Queue;
END;
GO

-- Metrics(@WindowMinutes, @Queue NULL = all): the metric buckets of the last @WindowMinutes minutes including the
-- current one (default 60), in (BucketStart, Queue, Outcome, Reason) order, each bucket summed over its slots (V013).
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

  SELECT b.BucketStart, b.Queue, b.Outcome, b.Reason, SUM(b.[Count]) AS [Count],
         SUM(b.TotalDurationMs) AS TotalDurationMs, MAX(b.MaxDurationMs) AS MaxDurationMs
  FROM keel.MetricBuckets AS b
  WHERE b.BucketStart >= @From AND (@Queue IS NULL OR b.Queue = @Queue)
  GROUP BY b.BucketStart, b.Queue, b.Outcome, b.Reason
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
-- argument (NULL = unchanged); @ClearMaxConcurrency = 1 makes the queue unlimited. Returns the settings row after
-- this call's change, read under its locks (not after the commit: another instance's change may follow at once), and
-- Created = 1 when this call inserted it (the key-range lock makes a second creator wait and then find the row).
-- A pause (@Paused = 1) first takes the queue's claim applock exclusively (the pause barrier, ClaimNext): it waits
-- until every claim in flight that may have read "not paused" has committed, so once it returns no claim of the
-- queue starts a job.
-- @Expected (compare-and-set): a JSON object {"setting": value the caller saw, ...} in the API's names, compared
-- with the row locked for the change (a queue without settings: the defaults). The first differing setting, in name
-- order, comes back as Conflict with the row as it is, and the transaction is rolled back: nothing is written.
-- Unless the row already holds every value the call sets (at least one): then it is a retry of a change that applied
-- and whose answer was lost (its expected values are those seen before it), and it succeeds unchanged (Unchanged = 1,
-- Conflict NULL, rolled back all the same). A compare-and-set on absolute values is idempotent that way.
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
  @MetricsRetentionSeconds INT,
  @Expected NVARCHAR(MAX) = NULL -- defaulted: a build before it calls without it (sql/README.md, "Rolling deploys")
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Name IS NULL OR LEN(@Name) = 0
    THROW 50040, N'UpdateQueue: @Name is required', 1;
  IF @Expected IS NOT NULL
     AND (ISJSON(@Expected) = 0 OR LEFT(LTRIM(@Expected), 1) <> N'{'
          OR EXISTS (SELECT 1 FROM OPENJSON(@Expected) AS e
                     WHERE e.[key] NOT IN (N'maxConcurrency', N'zombieTimeoutSeconds', N'zombiePolicy', N'maxAttempts',
                                           N'archiveRetentionSeconds', N'dlqRetentionSeconds',
                                           N'metricsRetentionSeconds')))
    THROW 50045, N'UpdateQueue: @Expected must be a JSON object of queue settings', 1;

  DECLARE @Created BIT = 0, @Conflict nvarchar(64) = NULL, @Holds BIT = 0;
  BEGIN TRY
    BEGIN TRANSACTION;
    -- The claim barrier: a pause, and a limit set, wait for every claim in flight that read the settings before
    -- (not paused; no limit: it counts nothing), and the claims after them read the change (ClaimNext).
    IF @Paused = 1 OR @MaxConcurrency IS NOT NULL
    BEGIN
      DECLARE @LkRes nvarchar(255) = N'keel.claim:' + @Name, @LkRc int;
      EXEC @LkRc = sys.sp_getapplock @Resource = @LkRes, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
      IF @LkRc < 0 THROW 50044, N'UpdateQueue: could not take the queue''s claim lock', 1;
    END;
    IF @Expected IS NOT NULL
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM keel.Queues WITH (UPDLOCK, SERIALIZABLE) WHERE Name = @Name)
      BEGIN
        INSERT keel.Queues (Name) VALUES (@Name); -- the defaults, to compare with; rolled back on a conflict
        SET @Created = 1;
      END;
      -- JSON types: 0 null, 1 string, 2 number. A value differs unless it is the column's, of the column's type.
      SELECT TOP (1) @Conflict = e.[key]
      FROM OPENJSON(@Expected) AS e
      CROSS JOIN keel.Queues AS q WITH (UPDLOCK, ROWLOCK)
      WHERE q.Name = @Name
        AND NOT EXISTS (
          SELECT 1 WHERE
               (e.[key] = N'maxConcurrency' AND ((e.[type] = 0 AND q.MaxConcurrency IS NULL)
                                                  OR (e.[type] = 2 AND TRY_CONVERT(int, e.[value]) = q.MaxConcurrency)))
            OR (e.[key] = N'zombieTimeoutSeconds' AND e.[type] = 2
                AND TRY_CONVERT(int, e.[value]) = q.ZombieTimeoutSeconds)
            OR (e.[key] = N'zombiePolicy' AND e.[type] = 1
                AND e.[value] COLLATE Latin1_General_100_BIN2 = q.ZombiePolicy COLLATE Latin1_General_100_BIN2)
            OR (e.[key] = N'maxAttempts' AND e.[type] = 2 AND TRY_CONVERT(int, e.[value]) = q.MaxAttempts)
            OR (e.[key] = N'archiveRetentionSeconds' AND e.[type] = 2
                AND TRY_CONVERT(int, e.[value]) = q.ArchiveRetentionSeconds)
            OR (e.[key] = N'dlqRetentionSeconds' AND e.[type] = 2
                AND TRY_CONVERT(int, e.[value]) = q.DlqRetentionSeconds)
            OR (e.[key] = N'metricsRetentionSeconds' AND e.[type] = 2
                AND TRY_CONVERT(int, e.[value]) = q.MetricsRetentionSeconds))
      ORDER BY e.[key];
      IF @Conflict IS NOT NULL
      BEGIN
        -- A retry of a change that applied: every setting the call sets already has its value.
        SELECT @Holds = 1
        FROM keel.Queues AS q
        WHERE q.Name = @Name
          AND (@Paused IS NOT NULL OR @MaxConcurrency IS NOT NULL OR ISNULL(@ClearMaxConcurrency, 0) = 1
               OR @ZombieTimeoutSeconds IS NOT NULL OR @ZombiePolicy IS NOT NULL OR @MaxAttempts IS NOT NULL
               OR @ArchiveRetentionSeconds IS NOT NULL OR @DlqRetentionSeconds IS NOT NULL
               OR @MetricsRetentionSeconds IS NOT NULL)
          AND (@Paused IS NULL OR q.Paused = @Paused)
          AND ((ISNULL(@ClearMaxConcurrency, 0) = 1 AND q.MaxConcurrency IS NULL)
               OR (ISNULL(@ClearMaxConcurrency, 0) = 0
                   AND (@MaxConcurrency IS NULL OR q.MaxConcurrency = @MaxConcurrency)))
          AND (@ZombieTimeoutSeconds IS NULL OR q.ZombieTimeoutSeconds = @ZombieTimeoutSeconds)
          AND (@ZombiePolicy IS NULL
               OR q.ZombiePolicy COLLATE Latin1_General_100_BIN2 = @ZombiePolicy COLLATE Latin1_General_100_BIN2)
          AND (@MaxAttempts IS NULL OR q.MaxAttempts = @MaxAttempts)
          AND (@ArchiveRetentionSeconds IS NULL OR q.ArchiveRetentionSeconds = @ArchiveRetentionSeconds)
          AND (@DlqRetentionSeconds IS NULL OR q.DlqRetentionSeconds = @DlqRetentionSeconds)
          AND (@MetricsRetentionSeconds IS NULL OR q.MetricsRetentionSeconds = @MetricsRetentionSeconds);
        SELECT q.Name, q.Paused, q.MaxConcurrency, q.ZombieTimeoutSeconds, q.ZombiePolicy, q.MaxAttempts,
               q.ArchiveRetentionSeconds, q.DlqRetentionSeconds, q.MetricsRetentionSeconds, q.UpdatedAt,
               CONVERT(bit, 0) AS Created, IIF(@Holds = 1, CONVERT(nvarchar(64), NULL), @Conflict) AS Conflict,
               @Holds AS Unchanged
        FROM keel.Queues AS q
        WHERE q.Name = @Name;
        ROLLBACK TRANSACTION;
        RETURN;
      END;
    END;
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
      SET @Created = 1;
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
    SELECT q.Name, q.Paused, q.MaxConcurrency, q.ZombieTimeoutSeconds, q.ZombiePolicy, q.MaxAttempts,
           q.ArchiveRetentionSeconds, q.DlqRetentionSeconds, q.MetricsRetentionSeconds, q.UpdatedAt,
           @Created AS Created, CONVERT(nvarchar(64), NULL) AS Conflict, CONVERT(bit, 0) AS Unchanged
    FROM keel.Queues AS q
    WHERE q.Name = @Name;
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;
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
         h.LeaseId, h.WorkerId, h.Progress, CONVERT(nvarchar(max), NULL) AS Result, h.Logs, h.MaxAttempts,
         h.LeaseExpiresAt, h.HeartbeatAt
  FROM keel.JobsHot AS h WHERE h.Id = @JobId
  UNION ALL
  SELECT a.Id, 'archive', a.Queue, a.Type, a.Payload, a.Priority, 'succeeded', a.Attempts, a.IdempotencyKey, a.Tags,
         a.CreatedAt, NULL, a.StartedAt, a.FinishedAt, a.DurationMs, NULL, NULL, CONVERT(bit, 0), NULL, a.WorkerId,
         NULL, a.Result, a.Logs, a.MaxAttempts, NULL, NULL
  FROM keel.JobsArchive AS a WHERE a.Id = @JobId
  UNION ALL
  SELECT d.Id, 'dlq', d.Queue, d.Type, d.Payload, d.Priority, 'dead', d.Attempts, d.IdempotencyKey, d.Tags,
         d.CreatedAt, NULL, d.StartedAt, d.FailedAt, d.DurationMs, d.Reason, d.Error, CONVERT(bit, 0), NULL, d.WorkerId,
         NULL, NULL, d.Logs, d.MaxAttempts, NULL, NULL
  FROM keel.JobsDLQ AS d WHERE d.Id = @JobId;
END;
GO

-- JobLinks(@JobId): a flow's edges of one job (the twin of keel.job_links): its parents (Relation 'parent', in the
-- order of its `after` list, with an archived parent's Result) and its children ('child', the first 1,000 by id),
-- each with where it is now (Location, State) and the outcome the child saw (ParentOutcome). One statement, one
-- snapshot (RCSI, as GetJob).
CREATE OR ALTER PROCEDURE keel.JobLinks
  @JobId BIGINT
AS
BEGIN
  SET NOCOUNT ON;
  WITH x AS (
    SELECT 'parent' AS Relation, e.ParentId AS Id, e.ParentOutcome AS Outcome, e.Position AS N
    FROM keel.JobDeps AS e WHERE e.ChildId = @JobId
    UNION ALL
    SELECT 'child', c.ChildId, c.ParentOutcome, NULL
    FROM (SELECT TOP (1000) e.ChildId, e.ParentOutcome FROM keel.JobDeps AS e WHERE e.ParentId = @JobId
          ORDER BY e.ChildId) AS c
  )
  SELECT x.Relation, x.Id AS JobId, COALESCE(h.Type, a.Type, d.Type) AS Type, COALESCE(h.Queue, a.Queue, d.Queue) AS Queue,
         CASE WHEN h.Id IS NOT NULL THEN 'hot' WHEN a.Id IS NOT NULL THEN 'archive' WHEN d.Id IS NOT NULL THEN 'dlq' END
           AS Location,
         COALESCE(CONVERT(varchar(10), h.State), IIF(a.Id IS NOT NULL, 'succeeded', NULL), IIF(d.Id IS NOT NULL, 'dead', NULL))
           AS State,
         x.Outcome, IIF(x.Relation = 'parent', a.Result, NULL) AS Result
  FROM x
  LEFT JOIN keel.JobsHot AS h ON h.Id = x.Id
  LEFT JOIN keel.JobsArchive AS a ON a.Id = x.Id AND h.Id IS NULL
  LEFT JOIN keel.JobsDLQ AS d ON d.Id = x.Id AND h.Id IS NULL AND a.Id IS NULL
  ORDER BY IIF(x.Relation = 'parent', 0, 1), x.N, x.Id;
END;
GO

-- SearchJobs(...): newest first (Id descending; @Oldest = 1: ascending) with keyset paging (@AfterId: ids past it in
-- that order), at most @Limit rows
-- (1..1000, default 50). @From/@To bound CreatedAt (hot), FinishedAt (archive) or FailedAt (dlq), [from, to).
-- @Text is a case-insensitive substring of the payload text or the last error; @Tag an exact tag; @Priority an exact
-- priority; @IdempotencyKey an exact key (a job's siblings).
-- @ScanRows bounds the work (a search never scans a whole table): only the next @ScanRows ids past @AfterId are examined (a range of
-- the clustered key). When more rows lie past that range, a last marker row (Location 'scan_bound', JobId the last
-- id examined) follows the matches: pass it as @AfterId to continue. The store sets it for archive and DLQ text
-- searches (JobSearch.scanRows). The twin of keel.search_jobs on PostgreSQL.
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
  @ScanRows INT,
  @Limit INT,
  @Priority INT,
  @IdempotencyKey NVARCHAR(400),
  @Oldest BIT
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Top int = ISNULL(@Limit, 50);
  IF @Top < 1 SET @Top = 1;
  IF @Top > 1000 SET @Top = 1000;
  DECLARE @Like nvarchar(900) = CASE WHEN @Text IS NULL THEN NULL
    ELSE N'%' + REPLACE(REPLACE(REPLACE(REPLACE(@Text, N'\', N'\\'), N'%', N'\%'), N'_', N'\_'), N'[', N'\[') + N'%' END;
  -- The id range examined, [@Lo, @Hi]: below @AfterId newest first, above it oldest first; narrowed to the scanned
  -- range when @ScanRows is set.
  DECLARE @Asc bit = ISNULL(@Oldest, 0);
  DECLARE @Lo bigint = IIF(@Asc = 1, ISNULL(@AfterId, -1) + 1, 0);
  DECLARE @Hi bigint = IIF(@Asc = 1, 9223372036854775807, ISNULL(@AfterId, 9223372036854775807) - 1);
  DECLARE @Edge bigint = NULL, @Seen int = 0;
  IF @ScanRows IS NOT NULL
  BEGIN
    IF @ScanRows < 1
      THROW 50042, N'SearchJobs: @ScanRows must be a positive integer', 1;
    IF @Location = 'hot' AND @Asc = 1
      SELECT @Edge = MAX(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) h.Id FROM keel.JobsHot AS h WHERE h.Id >= @Lo ORDER BY h.Id) AS x;
    ELSE IF @Location = 'hot'
      SELECT @Edge = MIN(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) h.Id FROM keel.JobsHot AS h WHERE h.Id <= @Hi ORDER BY h.Id DESC) AS x;
    ELSE IF @Location = 'archive' AND @Asc = 1
      SELECT @Edge = MAX(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) a.Id FROM keel.JobsArchive AS a WHERE a.Id >= @Lo ORDER BY a.Id) AS x;
    ELSE IF @Location = 'archive'
      SELECT @Edge = MIN(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) a.Id FROM keel.JobsArchive AS a WHERE a.Id <= @Hi ORDER BY a.Id DESC) AS x;
    ELSE IF @Location = 'dlq' AND @Asc = 1
      SELECT @Edge = MAX(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) d.Id FROM keel.JobsDLQ AS d WHERE d.Id >= @Lo ORDER BY d.Id) AS x;
    ELSE IF @Location = 'dlq'
      SELECT @Edge = MIN(x.Id), @Seen = COUNT(*)
      FROM (SELECT TOP (@ScanRows) d.Id FROM keel.JobsDLQ AS d WHERE d.Id <= @Hi ORDER BY d.Id DESC) AS x;
    IF @Seen < @ScanRows SET @Edge = NULL; -- the range reaches the end of the table: nothing past it to continue with
    ELSE IF @Asc = 1 SET @Hi = @Edge;
    ELSE SET @Lo = @Edge;
  END;

  IF @Location = 'hot' AND @Asc = 1
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) h.Id AS JobId, 'hot' AS Location, h.Queue, h.Type, h.Payload, h.Priority,
             CONVERT(varchar(10), h.State) AS State, h.Attempts, h.IdempotencyKey, h.Tags, h.CreatedAt, h.RunAt, h.StartedAt,
             CONVERT(datetime2(3), NULL) AS FinishedAt, CONVERT(bigint, NULL) AS DurationMs,
             CONVERT(varchar(16), NULL) AS Reason, h.LastError, h.CancelRequested, h.LeaseId, h.WorkerId, h.Progress,
             CONVERT(nvarchar(max), NULL) AS Result, CONVERT(nvarchar(max), NULL) AS Logs
      FROM keel.JobsHot AS h
      WHERE (@Queue IS NULL OR h.Queue = @Queue) AND (@Type IS NULL OR h.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(h.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@State IS NULL OR h.State = @State)
        AND (@Priority IS NULL OR h.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR h.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR h.CreatedAt >= @From) AND (@To IS NULL OR h.CreatedAt < @To)
        AND (@Like IS NULL OR h.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
             OR ISNULL(h.LastError, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND h.Id BETWEEN @Lo AND @Hi
      ORDER BY h.Id) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE IF @Location = 'hot'
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) h.Id AS JobId, 'hot' AS Location, h.Queue, h.Type, h.Payload, h.Priority,
             CONVERT(varchar(10), h.State) AS State, h.Attempts, h.IdempotencyKey, h.Tags, h.CreatedAt, h.RunAt, h.StartedAt,
             CONVERT(datetime2(3), NULL) AS FinishedAt, CONVERT(bigint, NULL) AS DurationMs,
             CONVERT(varchar(16), NULL) AS Reason, h.LastError, h.CancelRequested, h.LeaseId, h.WorkerId, h.Progress,
             CONVERT(nvarchar(max), NULL) AS Result, CONVERT(nvarchar(max), NULL) AS Logs
      FROM keel.JobsHot AS h
      WHERE (@Queue IS NULL OR h.Queue = @Queue) AND (@Type IS NULL OR h.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(h.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@State IS NULL OR h.State = @State)
        AND (@Priority IS NULL OR h.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR h.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR h.CreatedAt >= @From) AND (@To IS NULL OR h.CreatedAt < @To)
        AND (@Like IS NULL OR h.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
             OR ISNULL(h.LastError, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND h.Id BETWEEN @Lo AND @Hi
      ORDER BY h.Id DESC) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId DESC, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE IF @Location = 'archive' AND @Asc = 1
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) a.Id AS JobId, 'archive' AS Location, a.Queue, a.Type, a.Payload, a.Priority,
             CONVERT(varchar(10), 'succeeded') AS State, a.Attempts, a.IdempotencyKey, a.Tags, a.CreatedAt,
             CONVERT(datetime2(3), NULL) AS RunAt, a.StartedAt, a.FinishedAt, a.DurationMs,
             CONVERT(varchar(16), NULL) AS Reason, CONVERT(nvarchar(max), NULL) AS LastError,
             CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId, a.WorkerId,
             CONVERT(nvarchar(max), NULL) AS Progress, CONVERT(nvarchar(max), NULL) AS Result, -- lists: no results
             CONVERT(nvarchar(max), NULL) AS Logs -- nor logs (GetJob has both)
      FROM keel.JobsArchive AS a
      WHERE (@Queue IS NULL OR a.Queue = @Queue) AND (@Type IS NULL OR a.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(a.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@Priority IS NULL OR a.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR a.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR a.FinishedAt >= @From) AND (@To IS NULL OR a.FinishedAt < @To)
        AND (@Like IS NULL OR a.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND a.Id BETWEEN @Lo AND @Hi
      ORDER BY a.Id) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE IF @Location = 'archive'
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) a.Id AS JobId, 'archive' AS Location, a.Queue, a.Type, a.Payload, a.Priority,
             CONVERT(varchar(10), 'succeeded') AS State, a.Attempts, a.IdempotencyKey, a.Tags, a.CreatedAt,
             CONVERT(datetime2(3), NULL) AS RunAt, a.StartedAt, a.FinishedAt, a.DurationMs,
             CONVERT(varchar(16), NULL) AS Reason, CONVERT(nvarchar(max), NULL) AS LastError,
             CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId, a.WorkerId,
             CONVERT(nvarchar(max), NULL) AS Progress, CONVERT(nvarchar(max), NULL) AS Result, -- lists: no results
             CONVERT(nvarchar(max), NULL) AS Logs -- nor logs (GetJob has both)
      FROM keel.JobsArchive AS a
      WHERE (@Queue IS NULL OR a.Queue = @Queue) AND (@Type IS NULL OR a.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(a.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@Priority IS NULL OR a.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR a.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR a.FinishedAt >= @From) AND (@To IS NULL OR a.FinishedAt < @To)
        AND (@Like IS NULL OR a.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND a.Id BETWEEN @Lo AND @Hi
      ORDER BY a.Id DESC) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId DESC, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE IF @Location = 'dlq' AND @Asc = 1
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) d.Id AS JobId, 'dlq' AS Location, d.Queue, d.Type, d.Payload, d.Priority,
             CONVERT(varchar(10), 'dead') AS State, d.Attempts, d.IdempotencyKey, d.Tags, d.CreatedAt,
             CONVERT(datetime2(3), NULL) AS RunAt, d.StartedAt, d.FailedAt AS FinishedAt, d.DurationMs, d.Reason,
             d.Error AS LastError, CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId,
             d.WorkerId, CONVERT(nvarchar(max), NULL) AS Progress, CONVERT(nvarchar(max), NULL) AS Result,
             CONVERT(nvarchar(max), NULL) AS Logs
      FROM keel.JobsDLQ AS d
      WHERE (@Queue IS NULL OR d.Queue = @Queue) AND (@Type IS NULL OR d.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(d.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@Reason IS NULL OR d.Reason = @Reason)
        AND (@Priority IS NULL OR d.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR d.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR d.FailedAt >= @From) AND (@To IS NULL OR d.FailedAt < @To)
        AND (@Like IS NULL OR d.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
             OR ISNULL(d.Error, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND d.Id BETWEEN @Lo AND @Hi
      ORDER BY d.Id) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE IF @Location = 'dlq'
      SELECT u.* FROM (SELECT * FROM (SELECT TOP (@Top) d.Id AS JobId, 'dlq' AS Location, d.Queue, d.Type, d.Payload, d.Priority,
             CONVERT(varchar(10), 'dead') AS State, d.Attempts, d.IdempotencyKey, d.Tags, d.CreatedAt,
             CONVERT(datetime2(3), NULL) AS RunAt, d.StartedAt, d.FailedAt AS FinishedAt, d.DurationMs, d.Reason,
             d.Error AS LastError, CONVERT(bit, 0) AS CancelRequested, CONVERT(uniqueidentifier, NULL) AS LeaseId,
             d.WorkerId, CONVERT(nvarchar(max), NULL) AS Progress, CONVERT(nvarchar(max), NULL) AS Result,
             CONVERT(nvarchar(max), NULL) AS Logs
      FROM keel.JobsDLQ AS d
      WHERE (@Queue IS NULL OR d.Queue = @Queue) AND (@Type IS NULL OR d.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(d.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@Reason IS NULL OR d.Reason = @Reason)
        AND (@Priority IS NULL OR d.Priority = @Priority)
        AND (@IdempotencyKey IS NULL OR d.IdempotencyKey = @IdempotencyKey)
        AND (@From IS NULL OR d.FailedAt >= @From) AND (@To IS NULL OR d.FailedAt < @To)
        AND (@Like IS NULL OR d.Payload COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\'
             OR ISNULL(d.Error, N'') COLLATE Latin1_General_100_CI_AS LIKE @Like ESCAPE N'\')
        AND d.Id BETWEEN @Lo AND @Hi
      ORDER BY d.Id DESC) AS found
      UNION ALL
      SELECT @Edge, 'scan_bound', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL
      WHERE @Edge IS NOT NULL) AS u
      ORDER BY u.JobId DESC, IIF(u.Location = 'scan_bound', 1, 0)
      OPTION (RECOMPILE);
  ELSE
    THROW 50041, N'SearchJobs: @Location must be hot, archive or dlq', 1;
END;
GO

-- Console reads (issue 30): exact counts for previews, dead letters grouped in SQL, and the lease holders.

-- CountJobs(...): how many jobs match a filter, counted and bounded: at most @Cap + 1 rows are read, so Matched is
-- exact when Exact = 1 and "at least Matched" otherwise. The filters mean what they mean in SearchJobs (@From/@To
-- bound CreatedAt, FinishedAt or FailedAt); AsOf is the server's clock, the bound a purge preview keeps.
-- The twin of keel.count_jobs on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.CountJobs
  @Location VARCHAR(10),
  @Queue NVARCHAR(128),
  @Type NVARCHAR(256),
  @Tag NVARCHAR(64),
  @State VARCHAR(10),
  @Reason VARCHAR(16),
  @From DATETIME2(3),
  @To DATETIME2(3),
  @Cap INT
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Top int = ISNULL(@Cap, 10000);
  IF @Top < 1 SET @Top = 1;
  IF @Top > 1000000 SET @Top = 1000000;
  DECLARE @N bigint = 0;
  IF @Location = 'hot'
    SELECT @N = COUNT_BIG(*) FROM (
      SELECT TOP (@Top + 1) h.Id FROM keel.JobsHot AS h
      WHERE (@Queue IS NULL OR h.Queue = @Queue) AND (@Type IS NULL OR h.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(h.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@State IS NULL OR h.State = @State)
        AND (@From IS NULL OR h.CreatedAt >= @From) AND (@To IS NULL OR h.CreatedAt < @To)) AS x
    OPTION (RECOMPILE);
  ELSE IF @Location = 'archive' AND @Queue IS NULL AND (@From IS NOT NULL OR @To IS NOT NULL)
  BEGIN
    -- A time range over every queue (V031: no index of FinishedAt alone): each queue's range of
    -- IX_JobsArchive_QueueFinished, the queues found by one seek each (ArchiveQueues, R__040), stopping at @Top + 1
    -- rows in all.
    DECLARE @Lo datetime2(3) = ISNULL(@From, CONVERT(datetime2(3), '0001-01-01'));
    DECLARE @Hi datetime2(3) = ISNULL(@To, CONVERT(datetime2(3), '9999-12-31 23:59:59.999'));
    SELECT @N = COUNT_BIG(*) FROM (
      SELECT TOP (@Top + 1) x.Id FROM keel.ArchiveQueues() AS q
      CROSS APPLY (SELECT TOP (@Top + 1) a.Id FROM keel.JobsArchive AS a
                   WHERE a.Queue = q.Queue AND a.FinishedAt >= @Lo AND a.FinishedAt < @Hi
                     AND (@Type IS NULL OR a.Type = @Type)
                     AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(a.Tags) AS t
                                                  WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
                   ORDER BY a.FinishedAt) AS x) AS y
    OPTION (RECOMPILE);
  END
  ELSE IF @Location = 'archive'
    SELECT @N = COUNT_BIG(*) FROM (
      SELECT TOP (@Top + 1) a.Id FROM keel.JobsArchive AS a
      WHERE (@Queue IS NULL OR a.Queue = @Queue) AND (@Type IS NULL OR a.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(a.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@From IS NULL OR a.FinishedAt >= @From) AND (@To IS NULL OR a.FinishedAt < @To)) AS x
    OPTION (RECOMPILE);
  ELSE IF @Location = 'dlq'
    SELECT @N = COUNT_BIG(*) FROM (
      SELECT TOP (@Top + 1) d.Id FROM keel.JobsDLQ AS d
      WHERE (@Queue IS NULL OR d.Queue = @Queue) AND (@Type IS NULL OR d.Type = @Type)
        AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(d.Tags) AS t
                                     WHERE t.[value] COLLATE Latin1_General_100_BIN2 = @Tag))
        AND (@Reason IS NULL OR d.Reason = @Reason)
        AND (@From IS NULL OR d.FailedAt >= @From) AND (@To IS NULL OR d.FailedAt < @To)) AS x
    OPTION (RECOMPILE);
  ELSE
    THROW 50043, N'CountJobs: @Location must be hot, archive or dlq', 1;
  SELECT CASE WHEN @N > @Top THEN CONVERT(bigint, @Top) ELSE @N END AS Matched,
         CONVERT(bit, CASE WHEN @N <= @Top THEN 1 ELSE 0 END) AS Exact,
         CONVERT(datetime2(3), SYSUTCDATETIME()) AS AsOf;
END;
GO

-- DlqGroups(@Queue NULL = all, @Offset, @Limit, @ScanRows): dead letters grouped by reason, type and queue, counted
-- over the newest @ScanRows (1..1,000,000) dead letters (of one queue, or all): at most @ScanRows + 1 rows are read,
-- newest first along IX_JobsDLQ_Failed / IX_JobsDLQ_QueueFailed, so the read is bounded however large the DLQ grows.
-- Largest group first, a page of @Limit (1..500) groups from @Offset. Every row carries the number of groups and of
-- dead letters counted, and More: the DLQ holds older dead letters that were not counted (the totals are then lower
-- bounds). The row past the cap only sets More: it is the oldest read, so it never raises a group's NewestFailedAt,
-- and a group it alone would form is dropped. The twin of keel.dlq_groups on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.DlqGroups
  @Queue NVARCHAR(128),
  @Offset INT,
  @Limit INT,
  @ScanRows INT
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Skip int = ISNULL(@Offset, 0);
  IF @Skip < 0 SET @Skip = 0;
  DECLARE @Take int = ISNULL(@Limit, 50);
  IF @Take < 1 SET @Take = 1;
  IF @Take > 500 SET @Take = 500;
  DECLARE @Scan int = ISNULL(@ScanRows, 100000);
  IF @Scan < 1 SET @Scan = 1;
  IF @Scan > 1000000 SET @Scan = 1000000;
  WITH s AS (
    SELECT TOP (@Scan + 1) d.Reason, d.Type, d.Queue, d.FailedAt,
           ROW_NUMBER() OVER (ORDER BY d.FailedAt DESC) AS Rn
    FROM keel.JobsDLQ AS d
    WHERE (@Queue IS NULL OR d.Queue = @Queue)
    ORDER BY d.FailedAt DESC),
  g AS (
    SELECT s.Reason, s.Type, s.Queue,
           SUM(CASE WHEN s.Rn <= @Scan THEN CONVERT(bigint, 1) ELSE CONVERT(bigint, 0) END) AS Jobs,
           MAX(s.FailedAt) AS NewestFailedAt,
           MAX(CASE WHEN s.Rn > @Scan THEN 1 ELSE 0 END) AS Extra
    FROM s
    GROUP BY s.Reason, s.Type, s.Queue),
  w AS (
    SELECT g.Reason, g.Type, g.Queue, g.Jobs, g.NewestFailedAt,
           SUM(CASE WHEN g.Jobs > 0 THEN CONVERT(bigint, 1) ELSE CONVERT(bigint, 0) END) OVER () AS TotalGroups,
           SUM(g.Jobs) OVER () AS TotalJobs, MAX(g.Extra) OVER () AS More
    FROM g)
  SELECT w.Reason, w.Type, w.Queue, w.Jobs, w.NewestFailedAt, w.TotalGroups, w.TotalJobs,
         CONVERT(bit, w.More) AS More
  FROM w
  WHERE w.Jobs > 0
  ORDER BY w.Jobs DESC, w.Reason, w.Type, w.Queue
  OFFSET @Skip ROWS FETCH NEXT @Take ROWS ONLY
  OPTION (RECOMPILE);
END;
GO

-- ListWorkers: every processor of the registry (keel.Workers, V012: host, version, queues served, concurrency, last
-- seen) and every lease holder (per WorkerId, the hot jobs it holds, fetched or processing; its oldest and newest
-- sign of life: the heartbeat, else the start, else the claim; its earliest lease expiry), joined by WorkerId. A
-- registered worker holding nothing is listed (idle); a lease holder with no row is listed with a NULL registration
-- (Registered 0). Lease holders first, the stalest first; then the idle, the most recently seen first. The twin of
-- keel.list_workers on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.ListWorkers
AS
BEGIN
  SET NOCOUNT ON;
  WITH held AS (
    SELECT h.WorkerId, h.Queue, h.State, COALESCE(h.HeartbeatAt, h.StartedAt, h.FetchedAt) AS SeenAt, h.LeaseExpiresAt
    FROM keel.JobsHot AS h
    WHERE h.State IN ('fetched', 'processing') AND h.WorkerId IS NOT NULL),
  byQueue AS (
    SELECT b.WorkerId, b.Queue FROM held AS b GROUP BY b.WorkerId, b.Queue),
  l AS (
    SELECT x.WorkerId, COUNT_BIG(*) AS JobsHeld,
           SUM(CASE WHEN x.State = 'processing' THEN CONVERT(bigint, 1) ELSE CONVERT(bigint, 0) END) AS Processing,
           MIN(x.SeenAt) AS OldestHeartbeatAt, MAX(x.SeenAt) AS NewestHeartbeatAt,
           MIN(x.LeaseExpiresAt) AS EarliestLeaseExpiresAt
    FROM held AS x GROUP BY x.WorkerId)
  SELECT COALESCE(w.WorkerId, l.WorkerId) AS WorkerId,
         CONVERT(bit, CASE WHEN w.WorkerId IS NULL THEN 0 ELSE 1 END) AS Registered,
         w.Host, w.InstanceId, w.Pid, w.AppVersion, w.BuildId, w.Queues AS QueuesServed, w.Concurrency, w.JobsDone,
         w.StartedAt, w.LastSeenAt,
         COALESCE(l.JobsHeld, CONVERT(bigint, 0)) AS JobsHeld, COALESCE(l.Processing, CONVERT(bigint, 0)) AS Processing,
         (SELECT STRING_AGG(CONVERT(nvarchar(max), q.Queue), N',') WITHIN GROUP (ORDER BY q.Queue)
          FROM byQueue AS q WHERE q.WorkerId = l.WorkerId) AS Queues,
         l.OldestHeartbeatAt, l.NewestHeartbeatAt, l.EarliestLeaseExpiresAt,
         CONVERT(datetime2(3), SYSUTCDATETIME()) AS AsOf
  FROM keel.Workers AS w
  FULL JOIN l ON l.WorkerId = w.WorkerId
  ORDER BY CASE WHEN l.OldestHeartbeatAt IS NULL THEN 1 ELSE 0 END, l.OldestHeartbeatAt,
           CASE WHEN w.LastSeenAt IS NULL THEN 1 ELSE 0 END, w.LastSeenAt DESC, COALESCE(w.WorkerId, l.WorkerId);
END;
GO

-- Maintenance: zombie rescue, DLQ resurrection, retention purge. Every sweep is bounded (@Limit / @BatchSize) and
-- skips rows other sessions hold (READPAST), so a timer that fires twice or overlaps itself does no harm.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- RescueZombies(@Limit, @TypeMaxAttempts), each part one bounded batch in its own short transaction:
--   fetched past LeaseExpiresAt -> pending (no attempt was used)                          -> ReleasedFetched
--   processing with HeartbeatAt older than the queue's ZombieTimeoutSeconds:
--     cancel requested -> DLQ 'cancelled'; policy 'dlq' or attempts exhausted -> DLQ 'zombie' -> DeadLettered
--     otherwise (policy 'retry') -> pending, Zombie+1                                       -> Retried
--   pending past ExpiresAt -> DLQ 'expired'                                                 -> Expired
-- Returns one row: ReleasedFetched, Retried, DeadLettered, Expired.
-- Lock order, in each of the three transactions: the job rows, READPAST (a row another session holds is left to the
-- next sweep, never waited for: step 1 reads and locks in one statement, steps 2 and 3 find candidates without locks
-- and then lock exactly those by key); then the updates and Hot -> DLQ moves of exactly those rows;
-- keel.ApplyCounters once, last.
CREATE OR ALTER PROCEDURE keel.RescueZombies
  @Limit INT,
  @TypeMaxAttempts nvarchar(max) = NULL -- {"<job type>": <max attempts>}: the handlers' own limits
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  -- Should a deadlock happen anyway, the sweep (retried on its next run) is the victim, not a worker's move.
  SET DEADLOCK_PRIORITY LOW;
  IF @Limit IS NULL OR @Limit < 1
    THROW 50030, N'RescueZombies: @Limit must be a positive integer', 1;

  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Released int = 0, @Retried int = 0, @Dead int = 0, @Expired int = 0, @Moved int = 0;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @DeadIds keel.JobIdList;
  -- A job's limit: its own, else its handler's (by type), else its queue's.
  DECLARE @TypeMax TABLE (Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, MaxAttempts int NOT NULL);
  IF @TypeMaxAttempts IS NOT NULL
  BEGIN
    IF ISJSON(@TypeMaxAttempts) <> 1
      THROW 50037, N'RescueZombies: @TypeMaxAttempts must be a JSON object of job type -> max attempts', 1;
    INSERT @TypeMax (Type, MaxAttempts)
    SELECT j.[key], TRY_CAST(j.[value] AS int)
    FROM OPENJSON(@TypeMaxAttempts) AS j
    WHERE j.[type] = 2 AND TRY_CAST(j.[value] AS int) > 0;
  END;
  DECLARE @Z TABLE (Id bigint NOT NULL PRIMARY KEY, Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
                    Kind char(1) NOT NULL); -- c = cancelled, z = zombie to DLQ, r = back to pending
  -- The triggers' read-counter deltas, applied once per transaction by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    -- 1. Fetched jobs whose lease ran out: back to pending. Index order of IX_JobsHot_FetchedLease (LeaseExpiresAt,
    --    then the clustering key Id), so TOP stops early and only the rows it returns get locked.
    BEGIN TRANSACTION;
    WITH c AS (
      SELECT TOP (@Limit) h.*
      FROM keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK)
      WHERE h.State = 'fetched' AND h.LeaseExpiresAt < @Now
      ORDER BY h.LeaseExpiresAt, h.Id)
    UPDATE c SET State = 'pending', LeaseId = NULL, WorkerId = NULL, FetchedAt = NULL, LeaseExpiresAt = NULL;
    SET @Released = @@ROWCOUNT;
    EXEC keel.ApplyCounters @Counters = @Counters; -- HotCounts, last
    COMMIT TRANSACTION;

    -- 2. Processing jobs without a heartbeat for longer than their queue's zombie timeout.
    --    Candidates are found first without update locks (the timeout depends on the queue, so the search cannot
    --    stop early; update-locking every processing row it reads would hold them all until commit and stall the
    --    heartbeats and completions of healthy jobs). Then exactly those rows are locked by key (READPAST: a row a
    --    worker is moving right now is left to the next sweep) and re-checked under the lock.
    DECLARE @Cand TABLE (Id bigint NOT NULL PRIMARY KEY);
    INSERT @Cand (Id)
    SELECT TOP (@Limit) h.Id
    FROM keel.JobsHot AS h
    LEFT JOIN keel.Queues AS s ON s.Name = h.Queue
    WHERE h.State = 'processing'
      AND h.HeartbeatAt < DATEADD(second, -ISNULL(s.ZombieTimeoutSeconds, 300), @Now)
    ORDER BY h.HeartbeatAt, h.Id;

    BEGIN TRANSACTION;
    DELETE FROM @Counters;
    INSERT @Z (Id, Queue, Kind)
    SELECT h.Id, h.Queue,
           CASE WHEN h.CancelRequested = 1 THEN 'c'
                WHEN ISNULL(s.ZombiePolicy, 'retry') = 'dlq' OR h.Attempts >= COALESCE(h.MaxAttempts, t.MaxAttempts, s.MaxAttempts, 5) THEN 'z'
                ELSE 'r' END
    FROM @Cand AS c
    INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK) ON h.Id = c.Id
    LEFT JOIN keel.Queues AS s ON s.Name = h.Queue
    LEFT JOIN @TypeMax AS t ON t.Type = h.Type
    WHERE h.State = 'processing'
      AND h.HeartbeatAt < DATEADD(second, -ISNULL(s.ZombieTimeoutSeconds, 300), @Now);

    -- Table order: the hot-table update first, then the Hot -> DLQ moves, then the counters once.
    IF EXISTS (SELECT 1 FROM @Z WHERE Kind = 'r')
    BEGIN
      UPDATE h
      SET State = 'pending', RunAt = @Now, LeaseId = NULL, WorkerId = NULL, FetchedAt = NULL, LeaseExpiresAt = NULL,
          HeartbeatAt = NULL,
          LastError = N'zombie: no heartbeat since ' + CONVERT(nvarchar(30), h.HeartbeatAt, 126) + N'Z',
          Logs = keel.WithAttempt(h.Logs, h.Attempts, h.WorkerId, h.StartedAt, @Now, 'zombie',
                                  N'zombie: no heartbeat since ' + CONVERT(nvarchar(30), h.HeartbeatAt, 126) + N'Z')
      OUTPUT inserted.Queue, 1 INTO @Counters (Queue, Zombie)
      FROM keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK)
      INNER JOIN @Z AS z ON z.Id = h.Id AND z.Kind = 'r'
      WHERE h.State = 'processing';
      SET @Retried = @@ROWCOUNT;
    END;
    IF EXISTS (SELECT 1 FROM @Z WHERE Kind = 'z')
    BEGIN
      DELETE FROM @DeadIds;
      INSERT @DeadIds (Id) SELECT Id FROM @Z WHERE Kind = 'z';
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 0, @FromFetched = 0, @FromProcessing = 1,
                           @Reason = 'zombie', @Error = N'zombie: heartbeat timed out', @MovedCount = @Moved OUTPUT;
      SET @Dead += @Moved;
    END;
    IF EXISTS (SELECT 1 FROM @Z WHERE Kind = 'c')
    BEGIN
      DELETE FROM @DeadIds;
      INSERT @DeadIds (Id) SELECT Id FROM @Z WHERE Kind = 'c';
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 0, @FromFetched = 0, @FromProcessing = 1,
                           @Reason = 'cancelled', @Error = N'cancelled; worker lost before it stopped',
                           @MovedCount = @Moved OUTPUT;
      SET @Dead += @Moved;
    END;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last: HotCounts, DlqCounts, StatsSummary, buckets
    DELETE FROM @Counters;
    COMMIT TRANSACTION;

    -- 3. Pending jobs past ExpiresAt: DLQ 'expired'. As in step 2, candidates first without locks (index order of
    --    IX_JobsHot_PendingExpiry), then exactly those rows locked by clustered key, READPAST, and re-checked. Taking
    --    the update locks in the covering index itself would hold that index's keys while the move then waits for
    --    the clustered row; a claimer (or Cancel) holding the clustered row and about to update that index would
    --    wait for us: a deadlock.
    DECLARE @Expiring TABLE (Id bigint NOT NULL PRIMARY KEY);
    INSERT @Expiring (Id)
    SELECT TOP (@Limit) h.Id
    FROM keel.JobsHot AS h
    WHERE h.State = 'pending' AND h.ExpiresAt IS NOT NULL AND h.ExpiresAt <= @Now
    ORDER BY h.ExpiresAt, h.Id;

    BEGIN TRANSACTION;
    DELETE FROM @DeadIds;
    INSERT @DeadIds (Id)
    SELECT h.Id
    FROM @Expiring AS e
    INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK) ON h.Id = e.Id
    WHERE h.State = 'pending' AND h.ExpiresAt IS NOT NULL AND h.ExpiresAt <= @Now;
    IF @@ROWCOUNT > 0
    BEGIN
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 1, @FromFetched = 0, @FromProcessing = 0,
                           @Reason = 'expired', @Error = N'expired before it started', @MovedCount = @Moved OUTPUT;
      SET @Expired = @Moved;
    END;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last
    DELETE FROM @Counters;
    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT @Released AS ReleasedFetched, @Retried AS Retried, @Dead AS DeadLettered, @Expired AS Expired;
END;
GO

-- Resurrect(@JobIds JSON array of ids): the DLQ -> Hot move. Attempts reset to 0, RunAt now, IdempotencyKey kept,
-- LastError = the DLQ error, Resurrected+1 per job. A job whose key is held by a hot job of its queue and type stays
-- in the DLQ (as does all but the newest of several DLQ jobs sharing one key there). Keys are locked with the per-key applocks of EnqueueMany
-- before the DLQ rows are deleted, so a concurrent enqueue of the same key cannot slip in between;
-- the DLQ rows are deleted first (DELETE ... OUTPUT INTO), so two concurrent resurrects yield one hot job.
-- Returns JobId per resurrected job, in id order.
-- Lock order: the idempotency keys' applocks (in resource-name order, before any table lock, as EnqueueMany); the
-- DLQ rows by id (the delete is driven by @Cand, clustered on Id: ascending id order, as CompleteMany explains);
-- the hot insert of exactly the deleted rows; keel.ApplyCounters once, last: HotCounts, then DlqCounts, then
-- StatsSummary. (The triggers used to write DlqCounts at the end of the delete and HotCounts at the end of the
-- insert, the reverse of every Hot -> DLQ move: a deadlock with a concurrent Fail of the same queue.)
CREATE OR ALTER PROCEDURE keel.Resurrect
  @JobIds NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  IF @JobIds IS NULL OR ISJSON(@JobIds) = 0
    THROW 50031, N'Resurrect: @JobIds must be a JSON array of job ids', 1;

  -- ScopeKey: "queue/type/key", the key's scope (V005) as EnqueueJobs builds it, for the applocks and the self-join.
  DECLARE @Cand TABLE (Id bigint NOT NULL PRIMARY KEY,
                       Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
                       Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
                       IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL,
                       ScopeKey nvarchar(786) COLLATE Latin1_General_100_BIN2 NULL,
                       Eligible bit NOT NULL DEFAULT (1),
                       Family bit NOT NULL DEFAULT (0), -- a flow's child the failure of a resurrected job dead-lettered
                       INDEX IX_Cand_Key (ScopeKey, Id)); -- the newest-of-a-key check joins @Cand to itself
  DECLARE @Moved TABLE (
    Id bigint NOT NULL PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    CreatedAt datetime2(3) NOT NULL, Error nvarchar(max) NULL, Logs nvarchar(max) NULL, OnParentFailure varchar(10) NULL);
  DECLARE @Step TABLE (
    Id bigint NOT NULL PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    CreatedAt datetime2(3) NOT NULL, Error nvarchar(max) NULL, Logs nvarchar(max) NULL, OnParentFailure varchar(10) NULL);
  DECLARE @RoundIds TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Reopen TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Held TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Parents TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @ParentsHeld TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql

  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    BEGIN TRANSACTION;

    INSERT @Cand (Id, Queue, Type, IdempotencyKey, ScopeKey)
    SELECT d.Id, d.Queue, d.Type, d.IdempotencyKey, d.Queue + N'/' + d.Type + N'/' + d.IdempotencyKey
    FROM keel.JobsDLQ AS d
    WHERE d.Id IN (SELECT TRY_CONVERT(bigint, j.[value]) FROM OPENJSON(@JobIds) AS j);

    -- Flows (V007): the children (and theirs) that a requested job's failure dead-lettered as 'parent_failed' are
    -- candidates too; they come back in later rounds, once their failed parents are out of the DLQ (below).
    WITH f AS (
      SELECT e.ChildId AS Id
      FROM @Cand AS c
      INNER JOIN keel.JobDeps AS e ON e.ParentId = c.Id AND e.ParentOutcome = 'failed'
      INNER JOIN keel.JobsDLQ AS d ON d.Id = e.ChildId AND d.Reason = 'parent_failed'
      UNION ALL
      SELECT e.ChildId
      FROM f
      INNER JOIN keel.JobDeps AS e ON e.ParentId = f.Id AND e.ParentOutcome = 'failed'
      INNER JOIN keel.JobsDLQ AS d ON d.Id = e.ChildId AND d.Reason = 'parent_failed'
    )
    INSERT @Cand (Id, Queue, Type, IdempotencyKey, ScopeKey, Family)
    SELECT d.Id, d.Queue, d.Type, d.IdempotencyKey, d.Queue + N'/' + d.Type + N'/' + d.IdempotencyKey, 1
    FROM keel.JobsDLQ AS d
    WHERE d.Id IN (SELECT f.Id FROM f) AND NOT EXISTS (SELECT 1 FROM @Cand AS c WHERE c.Id = d.Id)
    OPTION (MAXRECURSION 1000);

    -- Several DLQ rows with one key in one queue and type: only the newest may come back.
    UPDATE c SET Eligible = 0
    FROM @Cand AS c
    WHERE c.ScopeKey IS NOT NULL
      AND EXISTS (SELECT 1 FROM @Cand AS n WHERE n.ScopeKey = c.ScopeKey AND n.Id > c.Id);

    -- The same per-key applocks as EnqueueMany, in the same order, before any table lock of this transaction.
    DECLARE @Keys TABLE (Res nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
    INSERT @Keys (Res)
    SELECT DISTINCT N'keel.idem:' + CONVERT(nvarchar(64), HASHBYTES('SHA2_256', ScopeKey), 2)
    FROM @Cand WHERE Eligible = 1 AND ScopeKey IS NOT NULL;
    DECLARE @Res nvarchar(255) = (SELECT MIN(Res) FROM @Keys), @Rc int;
    WHILE @Res IS NOT NULL
    BEGIN
      EXEC @Rc = sys.sp_getapplock @Resource = @Res, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
      IF @Rc < 0 THROW 50036, N'Resurrect: could not lock an idempotency key', 1;
      SET @Res = (SELECT MIN(Res) FROM @Keys WHERE Res > @Res);
    END;

    -- A key now held by a hot job of the same queue and type keeps its DLQ job where it is.
    UPDATE c SET Eligible = 0
    FROM @Cand AS c
    WHERE c.Eligible = 1 AND c.IdempotencyKey IS NOT NULL
      AND EXISTS (SELECT 1 FROM keel.JobsHot AS h WITH (READCOMMITTEDLOCK)
                  WHERE h.Queue = c.Queue AND h.Type = c.Type AND h.IdempotencyKey = c.IdempotencyKey
                    AND h.IdempotencyKey IS NOT NULL);

    -- Round by round: the requested jobs first, then the flow children whose failed parents have all left the DLQ.
    INSERT @RoundIds (Id) SELECT c.Id FROM @Cand AS c WHERE c.Eligible = 1 AND c.Family = 0;
    WHILE EXISTS (SELECT 1 FROM @RoundIds)
    BEGIN
      DELETE FROM @Step;
      DELETE d
      OUTPUT deleted.Id, deleted.Queue, deleted.Type, deleted.Payload, deleted.Priority, deleted.MaxAttempts,
             deleted.IdempotencyKey, deleted.Tags, deleted.CreatedAt, deleted.Error, deleted.Logs, deleted.OnParentFailure
      INTO @Step (Id, Queue, Type, Payload, Priority, MaxAttempts, IdempotencyKey, Tags, CreatedAt, Error, Logs,
                  OnParentFailure)
      FROM keel.JobsDLQ AS d WITH (ROWLOCK, FORCESEEK)
      INNER JOIN @RoundIds AS c ON c.Id = d.Id;
      IF @@ROWCOUNT = 0 BREAK;

      INSERT keel.JobsHot (Id, Queue, Type, Payload, Priority, State, RunAt, Attempts, MaxAttempts, IdempotencyKey, Tags,
                           CancelRequested, LastError, CreatedAt, Logs, OnParentFailure)
      SELECT m.Id, m.Queue, m.Type, m.Payload, m.Priority, 'pending', @Now, 0, m.MaxAttempts, m.IdempotencyKey, m.Tags,
             0, m.Error, m.CreatedAt, m.Logs, m.OnParentFailure
      FROM @Step AS m;
      INSERT @Moved (Id, Queue, Type, Payload, Priority, MaxAttempts, IdempotencyKey, Tags, CreatedAt, Error, Logs,
                     OnParentFailure)
      SELECT Id, Queue, Type, Payload, Priority, MaxAttempts, IdempotencyKey, Tags, CreatedAt, Error, Logs, OnParentFailure
      FROM @Step;
      INSERT @Counters (Queue, Resurrected) SELECT m.Queue, 1 FROM @Step AS m;

      DELETE FROM @RoundIds;
      INSERT @RoundIds (Id)
      SELECT c.Id FROM @Cand AS c
      WHERE c.Family = 1 AND c.Eligible = 1 AND NOT EXISTS (SELECT 1 FROM @Moved AS m WHERE m.Id = c.Id)
        AND EXISTS (SELECT 1 FROM keel.JobDeps AS e INNER JOIN @Step AS s ON s.Id = e.ParentId
                    WHERE e.ChildId = c.Id AND e.ParentOutcome = 'failed')
        AND NOT EXISTS (SELECT 1 FROM keel.JobDeps AS e INNER JOIN keel.JobsDLQ AS pd ON pd.Id = e.ParentId
                        WHERE e.ChildId = c.Id AND e.ParentOutcome = 'failed');
    END;

    -- Flows: the waiting hot children of the revived jobs (onFailure 'run') are locked, in id order, and wait for
    -- them again; a revived job's own edges say where its parents are now (hot: open; archived: succeeded; still
    -- dead: failed, and a job the operator resurrected in spite of it runs); it waits while one is open.
    -- A parent not revived with its child but hot (retried, resurrected earlier, or never failed) gets its edge
    -- open again, so its own final move must settle the child: it is flagged HasDependents (else it would finish
    -- without reading its edges and the child would wait for ever). Its row is locked before the edges are read, so
    -- it cannot finish unseen in between: rows that are not waiting first, by id; waiting ones with the children.
    IF EXISTS (SELECT 1 FROM @Moved AS m INNER JOIN keel.JobDeps AS e ON e.ParentId = m.Id)
       OR EXISTS (SELECT 1 FROM @Moved AS m INNER JOIN keel.JobDeps AS e ON e.ChildId = m.Id)
    BEGIN
      INSERT @Parents (Id)
      SELECT DISTINCT e.ParentId FROM @Moved AS m INNER JOIN keel.JobDeps AS e ON e.ChildId = m.Id
      WHERE NOT EXISTS (SELECT 1 FROM @Moved AS x WHERE x.Id = e.ParentId);
      INSERT @ParentsHeld (Id)
      SELECT h.Id FROM @Parents AS p INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = p.Id
      WHERE h.State <> 'waiting';
      INSERT @Reopen (Id)
      SELECT DISTINCT e.ChildId FROM @Moved AS m INNER JOIN keel.JobDeps AS e ON e.ParentId = m.Id
      WHERE e.ParentOutcome = 'failed' AND NOT EXISTS (SELECT 1 FROM @Moved AS x WHERE x.Id = e.ChildId);
      -- Waiting parents are locked with the waiting children, in one id order (an edge from @Moved to one of them
      -- that failed put it in @Reopen already, so @Held's use below is unchanged).
      INSERT @Reopen (Id)
      SELECT p.Id FROM @Parents AS p
      WHERE NOT EXISTS (SELECT 1 FROM @Reopen AS r WHERE r.Id = p.Id)
        AND NOT EXISTS (SELECT 1 FROM @ParentsHeld AS ph WHERE ph.Id = p.Id);
      INSERT @Held (Id)
      SELECT h.Id FROM @Reopen AS r INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = r.Id
      WHERE h.State = 'waiting';
      UPDATE e SET ParentOutcome = NULL
      FROM @Moved AS m INNER JOIN keel.JobDeps AS e WITH (ROWLOCK) ON e.ParentId = m.Id
      WHERE e.ParentOutcome = 'failed' AND EXISTS (SELECT 1 FROM @Held AS hd WHERE hd.Id = e.ChildId);
      UPDATE e
      SET ParentOutcome = CASE WHEN EXISTS (SELECT 1 FROM keel.JobsHot AS h WHERE h.Id = e.ParentId) THEN NULL
                               WHEN EXISTS (SELECT 1 FROM keel.JobsArchive AS a WHERE a.Id = e.ParentId) THEN 'succeeded'
                               ELSE 'failed' END
      FROM @Moved AS m INNER JOIN keel.JobDeps AS e WITH (ROWLOCK) ON e.ChildId = m.Id;
      UPDATE h SET HasDependents = 1
      FROM @Parents AS p INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = p.Id
      WHERE (h.HasDependents IS NULL OR h.HasDependents = 0)
        AND EXISTS (SELECT 1 FROM keel.JobDeps AS e WHERE e.ParentId = h.Id AND e.ParentOutcome IS NULL);
      UPDATE h
      SET HasDependents = IIF(EXISTS (SELECT 1 FROM keel.JobDeps AS e WHERE e.ParentId = h.Id AND e.ParentOutcome IS NULL),
                              CONVERT(bit, 1), NULL),
          State = IIF(EXISTS (SELECT 1 FROM keel.JobDeps AS e WHERE e.ChildId = h.Id AND e.ParentOutcome IS NULL),
                      'waiting', h.State)
      FROM @Moved AS m INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = m.Id;
    END;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT m.Id AS JobId FROM @Moved AS m ORDER BY m.Id;
END;
GO

-- ResurrectByFilter(...): up to @Limit DLQ jobs matching every given filter (NULL = any), oldest failure first.
-- @DryRun = 1 (or NULL) only lists them; otherwise resurrects them through keel.Resurrect. Returns JobId rows.
CREATE OR ALTER PROCEDURE keel.ResurrectByFilter
  @Queue NVARCHAR(128),
  @Type NVARCHAR(256),
  @Reason VARCHAR(16),
  @FailedAfter DATETIME2(3),
  @FailedBefore DATETIME2(3),
  @Limit INT,
  @DryRun BIT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Limit IS NULL OR @Limit < 1
    THROW 50032, N'ResurrectByFilter: @Limit must be a positive integer', 1;

  DECLARE @Ids TABLE (Seq int IDENTITY(1, 1) PRIMARY KEY, Id bigint NOT NULL);
  INSERT @Ids (Id)
  SELECT TOP (@Limit) d.Id
  FROM keel.JobsDLQ AS d
  WHERE (@Queue IS NULL OR d.Queue = @Queue)
    AND (@Type IS NULL OR d.Type = @Type)
    AND (@Reason IS NULL OR d.Reason = @Reason)
    AND (@FailedAfter IS NULL OR d.FailedAt >= @FailedAfter)
    AND (@FailedBefore IS NULL OR d.FailedAt < @FailedBefore)
  ORDER BY d.FailedAt, d.Id
  OPTION (RECOMPILE);

  IF ISNULL(@DryRun, 1) = 1
  BEGIN
    SELECT Id AS JobId FROM @Ids ORDER BY Seq;
    RETURN;
  END;

  DECLARE @Json nvarchar(max) =
    N'[' + ISNULL((SELECT STRING_AGG(CONVERT(nvarchar(max), Id), N',') FROM @Ids), N'') + N']';
  EXEC keel.Resurrect @JobIds = @Json;
END;
GO

-- ArchiveQueues(): the queues that have archived jobs, one MIN seek each over IX_JobsArchive_QueueFinished (a skip
-- scan: as many seeks as queues, whatever the archive's size). Purge and CountJobs walk each queue's time range from
-- it, since V031 left the archive no index of FinishedAt alone. The twin of keel._archive_queues on PostgreSQL.
-- Read-only and internal: keel_executor has EXECUTE on the schema, not SELECT on it; the procedures reach it by
-- ownership chaining.
CREATE OR ALTER FUNCTION keel.ArchiveQueues()
RETURNS @Queues TABLE (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY)
AS
BEGIN
  DECLARE @Q nvarchar(128) = (SELECT MIN(a.Queue) FROM keel.JobsArchive AS a);
  WHILE @Q IS NOT NULL
  BEGIN
    INSERT @Queues (Queue) VALUES (@Q);
    SET @Q = (SELECT MIN(a.Queue) FROM keel.JobsArchive AS a WHERE a.Queue > @Q);
  END;
  RETURN;
END;
GO

-- Purge(@Target 'archive'|'dlq'|'metrics', @Queue NULL = all, @OlderThan, @BatchSize): one batch of retention,
-- oldest first; archive by FinishedAt, dlq by FailedAt, metric buckets by BucketStart. Returns Deleted.
-- Lock order: each target is one DELETE in its own autocommit transaction, READPAST (a locked row is left to the
-- next batch); the DLQ delete's trigger writes DlqCounts at its end, last. DLQ rows are locked by clustered key (see
-- there); archive rows and metric buckets have no other deleter, and the moves only insert new keys.
CREATE OR ALTER PROCEDURE keel.Purge
  @Target VARCHAR(10),
  @Queue NVARCHAR(128),
  @OlderThan DATETIME2(3),
  @BatchSize INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  SET DEADLOCK_PRIORITY LOW; -- as RescueZombies: a retention batch yields to the workers
  IF @BatchSize IS NULL OR @BatchSize < 1
    THROW 50033, N'Purge: @BatchSize must be a positive integer', 1;
  IF @OlderThan IS NULL
    THROW 50034, N'Purge: @OlderThan is required', 1;
  DECLARE @Deleted int = 0;
  DECLARE @Gone TABLE (Id bigint NOT NULL PRIMARY KEY);

  IF @Target = 'archive' AND @Queue IS NULL
  BEGIN
    -- Every queue (V031: no index of FinishedAt alone): the queues with archived jobs (ArchiveQueues), then the
    -- oldest @BatchSize of each queue's range of IX_JobsArchive_QueueFinished, merged; those rows deleted by clustered
    -- key, READPAST, re-checked, as the DLQ's below.
    DECLARE @OldArchived TABLE (Id bigint NOT NULL PRIMARY KEY);
    INSERT @OldArchived (Id)
    SELECT TOP (@BatchSize) x.Id
    FROM keel.ArchiveQueues() AS q
    CROSS APPLY (SELECT TOP (@BatchSize) a.Id, a.FinishedAt FROM keel.JobsArchive AS a
                 WHERE a.Queue = q.Queue AND a.FinishedAt < @OlderThan
                 ORDER BY a.FinishedAt) AS x
    ORDER BY x.FinishedAt;
    DELETE a
    OUTPUT deleted.Id INTO @Gone (Id)
    FROM @OldArchived AS o
    INNER JOIN keel.JobsArchive AS a WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK) ON a.Id = o.Id
    WHERE a.FinishedAt < @OlderThan;
    SET @Deleted = @@ROWCOUNT;
  END
  ELSE IF @Target = 'archive'
  BEGIN
    WITH c AS (
      SELECT TOP (@BatchSize) a.Id FROM keel.JobsArchive AS a WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK)
      WHERE a.FinishedAt < @OlderThan AND (@Queue IS NULL OR a.Queue = @Queue)
      ORDER BY a.FinishedAt)
    DELETE FROM c
    OUTPUT deleted.Id INTO @Gone (Id)
    OPTION (RECOMPILE); -- with @Queue given, seek (Queue, time) instead of scanning every queue's old rows
    SET @Deleted = @@ROWCOUNT;
  END
  ELSE IF @Target = 'dlq'
  BEGIN
    -- Candidates without locks, then exactly those rows deleted by clustered key, READPAST, re-checked. Update locks
    -- taken in the covering index (FailedAt, Id) would be held while the delete waits for a clustered row that a
    -- Resurrect holds, and that Resurrect's delete then needs the same index keys: a deadlock.
    DECLARE @Old TABLE (Id bigint NOT NULL PRIMARY KEY);
    INSERT @Old (Id)
    SELECT TOP (@BatchSize) d.Id FROM keel.JobsDLQ AS d
    WHERE d.FailedAt < @OlderThan AND (@Queue IS NULL OR d.Queue = @Queue)
    ORDER BY d.FailedAt
    OPTION (RECOMPILE); -- with @Queue given, seek (Queue, time) instead of scanning every queue's old rows
    DELETE d
    OUTPUT deleted.Id INTO @Gone (Id)
    FROM @Old AS o
    INNER JOIN keel.JobsDLQ AS d WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK) ON d.Id = o.Id
    WHERE d.FailedAt < @OlderThan;
    SET @Deleted = @@ROWCOUNT;
  END
  ELSE IF @Target = 'metrics'
  BEGIN
    WITH c AS (
      SELECT TOP (@BatchSize) b.BucketStart FROM keel.MetricBuckets AS b WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK)
      WHERE b.BucketStart < @OlderThan AND (@Queue IS NULL OR b.Queue = @Queue)
      ORDER BY b.BucketStart)
    DELETE FROM c
    OPTION (RECOMPILE); -- a plan for this call's @Queue (NULL or not)
    SET @Deleted = @@ROWCOUNT;
  END
  ELSE
    THROW 50035, N'Purge: @Target must be archive, dlq or metrics', 1;

  -- A flow's edges leave with their child (V007), by the child's index; a statement of its own, after the job rows.
  IF EXISTS (SELECT 1 FROM @Gone)
    DELETE e FROM @Gone AS g INNER JOIN keel.JobDeps AS e WITH (ROWLOCK, FORCESEEK, INDEX (IX_JobDeps_Child)) ON e.ChildId = g.Id;

  SELECT @Deleted AS Deleted;
END;
GO

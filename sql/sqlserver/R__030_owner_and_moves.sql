-- Owner-scoped transitions and the final moves (Hot -> Archive, Hot -> DLQ).
-- Owner-scoped statements match (Id, LeaseId, State); zero rows means 'lease_lost' in the result, never an error.
-- Move pattern: SET XACT_ABORT ON; one short transaction; DELETE ... OUTPUT deleted.* INTO @Moved first (the captured
-- row is authoritative); INSERT the captured rows at the destination; the counters last, once (keel.ApplyCounters:
-- HotCounts, DlqCounts, StatsSummary, MetricBuckets); COMMIT; any error rolls everything back and is re-raised.
-- Lock order: R__010_counters.sql and docs/sqlserver.md ("Lock order"). A procedure with more than one counted
-- statement creates #KeelCountDeltas before its transaction, so the triggers leave the read counters to
-- keel.ApplyCounters; a batch locks its job rows first, in ascending id order (see CompleteMany).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- WithAttempt: @Logs (a job's Logs) with one attempt entry appended, {kind: 'attempt', attempt, worker, startedAt,
-- endedAt, outcome, error (cut to 2,000 characters)}, keeping the newest 100 attempt entries (the ctx.log lines are
-- left as they are: AppendJobLog bounds them). Called by the move that ends an attempt without success (HandBack,
-- DeadLetter for a processing row, RescueZombies), in its own statement: no extra round trip, and nothing on a
-- successful completion (the archive row is that attempt). The twin of keel._with_attempt on PostgreSQL.
-- A pure function of its arguments (it reads and writes no table), so it needs no DENY: calling it changes nothing.
CREATE OR ALTER FUNCTION keel.WithAttempt(
  @Logs NVARCHAR(MAX),
  @Attempt INT,
  @WorkerId NVARCHAR(200),
  @StartedAt DATETIME2(3),
  @EndedAt DATETIME2(3),
  @Outcome VARCHAR(16),
  @Error NVARCHAR(MAX))
RETURNS NVARCHAR(MAX)
AS
BEGIN
  DECLARE @Entry nvarchar(max) = (
    SELECT 'attempt' AS kind, @Attempt AS attempt, @WorkerId AS worker,
           CONVERT(varchar(30), @StartedAt, 126) + 'Z' AS startedAt, CONVERT(varchar(30), @EndedAt, 126) + 'Z' AS endedAt,
           @Outcome AS outcome, IIF(LEN(@Error) > 2000, LEFT(@Error, 2000) + N'…', @Error) AS error
    FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES);
  DECLARE @Out nvarchar(max);
  WITH Lines AS (
    SELECT CONVERT(int, e.[key]) AS Ord, e.[value] AS Line FROM OPENJSON(ISNULL(@Logs, N'[]')) AS e
    UNION ALL
    SELECT 2147483647, @Entry
  ), Numbered AS (
    SELECT Ord, Line, IIF(JSON_VALUE(Line, '$.kind') = 'attempt', 1, 0) AS IsAttempt,
           ROW_NUMBER() OVER (PARTITION BY IIF(JSON_VALUE(Line, '$.kind') = 'attempt', 1, 0) ORDER BY Ord DESC) AS FromNewest
    FROM Lines
  )
  SELECT @Out = N'[' + ISNULL(STRING_AGG(CONVERT(nvarchar(max), Line), N',') WITHIN GROUP (ORDER BY Ord), N'') + N']'
  FROM Numbered
  WHERE IsAttempt = 0 OR FromNewest <= 100;
  RETURN @Out;
END;
GO

-- FlowSettle: a flow's children settled in the transaction of the move that finished their parents (the twin of
-- keel._parents_finished and keel._settle_children on PostgreSQL; docs/jobs.md, "Flows"). @Parents just finished
-- with @Outcome ('succeeded': archived; 'failed': dead-lettered): their open edges are marked and their waiting
-- children decided; @Children (EnqueueJobs: the batch's new children) are decided too. A child with a failed parent
-- and a policy other than 'run' goes to the DLQ ('parent_failed' or 'skipped') here, and settles its own children in
-- the next round; a child with no unfinished parent becomes pending (due now, or at its RunAt if later).
-- Lock order (sql/README.md, 3a): every waiting descendant a failure can reach (a success: the direct children) is
-- locked first, in ascending id order (the nested loop driven by @Lock, as CompleteMany explains), after the
-- caller's own rows; then the edges; counters are left to the caller: read-counter deltas go to #KeelCountDeltas,
-- and the counter rows of the children it dead-letters to #KeelFlowCounters (keel.CounterRows' columns), both
-- created by the caller. It returns no result set (so a caller run through INSERT ... EXEC may call it).
-- Internal: DENYed to keel_executor (R__900_executor_role.sql).
CREATE OR ALTER PROCEDURE keel.FlowSettle
  @Parents keel.JobIdList READONLY,
  @Outcome VARCHAR(10),
  @Children keel.JobIdList READONLY
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0
    THROW 50040, N'keel.FlowSettle must run inside the transaction of its caller', 1;
  IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NULL OR OBJECT_ID(N'tempdb..#KeelFlowCounters') IS NULL
    THROW 50041, N'keel.FlowSettle: the calling procedure must create #KeelCountDeltas and #KeelFlowCounters', 1;
  IF @Outcome IS NULL OR @Outcome NOT IN ('succeeded', 'failed')
    THROW 50042, N'keel.FlowSettle: @Outcome must be succeeded or failed', 1;

  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Round varchar(10) = @Outcome;
  DECLARE @P TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Kids TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Lock TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Held TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Settle TABLE (Id bigint NOT NULL PRIMARY KEY, Policy varchar(10) NOT NULL, IsOpen bit NOT NULL,
                         Failed bit NOT NULL);
  DECLARE @Moved TABLE (
    Id bigint NOT NULL PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    CreatedAt datetime2(3) NOT NULL, WorkerId nvarchar(200) NULL, Logs nvarchar(max) NULL,
    HasDependents bit NULL, OnParentFailure varchar(10) NULL, Policy varchar(10) NOT NULL);

  INSERT @P (Id) SELECT Id FROM @Parents;
  INSERT @Kids (Id) SELECT Id FROM @Children;

  -- Step 3a of the lock order: the children (a failure: every descendant through open edges), by id, in one pass.
  WITH d AS (
    SELECT e.ChildId AS Id FROM @P AS p INNER JOIN keel.JobDeps AS e ON e.ParentId = p.Id WHERE e.ParentOutcome IS NULL
    UNION ALL
    SELECT e.ChildId FROM d INNER JOIN keel.JobDeps AS e ON e.ParentId = d.Id
    WHERE e.ParentOutcome IS NULL AND @Outcome = 'failed'
  )
  INSERT @Lock (Id) SELECT DISTINCT Id FROM d
  OPTION (MAXRECURSION 1000);
  INSERT @Lock (Id) SELECT k.Id FROM @Kids AS k WHERE NOT EXISTS (SELECT 1 FROM @Lock AS l WHERE l.Id = k.Id);
  INSERT @Held (Id)
  SELECT h.Id FROM @Lock AS l INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = l.Id;

  WHILE 1 = 1
  BEGIN
    -- This round's children: those of the parents that finished, through the edges still open, then the edges marked.
    INSERT @Kids (Id)
    SELECT DISTINCT e.ChildId FROM @P AS p INNER JOIN keel.JobDeps AS e ON e.ParentId = p.Id
    WHERE e.ParentOutcome IS NULL AND NOT EXISTS (SELECT 1 FROM @Kids AS k WHERE k.Id = e.ChildId);
    UPDATE e SET ParentOutcome = @Round
    FROM @P AS p INNER JOIN keel.JobDeps AS e WITH (ROWLOCK, FORCESEEK) ON e.ParentId = p.Id
    WHERE e.ParentOutcome IS NULL;

    DELETE FROM @Settle;
    INSERT @Settle (Id, Policy, IsOpen, Failed)
    SELECT h.Id, ISNULL(h.OnParentFailure, 'deadLetter'),
           IIF(EXISTS (SELECT 1 FROM keel.JobDeps AS e WHERE e.ChildId = h.Id AND e.ParentOutcome IS NULL), 1, 0),
           IIF(EXISTS (SELECT 1 FROM keel.JobDeps AS e WHERE e.ChildId = h.Id AND e.ParentOutcome = 'failed'), 1, 0)
    FROM @Kids AS k
    INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = k.Id
    WHERE h.State = 'waiting';

    -- Due: no parent unfinished, and no failed one unless the policy is 'run'.
    UPDATE h SET State = 'pending', RunAt = IIF(h.RunAt > @Now, h.RunAt, @Now)
    FROM @Settle AS s
    INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = s.Id
    WHERE s.IsOpen = 0 AND NOT (s.Failed = 1 AND s.Policy <> 'run');

    -- A failed parent and a policy other than 'run': Hot -> DLQ, as keel.DeadLetter moves a row.
    DELETE FROM @Moved;
    DELETE h
    OUTPUT deleted.Id, deleted.Queue, deleted.Type, deleted.Payload, deleted.Priority, deleted.Attempts, deleted.MaxAttempts,
           deleted.IdempotencyKey, deleted.Tags, deleted.CreatedAt, deleted.WorkerId, deleted.Logs, deleted.HasDependents,
           deleted.OnParentFailure, s.Policy
    INTO @Moved (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt, WorkerId,
                 Logs, HasDependents, OnParentFailure, Policy)
    FROM @Settle AS s
    INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = s.Id
    WHERE s.Failed = 1 AND s.Policy <> 'run' AND h.State = 'waiting';
    IF @@ROWCOUNT = 0 BREAK;

    INSERT keel.JobsDLQ (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt,
                         StartedAt, FailedAt, DurationMs, Reason, Error, WorkerId, Logs, OnParentFailure)
    SELECT m.Id, m.Queue, m.Type, m.Payload, m.Priority, m.Attempts, m.MaxAttempts, m.IdempotencyKey, m.Tags, m.CreatedAt,
           NULL, @Now, NULL, IIF(m.Policy = 'skip', 'skipped', 'parent_failed'),
           N'a parent job was dead-lettered; onFailure: ' + m.Policy, m.WorkerId, m.Logs, m.OnParentFailure
    FROM @Moved AS m;
    -- 'parent_failed' counts as failed, with a bucket; 'skipped' is counted nowhere.
    INSERT #KeelFlowCounters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
    SELECT m.Queue, 1, 0, 0, 'failed', 'parent_failed', 0 FROM @Moved AS m WHERE m.Policy <> 'skip';

    -- The next round: the children of the rows just dead-lettered (already locked above).
    DELETE FROM @P;
    DELETE FROM @Kids;
    INSERT @P (Id) SELECT m.Id FROM @Moved AS m WHERE m.HasDependents = 1;
    IF NOT EXISTS (SELECT 1 FROM @P) BREAK;
    SET @Round = 'failed';
  END;
END;
GO

-- DeadLetter: the Hot -> DLQ move shared by Fail, Cancel, Retry (cancel requested) and RescueZombies. Moves the
-- JobsHot rows whose ids are in @DeadIds and which are in one of the allowed states (and, when @LeaseId is given,
-- still under that lease). Must run inside the caller's transaction; batch callers already hold the rows (UPDLOCK).
-- The delete is driven by @DeadIds (clustered on Id): rows in ascending id order (CompleteMany explains why).
-- Returns the counter rows of the moved jobs, in keel.CounterRows' columns (Queue, Failed, Cancelled, Zombie,
-- Outcome, Reason, DurationMs): Failed 1, Cancelled 1 when the reason is 'cancelled', Zombie 1 when it is 'zombie',
-- and a ('failed', reason) metric bucket with the duration since StartedAt (0 when never started). The caller takes
-- them with INSERT @Counters (...) EXEC keel.DeadLetter ... and does NOT apply them here: it runs keel.ApplyCounters
-- exactly once, after all of its moves, so that StatsSummary and MetricBuckets are always locked after the job
-- tables and in one order (a transaction that applied counters twice would lock MetricBuckets before StatsSummary
-- the second time round, and deadlock against a concurrent move). Internal: DENYed to keel_executor (R__900_executor_role.sql).
CREATE OR ALTER PROCEDURE keel.DeadLetter
  @DeadIds keel.JobIdList READONLY,
  @LeaseId UNIQUEIDENTIFIER,
  @FromPending BIT,
  @FromFetched BIT,
  @FromProcessing BIT,
  @Reason VARCHAR(16),
  @Error NVARCHAR(MAX),
  @MovedCount INT OUTPUT,
  @FromWaiting BIT = 0 -- a flow's child not yet due (Cancel)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0
    THROW 50011, N'keel.DeadLetter must run inside the transaction of its caller', 1;
  IF @Reason IS NULL OR @Reason NOT IN ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired')
    THROW 50012, N'reason must be one of exhausted, fatal, timeout, cancelled, zombie, expired', 1;
  -- Two counted statements (hot delete, DLQ insert): the caller defers the read counters to its keel.ApplyCounters.
  IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NULL
    THROW 50014, N'keel.DeadLetter: the calling procedure must create #KeelCountDeltas before its transaction', 1;

  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Moved TABLE (
    Id bigint NOT NULL PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    CreatedAt datetime2(3) NOT NULL, StartedAt datetime2(3) NULL, LastError nvarchar(max) NULL, WorkerId nvarchar(200) NULL,
    Logs nvarchar(max) NULL, State varchar(10) NOT NULL, HasDependents bit NULL, OnParentFailure varchar(10) NULL);

  DELETE h
  OUTPUT deleted.Id, deleted.Queue, deleted.Type, deleted.Payload, deleted.Priority, deleted.Attempts, deleted.MaxAttempts,
         deleted.IdempotencyKey, deleted.Tags, deleted.CreatedAt, deleted.StartedAt, deleted.LastError, deleted.WorkerId,
         deleted.Logs, deleted.State, deleted.HasDependents, deleted.OnParentFailure
  INTO @Moved (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt, StartedAt,
               LastError, WorkerId, Logs, State, HasDependents, OnParentFailure)
  FROM keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK)
  INNER JOIN @DeadIds AS d ON d.Id = h.Id
  WHERE (@LeaseId IS NULL OR h.LeaseId = @LeaseId)
    AND (   (h.State = 'pending' AND @FromPending = 1)
         OR (h.State = 'fetched' AND @FromFetched = 1)
         OR (h.State = 'processing' AND @FromProcessing = 1)
         OR (h.State = 'waiting' AND @FromWaiting = 1));
  SET @MovedCount = @@ROWCOUNT;
  IF @MovedCount = 0 RETURN;

  INSERT keel.JobsDLQ (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt,
                       StartedAt, FailedAt, DurationMs, Reason, Error, WorkerId, Logs, OnParentFailure)
  SELECT m.Id, m.Queue, m.Type, m.Payload, m.Priority, m.Attempts, m.MaxAttempts, m.IdempotencyKey, m.Tags, m.CreatedAt,
         m.StartedAt, @Now,
         CASE WHEN m.StartedAt IS NULL THEN NULL
              WHEN m.StartedAt > @Now THEN 0
              ELSE DATEDIFF_BIG(millisecond, m.StartedAt, @Now) END,
         @Reason, ISNULL(@Error, m.LastError), m.WorkerId,
         -- a running attempt ends here: recorded with the job (a pending or fetched one never started)
         CASE WHEN m.State = 'processing'
              THEN keel.WithAttempt(m.Logs, m.Attempts, m.WorkerId, m.StartedAt, @Now, @Reason, ISNULL(@Error, m.LastError))
              ELSE m.Logs END,
         m.OnParentFailure
  FROM @Moved AS m;

  -- Flows: rows others wait for (HasDependents) settle their children here, in this same transaction (FlowSettle);
  -- the counter rows of the children it dead-letters join this procedure's own. Nothing for any other row.
  DECLARE @FlowMark int = NULL;
  IF EXISTS (SELECT 1 FROM @Moved WHERE HasDependents = 1)
  BEGIN
    IF OBJECT_ID(N'tempdb..#KeelFlowCounters') IS NULL
      CREATE TABLE #KeelFlowCounters (Seq int IDENTITY(1, 1) PRIMARY KEY,
        Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Failed int NOT NULL, Cancelled int NOT NULL,
        Zombie int NOT NULL, Outcome varchar(10) NULL, Reason varchar(16) NOT NULL, DurationMs bigint NOT NULL);
    SET @FlowMark = ISNULL((SELECT MAX(Seq) FROM #KeelFlowCounters), 0);
    DECLARE @Finished keel.JobIdList, @None keel.JobIdList;
    INSERT @Finished (Id) SELECT Id FROM @Moved WHERE HasDependents = 1;
    EXEC keel.FlowSettle @Parents = @Finished, @Outcome = 'failed', @Children = @None;
  END;

  IF @FlowMark IS NULL
    SELECT m.Queue, 1, IIF(@Reason = 'cancelled', 1, 0), IIF(@Reason = 'zombie', 1, 0), 'failed', @Reason,
           CASE WHEN m.StartedAt IS NULL OR m.StartedAt > @Now THEN 0 ELSE DATEDIFF_BIG(millisecond, m.StartedAt, @Now) END
    FROM @Moved AS m;
  ELSE
  BEGIN
    -- #KeelFlowCounters is referenced only here, where it exists (deferred name resolution).
    SELECT m.Queue, 1, IIF(@Reason = 'cancelled', 1, 0), IIF(@Reason = 'zombie', 1, 0), 'failed', @Reason,
           CASE WHEN m.StartedAt IS NULL OR m.StartedAt > @Now THEN 0 ELSE DATEDIFF_BIG(millisecond, m.StartedAt, @Now) END
    FROM @Moved AS m
    UNION ALL
    SELECT f.Queue, f.Failed, f.Cancelled, f.Zombie, f.Outcome, f.Reason, f.DurationMs
    FROM #KeelFlowCounters AS f
    WHERE f.Seq > @FlowMark;
    DELETE FROM #KeelFlowCounters WHERE Seq > @FlowMark; -- counted by this result: never twice
  END;
END;
GO

-- StartMany(@Leases JSON [{jobId, leaseId}]): fetched -> processing for every job still under that lease; Attempts+1,
-- StartedAt and HeartbeatAt = now. One row per input in input order: JobId, Status ok|lease_lost, Attempt (0 if lost).
-- Lock order: one UPDATE driven by @Ids in ascending id order (CompleteMany explains the plan), the only counted
-- statement of its autocommit transaction, so the JobsHot trigger writes HotCounts last.
CREATE OR ALTER PROCEDURE keel.StartMany
  @Leases NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  IF @Leases IS NULL OR ISJSON(@Leases) = 0
    THROW 50021, N'StartMany: @Leases must be a JSON array of {jobId, leaseId}', 1;

  DECLARE @L TABLE (Ord int NOT NULL PRIMARY KEY, JobIdText nvarchar(40) NULL, JobId bigint NULL, LeaseId uniqueidentifier NULL);
  INSERT @L (Ord, JobIdText, JobId, LeaseId)
  SELECT CONVERT(int, j.[key]), v.jobId, TRY_CONVERT(bigint, v.jobId), TRY_CONVERT(uniqueidentifier, v.leaseId)
  FROM OPENJSON(@Leases) AS j
  CROSS APPLY OPENJSON(j.[value]) WITH (jobId nvarchar(40) '$.jobId', leaseId nvarchar(64) '$.leaseId') AS v;

  DECLARE @Ids TABLE (Id bigint NOT NULL, LeaseId uniqueidentifier NOT NULL, PRIMARY KEY (Id, LeaseId));
  INSERT @Ids (Id, LeaseId)
  SELECT DISTINCT JobId, LeaseId FROM @L WHERE JobId IS NOT NULL AND LeaseId IS NOT NULL;

  DECLARE @Started TABLE (Id bigint NOT NULL PRIMARY KEY, Attempts int NOT NULL);
  UPDATE h
  SET State = 'processing', Attempts = h.Attempts + 1, StartedAt = @Now, HeartbeatAt = @Now, Progress = NULL
  OUTPUT inserted.Id, inserted.Attempts INTO @Started (Id, Attempts)
  FROM @Ids AS i
  INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = i.Id AND h.LeaseId = i.LeaseId
  WHERE h.State = 'fetched';

  SELECT l.JobIdText AS JobId,
         IIF(s.Id IS NULL, 'lease_lost', 'ok') AS Status,
         ISNULL(s.Attempts, 0) AS Attempt
  FROM @L AS l
  LEFT JOIN @Started AS s ON s.Id = l.JobId
  ORDER BY l.Ord;
END;
GO

-- Heartbeat(@JobId, @LeaseId): processing under that lease -> HeartbeatAt = now. Returns Status, CancelRequested
-- and ZombieTimeoutSeconds: the queue's zombie timeout as it is now (300 without a settings row, as RescueZombies
-- reads it), so a worker learns a changed timeout at its next beat. The twin of keel.heartbeat on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.Heartbeat
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Beat TABLE (CancelRequested bit NOT NULL, Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL);
  UPDATE keel.JobsHot WITH (ROWLOCK)
  SET HeartbeatAt = SYSUTCDATETIME()
  OUTPUT inserted.CancelRequested, inserted.Queue INTO @Beat (CancelRequested, Queue)
  WHERE Id = @JobId AND LeaseId = @LeaseId AND State = 'processing';

  IF EXISTS (SELECT 1 FROM @Beat)
    SELECT 'ok' AS Status, b.CancelRequested, ISNULL(s.ZombieTimeoutSeconds, 300) AS ZombieTimeoutSeconds
    FROM @Beat AS b
    LEFT JOIN keel.Queues AS s ON s.Name = b.Queue;
  ELSE
    SELECT 'lease_lost' AS Status, CONVERT(bit, 0) AS CancelRequested, CONVERT(int, NULL) AS ZombieTimeoutSeconds;
END;
GO

-- HeartbeatMany(@Leases JSON [{jobId, leaseId}]): Heartbeat for every running attempt a worker's beat timer has due,
-- in one call (one round trip and one pool connection a tick, not one a job: docs/jobs.md, "Leases and heartbeats").
-- Fenced per row: a job still processing under its lease gets HeartbeatAt = now; one whose lease changed is left
-- alone and not returned (the caller reports it lost). One row per job that beat: JobId, LeaseId, Status 'ok',
-- CancelRequested, ZombieTimeoutSeconds (as Heartbeat). The twin of keel.heartbeat_many on PostgreSQL.
-- Lock order: one UPDATE driven by @Ids in ascending id order, as StartMany (CompleteMany explains the plan); no
-- counter moves, the queue settings are read unlocked after it, as Heartbeat reads them.
CREATE OR ALTER PROCEDURE keel.HeartbeatMany
  @Leases NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Leases IS NULL OR ISJSON(@Leases) = 0
    THROW 50029, N'HeartbeatMany: @Leases must be a JSON array of {jobId, leaseId}', 1;

  DECLARE @Ids TABLE (Id bigint NOT NULL, LeaseId uniqueidentifier NOT NULL, PRIMARY KEY (Id, LeaseId));
  INSERT @Ids (Id, LeaseId)
  SELECT DISTINCT TRY_CONVERT(bigint, v.jobId), TRY_CONVERT(uniqueidentifier, v.leaseId)
  FROM OPENJSON(@Leases) AS j
  CROSS APPLY OPENJSON(j.[value]) WITH (jobId nvarchar(40) '$.jobId', leaseId nvarchar(64) '$.leaseId') AS v
  WHERE TRY_CONVERT(bigint, v.jobId) IS NOT NULL AND TRY_CONVERT(uniqueidentifier, v.leaseId) IS NOT NULL;

  DECLARE @Beat TABLE (Id bigint NOT NULL PRIMARY KEY, LeaseId uniqueidentifier NOT NULL, CancelRequested bit NOT NULL,
                       Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL);
  UPDATE h
  SET HeartbeatAt = SYSUTCDATETIME()
  OUTPUT inserted.Id, inserted.LeaseId, inserted.CancelRequested, inserted.Queue INTO @Beat (Id, LeaseId, CancelRequested, Queue)
  FROM @Ids AS i
  INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = i.Id AND h.LeaseId = i.LeaseId
  WHERE h.State = 'processing';

  SELECT CONVERT(nvarchar(40), b.Id) AS JobId, b.LeaseId, 'ok' AS Status, b.CancelRequested,
         ISNULL(s.ZombieTimeoutSeconds, 300) AS ZombieTimeoutSeconds
  FROM @Beat AS b
  LEFT JOIN keel.Queues AS s ON s.Name = b.Queue
  ORDER BY b.Id;
END;
GO

-- ReportProgress(@JobId, @LeaseId, @Progress JSON): the running attempt's latest progress ({fraction, done, total,
-- note}, checked by the app: shared/jobs/progress.ts), under its lease. Returns Result 'ok' or 'lease_lost'. The twin
-- of keel.report_progress on PostgreSQL.
CREATE OR ALTER PROCEDURE keel.ReportProgress
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @Progress NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Progress IS NOT NULL AND ISJSON(@Progress) = 0
    THROW 50024, N'ReportProgress: @Progress must be JSON', 1;
  UPDATE keel.JobsHot WITH (ROWLOCK)
  SET Progress = @Progress
  WHERE Id = @JobId AND LeaseId = @LeaseId AND State = 'processing';
  SELECT IIF(@@ROWCOUNT = 0, 'lease_lost', 'ok') AS Result;
END;
GO

-- AppendJobLog(@JobId, @LeaseId, @Lines JSON array, @MaxLines): a running attempt's ctx.log lines ({attempt, at,
-- level, message, fields}, checked and cut by the app: shared/jobs/jobLog.ts) appended to the job's Logs under the
-- lease (fetched or processing), keeping the newest @MaxLines. Returns Result 'ok' or 'lease_lost'. The twin of
-- keel.append_job_log on PostgreSQL. Lock order: the one job row (UPDLOCK), nothing else.
CREATE OR ALTER PROCEDURE keel.AppendJobLog
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @Lines NVARCHAR(MAX),
  @MaxLines INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @MaxLines IS NULL OR @MaxLines < 1
    THROW 50025, N'AppendJobLog: @MaxLines must be a positive integer', 1;
  IF @Lines IS NULL OR ISJSON(@Lines) = 0 OR LEFT(LTRIM(@Lines), 1) <> N'['
    THROW 50026, N'AppendJobLog: @Lines must be a JSON array', 1;
  DECLARE @Existing nvarchar(max), @Found int, @Merged nvarchar(max);
  BEGIN TRANSACTION;
  SELECT @Existing = h.Logs
  FROM keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK)
  WHERE h.Id = @JobId AND h.LeaseId = @LeaseId AND h.State IN ('fetched', 'processing');
  SET @Found = @@ROWCOUNT;
  IF @Found = 0
  BEGIN
    COMMIT TRANSACTION;
    SELECT 'lease_lost' AS Result;
    RETURN;
  END;
  -- Old lines first, then the new ones, each in array order; the newest @MaxLines kept.
  WITH Lines AS (
    SELECT 0 AS Part, CONVERT(int, e.[key]) AS Ord, e.[value] AS Line FROM OPENJSON(ISNULL(@Existing, N'[]')) AS e
    UNION ALL
    SELECT 1, CONVERT(int, n.[key]), n.[value] FROM OPENJSON(@Lines) AS n
  ), Numbered AS (
    -- Recorded attempts (keel.WithAttempt) are bounded on their own: log lines never push them out.
    SELECT Part, Ord, Line, IIF(JSON_VALUE(Line, '$.kind') = 'attempt', 1, 0) AS IsAttempt,
           ROW_NUMBER() OVER (PARTITION BY IIF(JSON_VALUE(Line, '$.kind') = 'attempt', 1, 0)
                              ORDER BY Part DESC, Ord DESC) AS FromNewest
    FROM Lines
  )
  SELECT @Merged = N'[' + ISNULL(STRING_AGG(CONVERT(nvarchar(max), Line), N',') WITHIN GROUP (ORDER BY Part, Ord), N'') + N']'
  FROM Numbered
  WHERE FromNewest <= IIF(IsAttempt = 1, 100, @MaxLines);
  UPDATE keel.JobsHot WITH (ROWLOCK) SET Logs = @Merged WHERE Id = @JobId;
  COMMIT TRANSACTION;
  SELECT 'ok' AS Result;
END;
GO

-- Release(@JobId, @LeaseId): fetched under that lease -> pending, lease cleared, no attempt used. Returns Status.
CREATE OR ALTER PROCEDURE keel.Release
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  UPDATE keel.JobsHot WITH (ROWLOCK)
  SET State = 'pending', LeaseId = NULL, WorkerId = NULL, FetchedAt = NULL, LeaseExpiresAt = NULL
  WHERE Id = @JobId AND LeaseId = @LeaseId AND State = 'fetched';
  SELECT IIF(@@ROWCOUNT = 1, 'ok', 'lease_lost') AS Status;
END;
GO

-- CompleteMany(@Leases JSON [{jobId, leaseId}]): the Hot -> Archive move for every job still processing under its
-- lease; Succeeded+1 and a ('succeeded', '') metric bucket per job. A job whose cancel was requested goes to the DLQ
-- as 'cancelled' instead (Status 'cancelled'). One row per input in input order: JobId, Status.
--
-- Lock order: (2) the job rows, locked first by one SELECT in ascending id order; (3) the hot deletes and the
-- archive / DLQ inserts of exactly those rows; (4) keel.ApplyCounters once. Why the SELECT locks in id order:
-- it reads @Ids (clustered on Id, LeaseId) and JobsHot WITH FORCESEEK, whose only seekable predicate is the join on
-- Id, so the plan is a nested loop with @Ids as its outer input; it inserts into a table variable, so the plan is
-- serial; and @Ids is read in key order (an unordered scan in allocation order is only considered above 64 pages,
-- and 10,000 (id, lease) pairs are about 45). Each JobsHot row is therefore U-locked in ascending id order and
-- kept until commit (UPDLOCK). The ORDER BY of a set-based UPDATE/DELETE would not do this: SQL Server does not
-- promise an order in which a DML statement visits its rows. Two batches sharing rows (a lease lost to another
-- worker in between) thus wait for each other in one direction only.
CREATE OR ALTER PROCEDURE keel.CompleteMany
  @Leases NVARCHAR(MAX),
  @Results NVARCHAR(MAX) = NULL
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  IF @Leases IS NULL OR ISJSON(@Leases) = 0
    THROW 50022, N'CompleteMany: @Leases must be a JSON array of {jobId, leaseId}', 1;

  DECLARE @L TABLE (Ord int NOT NULL PRIMARY KEY, JobIdText nvarchar(40) NULL, JobId bigint NULL, LeaseId uniqueidentifier NULL);
  INSERT @L (Ord, JobIdText, JobId, LeaseId)
  SELECT CONVERT(int, j.[key]), v.jobId, TRY_CONVERT(bigint, v.jobId), TRY_CONVERT(uniqueidentifier, v.leaseId)
  FROM OPENJSON(@Leases) AS j
  CROSS APPLY OPENJSON(j.[value]) WITH (jobId nvarchar(40) '$.jobId', leaseId nvarchar(64) '$.leaseId') AS v;

  DECLARE @Ids TABLE (Id bigint NOT NULL, LeaseId uniqueidentifier NOT NULL, PRIMARY KEY (Id, LeaseId));
  INSERT @Ids (Id, LeaseId)
  SELECT DISTINCT JobId, LeaseId FROM @L WHERE JobId IS NOT NULL AND LeaseId IS NOT NULL;

  -- @Results: NULL, or a JSON object of the handlers' results by job id ({"123": <value>}); a job absent from it
  -- archives with Result NULL. Read before the transaction, like @Leases.
  IF @Results IS NOT NULL AND ISJSON(@Results) = 0
    THROW 50023, N'CompleteMany: @Results must be a JSON object of results by job id', 1;
  DECLARE @R TABLE (Id bigint NOT NULL PRIMARY KEY, Result nvarchar(max) NOT NULL);
  IF @Results IS NOT NULL
    INSERT @R (Id, Result)
    SELECT TRY_CONVERT(bigint, r.[key]), r.[value]
    FROM OPENJSON(@Results) AS r
    WHERE TRY_CONVERT(bigint, r.[key]) IS NOT NULL AND r.[type] <> 0; -- type 0: a JSON null, stored as NULL

  DECLARE @Locked TABLE (Id bigint NOT NULL PRIMARY KEY, CancelRequested bit NOT NULL);
  DECLARE @Moved TABLE (
    Id bigint NOT NULL PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    CreatedAt datetime2(3) NOT NULL, StartedAt datetime2(3) NULL, WorkerId nvarchar(200) NULL, Logs nvarchar(max) NULL,
    HasDependents bit NULL);
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @DeadIds keel.JobIdList;
  DECLARE @Finished keel.JobIdList, @None keel.JobIdList;
  DECLARE @Cancelled TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Dead int = 0, @Archived int = 0;

  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    BEGIN TRANSACTION;

    -- Every job still processing under its lease, locked in ascending id order (see above) until commit, so the
    -- decision below and the moves see the same rows.
    INSERT @Locked (Id, CancelRequested)
    SELECT h.Id, h.CancelRequested
    FROM @Ids AS i
    INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = i.Id AND h.LeaseId = i.LeaseId
    WHERE h.State = 'processing';

    -- A job whose cancel was requested while it ran goes to the DLQ as 'cancelled' even when its handler finished
    -- first: the operator was told 'cancel_requested', and that is how such a job ends (as with Retry).
    INSERT @Cancelled (Id) SELECT Id FROM @Locked WHERE CancelRequested = 1;

    DELETE h
    OUTPUT deleted.Id, deleted.Queue, deleted.Type, deleted.Payload, deleted.Priority, deleted.Attempts,
           deleted.MaxAttempts, deleted.IdempotencyKey, deleted.Tags, deleted.CreatedAt, deleted.StartedAt, deleted.WorkerId,
           deleted.Logs, deleted.HasDependents
    INTO @Moved (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt, StartedAt,
                 WorkerId, Logs, HasDependents)
    FROM @Locked AS k
    INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = k.Id
    WHERE k.CancelRequested = 0 AND h.State = 'processing';
    SET @Archived = @@ROWCOUNT;

    IF @Archived > 0
    BEGIN
      INSERT keel.JobsArchive (Id, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, CreatedAt,
                               StartedAt, FinishedAt, DurationMs, WorkerId, Result, Logs)
      SELECT m.Id, m.Queue, m.Type, m.Payload, m.Priority, m.Attempts, m.MaxAttempts, m.IdempotencyKey, m.Tags,
             m.CreatedAt, m.StartedAt, @Now,
             CASE WHEN m.StartedAt IS NULL OR m.StartedAt > @Now THEN 0 ELSE DATEDIFF_BIG(millisecond, m.StartedAt, @Now) END,
             m.WorkerId, r.Result, m.Logs
      FROM @Moved AS m
      LEFT JOIN @R AS r ON r.Id = m.Id;

      INSERT @Counters (Queue, Succeeded, Outcome, Reason, DurationMs)
      SELECT m.Queue, 1, 'succeeded', '',
             CASE WHEN m.StartedAt IS NULL OR m.StartedAt > @Now THEN 0 ELSE DATEDIFF_BIG(millisecond, m.StartedAt, @Now) END
      FROM @Moved AS m;
    END;
    IF EXISTS (SELECT 1 FROM @Cancelled)
    BEGIN
      INSERT @DeadIds (Id) SELECT Id FROM @Cancelled;
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 0, @FromFetched = 0, @FromProcessing = 1,
                           @Reason = 'cancelled',
                           @Error = N'cancel requested while running; the handler finished before it saw the request',
                           @MovedCount = @Dead OUTPUT;
    END;
    -- Flows: jobs others wait for settle their children in this transaction (FlowSettle). Only flagged rows.
    IF EXISTS (SELECT 1 FROM @Moved WHERE HasDependents = 1)
    BEGIN
      CREATE TABLE #KeelFlowCounters (Seq int IDENTITY(1, 1) PRIMARY KEY,
        Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Failed int NOT NULL, Cancelled int NOT NULL,
        Zombie int NOT NULL, Outcome varchar(10) NULL, Reason varchar(16) NOT NULL, DurationMs bigint NOT NULL);
      INSERT @Finished (Id) SELECT Id FROM @Moved WHERE HasDependents = 1;
      EXEC keel.FlowSettle @Parents = @Finished, @Outcome = 'succeeded', @Children = @None;
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      SELECT Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs FROM #KeelFlowCounters;
    END;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, after every move: HotCounts, DlqCounts, StatsSummary, buckets

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT l.JobIdText AS JobId,
         CASE WHEN m.Id IS NOT NULL THEN 'ok' WHEN c.Id IS NOT NULL THEN 'cancelled' ELSE 'lease_lost' END AS Status
  FROM @L AS l
  LEFT JOIN @Moved AS m ON m.Id = l.JobId
  LEFT JOIN @Cancelled AS c ON c.Id = l.JobId
  ORDER BY l.Ord;
END;
GO

-- HandBack: the body Retry and Interrupt share. Processing under that lease -> pending at @RunAt (now when NULL),
-- lease cleared, LastError = @Error. A retry counts Retried+1 (the attempt was already counted by Start); an
-- interruption (@Interrupted = 1) gives the attempt back instead. A job whose cancel was requested goes to the DLQ
-- as 'cancelled': the operator's cancel wins over the handler's retry. @Status: 'ok', 'cancelled' or 'lease_lost'.
-- Lock order: the job row (UPDLOCK); the hot update, or the Hot -> DLQ move; keel.ApplyCounters once, last.
CREATE OR ALTER PROCEDURE keel.HandBack
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @RunAt DATETIME2(3),
  @Error NVARCHAR(MAX),
  @Interrupted BIT,
  @Status VARCHAR(10) OUTPUT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Queue nvarchar(128), @CancelRequested bit, @Moved int;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @DeadIds keel.JobIdList;
  SET @Status = 'lease_lost';

  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    BEGIN TRANSACTION;

    SELECT @Queue = h.Queue, @CancelRequested = h.CancelRequested
    FROM keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK)
    WHERE h.Id = @JobId AND h.LeaseId = @LeaseId AND h.State = 'processing';

    IF @Queue IS NOT NULL AND @CancelRequested = 1
    BEGIN
      INSERT @DeadIds (Id) VALUES (@JobId);
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = @LeaseId, @FromPending = 0, @FromFetched = 0, @FromProcessing = 1,
                           @Reason = 'cancelled', @Error = @Error, @MovedCount = @Moved OUTPUT;
      -- Not 'ok': the worker reports where the job went (as CompleteMany's answer does).
      IF @Moved = 1 SET @Status = 'cancelled';
    END
    ELSE IF @Queue IS NOT NULL
    BEGIN
      UPDATE keel.JobsHot WITH (ROWLOCK)
      SET State = 'pending', RunAt = ISNULL(@RunAt, @Now),
          Attempts = IIF(@Interrupted = 1 AND Attempts > 0, Attempts - 1, Attempts), LeaseId = NULL,
          WorkerId = NULL, FetchedAt = NULL, LeaseExpiresAt = NULL, HeartbeatAt = NULL, LastError = @Error,
          -- the attempt that ends here, recorded with the job (SET reads the row as it was before this update)
          Logs = keel.WithAttempt(Logs, Attempts, WorkerId, StartedAt, @Now,
                                  IIF(@Interrupted = 1, 'interrupted', 'retried'), @Error)
      WHERE Id = @JobId AND LeaseId = @LeaseId AND State = 'processing';
      IF @@ROWCOUNT = 1
      BEGIN
        IF @Interrupted = 0 INSERT @Counters (Queue, Retried) VALUES (@Queue, 1);
        SET @Status = 'ok';
      END;
    END;
    -- Once, last, on every path: an interruption still changes HotCounts (processing -> pending).
    EXEC keel.ApplyCounters @Counters = @Counters;

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;
END;
GO

-- Retry(@JobId, @LeaseId, @RunAt, @Error, @DelayMs): processing under that lease -> pending at @RunAt, or @DelayMs
-- after now (the processor's backoff, by this server's clock: the one every claim's due test reads, so a worker's
-- skewed clock cannot cut the backoff short), or now when neither is given; Retried+1, or the DLQ as 'cancelled'
-- after a cancel request (HandBack). Returns Status. @DelayMs is at most ten years (the store checks it), so its
-- seconds fit DATEADD's int.
CREATE OR ALTER PROCEDURE keel.Retry
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @RunAt DATETIME2(3),
  @Error NVARCHAR(MAX),
  @DelayMs BIGINT = NULL
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Status varchar(10);
  DECLARE @At datetime2(3) = @RunAt;
  IF @At IS NULL AND @DelayMs IS NOT NULL
    SET @At = DATEADD(millisecond, CONVERT(int, @DelayMs % 1000),
                      DATEADD(second, CONVERT(int, @DelayMs / 1000), SYSUTCDATETIME()));
  EXEC keel.HandBack @JobId = @JobId, @LeaseId = @LeaseId, @RunAt = @At, @Error = @Error, @Interrupted = 0,
                     @Status = @Status OUTPUT;
  SELECT @Status AS Status;
END;
GO

-- Interrupt(@JobId, @LeaseId, @Error): a running job handed back by its worker's graceful shutdown. Processing under
-- that lease -> pending now, and the attempt Start counted is given back (Attempts - 1, never below 0): the handler
-- did not fail (a crash, found by RescueZombies, still uses it). Not a retry: Retried is not counted. A job whose
-- cancel was requested goes to the DLQ as 'cancelled' instead, as with Retry (HandBack). Returns Status.
CREATE OR ALTER PROCEDURE keel.Interrupt
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @Error NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Status varchar(10);
  EXEC keel.HandBack @JobId = @JobId, @LeaseId = @LeaseId, @RunAt = NULL, @Error = @Error, @Interrupted = 1,
                     @Status = @Status OUTPUT;
  SELECT @Status AS Status;
END;
GO

-- Fail(@JobId, @LeaseId, @Reason, @Error): fetched or processing under that lease -> DLQ with the reason, or as
-- 'cancelled' (Status 'cancelled') when its cancel was requested: such a job always ends so (docs/jobs.md, step 4).
-- Lock order: the job row (UPDLOCK, then the delete); the DLQ insert; keel.ApplyCounters once, last.
CREATE OR ALTER PROCEDURE keel.Fail
  @JobId BIGINT,
  @LeaseId UNIQUEIDENTIFIER,
  @Reason VARCHAR(16),
  @Error NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Reason IS NULL OR @Reason NOT IN ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired')
    THROW 50012, N'reason must be one of exhausted, fatal, timeout, cancelled, zombie, expired', 1;
  DECLARE @Moved int = 0;
  DECLARE @CancelRequested bit = 0;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @DeadIds keel.JobIdList;

  IF @LeaseId IS NOT NULL AND @JobId IS NOT NULL
  BEGIN
    INSERT @DeadIds (Id) VALUES (@JobId);
    -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
    CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
      Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));
    BEGIN TRY
      BEGIN TRANSACTION;
      SELECT @CancelRequested = h.CancelRequested
      FROM keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK)
      WHERE h.Id = @JobId AND h.LeaseId = @LeaseId AND h.State IN ('fetched', 'processing');
      IF @CancelRequested = 1 AND @Reason <> 'cancelled' SET @Reason = 'cancelled';
      ELSE SET @CancelRequested = 0; -- the answer says 'cancelled' only where the reason was changed
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = @LeaseId, @FromPending = 0, @FromFetched = 1, @FromProcessing = 1,
                           @Reason = @Reason, @Error = @Error, @MovedCount = @Moved OUTPUT;
      EXEC keel.ApplyCounters @Counters = @Counters; -- once, last
      COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
      IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
      THROW;
    END CATCH;
  END;

  SELECT IIF(@Moved = 1, IIF(@CancelRequested = 1, 'cancelled', 'ok'), 'lease_lost') AS Status;
END;
GO

-- Cancel(@JobId): pending, fetched or waiting -> DLQ 'cancelled' at once ('cancelled'); processing -> CancelRequested = 1
-- ('cancel_requested'; the next heartbeat tells the handler); not in the hot table -> 'not_found'.
-- The row is locked first, so the decision and the action see the same state.
-- Lock order: the job row (UPDLOCK); the flag update or the Hot -> DLQ move; keel.ApplyCounters once, last.
CREATE OR ALTER PROCEDURE keel.Cancel
  @JobId BIGINT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @State varchar(10), @Status varchar(20) = 'not_found', @Moved int;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @DeadIds keel.JobIdList;
  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    BEGIN TRANSACTION;

    SELECT @State = h.State FROM keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK) WHERE h.Id = @JobId;

    IF @State = 'processing'
    BEGIN
      UPDATE keel.JobsHot WITH (ROWLOCK) SET CancelRequested = 1 WHERE Id = @JobId;
      SET @Status = 'cancel_requested';
    END
    ELSE IF @State IN ('pending', 'fetched', 'waiting')
    BEGIN
      INSERT @DeadIds (Id) VALUES (@JobId);
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 1, @FromFetched = 1, @FromProcessing = 0,
                           @Reason = 'cancelled', @Error = N'cancelled by operator', @MovedCount = @Moved OUTPUT,
                           @FromWaiting = 1;
      IF @Moved > 0 SET @Status = 'cancelled';
    END;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT @Status AS Status;
END;
GO

-- CancelMany(@JobIds JSON [id, ...]): Cancel for many jobs in one transaction (the ops API's cancel by selection sends
-- its ids in chunks): one row per distinct id, ascending: JobId, Status cancelled|cancel_requested|not_found, as Cancel
-- answers. The twin of keel.cancel_many on PostgreSQL. Lock order (sql/README.md): the named rows that are not
-- waiting, U-locked in ascending id order (the nested loop driven by @Ids, as CompleteMany explains); then, in one id
-- order, the named waiting rows and every waiting descendant of the rows to be dead-lettered (a failure's whole
-- cascade at once, as FlowSettle takes it; FlowSettle then finds them held); then one keel.DeadLetter for all of them,
-- and keel.ApplyCounters once, last. Jobs in no flow read no edge.
CREATE OR ALTER PROCEDURE keel.CancelMany
  @JobIds NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @JobIds IS NULL OR ISJSON(@JobIds) = 0
    THROW 50032, N'CancelMany: @JobIds must be a JSON array of job ids', 1;

  DECLARE @Ids TABLE (Id bigint NOT NULL PRIMARY KEY);
  INSERT @Ids (Id)
  SELECT DISTINCT TRY_CONVERT(bigint, j.[value]) FROM OPENJSON(@JobIds) AS j
  WHERE TRY_CONVERT(bigint, j.[value]) IS NOT NULL;

  DECLARE @Waiting TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @First TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Roots TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Lock TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Held TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Running TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @DeadIds keel.JobIdList;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql
  DECLARE @Moved int;

  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql).
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));

  BEGIN TRY
    BEGIN TRANSACTION;

    -- Which named rows wait (read without a lock: one released in between is locked with the waiting ones below).
    INSERT @Waiting (Id)
    SELECT h.Id FROM @Ids AS i INNER JOIN keel.JobsHot AS h WITH (FORCESEEK) ON h.Id = i.Id WHERE h.State = 'waiting';
    INSERT @First (Id) SELECT i.Id FROM @Ids AS i WHERE NOT EXISTS (SELECT 1 FROM @Waiting AS w WHERE w.Id = i.Id);

    -- Step 3: the named rows that are not waiting, in ascending id order, until commit.
    INSERT @Held (Id)
    SELECT h.Id FROM @First AS f INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = f.Id;

    -- Step 3a: the named waiting rows and the waiting descendants of the rows to be dead-lettered, by id, in one pass.
    INSERT @Roots (Id)
    SELECT h.Id FROM @Ids AS i INNER JOIN keel.JobsHot AS h WITH (FORCESEEK) ON h.Id = i.Id
    WHERE h.State IN ('pending', 'fetched', 'waiting') AND h.HasDependents = 1;
    IF EXISTS (SELECT 1 FROM @Roots)
    BEGIN
      WITH d AS (
        SELECT e.ChildId AS Id FROM @Roots AS r INNER JOIN keel.JobDeps AS e ON e.ParentId = r.Id WHERE e.ParentOutcome IS NULL
        UNION ALL
        SELECT e.ChildId FROM d INNER JOIN keel.JobDeps AS e ON e.ParentId = d.Id WHERE e.ParentOutcome IS NULL
      )
      INSERT @Lock (Id) SELECT DISTINCT d.Id FROM d WHERE NOT EXISTS (SELECT 1 FROM @Held AS x WHERE x.Id = d.Id)
      OPTION (MAXRECURSION 1000);
    END;
    INSERT @Lock (Id)
    SELECT w.Id FROM @Waiting AS w WHERE NOT EXISTS (SELECT 1 FROM @Lock AS l WHERE l.Id = w.Id);
    INSERT @Held (Id)
    SELECT h.Id FROM @Lock AS l INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = l.Id
    WHERE NOT EXISTS (SELECT 1 FROM @Held AS x WHERE x.Id = l.Id);

    -- Every named row still hot is held now: its state stays as read here until commit.
    INSERT @Running (Id)
    SELECT h.Id FROM @Ids AS i INNER JOIN keel.JobsHot AS h WITH (FORCESEEK) ON h.Id = i.Id WHERE h.State = 'processing';
    INSERT @DeadIds (Id)
    SELECT h.Id FROM @Ids AS i INNER JOIN keel.JobsHot AS h WITH (FORCESEEK) ON h.Id = i.Id
    WHERE h.State IN ('pending', 'fetched', 'waiting');

    IF EXISTS (SELECT 1 FROM @Running)
      UPDATE h SET CancelRequested = 1
      FROM @Running AS r INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = r.Id;
    IF EXISTS (SELECT 1 FROM @DeadIds)
      INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
      EXEC keel.DeadLetter @DeadIds = @DeadIds, @LeaseId = NULL, @FromPending = 1, @FromFetched = 1, @FromProcessing = 0,
                           @Reason = 'cancelled', @Error = N'cancelled by operator', @MovedCount = @Moved OUTPUT,
                           @FromWaiting = 1;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT i.Id AS JobId,
         CASE WHEN EXISTS (SELECT 1 FROM @DeadIds AS d WHERE d.Id = i.Id) THEN 'cancelled'
              WHEN EXISTS (SELECT 1 FROM @Running AS r WHERE r.Id = i.Id) THEN 'cancel_requested'
              ELSE 'not_found' END AS Status
  FROM @Ids AS i
  ORDER BY i.Id;
END;
GO

-- Enqueue and claims.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- EnqueueJobs(@Jobs, @Scheduler): the enqueue behind keel.EnqueueMany (@Scheduler = 0) and keel.FireSchedule (1:
-- idempotency keys starting "schedule:" allowed; EnqueueMany refuses them with 50026). Internal (DENY, R__900).
-- @Jobs is a JSON array of {queue, type, payload, priority, runAt, delayMs, tags, idempotencyKey, maxAttempts,
-- expiresAt} (runAt/expiresAt ISO 8601, 'Z' or an offset). Returns one row per input in input order: Ord, JobId,
-- Duplicate (1 = a hot job of the same queue and type holds the idempotency key, with the same payload text; JobId
-- is that job's; a key repeated inside one batch yields the first occurrence's job). A key held with another payload
-- refuses the whole batch with error 50025, its message ending in a JSON object naming the job (index, queue, type,
-- idempotencyKey); a queue, type or key longer than its column with 50046. Keys are unique per (Queue, Type,
-- IdempotencyKey) (V005) and serialised by per-key applocks taken in one global order (see below), so concurrent
-- batches sharing keys never deadlock and never retry.
-- A batch with flows (any job with `after` or `onFailure`) is handed to keel.EnqueueFlowJobs, which runs this
-- procedure for the inserts (@Linking = 1) and then links the flow in the same transaction; a scheduled job cannot
-- wait for others (50028).
CREATE OR ALTER PROCEDURE keel.EnqueueJobs
  @Jobs NVARCHAR(MAX),
  @Scheduler BIT,
  @Linking BIT = 0
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();

  IF @Jobs IS NULL OR ISJSON(@Jobs) = 0 OR LEFT(LTRIM(@Jobs), 1) <> N'['
    THROW 50020, N'EnqueueMany: @Jobs must be a JSON array', 1;

  DECLARE @In TABLE (
    Ord            int NOT NULL PRIMARY KEY,
    -- Queue, Type and IdempotencyKey one character wider than their columns (128, 256, 400): OPENJSON cuts a longer
    -- value to the declared length without an error, and two different long keys cut alike would be one job.
    -- The check after the read refuses them, naming the job and field.
    Queue          nvarchar(129) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Type           nvarchar(257) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload        nvarchar(max) NOT NULL,
    Priority       int NOT NULL,
    RunAt          datetime2(3) NOT NULL,
    MaxAttempts    int NULL,
    IdempotencyKey nvarchar(401) COLLATE Latin1_General_100_BIN2 NULL,
    -- The key's scope, "queue/type/key" ('/' is in no queue or type name): the one column the self-joins match on.
    ScopeKey       nvarchar(789) COLLATE Latin1_General_100_BIN2 NULL,
    Tags           nvarchar(max) NOT NULL,
    ExpiresAt      datetime2(3) NULL,
    Flow           bit NOT NULL DEFAULT (0), -- it has `after` or `onFailure` (keel.EnqueueFlowJobs)
    Id             bigint NULL,
    Duplicate      bit NOT NULL DEFAULT (0),
    Clash          bit NOT NULL DEFAULT (0), -- the key is held with another payload
    Insert_        bit NOT NULL DEFAULT (0),
    -- The statements below join @In to itself on the key, and the Queues loop looks for each queue in it. A table
    -- variable has no statistics and its plan is cached with the row count of the call that compiled it (one job,
    -- often): without these indexes a 20,000-job batch could run those joins as a full scan of @In per row.
    INDEX IX_In_Key (ScopeKey, Ord),
    INDEX IX_In_Queue (Queue));

  INSERT @In (Ord, Queue, Type, Payload, Priority, RunAt, MaxAttempts, IdempotencyKey, Tags, ExpiresAt, Flow)
  SELECT CONVERT(int, j.[key]),
         v.queue,
         v.type,
         -- payload is any JSON value: rebuild its JSON text from OPENJSON's value and type.
         ISNULL((SELECT CASE p.[type]
                          WHEN 0 THEN N'null'
                          WHEN 1 THEN N'"' + STRING_ESCAPE(p.[value], 'json') + N'"'
                          ELSE p.[value] END
                 FROM OPENJSON(j.[value]) AS p
                 WHERE p.[key] = N'payload'), N'null'),
         ISNULL(v.priority, 0),
         CASE WHEN v.runAt IS NOT NULL
              THEN CONVERT(datetime2(3), SWITCHOFFSET(CONVERT(datetimeoffset(3), v.runAt), '+00:00'))
              ELSE DATEADD(millisecond, CONVERT(int, ISNULL(v.delayMs, 0) % 1000),
                           DATEADD(second, CONVERT(int, ISNULL(v.delayMs, 0) / 1000), @Now)) END,
         v.maxAttempts,
         v.idempotencyKey,
         ISNULL(v.tags, N'[]'),
         CASE WHEN v.expiresAt IS NOT NULL
              THEN CONVERT(datetime2(3), SWITCHOFFSET(CONVERT(datetimeoffset(3), v.expiresAt), '+00:00')) END,
         IIF(v.after IS NOT NULL OR v.onFailure IS NOT NULL, 1, 0)
  FROM OPENJSON(@Jobs) AS j
  CROSS APPLY OPENJSON(j.[value]) WITH (
    queue          nvarchar(129) '$.queue',
    type           nvarchar(257) '$.type',
    priority       int           '$.priority',
    runAt          nvarchar(40)  '$.runAt',
    delayMs        bigint        '$.delayMs',
    tags           nvarchar(max) '$.tags' AS JSON,
    idempotencyKey nvarchar(401) '$.idempotencyKey',
    maxAttempts    int           '$.maxAttempts',
    expiresAt      nvarchar(40)  '$.expiresAt',
    after          nvarchar(max) '$.after' AS JSON,
    onFailure      nvarchar(20)  '$.onFailure') AS v;

  IF NOT EXISTS (SELECT 1 FROM @In)
  BEGIN
    SELECT Ord, Id AS JobId, Duplicate FROM @In;
    RETURN;
  END;

  DECLARE @Msg nvarchar(2048);
  SELECT TOP (1) @Msg = CONCAT(N'jobs[', Ord, N'].',
                               CASE WHEN DATALENGTH(Queue) > 256 THEN N'queue: longer than 128 characters'
                                    WHEN DATALENGTH(Type) > 512 THEN N'type: longer than 256 characters'
                                    ELSE N'idempotencyKey: longer than 400 characters' END)
  FROM @In
  WHERE DATALENGTH(Queue) > 256 OR DATALENGTH(Type) > 512 OR DATALENGTH(IdempotencyKey) > 800
  ORDER BY Ord;
  IF @Msg IS NOT NULL THROW 50046, @Msg, 1;
  IF ISNULL(@Scheduler, 0) = 0 AND EXISTS (SELECT 1 FROM @In WHERE IdempotencyKey LIKE N'schedule:%')
  BEGIN
    SET @Msg = CONCAT(N'jobs[', (SELECT MIN(Ord) FROM @In WHERE IdempotencyKey LIKE N'schedule:%'),
                      N'].idempotencyKey: keys starting with "schedule:" are reserved for the scheduler');
    THROW 50026, @Msg, 1;
  END;
  UPDATE @In SET ScopeKey = Queue + N'/' + Type + N'/' + IdempotencyKey WHERE IdempotencyKey IS NOT NULL;

  -- Flows (V007): a schedule fires jobs, not flows; any other batch with one goes to keel.EnqueueFlowJobs.
  IF ISNULL(@Linking, 0) = 0 AND EXISTS (SELECT 1 FROM @In WHERE Flow = 1)
  BEGIN
    IF ISNULL(@Scheduler, 0) = 1
    BEGIN
      SET @Msg = CONCAT(N'jobs[', (SELECT MIN(Ord) FROM @In WHERE Flow = 1),
                        N'].after: a scheduled job cannot wait for other jobs');
      THROW 50028, @Msg, 1;
    END;
    EXEC keel.EnqueueFlowJobs @Jobs = @Jobs;
    RETURN;
  END;

  -- Queue settings rows, created on first use (default settings), in name order, before the job transaction: each
  -- in its own short autocommitted statement, or, under FireSchedule, inside its transaction (after the Schedules
  -- row). Queues rows are step 1 of the lock order (R__010_counters.sql), so either way this is safe.
  DECLARE @Q nvarchar(128) = (SELECT MIN(i.Queue) FROM @In AS i WHERE NOT EXISTS (SELECT 1 FROM keel.Queues AS q WHERE q.Name = i.Queue));
  WHILE @Q IS NOT NULL
  BEGIN
    INSERT keel.Queues (Name)
    SELECT @Q WHERE NOT EXISTS (SELECT 1 FROM keel.Queues WITH (UPDLOCK, HOLDLOCK) WHERE Name = @Q);
    SET @Q = (SELECT MIN(i.Queue) FROM @In AS i
              WHERE i.Queue > @Q AND NOT EXISTS (SELECT 1 FROM keel.Queues AS q WHERE q.Name = i.Queue));
  END;

  -- A transaction of its own, or the caller's (FireSchedule runs this through INSERT ... EXEC, where a ROLLBACK here
  -- would raise error 3915 instead of re-raising the real error, a deadlock's 1205 included; XACT_ABORT has doomed
  -- the caller's transaction, and the caller rolls it back).
  DECLARE @OwnTran bit = IIF(@@TRANCOUNT = 0, 1, 0);
  BEGIN TRY
    IF @OwnTran = 1 BEGIN TRANSACTION;

    -- Idempotency keys: one exclusive transaction-owned applock per key (named by the key's SHA-256), taken in
    -- resource-name order. Every writer of a hot idempotency key (EnqueueMany, Resurrect) takes these locks first,
    -- before touching any table, so rivals queue up in one order: no unique-key error, no deadlock, no retry loop.
    DECLARE @Keys TABLE (
      Res nvarchar(255) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
    INSERT @Keys (Res)
    SELECT DISTINCT N'keel.idem:' + CONVERT(nvarchar(64), HASHBYTES('SHA2_256', ScopeKey), 2)
    FROM @In WHERE ScopeKey IS NOT NULL;

    DECLARE @Res nvarchar(255) = (SELECT MIN(Res) FROM @Keys), @Rc int;
    WHILE @Res IS NOT NULL
    BEGIN
      EXEC @Rc = sys.sp_getapplock @Resource = @Res, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
      IF @Rc < 0 THROW 50023, N'EnqueueMany: could not lock an idempotency key', 1;
      SET @Res = (SELECT MIN(Res) FROM @Keys WHERE Res > @Res);
    END;

    -- Keys held by a hot job of the same queue and type (latest committed state: READCOMMITTEDLOCK waits for a move
    -- in flight). Another payload (compared as text, byte for byte) is a clash.
    UPDATE i SET Id = h.Id, Duplicate = 1,
                 Clash = IIF(h.Payload COLLATE Latin1_General_100_BIN2 = i.Payload COLLATE Latin1_General_100_BIN2, 0, 1)
    FROM @In AS i
    INNER JOIN keel.JobsHot AS h WITH (READCOMMITTEDLOCK)
      ON h.Queue = i.Queue AND h.Type = i.Type AND h.IdempotencyKey = i.IdempotencyKey AND h.IdempotencyKey IS NOT NULL
    WHERE i.IdempotencyKey IS NOT NULL;

    -- Rows to insert: every job without a key, and the first occurrence of each free key (the first row of each key
    -- in IX_In_Key order).
    UPDATE i SET Insert_ = 1
    FROM @In AS i
    LEFT JOIN (SELECT f.ScopeKey, MIN(f.Ord) AS FirstOrd
               FROM @In AS f WHERE f.ScopeKey IS NOT NULL GROUP BY f.ScopeKey) AS k
      ON k.ScopeKey = i.ScopeKey
    WHERE i.Duplicate = 0 AND (i.ScopeKey IS NULL OR k.FirstOrd = i.Ord);

    -- New ids in input order.
    DECLARE @NewIds TABLE (Ord int NOT NULL PRIMARY KEY, Id bigint NOT NULL);
    INSERT @NewIds (Ord, Id)
    SELECT Ord, NEXT VALUE FOR keel.JobIdSeq OVER (ORDER BY Ord)
    FROM @In
    WHERE Insert_ = 1;
    UPDATE i SET Id = n.Id FROM @In AS i INNER JOIN @NewIds AS n ON n.Ord = i.Ord;

    -- Later repeats of a key inside this batch are duplicates of its first occurrence.
    UPDATE d SET Id = f.Id, Duplicate = 1,
                 Clash = IIF(f.Payload COLLATE Latin1_General_100_BIN2 = d.Payload COLLATE Latin1_General_100_BIN2, 0, 1)
    FROM @In AS d
    INNER JOIN @In AS f ON f.ScopeKey = d.ScopeKey AND f.Insert_ = 1
    WHERE d.Insert_ = 0 AND d.Duplicate = 0 AND d.ScopeKey IS NOT NULL;

    -- A key held with another payload refuses the batch: a conflict, never a silent duplicate.
    IF EXISTS (SELECT 1 FROM @In WHERE Clash = 1)
    BEGIN
      SET @Msg = (SELECT TOP (1) CONCAT(N'jobs[', c.Ord, N'].idempotencyKey: held by a hot job of the same queue and type ',
                                        N'with another payload ',
                                        (SELECT c.Ord AS [index], c.Queue AS queue, c.Type AS type,
                                                c.IdempotencyKey AS idempotencyKey
                                         FOR JSON PATH, WITHOUT_ARRAY_WRAPPER))
                  FROM @In AS c WHERE c.Clash = 1 ORDER BY c.Ord);
      THROW 50025, @Msg, 1;
    END;

    -- The transaction's one counted statement, and its last: the JobsHot trigger writes HotCounts at its end (lock
    -- order step 4, R__010_counters.sql). New ids and keys: nothing here waits for another transaction's job row.
    INSERT keel.JobsHot (Id, Queue, Type, Payload, Priority, State, RunAt, Attempts, MaxAttempts, IdempotencyKey, Tags,
                         CancelRequested, ExpiresAt, CreatedAt)
    SELECT Id, Queue, Type, Payload, Priority, 'pending', RunAt, 0, MaxAttempts, IdempotencyKey, Tags,
           0, ExpiresAt, @Now
    FROM @In
    WHERE Insert_ = 1;

    IF @OwnTran = 1 COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @OwnTran = 1 AND @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT Ord, Id AS JobId, Duplicate FROM @In ORDER BY Ord;
END;
GO

-- EnqueueFlowJobs(@Jobs): a batch with flows (docs/jobs.md, "Flows"; the twin of keel._lock_parents and
-- keel._link_children on PostgreSQL), reached through keel.EnqueueJobs. In one transaction (its own, nested in the
-- caller's when there is one): keel.EnqueueJobs inserts the batch (@Linking = 1: idempotency keys and all, as for
-- any batch); then the parents named by id are locked, in id order (DLQ parents shared, then hot parents that are not
-- waiting, then waiting ones), and one that is in no table refuses the batch; the new children become 'waiting', the
-- edges are written, hot parents flagged (HasDependents), and keel.FlowSettle decides each child: due, waiting, or
-- dead-lettered by its policy when a parent is already dead. The rows it inserted are new and invisible to every other
-- session until commit, so locking the parents after them changes nothing another session can see, and the
-- idempotency applocks stay first (Resurrect and EnqueueJobs take them before any table lock). Counters: one
-- keel.ApplyCounters, last. Returns one row per input in input order: Ord, JobId, Duplicate (as EnqueueJobs).
-- Internal: DENYed to keel_executor (R__900_executor_role.sql).
CREATE OR ALTER PROCEDURE keel.EnqueueFlowJobs
  @Jobs NVARCHAR(MAX)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Msg nvarchar(2048);
  -- Each `after` reference: Ext a job id (it exists before the batch: ids only grow), Idx an earlier job of this
  -- batch (0-based); so no flow can hold a cycle.
  DECLARE @Docs TABLE (Ord int NOT NULL PRIMARY KEY, After nvarchar(max) NULL, OnFailure nvarchar(20) NULL);
  DECLARE @Refs TABLE (Ord int NOT NULL, K int NOT NULL, Ext bigint NULL, Idx int NULL, ParentId bigint NULL,
                       PRIMARY KEY (Ord, K));
  INSERT @Docs (Ord, After, OnFailure)
  SELECT CONVERT(int, j.[key]), v.after, v.onFailure
  FROM OPENJSON(@Jobs) AS j
  CROSS APPLY OPENJSON(j.[value]) WITH (after nvarchar(max) '$.after' AS JSON, onFailure nvarchar(20) '$.onFailure') AS v;
  SET @Msg = (SELECT TOP (1) CONCAT(N'jobs[', d.Ord, N']',
                CASE WHEN d.After IS NOT NULL AND (ISJSON(d.After) = 0 OR LEFT(LTRIM(d.After), 1) <> N'['
                                                   OR (SELECT COUNT(*) FROM OPENJSON(d.After)) > 1000)
                       THEN N'.after: must be an array of at most 1000 parents: job ids, or {"index": n} for an earlier job of this batch'
                     WHEN d.OnFailure IS NOT NULL AND d.OnFailure NOT IN (N'skip', N'run', N'deadLetter')
                       THEN N'.onFailure: must be skip, run or deadLetter'
                     ELSE N'.onFailure: applies only to a job with parents (after)' END)
              FROM @Docs AS d
              WHERE (d.After IS NOT NULL AND (ISJSON(d.After) = 0 OR LEFT(LTRIM(d.After), 1) <> N'['
                                              OR (SELECT COUNT(*) FROM OPENJSON(d.After)) > 1000))
                 OR (d.OnFailure IS NOT NULL AND (d.OnFailure NOT IN (N'skip', N'run', N'deadLetter')
                                                 OR d.After IS NULL OR (SELECT COUNT(*) FROM OPENJSON(d.After)) = 0))
              ORDER BY d.Ord);
  IF @Msg IS NOT NULL THROW 50027, @Msg, 1;
  INSERT @Refs (Ord, K, Ext, Idx)
  SELECT d.Ord, CONVERT(int, a.[key]),
         CASE WHEN a.[type] IN (1, 2) AND a.[value] NOT LIKE N'%[^0-9]%' AND LEN(a.[value]) BETWEEN 1 AND 19
                   AND LEFT(a.[value], 1) <> N'0' THEN TRY_CONVERT(bigint, a.[value]) END,
         CASE WHEN a.[type] = 5 AND (SELECT COUNT(*) FROM OPENJSON(a.[value])) = 1
                   AND JSON_VALUE(a.[value], '$.index') NOT LIKE N'%[^0-9]%'
                   AND LEN(JSON_VALUE(a.[value], '$.index')) BETWEEN 1 AND 5
              THEN TRY_CONVERT(int, JSON_VALUE(a.[value], '$.index')) END
  FROM @Docs AS d
  CROSS APPLY OPENJSON(d.After) AS a
  WHERE d.After IS NOT NULL;
  SET @Msg = (SELECT TOP (1) CONCAT(N'jobs[', r.Ord, N'].after[', r.K, N']: ',
                CASE WHEN r.Ext IS NULL AND r.Idx IS NULL
                       THEN N'must be a job id or {"index": n} naming an earlier job of this batch'
                     ELSE CONCAT(N'{"index": ', r.Idx, N'} must name an earlier job of this batch; ',
                                 N'a job cannot wait for itself or a later job') END)
              FROM @Refs AS r
              WHERE (r.Ext IS NULL AND r.Idx IS NULL) OR r.Idx >= r.Ord
              ORDER BY r.Ord, r.K);
  IF @Msg IS NOT NULL THROW 50027, @Msg, 1;

  DECLARE @Out TABLE (Ord int NOT NULL PRIMARY KEY, JobId bigint NULL, Duplicate bit NOT NULL);
  DECLARE @Ext TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @ExtWaiting TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Got TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @Edges TABLE (ParentId bigint NOT NULL, ChildId bigint NOT NULL, Position int NOT NULL,
                        PRIMARY KEY (ParentId, ChildId));
  DECLARE @Flagged TABLE (Id bigint NOT NULL PRIMARY KEY);
  DECLARE @NoParents keel.JobIdList;
  DECLARE @NewChildren keel.JobIdList;
  DECLARE @Counters keel.CounterRows; -- the one definition: V002__counter_types.sql

  -- The triggers' read-counter deltas, applied once by keel.ApplyCounters (R__010_counters.sql), and the counter
  -- rows of the children keel.FlowSettle dead-letters.
  CREATE TABLE #KeelCountDeltas (Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Pending bigint NOT NULL, Fetched bigint NOT NULL, Processing bigint NOT NULL, Dlq bigint NOT NULL,
    Waiting bigint NOT NULL DEFAULT (0));
  CREATE TABLE #KeelFlowCounters (Seq int IDENTITY(1, 1) PRIMARY KEY,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Failed int NOT NULL, Cancelled int NOT NULL,
    Zombie int NOT NULL, Outcome varchar(10) NULL, Reason varchar(16) NOT NULL, DurationMs bigint NOT NULL);

  BEGIN TRY
    BEGIN TRANSACTION;

    INSERT @Out (Ord, JobId, Duplicate)
    EXEC keel.EnqueueJobs @Jobs = @Jobs, @Scheduler = 0, @Linking = 1;

    -- The parents named by id, locked in id order: DLQ parents shared (a resurrect waits), then hot ones that are not
    -- waiting, then waiting ones (sql/README.md, Lock order 3a).
    INSERT @Ext (Id) SELECT DISTINCT Ext FROM @Refs WHERE Ext IS NOT NULL;
    INSERT @Got (Id)
    SELECT d.Id FROM @Ext AS x INNER JOIN keel.JobsDLQ AS d WITH (HOLDLOCK, ROWLOCK, FORCESEEK) ON d.Id = x.Id;
    INSERT @ExtWaiting (Id)
    SELECT h.Id FROM @Ext AS x INNER JOIN keel.JobsHot AS h WITH (READCOMMITTEDLOCK, FORCESEEK) ON h.Id = x.Id
    WHERE h.State = 'waiting';
    DELETE FROM @Got;
    INSERT @Got (Id)
    SELECT h.Id FROM @Ext AS x INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = x.Id
    WHERE NOT EXISTS (SELECT 1 FROM @ExtWaiting AS w WHERE w.Id = x.Id);
    INSERT @Got (Id)
    SELECT h.Id FROM @ExtWaiting AS x INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = x.Id
    WHERE NOT EXISTS (SELECT 1 FROM @Got AS g WHERE g.Id = x.Id);
    SET @Msg = (SELECT TOP (1) CONCAT(N'jobs[', r.Ord, N'].after[', r.K, N']: job ', r.Ext,
                                      N' does not exist; it is not hot, archived or dead-lettered')
                FROM @Refs AS r
                WHERE r.Ext IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM keel.JobsHot AS h WITH (READCOMMITTEDLOCK) WHERE h.Id = r.Ext)
                  AND NOT EXISTS (SELECT 1 FROM keel.JobsArchive AS a WITH (READCOMMITTEDLOCK) WHERE a.Id = r.Ext)
                  AND NOT EXISTS (SELECT 1 FROM keel.JobsDLQ AS d WITH (READCOMMITTEDLOCK) WHERE d.Id = r.Ext)
                ORDER BY r.Ord, r.K);
    IF @Msg IS NOT NULL THROW 50027, @Msg, 1;

    -- The edges of the new children (not of duplicates: a duplicate's edges are the held job's).
    UPDATE r SET ParentId = COALESCE(r.Ext, p.JobId)
    FROM @Refs AS r LEFT JOIN @Out AS p ON p.Ord = r.Idx;
    INSERT @Edges (ParentId, ChildId, Position)
    SELECT r.ParentId, c.JobId, MIN(r.K)
    FROM @Refs AS r INNER JOIN @Out AS c ON c.Ord = r.Ord
    WHERE c.Duplicate = 0
    GROUP BY r.ParentId, c.JobId;
    INSERT @NewChildren (Id) SELECT DISTINCT ChildId FROM @Edges;

    UPDATE h SET State = 'waiting',
                 OnParentFailure = ISNULL(CONVERT(varchar(10), d.OnFailure), 'deadLetter')
    FROM @Out AS o
    INNER JOIN @Docs AS d ON d.Ord = o.Ord
    INNER JOIN keel.JobsHot AS h WITH (ROWLOCK, FORCESEEK) ON h.Id = o.JobId
    WHERE o.Duplicate = 0 AND EXISTS (SELECT 1 FROM @NewChildren AS n WHERE n.Id = o.JobId);

    -- Hot parents flagged; a parent named by index that was a duplicate of an older hot job is the one row locked
    -- here for the first time (sql/README.md, Lock order 3a).
    UPDATE h SET HasDependents = 1
    OUTPUT inserted.Id INTO @Flagged (Id)
    FROM (SELECT DISTINCT ParentId FROM @Edges) AS p
    INNER JOIN keel.JobsHot AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK) ON h.Id = p.ParentId;
    INSERT keel.JobDeps (ParentId, ChildId, Position, ParentOutcome)
    SELECT e.ParentId, e.ChildId, e.Position,
           CASE WHEN EXISTS (SELECT 1 FROM @Flagged AS f WHERE f.Id = e.ParentId) THEN NULL
                WHEN EXISTS (SELECT 1 FROM keel.JobsArchive AS a WHERE a.Id = e.ParentId) THEN 'succeeded'
                ELSE 'failed' END
    FROM @Edges AS e;

    EXEC keel.FlowSettle @Parents = @NoParents, @Outcome = 'succeeded', @Children = @NewChildren;
    INSERT @Counters (Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs)
    SELECT Queue, Failed, Cancelled, Zombie, Outcome, Reason, DurationMs FROM #KeelFlowCounters;
    EXEC keel.ApplyCounters @Counters = @Counters; -- once, last

    COMMIT TRANSACTION;
  END TRY
  BEGIN CATCH
    IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
    THROW;
  END CATCH;

  SELECT Ord, JobId, Duplicate FROM @Out ORDER BY Ord;
END;
GO

-- EnqueueMany(@Jobs): the versioned SQL entry point for producers (docs/jobs.md, "Producing jobs from another
-- application"; the role keel_producer may execute it and nothing else): keel.EnqueueJobs without scheduler keys.
-- Safe inside the caller's transaction: it commits nothing of its own there (EnqueueJobs only begins and commits a
-- transaction when @@TRANCOUNT is 0), and an error dooms the caller's transaction (XACT_ABORT) for it to roll back.
-- Workers find the jobs at the dispatcher's next poll after the caller commits (docs/sqlserver.md).
-- A second result set, one row: StoreNow, this server's clock, so a producer's wake() delays a job's message until
-- its runAt by the store's clock, not its host's (@keel/client, transactional.ts). A datetimeoffset: the producer's
-- mssql pool is not Keel's, and tedious reads a datetime2 in that pool's useUTC setting (false: as the host's local
-- time, the clock off by the host's UTC offset), a datetimeoffset as the instant it is, whatever the setting.
CREATE OR ALTER PROCEDURE keel.EnqueueMany
  @Jobs NVARCHAR(MAX)
AS
BEGIN
  SET NOCOUNT ON;
  EXEC keel.EnqueueJobs @Jobs = @Jobs, @Scheduler = 0;
  SELECT TODATETIMEOFFSET(SYSUTCDATETIME(), 0) AS StoreNow;
END;
GO

-- TakeClaimLocks(@Queues): the pause barrier of every claim (step 0 of the lock order, docs/sqlserver.md): each named
-- queue's claim applock keel.claim:<queue> in share mode, owner Transaction, in name order (the binary collation of
-- the type), before the caller locks any table, held to its commit. UpdateQueue takes a queue's applock exclusively
-- to pause it, so a pause waits for every claim that may have read "not paused", and a claim that comes after reads
-- the pause. Runs inside the caller's transaction (ClaimNext, ClaimAndStart, ClaimById); internal (R__900).
CREATE OR ALTER PROCEDURE keel.TakeClaimLocks
  @Queues keel.QueueNameList READONLY
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0 THROW 50015, N'TakeClaimLocks: a claim lock is held to the commit of its caller''s transaction', 1;
  DECLARE @Lk nvarchar(128) = (SELECT MIN(Name) FROM @Queues), @LkRes nvarchar(255), @LkRc int, @Msg nvarchar(400);
  WHILE @Lk IS NOT NULL
  BEGIN
    SET @LkRes = N'keel.claim:' + @Lk;
    EXEC @LkRc = sys.sp_getapplock @Resource = @LkRes, @LockMode = 'Shared', @LockOwner = 'Transaction';
    IF @LkRc < 0
    BEGIN
      SET @Msg = N'could not take the claim lock of queue ' + @Lk + N': sp_getapplock returned ' + CONVERT(nvarchar(11), @LkRc);
      THROW 50015, @Msg, 1;
    END;
    SET @Lk = (SELECT MIN(Name) FROM @Queues WHERE Name > @Lk);
  END;
END;
GO

-- PickClaimable(@Queues, @Limit, @Now): the one choice of every claim over many queues (ClaimNext, ClaimAndStart,
-- PickDue): the due pending jobs of the given queues that a claim takes now, highest priority first, then RunAt, then
-- Id; paused queues give nothing; a queue with MaxConcurrency at most MaxConcurrency - (fetched + processing) jobs,
-- counted across every host, under its Queues row locked (UPDLOCK, name order, before any JobsHot row). At most
-- @Limit per queue; the caller keeps the best @Limit across queues. Returned as one result set (the caller's
-- INSERT ... EXEC): Id, Priority, RunAt, and the queue's QueueMaxAttempts and QueueZombieTimeoutSeconds (the lease a
-- started job keeps by heartbeats, as RescueZombies reads it). The picked rows stay pending and update-locked until
-- the caller's commit. Runs inside the caller's transaction, right after keel.TakeClaimLocks took @Queues' claim
-- applocks (the pause barrier): the settings read here are those committed by then. Internal (R__900).
-- One statement per queue and priority level, in index order (IX_JobsHot_PendingDue: Queue, Priority DESC, RunAt,
-- Id, ExpiresAt included): the rows arrive in claim order, TOP stops after @Take of them and only the rows picked
-- get update-locked. (One statement over several queues would need a sort, and every pending row fed into it would
-- stay update-locked until commit: concurrent claimers, reading past locked rows, would come back empty-handed while
-- jobs wait.) Each level is found by one seek, and within it only its due rows are read (Priority = @Prio AND RunAt
-- <= @Now is one range of the index): delayed jobs of a higher priority are never read, so a claim costs the same
-- however many jobs wait for their time.
CREATE OR ALTER PROCEDURE keel.PickClaimable
  @Queues keel.QueueNameList READONLY,
  @Limit INT,
  @Now datetime2(3)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @@TRANCOUNT = 0 THROW 50016, N'PickClaimable: its picks are held to the commit of its caller''s transaction', 1;
  DECLARE @Q TABLE (
    Name nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
    Limited bit NOT NULL, Slots int NULL, QueueMaxAttempts int NOT NULL, QueueZombieTimeoutSeconds int NOT NULL);
  DECLARE @Pick TABLE (Id bigint NOT NULL PRIMARY KEY, Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Priority int NOT NULL, RunAt datetime2(3) NOT NULL);

  -- The settings under the claim applocks: a pause, or a limit, that UpdateQueue committed before them is seen here
  -- (it takes the applock exclusively); queues without a settings row count as unlimited and unpaused.
  INSERT @Q (Name, Limited, QueueMaxAttempts, QueueZombieTimeoutSeconds)
  SELECT n.Name, IIF(s.MaxConcurrency IS NULL, 0, 1), ISNULL(s.MaxAttempts, 5), ISNULL(s.ZombieTimeoutSeconds, 300)
  FROM @Queues AS n
  LEFT JOIN keel.Queues AS s ON s.Name = n.Name
  WHERE ISNULL(s.Paused, 0) = 0;

  -- Limited queues: lock each settings row in name order, then count what runs now.
  DECLARE @Name nvarchar(128) = (SELECT MIN(Name) FROM @Q WHERE Limited = 1);
  DECLARE @Max int, @Paused bit, @Running int, @Take int, @Prio int;
  WHILE @Name IS NOT NULL
  BEGIN
    SELECT @Max = NULL, @Paused = NULL;
    SELECT @Max = s.MaxConcurrency, @Paused = s.Paused
    FROM keel.Queues AS s WITH (UPDLOCK, ROWLOCK)
    WHERE s.Name = @Name;
    IF @Paused = 1
      UPDATE @Q SET Slots = 0 WHERE Name = @Name;
    ELSE IF @Max IS NULL
      UPDATE @Q SET Limited = 0 WHERE Name = @Name; -- made unlimited meanwhile
    ELSE
    BEGIN
      SELECT @Running = COUNT(*) FROM keel.JobsHot AS h
      WHERE h.Queue = @Name AND h.State IN ('fetched', 'processing');
      UPDATE @Q SET Slots = IIF(@Max > @Running, @Max - @Running, 0) WHERE Name = @Name;
    END;
    SET @Name = (SELECT MIN(Name) FROM @Q WHERE Limited = 1 AND Name > @Name);
  END;

  -- Every queue with room, one at a time in name order: at most @Limit jobs each (a limited queue at most its free
  -- slots), one priority level at a time, highest first.
  UPDATE @Q SET Slots = @Limit WHERE Limited = 0;
  SET @Name = (SELECT MIN(Name) FROM @Q WHERE Slots > 0);
  WHILE @Name IS NOT NULL
  BEGIN
    SELECT @Take = IIF(Slots < @Limit, Slots, @Limit) FROM @Q WHERE Name = @Name;
    SET @Prio = (SELECT MAX(h.Priority) FROM keel.JobsHot AS h WITH (INDEX(IX_JobsHot_PendingDue))
                 WHERE h.Queue = @Name AND h.State = 'pending');
    WHILE @Prio IS NOT NULL AND @Take > 0
    BEGIN
      INSERT @Pick (Id, Queue, Priority, RunAt)
      SELECT TOP (@Take) h.Id, @Name, h.Priority, h.RunAt
      FROM keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, INDEX(IX_JobsHot_PendingDue))
      WHERE h.Queue = @Name AND h.State = 'pending' AND h.Priority = @Prio AND h.RunAt <= @Now
        AND (h.ExpiresAt IS NULL OR h.ExpiresAt > @Now)
      ORDER BY h.RunAt, h.Id;
      SET @Take = @Take - @@ROWCOUNT;

      SET @Prio = (SELECT MAX(h.Priority) FROM keel.JobsHot AS h WITH (INDEX(IX_JobsHot_PendingDue))
                   WHERE h.Queue = @Name AND h.State = 'pending' AND h.Priority < @Prio);
    END;
    SET @Name = (SELECT MIN(Name) FROM @Q WHERE Slots > 0 AND Name > @Name);
  END;

  SELECT p.Id, p.Priority, p.RunAt, q.QueueMaxAttempts, q.QueueZombieTimeoutSeconds
  FROM @Pick AS p
  INNER JOIN @Q AS q ON q.Name = p.Queue;
END;
GO

-- ClaimNext(@WorkerId, @Queues JSON array of names, @Limit, @LeaseSeconds): up to @Limit due pending jobs of the
-- given queues as keel.PickClaimable chooses them (priority, RunAt, Id; pause; MaxConcurrency counted across every
-- host; expiry), claimed by key: each gets a new lease, State 'fetched', LeaseId NEWID(), LeaseExpiresAt. Rows other
-- claimers hold are skipped (UPDLOCK, READPAST, ROWLOCK, plus READCOMMITTEDLOCK, which READPAST requires under
-- READ_COMMITTED_SNAPSHOT); paused queues give nothing. Only the best @Limit picked rows across queues are updated;
-- the other picked rows stay update-locked until commit, untouched.
-- Lock order (R__010_counters.sql): every queue's claim applock in share mode by name (the pause barrier: UpdateQueue);
-- limited queues' Queues rows by name; job rows READPAST (a claim skips a locked row, it never waits for one); one
-- UPDATE, the transaction's only counted statement and its last, so the JobsHot trigger writes HotCounts at the end.
CREATE OR ALTER PROCEDURE keel.ClaimNext
  @WorkerId NVARCHAR(200),
  @Queues NVARCHAR(MAX),
  @Limit INT,
  @LeaseSeconds INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @LeaseUntil datetime2(3) = DATEADD(second, ISNULL(@LeaseSeconds, 60), @Now);

  DECLARE @Claimed TABLE (
    Id bigint NOT NULL PRIMARY KEY, LeaseId uniqueidentifier NOT NULL,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    RunAt datetime2(3) NOT NULL, CreatedAt datetime2(3) NOT NULL, LeaseExpiresAt datetime2(3) NOT NULL);
  DECLARE @Pick TABLE (Id bigint NOT NULL PRIMARY KEY, Priority int NOT NULL, RunAt datetime2(3) NOT NULL,
    QueueMaxAttempts int NOT NULL, QueueZombieTimeoutSeconds int NOT NULL);
  DECLARE @Lock keel.QueueNameList; -- the queues whose claim applocks it takes (keel.TakeClaimLocks)

  IF @Limit IS NOT NULL AND @Limit >= 1 AND @Queues IS NOT NULL AND ISJSON(@Queues) = 1
  BEGIN
    -- Settings read without locks: a queue paused now takes no claim applock (keel.PickClaimable reads them again
    -- under the applocks).
    INSERT @Lock (Name)
    SELECT n.Name
    FROM (SELECT DISTINCT CONVERT(nvarchar(128), j.[value]) COLLATE Latin1_General_100_BIN2 AS Name
          FROM OPENJSON(@Queues) AS j WHERE j.[type] = 1) AS n
    LEFT JOIN keel.Queues AS s ON s.Name = n.Name
    WHERE ISNULL(s.Paused, 0) = 0;

    BEGIN TRY
      BEGIN TRANSACTION;

      -- The pause barrier (UpdateQueue): each queue's claim applock in share mode, in name order, before any table
      -- lock, held to the commit (keel.TakeClaimLocks). A pause takes the applock exclusively, so it waits for this
      -- claim, or this claim for the pause, and nothing it picks starts after the pause has answered.
      EXEC keel.TakeClaimLocks @Queues = @Lock;
      INSERT @Pick (Id, Priority, RunAt, QueueMaxAttempts, QueueZombieTimeoutSeconds)
      EXEC keel.PickClaimable @Queues = @Lock, @Limit = @Limit, @Now = @Now;

      -- The best @Limit picked rows across queues, claimed by key; READPAST there too, so a row an operator's cancel
      -- holds is left alone rather than waited for.
      UPDATE h
      SET State = 'fetched', LeaseId = NEWID(), WorkerId = @WorkerId, FetchedAt = @Now, LeaseExpiresAt = @LeaseUntil
      OUTPUT inserted.Id, inserted.LeaseId, inserted.Queue, inserted.Type, inserted.Payload, inserted.Priority,
             inserted.Attempts, inserted.MaxAttempts, inserted.IdempotencyKey, inserted.Tags, inserted.RunAt,
             inserted.CreatedAt, inserted.LeaseExpiresAt
      INTO @Claimed (Id, LeaseId, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, RunAt,
                     CreatedAt, LeaseExpiresAt)
      FROM keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK)
      INNER JOIN (SELECT TOP (@Limit) p.Id FROM @Pick AS p ORDER BY p.Priority DESC, p.RunAt, p.Id) AS b ON b.Id = h.Id
      WHERE h.State = 'pending';

      COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
      IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
      THROW;
    END CATCH;
  END;

  SELECT c.Id AS JobId, c.LeaseId, c.Queue, c.Type, c.Payload, c.Priority, c.Attempts, c.MaxAttempts,
         p.QueueMaxAttempts, c.IdempotencyKey, c.Tags, c.RunAt, c.CreatedAt, c.LeaseExpiresAt,
         p.QueueZombieTimeoutSeconds
  FROM @Claimed AS c
  INNER JOIN @Pick AS p ON p.Id = c.Id
  ORDER BY c.Priority DESC, c.RunAt, c.Id;
END;
GO

-- ClaimAndStart(@WorkerId, @Queues JSON array of names, @Limit, @LeaseSeconds): ClaimNext and StartMany in one
-- transaction: the jobs ClaimNext would choose (keel.PickClaimable), set straight to State 'processing' under a new
-- lease with Attempts + 1, StartedAt and HeartbeatAt = now. Columns as ClaimNext (Attempts = before this attempt)
-- plus Attempt, the attempt now running. Only the best @Limit picked rows across queues are updated, so nothing has
-- to be handed back (a started row would have to be un-started); the other picked rows stay update-locked until
-- commit, as ClaimNext's do.
-- Lock order (R__010_counters.sql): the queues' claim applocks (shared, by name), limited queues' Queues rows by name;
-- job rows READPAST (never waited for); one UPDATE, the transaction's only counted statement and its last, so the
-- JobsHot trigger writes HotCounts at the end.
CREATE OR ALTER PROCEDURE keel.ClaimAndStart
  @WorkerId NVARCHAR(200),
  @Queues NVARCHAR(MAX),
  @Limit INT,
  @LeaseSeconds INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @LeaseUntil datetime2(3) = DATEADD(second, ISNULL(@LeaseSeconds, 60), @Now);

  DECLARE @Started TABLE (
    Id bigint NOT NULL PRIMARY KEY, LeaseId uniqueidentifier NOT NULL,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    RunAt datetime2(3) NOT NULL, CreatedAt datetime2(3) NOT NULL, LeaseExpiresAt datetime2(3) NOT NULL);
  DECLARE @Pick TABLE (Id bigint NOT NULL PRIMARY KEY, Priority int NOT NULL, RunAt datetime2(3) NOT NULL,
    QueueMaxAttempts int NOT NULL, QueueZombieTimeoutSeconds int NOT NULL);
  DECLARE @Lock keel.QueueNameList;

  IF @Limit IS NOT NULL AND @Limit >= 1 AND @Queues IS NOT NULL AND ISJSON(@Queues) = 1
  BEGIN
    -- Settings read without locks, as ClaimNext.
    INSERT @Lock (Name)
    SELECT n.Name
    FROM (SELECT DISTINCT CONVERT(nvarchar(128), j.[value]) COLLATE Latin1_General_100_BIN2 AS Name
          FROM OPENJSON(@Queues) AS j WHERE j.[type] = 1) AS n
    LEFT JOIN keel.Queues AS s ON s.Name = n.Name
    WHERE ISNULL(s.Paused, 0) = 0;

    BEGIN TRY
      BEGIN TRANSACTION;

      -- The pause barrier, then the choice, as ClaimNext.
      EXEC keel.TakeClaimLocks @Queues = @Lock;
      INSERT @Pick (Id, Priority, RunAt, QueueMaxAttempts, QueueZombieTimeoutSeconds)
      EXEC keel.PickClaimable @Queues = @Lock, @Limit = @Limit, @Now = @Now;

      -- The best @Limit picked rows across queues, claimed and started by key.
      UPDATE h
      SET State = 'processing', LeaseId = NEWID(), WorkerId = @WorkerId, FetchedAt = @Now, LeaseExpiresAt = @LeaseUntil,
          Attempts = h.Attempts + 1, StartedAt = @Now, HeartbeatAt = @Now, Progress = NULL
      OUTPUT inserted.Id, inserted.LeaseId, inserted.Queue, inserted.Type, inserted.Payload, inserted.Priority,
             inserted.Attempts, inserted.MaxAttempts, inserted.IdempotencyKey, inserted.Tags, inserted.RunAt,
             inserted.CreatedAt, inserted.LeaseExpiresAt
      INTO @Started (Id, LeaseId, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, RunAt,
                     CreatedAt, LeaseExpiresAt)
      FROM keel.JobsHot AS h WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK, FORCESEEK)
      INNER JOIN (SELECT TOP (@Limit) p.Id FROM @Pick AS p ORDER BY p.Priority DESC, p.RunAt, p.Id) AS b ON b.Id = h.Id
      WHERE h.State = 'pending';

      COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
      IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
      THROW;
    END CATCH;
  END;

  SELECT c.Id AS JobId, c.LeaseId, c.Queue, c.Type, c.Payload, c.Priority, c.Attempts - 1 AS Attempts, c.MaxAttempts,
         p.QueueMaxAttempts, c.IdempotencyKey, c.Tags, c.RunAt, c.CreatedAt, c.LeaseExpiresAt, c.Attempts AS Attempt,
         p.QueueZombieTimeoutSeconds
  FROM @Started AS c
  INNER JOIN @Pick AS p ON p.Id = c.Id
  ORDER BY c.Priority DESC, c.RunAt, c.Id;
END;
GO

-- PickDue(@Queues JSON array of names, @Limit): the ids of the due jobs ClaimNext would take now (the same choice,
-- keel.PickClaimable), at most @Limit, in claim order, left pending: nothing is claimed. For posting their queue
-- messages (the dispatcher's post mode, a freed slot's hand-on, resume), whose runner then claims each by id. One
-- transaction under the pause barrier, so no row is ever fetched on the way: a pause that answered counted none of
-- them in flight (claiming and then releasing them did: they were fetched until the release, and then never ran).
-- Lock order (R__010_counters.sql): the queues' claim applocks (shared, by name, keel.TakeClaimLocks), limited queues'
-- Queues rows by name; job rows READPAST, update-locked until the commit and not changed; no counted statement.
CREATE OR ALTER PROCEDURE keel.PickDue
  @Queues NVARCHAR(MAX),
  @Limit INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @Pick TABLE (Id bigint NOT NULL PRIMARY KEY, Priority int NOT NULL, RunAt datetime2(3) NOT NULL,
    QueueMaxAttempts int NOT NULL, QueueZombieTimeoutSeconds int NOT NULL);
  DECLARE @Lock keel.QueueNameList;

  IF @Limit IS NOT NULL AND @Limit >= 1 AND @Queues IS NOT NULL AND ISJSON(@Queues) = 1
  BEGIN
    -- Settings read without locks, as ClaimNext.
    INSERT @Lock (Name)
    SELECT n.Name
    FROM (SELECT DISTINCT CONVERT(nvarchar(128), j.[value]) COLLATE Latin1_General_100_BIN2 AS Name
          FROM OPENJSON(@Queues) AS j WHERE j.[type] = 1) AS n
    LEFT JOIN keel.Queues AS s ON s.Name = n.Name
    WHERE ISNULL(s.Paused, 0) = 0;

    BEGIN TRY
      BEGIN TRANSACTION;

      -- The pause barrier, then the choice, as ClaimNext.
      EXEC keel.TakeClaimLocks @Queues = @Lock;
      INSERT @Pick (Id, Priority, RunAt, QueueMaxAttempts, QueueZombieTimeoutSeconds)
      EXEC keel.PickClaimable @Queues = @Lock, @Limit = @Limit, @Now = @Now;

      COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
      IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
      THROW;
    END CATCH;
  END;

  SELECT TOP (IIF(@Limit >= 1, @Limit, 0)) p.Id AS JobId
  FROM @Pick AS p
  ORDER BY p.Priority DESC, p.RunAt, p.Id;
END;
GO

-- ClaimById(@JobId, @WorkerId, @LeaseSeconds): claims one job by id when it is pending and due, its queue is not
-- paused and (for a limited queue, locked first) has a free slot; a row another session holds is skipped (READPAST).
-- Returns the claimed job (same columns as ClaimNext) or no row.
-- Lock order (R__010_counters.sql): the queue's claim applock (shared); the Queues row (limited queue); the job row
-- READPAST; one UPDATE, last, whose trigger writes HotCounts.
CREATE OR ALTER PROCEDURE keel.ClaimById
  @JobId BIGINT,
  @WorkerId NVARCHAR(200),
  @LeaseSeconds INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  DECLARE @Now datetime2(3) = SYSUTCDATETIME();
  DECLARE @LeaseUntil datetime2(3) = DATEADD(second, ISNULL(@LeaseSeconds, 60), @Now);
  DECLARE @Claimed TABLE (
    Id bigint NOT NULL PRIMARY KEY, LeaseId uniqueidentifier NOT NULL,
    Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, Type nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    Payload nvarchar(max) NOT NULL, Priority int NOT NULL, Attempts int NOT NULL, MaxAttempts int NULL,
    IdempotencyKey nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL, Tags nvarchar(max) NOT NULL,
    RunAt datetime2(3) NOT NULL, CreatedAt datetime2(3) NOT NULL, LeaseExpiresAt datetime2(3) NOT NULL);
  DECLARE @Queue nvarchar(128), @Paused bit, @Max int, @QueueMaxAttempts int = 5, @QueueZombieTimeoutSeconds int = 300,
          @Running int;
  DECLARE @Lock keel.QueueNameList;

  SELECT @Queue = h.Queue FROM keel.JobsHot AS h WHERE h.Id = @JobId AND h.State = 'pending';

  IF @Queue IS NOT NULL
  BEGIN
    SELECT @Paused = s.Paused, @Max = s.MaxConcurrency, @QueueMaxAttempts = s.MaxAttempts,
           @QueueZombieTimeoutSeconds = s.ZombieTimeoutSeconds
    FROM keel.Queues AS s WHERE s.Name = @Queue;

    IF ISNULL(@Paused, 0) = 0
    BEGIN
      BEGIN TRY
        BEGIN TRANSACTION;
        -- The pause barrier, as ClaimNext: the queue's claim applock in share mode, then the settings as committed now.
        INSERT @Lock (Name) VALUES (@Queue);
        EXEC keel.TakeClaimLocks @Queues = @Lock;
        SELECT @Paused = s.Paused, @Max = s.MaxConcurrency FROM keel.Queues AS s WHERE s.Name = @Queue;
        IF ISNULL(@Paused, 0) = 0 AND @Max IS NOT NULL
        BEGIN
          SELECT @Max = s.MaxConcurrency, @Paused = s.Paused
          FROM keel.Queues AS s WITH (UPDLOCK, ROWLOCK) WHERE s.Name = @Queue;
          SELECT @Running = COUNT(*) FROM keel.JobsHot AS h
          WHERE h.Queue = @Queue AND h.State IN ('fetched', 'processing');
        END;

        IF ISNULL(@Paused, 0) = 0 AND (@Max IS NULL OR @Running < @Max)
          UPDATE keel.JobsHot WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK)
          SET State = 'fetched', LeaseId = NEWID(), WorkerId = @WorkerId, FetchedAt = @Now, LeaseExpiresAt = @LeaseUntil
          OUTPUT inserted.Id, inserted.LeaseId, inserted.Queue, inserted.Type, inserted.Payload, inserted.Priority,
                 inserted.Attempts, inserted.MaxAttempts, inserted.IdempotencyKey, inserted.Tags, inserted.RunAt,
                 inserted.CreatedAt, inserted.LeaseExpiresAt
          INTO @Claimed (Id, LeaseId, Queue, Type, Payload, Priority, Attempts, MaxAttempts, IdempotencyKey, Tags, RunAt,
                         CreatedAt, LeaseExpiresAt)
          WHERE Id = @JobId AND Queue = @Queue AND State = 'pending' AND RunAt <= @Now
            AND (ExpiresAt IS NULL OR ExpiresAt > @Now);

        COMMIT TRANSACTION;
      END TRY
      BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
      END CATCH;
    END;
  END;

  SELECT c.Id AS JobId, c.LeaseId, c.Queue, c.Type, c.Payload, c.Priority, c.Attempts, c.MaxAttempts,
         ISNULL(@QueueMaxAttempts, 5) AS QueueMaxAttempts, c.IdempotencyKey, c.Tags, c.RunAt, c.CreatedAt,
         c.LeaseExpiresAt, ISNULL(@QueueZombieTimeoutSeconds, 300) AS QueueZombieTimeoutSeconds
  FROM @Claimed AS c;
END;
GO

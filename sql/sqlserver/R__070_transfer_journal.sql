-- Transfer journal procedures over keel.TransferBatches / TransferBatchEvents (V020). Repeatable (sql/README.md).
-- Names and parameters are JOURNAL_PROCEDURES (shared/transfer/journalProcedures.ts) in PascalCase, the same as
-- PostgreSQL's (R__030_transfer_journal_functions.sql); test/engines/parity.test.ts compares them with this file.
-- Batch rows carry the journal's column names: ManifestRows, ManifestChecksum and AppliedRows/StagedRows are
-- answered as RowCount, Checksum, StagedCount and AppliedCount (PostgreSQL's row_count, checksum, ...).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- Inserts a batch in state 'extracting' with its 'created' event. First result set: Outcome, ConflictBatchId,
-- ConflictState; Outcome is
--   inserted            (a second result set holds the batch row)
--   transfer_paused     the transfer (a replay: the transfer it replays) is paused; nothing was written
--   duplicate_batch_id  a batch with this id exists (named, with its state)
--   open_batch_exists   the transfer has an open batch, or (a replay, '<transfer>@replay-<n>') a replay of the same
--                       range is open in another replay chain (named); timestamp and rowversion windows: a replay
--                       of the transfer is open, or (a replay) the transfer's own batch is (named)
--   window_taken        a live batch of the transfer shares the window's low or high bound (named)
-- First the transfer's lock (an applock on its name, a replay chain's on the transfer it replays; sql/README.md
-- "Lock order"), held to commit: the pause and the open replay are read under it, so a pause that committed first
-- is seen, a pause that comes later waits for this insert to commit, and two replays of one range take turns.
-- A unique index refuses the insert (2627 on the key, 2601 on a filtered index); which rule it was is read from the
-- committed rows afterwards, never from the error text. The refused insert waited for its rival to commit, so the
-- rival is visible; if it left the way meanwhile (failed, releasing its window), the insert is tried again.
-- A new replay chain is asked for as '<transfer>@replay-' (nothing after the mark): its name is completed here with
-- the batch's Seq, a number the journal issues (the row is inserted under the bare mark, then renamed in the same
-- transaction; the transfer's lock keeps a second such row from meeting it), so two replays never share a chain and
-- the numbers follow the order the chains were created in, whatever the hosts' clocks say. A name with a number
-- already (an older version's) is kept. PostgreSQL: keel.transfer_batch_insert, the same.
CREATE OR ALTER PROCEDURE keel.TransferBatchInsert
  @BatchId uniqueidentifier,
  @TransferName nvarchar(64),
  @BoundaryKind varchar(12),
  @BoundaryLow nvarchar(64),
  @BoundaryHigh nvarchar(64),
  @SchemaHash char(64),
  @SchemaColumns nvarchar(max),
  @Detail nvarchar(max)
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @Try int = 0;
  DECLARE @Outcome varchar(24) = NULL;
  DECLARE @Refusal varchar(24) = NULL;
  DECLARE @ConflictId uniqueidentifier = NULL;
  DECLARE @ConflictState varchar(12) = NULL;
  DECLARE @Rc int;
  DECLARE @Mark int = CHARINDEX(N'@replay-', @TransferName);
  DECLARE @Base nvarchar(64) = IIF(@Mark > 0, LEFT(@TransferName, @Mark - 1), @TransferName);
  DECLARE @ReplayPrefix nvarchar(80) = @Base + N'@replay-';
  DECLARE @Lock nvarchar(255) = N'keel.transfer:' + @Base;
  DECLARE @NewChain bit = CASE WHEN RIGHT(@TransferName, 8) = N'@replay-' AND LEN(@TransferName) = LEN(@ReplayPrefix) THEN 1 ELSE 0 END;
  DECLARE @Name nvarchar(64) = @TransferName;
  WHILE @Outcome IS NULL AND @Try < 5
  BEGIN
    SET @Try += 1;
    SELECT @ConflictId = NULL, @ConflictState = NULL, @Refusal = NULL;
    BEGIN TRY
      BEGIN TRANSACTION;
      EXEC @Rc = sys.sp_getapplock @Resource = @Lock, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
      IF @Rc < 0 THROW 51021, N'keel.TransferBatchInsert: could not take the transfer''s lock', 1;
      IF EXISTS (SELECT 1 FROM keel.TransferControls WITH (READCOMMITTEDLOCK) WHERE TransferName = @Base AND Paused = 1)
        SET @Refusal = 'transfer_paused';
      ELSE IF @Mark > 0
        -- Open batches are few (one per chain): read through IX_TransferBatches_State.
        SELECT TOP (1) @ConflictId = BatchId, @ConflictState = State, @Refusal = 'open_batch_exists'
          FROM keel.TransferBatches WITH (READCOMMITTEDLOCK)
         WHERE State IN ('extracting', 'staged', 'applying', 'unresolved')
           AND LEFT(TransferName, LEN(@ReplayPrefix)) = @ReplayPrefix
           AND (BoundaryLow = @BoundaryLow OR (BoundaryLow IS NULL AND @BoundaryLow IS NULL))
           AND BoundaryHigh = @BoundaryHigh;
      -- Timestamp and rowversion windows: an update moves a row out of its committed window into the next one, so a
      -- replay (which stages its range as the source is then) and the transfer's own window must not be open at once:
      -- the live window could carry a row's new version before the replay's apply wrote the old one back over it, for
      -- good. Each waits for the other's open batch (read under the transfer's lock). Key windows need not: a row never
      -- leaves its key window (PostgreSQL: keel.transfer_batch_insert, the same).
      IF @Refusal IS NULL AND @BoundaryKind IN ('timestamp', 'rowversion')
        SELECT TOP (1) @ConflictId = BatchId, @ConflictState = State, @Refusal = 'open_batch_exists'
          FROM keel.TransferBatches WITH (READCOMMITTEDLOCK)
         WHERE State IN ('extracting', 'staged', 'applying', 'unresolved')
           AND ((@Mark > 0 AND TransferName = @Base)
             OR (@Mark = 0 AND LEFT(TransferName, LEN(@ReplayPrefix)) = @ReplayPrefix));
      IF @Refusal IS NULL
      BEGIN
        INSERT INTO keel.TransferBatches (BatchId, TransferName, State, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns)
        VALUES (@BatchId, @TransferName, 'extracting', @BoundaryKind, @BoundaryLow, @BoundaryHigh, @SchemaHash, @SchemaColumns);
        IF @NewChain = 1
        BEGIN
          SET @Name = @TransferName + CAST(SCOPE_IDENTITY() AS nvarchar(20));
          UPDATE keel.TransferBatches SET TransferName = @Name WHERE BatchId = @BatchId;
        END;
        INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail)
        VALUES (@BatchId, NULL, 'extracting', 'created', @Detail);
      END;
      COMMIT TRANSACTION;
      SET @Outcome = COALESCE(@Refusal, 'inserted');
    END TRY
    BEGIN CATCH
      IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
      -- A deadlock victim (1205) among racing inserts simply tries again.
      IF ERROR_NUMBER() = 1205 AND @Try < 5 CONTINUE;
      IF ERROR_NUMBER() NOT IN (2601, 2627) THROW;
      SELECT @ConflictState = State FROM keel.TransferBatches WITH (READCOMMITTEDLOCK) WHERE BatchId = @BatchId;
      IF @ConflictState IS NOT NULL
        SELECT @Outcome = 'duplicate_batch_id', @ConflictId = @BatchId;
      ELSE
      BEGIN
        SELECT TOP (1) @ConflictId = BatchId, @ConflictState = State
          FROM keel.TransferBatches WITH (READCOMMITTEDLOCK)
         WHERE TransferName = @Name AND State IN ('extracting', 'staged', 'applying', 'unresolved');
        IF @ConflictId IS NOT NULL
          SET @Outcome = 'open_batch_exists';
        ELSE
        BEGIN
          SELECT TOP (1) @ConflictId = BatchId, @ConflictState = State
            FROM keel.TransferBatches WITH (READCOMMITTEDLOCK)
           WHERE TransferName = @Name AND State <> 'failed'
             AND (BoundaryHigh = @BoundaryHigh OR BoundaryLow = @BoundaryLow OR (BoundaryLow IS NULL AND @BoundaryLow IS NULL));
          IF @ConflictId IS NOT NULL SET @Outcome = 'window_taken';
        END;
      END;
    END CATCH;
  END;
  IF @Outcome IS NULL
    THROW 51020, N'keel.TransferBatchInsert: refused by a unique index that no committed batch explains (5 tries)', 1;
  SELECT @Outcome AS Outcome, @ConflictId AS ConflictBatchId, @ConflictState AS ConflictState;
  IF @Outcome = 'inserted'
    SELECT BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
      FROM keel.TransferBatches WHERE BatchId = @BatchId;
END;
GO

-- Compare-and-set state change with a patch and an event, in one transaction. Returns the updated row, or no
-- row when the batch is not in one of @FromStates (comma-separated). Each patchable column comes with a @Set<Column>
-- flag: 1 sets the column to the value beside it (NULL clears it), 0 leaves it. @IfVersion (NULL: the state alone
-- decides) also fences the move on the Version the caller read: a writer that decided on an older record (reconcile's
-- verdict while another run started an apply) moves nothing, and its event is still recorded on the row as it is,
-- marked {"stale": true, "version": <the row's>} (PostgreSQL: keel.transfer_batch_transition).
CREATE OR ALTER PROCEDURE keel.TransferBatchTransition
  @BatchId uniqueidentifier,
  @FromStates varchar(100),
  @ToState varchar(12),
  @SetRowCount bit, @RowCount bigint,
  @SetChecksum bit, @Checksum varchar(24),
  @SetStagedCount bit, @StagedCount bigint,
  @SetStagedChecksum bit, @StagedChecksum varchar(24),
  @SetAppliedCount bit, @AppliedCount bigint,
  @SetLastError bit, @LastError nvarchar(2000),
  @SetLastErrorCode bit, @LastErrorCode varchar(64),
  @SetTargetReconcileToken bit, @TargetReconcileToken varchar(512),
  @IncrementAttempts bit,
  @Stamp varchar(20),
  @Event varchar(64),
  @Detail nvarchar(max),
  @IfVersion bigint = NULL -- defaulted: a build before it calls without it (sql/README.md, "Rolling deploys")
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @Prev varchar(12);
  DECLARE @Version bigint;
  IF @Stamp IS NOT NULL AND @Stamp NOT IN ('extracted_at', 'staged_at', 'apply_started_at', 'committed_at', 'failed_at')
    THROW 51021, N'keel.TransferBatchTransition: unknown @Stamp', 1;
  BEGIN TRANSACTION;
  SELECT @Prev = State, @Version = Version FROM keel.TransferBatches WITH (UPDLOCK, HOLDLOCK) WHERE BatchId = @BatchId;
  IF @Prev IS NULL
  BEGIN
    ROLLBACK TRANSACTION;
    RETURN;
  END;
  IF CHARINDEX(',' + @Prev + ',', ',' + @FromStates + ',') = 0 OR @Version <> COALESCE(@IfVersion, @Version)
  BEGIN
    IF @IfVersion IS NOT NULL
      INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail)
      VALUES (@BatchId, @Prev, @Prev, @Event,
              JSON_MODIFY(JSON_MODIFY(CASE WHEN ISJSON(@Detail) = 1 AND LEFT(LTRIM(@Detail), 1) = N'{' THEN @Detail ELSE N'{}' END,
                                      '$.stale', CAST(1 AS bit)), '$.version', @Version));
    COMMIT TRANSACTION;
    RETURN;
  END;
  UPDATE keel.TransferBatches
     SET State = @ToState,
         UpdatedAt = SYSUTCDATETIME(),
         -- The manifest is written once (a racing second run gets the first back and is verified against it).
         ManifestRows = CASE WHEN @SetRowCount = 1 AND ManifestRows IS NULL THEN @RowCount ELSE ManifestRows END,
         ManifestChecksum = CASE WHEN @SetChecksum = 1 AND ManifestChecksum IS NULL THEN @Checksum ELSE ManifestChecksum END,
         StagedRows = CASE WHEN @SetStagedCount = 1 THEN @StagedCount ELSE StagedRows END,
         StagedChecksum = CASE WHEN @SetStagedChecksum = 1 THEN @StagedChecksum ELSE StagedChecksum END,
         AppliedRows = CASE WHEN @SetAppliedCount = 1 THEN @AppliedCount ELSE AppliedRows END,
         LastError = CASE WHEN @SetLastError = 1 THEN @LastError ELSE LastError END,
         LastErrorCode = CASE WHEN @SetLastErrorCode = 1 THEN @LastErrorCode ELSE LastErrorCode END,
         TargetReconcileToken = CASE WHEN @SetTargetReconcileToken = 1 THEN @TargetReconcileToken ELSE TargetReconcileToken END,
         Attempts = Attempts + CASE WHEN @IncrementAttempts = 1 THEN 1 ELSE 0 END,
         Version = Version + 1,
         ExtractedAt = CASE WHEN @Stamp = 'extracted_at' THEN SYSUTCDATETIME() ELSE ExtractedAt END,
         StagedAt = CASE WHEN @Stamp = 'staged_at' THEN SYSUTCDATETIME() ELSE StagedAt END,
         ApplyStartedAt = CASE WHEN @Stamp = 'apply_started_at' THEN SYSUTCDATETIME() ELSE ApplyStartedAt END,
         CommittedAt = CASE WHEN @Stamp = 'committed_at' THEN SYSUTCDATETIME() ELSE CommittedAt END,
         FailedAt = CASE WHEN @Stamp = 'failed_at' THEN SYSUTCDATETIME() ELSE FailedAt END
   WHERE BatchId = @BatchId;
  INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail)
  VALUES (@BatchId, @Prev, @ToState, @Event, @Detail);
  COMMIT TRANSACTION;
  SELECT BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches WHERE BatchId = @BatchId;
END;
GO

-- Records an event (and optionally last error / reconcile token, flagged as in TransferBatchTransition) without
-- changing the state. A note that writes a column raises the row's Version and touches UpdatedAt. @IfVersion (NULL:
-- unconditional) fences the write on the version the caller read: when the row changed since, nothing of the row is
-- written (a stale writer never replaces a newer record) and the event is still recorded, its detail marked
-- {"stale": true, "version": <the row's>} (PostgreSQL: keel.transfer_batch_note).
CREATE OR ALTER PROCEDURE keel.TransferBatchNote
  @BatchId uniqueidentifier,
  @Event varchar(64),
  @Detail nvarchar(max),
  @SetLastError bit, @LastError nvarchar(2000),
  @SetLastErrorCode bit, @LastErrorCode varchar(64),
  @SetTargetReconcileToken bit, @TargetReconcileToken varchar(512),
  @IfVersion bigint
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @State varchar(12);
  DECLARE @Version bigint;
  DECLARE @Touch bit = CASE WHEN @SetLastError = 1 OR @SetLastErrorCode = 1 OR @SetTargetReconcileToken = 1 THEN 1 ELSE 0 END;
  BEGIN TRANSACTION;
  UPDATE keel.TransferBatches
     SET @State = State,
         LastError = CASE WHEN @SetLastError = 1 THEN @LastError ELSE LastError END,
         LastErrorCode = CASE WHEN @SetLastErrorCode = 1 THEN @LastErrorCode ELSE LastErrorCode END,
         TargetReconcileToken = CASE WHEN @SetTargetReconcileToken = 1 THEN @TargetReconcileToken ELSE TargetReconcileToken END,
         UpdatedAt = CASE WHEN @Touch = 1 THEN SYSUTCDATETIME() ELSE UpdatedAt END,
         Version = Version + CASE WHEN @Touch = 1 THEN 1 ELSE 0 END
   WHERE BatchId = @BatchId AND (@IfVersion IS NULL OR Version = @IfVersion);
  DECLARE @Written bit = CASE WHEN @State IS NULL THEN 0 ELSE 1 END;
  IF @Written = 1
    INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail) VALUES (@BatchId, @State, @State, @Event, @Detail);
  ELSE
  BEGIN
    SELECT @State = State, @Version = Version FROM keel.TransferBatches WHERE BatchId = @BatchId;
    IF @State IS NOT NULL
      INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail)
      VALUES (@BatchId, @State, @State, @Event,
              JSON_MODIFY(JSON_MODIFY(CASE WHEN ISJSON(@Detail) = 1 AND LEFT(LTRIM(@Detail), 1) = N'{' THEN @Detail ELSE N'{}' END,
                                      '$.stale', CAST(1 AS bit)), '$.version', @Version));
  END;
  COMMIT TRANSACTION;
  -- false: no such batch, or the fence kept the row as it was (the answer of the PostgreSQL function).
  SELECT @Written AS Result;
END;
GO

-- Reads. The app role (keel_executor) has EXECUTE only: every journal read is one of these procedures.
CREATE OR ALTER PROCEDURE keel.TransferBatchGet
  @BatchId uniqueidentifier
AS
BEGIN
  SET NOCOUNT ON;
  SELECT BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches WHERE BatchId = @BatchId;
END;
GO

-- Two result sets: the transfer's open batch (zero or one row), then its latest committed batch (zero or one row).
CREATE OR ALTER PROCEDURE keel.TransferBatchLast
  @TransferName nvarchar(64)
AS
BEGIN
  SET NOCOUNT ON;
  SELECT TOP (1) BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches
   WHERE TransferName = @TransferName AND State IN ('extracting', 'staged', 'applying', 'unresolved');
  SELECT TOP (1) BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches
   WHERE TransferName = @TransferName AND State = 'committed'
   ORDER BY Seq DESC;
END;
GO

-- Newest first; @AfterId: keyset pagination (batches created before that one; an unknown id gives no rows).
CREATE OR ALTER PROCEDURE keel.TransferBatchList
  @TransferName nvarchar(64) = NULL,
  @State varchar(12) = NULL,
  @AfterId uniqueidentifier = NULL,
  @Limit int = 100
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @AfterSeq bigint = NULL;
  IF @AfterId IS NOT NULL
    SELECT @AfterSeq = Seq FROM keel.TransferBatches WHERE BatchId = @AfterId;
  SET @Limit = CASE WHEN @Limit IS NULL THEN 100 WHEN @Limit < 1 THEN 1 WHEN @Limit > 1000 THEN 1000 ELSE @Limit END;
  SELECT TOP (@Limit) BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches
   WHERE (@TransferName IS NULL OR TransferName = @TransferName)
     AND (@State IS NULL OR State = @State)
     AND (@AfterId IS NULL OR Seq < @AfterSeq)
   ORDER BY Seq DESC
  OPTION (RECOMPILE);
END;
GO

-- (Not named TransferBatchEvents: a procedure and the table would share one name in schema keel.)
CREATE OR ALTER PROCEDURE keel.TransferBatchEventList
  @BatchId uniqueidentifier
AS
BEGIN
  SET NOCOUNT ON;
  SELECT EventId, BatchId, At, FromState, ToState, Event, Detail
    FROM keel.TransferBatchEvents WHERE BatchId = @BatchId ORDER BY EventId;
END;
GO

-- Batches in one of @States (comma-separated) not updated for @OlderThanMs, oldest first.
CREATE OR ALTER PROCEDURE keel.TransferBatchStale
  @States varchar(100),
  @OlderThanMs bigint,
  @Limit int = 20
AS
BEGIN
  SET NOCOUNT ON;
  DECLARE @Ms bigint = CASE WHEN @OlderThanMs IS NULL OR @OlderThanMs < 0 THEN 0 WHEN @OlderThanMs > 2000000000000 THEN 2000000000000 ELSE @OlderThanMs END;
  DECLARE @Before datetime2(3) = DATEADD(millisecond, -CAST(@Ms % 1000 AS int), DATEADD(second, -CAST(@Ms / 1000 AS int), SYSUTCDATETIME()));
  SET @Limit = CASE WHEN @Limit IS NULL THEN 20 WHEN @Limit < 1 THEN 1 WHEN @Limit > 1000 THEN 1000 ELSE @Limit END;
  SELECT TOP (@Limit) BatchId, TransferName, State, Attempts, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns,
         ManifestRows AS [RowCount], ManifestChecksum AS [Checksum], StagedRows AS StagedCount, StagedChecksum,
         AppliedRows AS AppliedCount, LastError, LastErrorCode, TargetReconcileToken,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt, Version, Seq
    FROM keel.TransferBatches
   WHERE CHARINDEX(',' + State + ',', ',' + @States + ',') > 0 AND UpdatedAt < @Before
   ORDER BY UpdatedAt;
END;
GO

-- Pauses or resumes a transfer (an upsert of its control row, V021); returns the row. UPDLOCK + HOLDLOCK on the
-- key make two first pauses of one transfer wait for each other instead of racing to insert.
CREATE OR ALTER PROCEDURE keel.TransferControlSet
  @TransferName nvarchar(64),
  @Paused bit,
  @Reason nvarchar(2000),
  @ChangedBy nvarchar(256)
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @Rc int;
  DECLARE @Lock nvarchar(255) = N'keel.transfer:' + @TransferName;
  BEGIN TRANSACTION;
  -- The transfer's lock first (TransferBatchInsert): a batch insert in flight commits before the pause, and none
  -- starts after it commits without seeing it.
  EXEC @Rc = sys.sp_getapplock @Resource = @Lock, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
  IF @Rc < 0 THROW 51022, N'keel.TransferControlSet: could not take the transfer''s lock', 1;
  UPDATE keel.TransferControls WITH (UPDLOCK, HOLDLOCK)
     SET Paused = @Paused, Reason = @Reason, ChangedBy = @ChangedBy, ChangedAt = SYSUTCDATETIME()
   WHERE TransferName = @TransferName;
  IF @@ROWCOUNT = 0
    INSERT INTO keel.TransferControls (TransferName, Paused, Reason, ChangedBy)
    VALUES (@TransferName, @Paused, @Reason, @ChangedBy);
  COMMIT TRANSACTION;
  SELECT TransferName, Paused, Reason, ChangedBy, ChangedAt FROM keel.TransferControls WHERE TransferName = @TransferName;
END;
GO

-- Every transfer's control row (only transfers an operator ever paused have one).
CREATE OR ALTER PROCEDURE keel.TransferControlList
AS
BEGIN
  SET NOCOUNT ON;
  SELECT TransferName, Paused, Reason, ChangedBy, ChangedAt FROM keel.TransferControls ORDER BY TransferName;
END;
GO

-- The journal server's clock (the clock of every stamp above): the hosts' clocks may be off it by hours, so the
-- transfer timer, its freshness figures and GET /transfers measure the stamps' ages against this.
CREATE OR ALTER PROCEDURE keel.TransferJournalNow
AS
BEGIN
  SET NOCOUNT ON;
  SELECT SYSUTCDATETIME() AS JournalNow;
END;
GO

-- Keel transfer batch journal, SQL Server / Azure SQL twin of sql/postgres/V020__transfer_journal.sql.
-- One row per batch (keel.TransferBatches) plus its history (keel.TransferBatchEvents). A batch covers the window
-- (BoundaryLow, BoundaryHigh] of its transfer; failed batches release their window; a transfer has at most one
-- open batch. Filtered indexes need ANSI_NULLS and QUOTED_IDENTIFIER ON (also when the procedures are created).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF SCHEMA_ID(N'keel') IS NULL EXEC (N'CREATE SCHEMA keel AUTHORIZATION dbo');
GO

IF OBJECT_ID(N'keel.TransferBatches', N'U') IS NULL
CREATE TABLE keel.TransferBatches (
  BatchId           uniqueidentifier NOT NULL CONSTRAINT PK_TransferBatches PRIMARY KEY NONCLUSTERED,
  Seq               bigint IDENTITY(1, 1) NOT NULL,
  TransferName      nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL,
  State             varchar(12) NOT NULL
                    CONSTRAINT CK_TransferBatches_State CHECK (State IN ('extracting', 'staged', 'applying', 'committed', 'failed', 'unresolved')),
  Attempts          int NOT NULL CONSTRAINT DF_TransferBatches_Attempts DEFAULT (0),
  BoundaryKind      varchar(12) NOT NULL CONSTRAINT CK_TransferBatches_BoundaryKind CHECK (BoundaryKind IN ('key', 'timestamp', 'rowversion')),
  BoundaryLow       nvarchar(64) COLLATE Latin1_General_100_BIN2 NULL,
  BoundaryHigh      nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL,
  SchemaHash        char(64) NOT NULL,
  SchemaColumns     nvarchar(max) NOT NULL,
  ManifestRows      bigint NULL,
  ManifestChecksum  varchar(24) NULL,
  StagedRows        bigint NULL,
  StagedChecksum    varchar(24) NULL,
  AppliedRows       bigint NULL,
  LastError         nvarchar(2000) NULL,
  LastErrorCode     varchar(64) NULL,
  TargetLtxid       varchar(512) NULL,
  CreatedAt         datetime2(3) NOT NULL CONSTRAINT DF_TransferBatches_CreatedAt DEFAULT (SYSUTCDATETIME()),
  UpdatedAt         datetime2(3) NOT NULL CONSTRAINT DF_TransferBatches_UpdatedAt DEFAULT (SYSUTCDATETIME()),
  ExtractedAt       datetime2(3) NULL,
  StagedAt          datetime2(3) NULL,
  ApplyStartedAt    datetime2(3) NULL,
  CommittedAt       datetime2(3) NULL,
  FailedAt          datetime2(3) NULL,
  CONSTRAINT UX_TransferBatches_Seq UNIQUE CLUSTERED (Seq)
);
GO

-- A second batch for an already-covered window is refused: windows chain (next low = last high), so two live
-- batches of one transfer share neither bound. (A unique index treats NULLs as equal: one "from the start".)
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'UX_TransferBatches_WindowLow' AND object_id = OBJECT_ID(N'keel.TransferBatches'))
  CREATE UNIQUE NONCLUSTERED INDEX UX_TransferBatches_WindowLow ON keel.TransferBatches (TransferName, BoundaryLow) WHERE State <> 'failed';
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'UX_TransferBatches_WindowHigh' AND object_id = OBJECT_ID(N'keel.TransferBatches'))
  CREATE UNIQUE NONCLUSTERED INDEX UX_TransferBatches_WindowHigh ON keel.TransferBatches (TransferName, BoundaryHigh) WHERE State <> 'failed';
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'UX_TransferBatches_OneOpen' AND object_id = OBJECT_ID(N'keel.TransferBatches'))
  CREATE UNIQUE NONCLUSTERED INDEX UX_TransferBatches_OneOpen ON keel.TransferBatches (TransferName)
    WHERE State IN ('extracting', 'staged', 'applying', 'unresolved');
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'IX_TransferBatches_Transfer' AND object_id = OBJECT_ID(N'keel.TransferBatches'))
  CREATE NONCLUSTERED INDEX IX_TransferBatches_Transfer ON keel.TransferBatches (TransferName, Seq DESC) INCLUDE (State);
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'IX_TransferBatches_State' AND object_id = OBJECT_ID(N'keel.TransferBatches'))
  CREATE NONCLUSTERED INDEX IX_TransferBatches_State ON keel.TransferBatches (State, UpdatedAt);
GO

IF OBJECT_ID(N'keel.TransferBatchEvents', N'U') IS NULL
CREATE TABLE keel.TransferBatchEvents (
  EventId    bigint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_TransferBatchEvents PRIMARY KEY NONCLUSTERED,
  BatchId    uniqueidentifier NOT NULL,
  At         datetime2(3) NOT NULL CONSTRAINT DF_TransferBatchEvents_At DEFAULT (SYSUTCDATETIME()),
  FromState  varchar(12) NULL,
  ToState    varchar(12) NULL,
  Event      varchar(64) NOT NULL,
  Detail     nvarchar(max) NULL
);
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'CX_TransferBatchEvents_Batch' AND object_id = OBJECT_ID(N'keel.TransferBatchEvents'))
  CREATE CLUSTERED INDEX CX_TransferBatchEvents_Batch ON keel.TransferBatchEvents (BatchId, EventId);
GO

-- Inserts a batch in state 'extracting' with its 'created' event. Returns Inserted = 0 (no error) when a unique
-- index refused it (open batch or covered window): the caller reads the journal to say which.
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
  BEGIN TRY
    BEGIN TRANSACTION;
    INSERT INTO keel.TransferBatches (BatchId, TransferName, State, BoundaryKind, BoundaryLow, BoundaryHigh, SchemaHash, SchemaColumns)
    VALUES (@BatchId, @TransferName, 'extracting', @BoundaryKind, @BoundaryLow, @BoundaryHigh, @SchemaHash, @SchemaColumns);
    INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail)
    VALUES (@BatchId, NULL, 'extracting', 'created', @Detail);
    COMMIT TRANSACTION;
    SELECT CAST(1 AS bit) AS Inserted;
  END TRY
  BEGIN CATCH
    IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
    IF ERROR_NUMBER() IN (2601, 2627)
    BEGIN
      SELECT CAST(0 AS bit) AS Inserted;
      RETURN;
    END;
    THROW;
  END CATCH;
END;
GO

-- Compare-and-set state change with a patch and an event, in one transaction. Returns the updated row, or no
-- row when the batch is not in one of @FromStates (comma-separated).
CREATE OR ALTER PROCEDURE keel.TransferBatchTransition
  @BatchId uniqueidentifier,
  @FromStates varchar(100),
  @ToState varchar(12),
  @SetManifest bit = 0, @ManifestRows bigint = NULL, @ManifestChecksum varchar(24) = NULL,
  @SetStaged bit = 0, @StagedRows bigint = NULL, @StagedChecksum varchar(24) = NULL,
  @SetApplied bit = 0, @AppliedRows bigint = NULL,
  @SetLastError bit = 0, @LastError nvarchar(2000) = NULL, @LastErrorCode varchar(64) = NULL,
  @SetLtxid bit = 0, @TargetLtxid varchar(512) = NULL,
  @IncrementAttempts bit = 0,
  @Stamp varchar(20) = NULL,
  @Event varchar(64),
  @Detail nvarchar(max) = NULL
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @Prev varchar(12);
  BEGIN TRANSACTION;
  SELECT @Prev = State FROM keel.TransferBatches WITH (UPDLOCK, HOLDLOCK) WHERE BatchId = @BatchId;
  IF @Prev IS NULL OR CHARINDEX(',' + @Prev + ',', ',' + @FromStates + ',') = 0
  BEGIN
    ROLLBACK TRANSACTION;
    RETURN;
  END;
  UPDATE keel.TransferBatches
     SET State = @ToState,
         UpdatedAt = SYSUTCDATETIME(),
         ManifestRows = CASE WHEN @SetManifest = 1 THEN @ManifestRows ELSE ManifestRows END,
         ManifestChecksum = CASE WHEN @SetManifest = 1 THEN @ManifestChecksum ELSE ManifestChecksum END,
         StagedRows = CASE WHEN @SetStaged = 1 THEN @StagedRows ELSE StagedRows END,
         StagedChecksum = CASE WHEN @SetStaged = 1 THEN @StagedChecksum ELSE StagedChecksum END,
         AppliedRows = CASE WHEN @SetApplied = 1 THEN @AppliedRows ELSE AppliedRows END,
         LastError = CASE WHEN @SetLastError = 1 THEN @LastError ELSE LastError END,
         LastErrorCode = CASE WHEN @SetLastError = 1 THEN @LastErrorCode ELSE LastErrorCode END,
         TargetLtxid = CASE WHEN @SetLtxid = 1 THEN @TargetLtxid ELSE TargetLtxid END,
         Attempts = Attempts + CASE WHEN @IncrementAttempts = 1 THEN 1 ELSE 0 END,
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
         ManifestRows, ManifestChecksum, StagedRows, StagedChecksum, AppliedRows, LastError, LastErrorCode, TargetLtxid,
         CreatedAt, UpdatedAt, ExtractedAt, StagedAt, ApplyStartedAt, CommittedAt, FailedAt
    FROM keel.TransferBatches WHERE BatchId = @BatchId;
END;
GO

-- Records an event (and optionally last error / LTXID) without changing the state.
CREATE OR ALTER PROCEDURE keel.TransferBatchNote
  @BatchId uniqueidentifier,
  @Event varchar(64),
  @Detail nvarchar(max) = NULL,
  @SetLastError bit = 0, @LastError nvarchar(2000) = NULL, @LastErrorCode varchar(64) = NULL,
  @SetLtxid bit = 0, @TargetLtxid varchar(512) = NULL
AS
BEGIN
  SET NOCOUNT ON;
  SET XACT_ABORT ON;
  DECLARE @State varchar(12);
  BEGIN TRANSACTION;
  UPDATE keel.TransferBatches
     SET @State = State,
         LastError = CASE WHEN @SetLastError = 1 THEN @LastError ELSE LastError END,
         LastErrorCode = CASE WHEN @SetLastError = 1 THEN @LastErrorCode ELSE LastErrorCode END,
         TargetLtxid = CASE WHEN @SetLtxid = 1 THEN @TargetLtxid ELSE TargetLtxid END,
         UpdatedAt = CASE WHEN @SetLastError = 1 OR @SetLtxid = 1 THEN SYSUTCDATETIME() ELSE UpdatedAt END
   WHERE BatchId = @BatchId;
  IF @State IS NOT NULL
    INSERT INTO keel.TransferBatchEvents (BatchId, FromState, ToState, Event, Detail) VALUES (@BatchId, @State, @State, @Event, @Detail);
  COMMIT TRANSACTION;
END;
GO

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
  TargetReconcileToken varchar(512) NULL, -- opaque, from the target adapter (docs/transfer.md)
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

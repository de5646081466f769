-- Per-transfer controls set by operators, SQL Server twin of sql/postgres/V021__transfer_controls.sql
-- (docs/transfer.md, "Pause and resume"). One row per transfer an operator ever paused; no row = running.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF OBJECT_ID(N'keel.TransferControls', N'U') IS NULL
CREATE TABLE keel.TransferControls (
  TransferName nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_TransferControls PRIMARY KEY,
  Paused       bit NOT NULL,
  Reason       nvarchar(2000) NULL,
  ChangedBy    nvarchar(256) NULL,
  ChangedAt    datetime2(3) NOT NULL CONSTRAINT DF_TransferControls_ChangedAt DEFAULT (SYSUTCDATETIME())
);
GO

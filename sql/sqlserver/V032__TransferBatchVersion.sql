-- A batch row's version, raised by every change of the row (each transition, each note that writes a column): a
-- note can be made conditional on it (keel.TransferBatchNote @IfVersion), so a stale writer never replaces a newer
-- record. SQL Server twin of sql/postgres/V032__transfer_batch_version.sql.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF COL_LENGTH(N'keel.TransferBatches', N'Version') IS NULL
  ALTER TABLE keel.TransferBatches ADD Version bigint NOT NULL CONSTRAINT DF_TransferBatches_Version DEFAULT (0);
GO

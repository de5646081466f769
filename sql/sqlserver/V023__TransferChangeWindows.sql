-- Change windows (boundary kind 'changes': Change Tracking version windows that carry deletes, docs/transfer.md
-- "Deletes") are journalled like any window. SQL Server twin of sql/postgres/V023__transfer_change_windows.sql.
-- V020's CK_TransferBatches_BoundaryKind is replaced by CK_TransferBatches_BoundaryKinds (a new name: V020 stays as
-- it is, and the model gate sees both files).
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF EXISTS (SELECT 1 FROM sys.check_constraints WHERE name = N'CK_TransferBatches_BoundaryKind'
             AND parent_object_id = OBJECT_ID(N'keel.TransferBatches'))
  ALTER TABLE keel.TransferBatches DROP CONSTRAINT CK_TransferBatches_BoundaryKind;
GO

IF NOT EXISTS (SELECT 1 FROM sys.check_constraints WHERE name = N'CK_TransferBatches_BoundaryKinds'
                 AND parent_object_id = OBJECT_ID(N'keel.TransferBatches'))
  ALTER TABLE keel.TransferBatches ADD CONSTRAINT CK_TransferBatches_BoundaryKinds
    CHECK (BoundaryKind IN ('key', 'timestamp', 'rowversion', 'changes'));
GO

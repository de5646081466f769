-- Lock escalation off on the three job tables (review F2). Versioned: a table option, applied once (sql/README.md).
--
-- SQL Server escalates a statement that holds about 5,000 locks on one table or index straight to a TABLE lock held
-- until commit (for an UPDLOCK read the escalated lock is X). READPAST skips row locks only, never a table lock, so
-- one big statement would stall every claimer, heartbeat, start and completion on the table until it commits. Keel's
-- statements can pass the threshold: EnqueueMany inserts up to 20,000 jobs in one INSERT (LIMITS.batchJobs), claims
-- take up to 10,000, and the rescue / purge batches may be set to 10,000 (KEEL_MAINT_*_BATCH); a purge escalating on
-- JobsArchive would block every completion's archive insert the same way.
--
-- DISABLE rather than AUTO: AUTO only changes the escalation target to a partition of a partitioned table, and these
-- tables are not partitioned, so AUTO would still escalate to the table. The locks stay bounded by the batch limits:
-- at most 20,000 rows per statement, a few locks per row (clustered key plus the filtered indexes the row enters),
-- about 100 bytes each, a few MB per batch at worst. Splitting every batch under 5,000 rows instead would have
-- turned each one-statement move into a loop of statements (docs/sqlserver.md, "Lock escalation").
-- On Azure SQL Database optimized locking avoids escalation for plain DML, but statements with lock hints (all of the
-- claims and sweeps) still take row locks and hold them to the end of the transaction, so the option matters there
-- too; SQL Server 2022 has no optimized locking.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

ALTER TABLE keel.JobsHot SET (LOCK_ESCALATION = DISABLE);
ALTER TABLE keel.JobsArchive SET (LOCK_ESCALATION = DISABLE);
ALTER TABLE keel.JobsDLQ SET (LOCK_ESCALATION = DISABLE);
GO

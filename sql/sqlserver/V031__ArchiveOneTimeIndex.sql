-- The archive keeps one time index, (Queue, FinishedAt), as sql/postgres/V031 does: every completed job writes an
-- archive row and each index entry is work on the hot path (issue 22). Purge and CountJobs with no queue walk
-- IX_JobsArchive_QueueFinished one queue at a time, the queues found by seeks of the same index (keel.Purge,
-- keel.CountJobs).
DROP INDEX IF EXISTS IX_JobsArchive_Finished ON keel.JobsArchive;
GO

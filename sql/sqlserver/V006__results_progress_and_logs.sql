-- What a job produced, how far it is and what it logged (issue 29); the twin of sql/postgres/V008__results_and_progress.sql.
-- JobsHot.Progress: the latest ctx.progress() of the running attempt (JSON {fraction, done, total, note}), written by
-- keel.ReportProgress under the attempt's lease and cleared when the next attempt starts.
-- JobsArchive.Result: the JSON value the handler returned, stored by the same CompleteMany move that archives it.
-- Logs (all three tables): the job's own ctx.log lines, a JSON array of the newest KEEL_JOB_LOG_LINES, appended under
-- the lease by keel.AppendJobLog and carried by every move in the move's own transaction.
-- Nullable with no default: a metadata-only change, and jobs that use neither store nothing.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

ALTER TABLE keel.JobsHot ADD Progress nvarchar(max) NULL
  CONSTRAINT CK_JobsHot_Progress CHECK (Progress IS NULL OR ISJSON(Progress) = 1);
ALTER TABLE keel.JobsHot ADD Logs nvarchar(max) NULL
  CONSTRAINT CK_JobsHot_Logs CHECK (Logs IS NULL OR ISJSON(Logs) = 1);
ALTER TABLE keel.JobsArchive ADD Result nvarchar(max) NULL
  CONSTRAINT CK_JobsArchive_Result CHECK (Result IS NULL OR ISJSON(Result) = 1);
ALTER TABLE keel.JobsArchive ADD Logs nvarchar(max) NULL
  CONSTRAINT CK_JobsArchive_Logs CHECK (Logs IS NULL OR ISJSON(Logs) = 1);
ALTER TABLE keel.JobsDLQ ADD Logs nvarchar(max) NULL
  CONSTRAINT CK_JobsDLQ_Logs CHECK (Logs IS NULL OR ISJSON(Logs) = 1);
GO

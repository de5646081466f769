-- What a job produced and how far it is (issue 29); the twin of sql/postgres/V008__results_and_progress.sql.
-- JobsHot.Progress: the latest ctx.progress() of the running attempt (JSON {fraction, done, total, note}), written by
-- keel.ReportProgress under the attempt's lease and cleared when the next attempt starts.
-- JobsArchive.Result: the JSON value the handler returned, stored by the same CompleteMany move that archives it.
-- Nullable with no default: a metadata-only change, and jobs that use neither store nothing.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

ALTER TABLE keel.JobsHot ADD Progress nvarchar(max) NULL
  CONSTRAINT CK_JobsHot_Progress CHECK (Progress IS NULL OR ISJSON(Progress) = 1);
ALTER TABLE keel.JobsArchive ADD Result nvarchar(max) NULL
  CONSTRAINT CK_JobsArchive_Result CHECK (Result IS NULL OR ISJSON(Result) = 1);
GO

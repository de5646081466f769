-- StatsSummary and MetricBuckets per session slot (issue 22), the twin of sql/postgres/V014: one row per queue (and
-- minute, outcome, reason) was shared by every session, so completions committing at once queued on it. Now each
-- session adds to the rows of its slot, @@SPID % 16, as HotCounts does (V003), and the readers (keel.Stats,
-- keel.Metrics) sum the slots; the purge deletes by BucketStart as before. At most 16 rows where there was one, and
-- no folding: a slot outlives its session (sessions ids are few and reused). What is there so far is slot 0.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

ALTER TABLE keel.StatsSummary ADD Slot smallint NOT NULL CONSTRAINT DF_StatsSummary_Slot DEFAULT (0);
GO
ALTER TABLE keel.StatsSummary DROP CONSTRAINT PK_StatsSummary;
ALTER TABLE keel.StatsSummary ADD CONSTRAINT PK_StatsSummary PRIMARY KEY CLUSTERED (Queue, Slot);
GO

ALTER TABLE keel.MetricBuckets ADD Slot smallint NOT NULL CONSTRAINT DF_MetricBuckets_Slot DEFAULT (0);
GO
ALTER TABLE keel.MetricBuckets DROP CONSTRAINT PK_MetricBuckets;
ALTER TABLE keel.MetricBuckets ADD CONSTRAINT PK_MetricBuckets PRIMARY KEY CLUSTERED (BucketStart, Queue, Outcome, Reason, Slot);
GO

-- Cheap reads at scale (issue 12): keel.Stats reads maintained counters and bounded index ranges, never every row.
-- The triggers that keep the counters are in R__015_read_counters.sql. The twin of sql/postgres/V003__read_counters.sql.
-- The counters start at zero: no SQL Server database holds jobs yet (nothing is deployed), so V001 and this file are
-- applied together to empty tables.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- Hot rows per queue and state, kept exact by the trigger on JobsHot in the transaction of every change. Each session
-- writes its own slot (@@SPID % 16), so the batched claims, starts and completes of different connections do not
-- queue on one counter row; keel.Stats sums the slots.
CREATE TABLE keel.HotCounts (
  Queue       nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Slot        smallint NOT NULL,
  Pending     bigint NOT NULL CONSTRAINT DF_HotCounts_Pending DEFAULT (0),
  Fetched     bigint NOT NULL CONSTRAINT DF_HotCounts_Fetched DEFAULT (0),
  Processing  bigint NOT NULL CONSTRAINT DF_HotCounts_Processing DEFAULT (0),
  CONSTRAINT PK_HotCounts PRIMARY KEY CLUSTERED (Queue, Slot)
);
GO

-- Rows in the DLQ per queue, kept by the trigger on JobsDLQ (every insert and delete, whichever procedure did it).
CREATE TABLE keel.DlqCounts (
  Queue  nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_DlqCounts PRIMARY KEY CLUSTERED,
  N      bigint NOT NULL CONSTRAINT DF_DlqCounts_N DEFAULT (0)
);
GO

-- The oldest pending RunAt of a queue is the first entry; due / not-yet-due pending rows are its two ranges either
-- side of now (keel.Stats counts at most 1,000 entries of one of them). Claims and starts leave the filter.
CREATE NONCLUSTERED INDEX IX_JobsHot_PendingRunAt ON keel.JobsHot (Queue, RunAt)
  WHERE State = 'pending';
GO

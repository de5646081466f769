-- Counters shared by every move: StatsSummary per queue and MetricBuckets per minute x queue x outcome x reason.
-- keel.ApplyCounters is called by a move procedure INSIDE its transaction, after the rows have moved, with the
-- caller's counter rows (one per moved job) in a keel.CounterRows table variable. It upserts StatsSummary rows in queue
-- order, then MetricBuckets rows in key order: every caller locks counter rows in the same order, after the job
-- tables, so counter updates of concurrent moves queue up behind each other and never deadlock.
--
-- keel.CounterRows and keel.JobIdList are the one definition of the rows that the move procedures hand to each other
-- (they used to be temp tables #Counters and #DeadIds re-declared in six procedures, invisible to the model gate).
-- A table type cannot be altered while procedures use it: change it by a new migration that drops and recreates
-- the procedures that take it.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

CREATE TYPE keel.CounterRows AS TABLE (
  Queue nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Succeeded int NOT NULL DEFAULT 0, Failed int NOT NULL DEFAULT 0, Retried int NOT NULL DEFAULT 0,
  Cancelled int NOT NULL DEFAULT 0, Zombie int NOT NULL DEFAULT 0, Resurrected int NOT NULL DEFAULT 0,
  Outcome varchar(10) NULL,               -- 'succeeded' | 'failed' adds to a metric bucket; NULL adds none
  Reason varchar(16) NOT NULL DEFAULT '', -- '' for succeeded
  DurationMs bigint NOT NULL DEFAULT 0);
GO

-- Job ids handed to keel.DeadLetter.
CREATE TYPE keel.JobIdList AS TABLE (Id bigint NOT NULL PRIMARY KEY);
GO

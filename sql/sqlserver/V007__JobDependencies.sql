-- Continuations and fan-in (issue 29); the twin of sql/postgres/V010__job_dependencies.sql. A job enqueued with
-- `after` waits in JobsHot, State 'waiting' (in no claim index: IX_JobsHot_PendingDue is filtered on 'pending'),
-- until its parents have finished; the parent's own final move releases it in the same transaction (keel.FlowSettle,
-- R__030_owner_and_moves.sql). HasDependents is set on a hot row only when a child is enqueued against it, and only
-- the moves of flagged rows read keel.JobDeps: jobs without dependencies pay nothing. Nullable columns without a
-- default: metadata-only changes.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

ALTER TABLE keel.JobsHot DROP CONSTRAINT CK_JobsHot_State;
ALTER TABLE keel.JobsHot ADD CONSTRAINT CK_JobsHot_StateWithWaiting CHECK (State IN ('pending', 'fetched', 'processing', 'waiting'));
ALTER TABLE keel.JobsHot ADD HasDependents bit NULL;
ALTER TABLE keel.JobsHot ADD OnParentFailure varchar(10) NULL
  CONSTRAINT CK_JobsHot_OnParentFailure CHECK (OnParentFailure IN ('skip', 'run', 'deadLetter'));
GO

-- 'parent_failed': a parent was dead-lettered and the child's policy is 'deadLetter' (counted as failed; the child
-- comes back when the parent is resurrected); 'skipped': the policy is 'skip' (not a failure).
ALTER TABLE keel.JobsDLQ DROP CONSTRAINT CK_JobsDLQ_Reason;
ALTER TABLE keel.JobsDLQ ADD CONSTRAINT CK_JobsDLQ_ReasonWithFlows
  CHECK (Reason IN ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed', 'skipped'));
ALTER TABLE keel.JobsDLQ ADD OnParentFailure varchar(10) NULL; -- a waiting child's policy, kept for its resurrect
GO

-- The edges of every flow, kept until retention purges the child (keel.Purge). ParentOutcome: NULL while the
-- parent is hot, 'succeeded' once archived, 'failed' once dead-lettered (NULL again when it is resurrected). Written
-- only by whoever holds the parent's row, read under the child's row (sql/README.md, Lock order).
CREATE TABLE keel.JobDeps (
  ParentId       bigint NOT NULL,
  ChildId        bigint NOT NULL,
  Position       int NOT NULL, -- the parent's place in the child's `after` list
  ParentOutcome  varchar(10) NULL CONSTRAINT CK_JobDeps_ParentOutcome CHECK (ParentOutcome IN ('succeeded', 'failed')),
  CONSTRAINT PK_JobDeps PRIMARY KEY CLUSTERED (ParentId, ChildId)
);
CREATE NONCLUSTERED INDEX IX_JobDeps_Child ON keel.JobDeps (ChildId, ParentId) INCLUDE (ParentOutcome, Position);
ALTER TABLE keel.JobDeps SET (LOCK_ESCALATION = DISABLE);
GO

-- Waiting rows per queue (not pending: not due), kept by the JobsHot trigger (R__015_read_counters.sql).
ALTER TABLE keel.HotCounts ADD Waiting bigint NOT NULL CONSTRAINT DF_HotCounts_Waiting DEFAULT (0);
GO

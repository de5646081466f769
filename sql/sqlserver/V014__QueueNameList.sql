-- Table type keel.QueueNameList: the queue names whose claim applocks keel.TakeClaimLocks takes (R__020), the pause
-- barrier that ClaimNext, ClaimAndStart and ClaimById each used to write out as their own loop. The names are
-- compared and ordered in the binary collation of keel.Queues.Name, so the locks are taken in the one name order
-- (docs/sqlserver.md, "Lock order", step 0). As V002's types: changed only by a new migration that drops and
-- recreates the procedures that take it.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

CREATE TYPE keel.QueueNameList AS TABLE (Name nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
GO

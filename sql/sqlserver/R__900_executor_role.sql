-- Least privilege: the application's identity only executes the keel procedures. No table rights are granted:
-- the procedures reach the tables through ownership chaining (procedures, tables and the sequence are all owned by
-- the keel schema's owner, dbo). Add an identity with sql/sqlserver/admin/create-identity-user.sql.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF DATABASE_PRINCIPAL_ID(N'keel_executor') IS NULL
  CREATE ROLE keel_executor AUTHORIZATION dbo;
GO

GRANT EXECUTE ON SCHEMA::keel TO keel_executor;
GO

-- NEXT VALUE FOR (job ids, in keel.EnqueueMany) checks UPDATE on the sequence. The procedure and the sequence share
-- an owner, so the ownership chain already covers it; the explicit grant keeps the role working even where that
-- chain is not applied to sequences. It only lets the role draw job ids (no ALTER, no table access).
GRANT UPDATE ON OBJECT::keel.JobIdSeq TO keel_executor;
GO

-- Internal procedures: called only by other keel procedures, never by the application. DENY overrides the schema-wide
-- GRANT above for the role's members; the calls from inside keel procedures still work, because an ownership chain
-- (caller and callee both owned by dbo) skips the permission check on the callee. Without this, the app could run
-- keel.DeadLetter itself and dead-letter any job without holding its lease. Every keel procedure that the TypeScript
-- code does not call must be listed here (test/engines/parity.test.ts checks it).
DENY EXECUTE ON OBJECT::keel.DeadLetter TO keel_executor;
DENY EXECUTE ON OBJECT::keel.FlowSettle TO keel_executor;
DENY EXECUTE ON OBJECT::keel.EnqueueFlowJobs TO keel_executor; -- EnqueueJobs' flow path
DENY EXECUTE ON OBJECT::keel.ApplyCounters TO keel_executor;
DENY EXECUTE ON OBJECT::keel.HandBack TO keel_executor;
DENY EXECUTE ON OBJECT::keel.TakeClaimLocks TO keel_executor; -- the claims' pause barrier, inside their transaction
DENY EXECUTE ON OBJECT::keel.PickClaimable TO keel_executor; -- the claims' choice, inside their transaction
DENY EXECUTE ON OBJECT::keel.EnqueueJobs TO keel_executor; -- EnqueueMany's body: with @Scheduler = 1 it takes "schedule:" keys
GO

-- The ops audit trail (V030): the role holds no table rights anyway; the explicit DENY keeps it so should a broader
-- grant (e.g. db_datawriter) be given to the app's user by mistake. The audit procedures still work: the ownership
-- chain from a keel procedure to the table skips the permission check. Rows change only through RecordAudit,
-- FinishAudit (a started row, once) and PurgeAudit (by age).
DENY INSERT, UPDATE, DELETE ON OBJECT::keel.OpsAudit TO keel_executor;
GO

-- The worker registry (V012): as the audit table, no table rights, and the DENY guards against a broader grant. Rows
-- change only through RegisterWorker, DeregisterWorker and PruneWorkers.
DENY INSERT, UPDATE, DELETE ON OBJECT::keel.Workers TO keel_executor;
GO

-- The enqueue-only role (issue 25), the twin of sql/postgres/roles/keel_producer.sql: a producer in another application
-- may execute keel.EnqueueMany and nothing else (no schema-wide grant: every other procedure, table and view is closed
-- to it). EnqueueMany reaches EnqueueJobs, the tables and the sequence through the ownership chain (all owned by
-- dbo); the sequence grant is the one keel_executor has, for the same reason. A producer's user:
-- CREATE USER [billing-app] FROM EXTERNAL PROVIDER; ALTER ROLE keel_producer ADD MEMBER [billing-app];
IF DATABASE_PRINCIPAL_ID(N'keel_producer') IS NULL
  CREATE ROLE keel_producer AUTHORIZATION dbo;
GO

GRANT EXECUTE ON OBJECT::keel.EnqueueMany TO keel_producer;
GRANT UPDATE ON OBJECT::keel.JobIdSeq TO keel_producer;
GO

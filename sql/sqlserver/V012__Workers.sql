-- The registry of live job processors (issue 30), the twin of sql/postgres/V012__workers.sql: one row per processor
-- process, written by the process itself (RegisterWorker when it starts and again at most every
-- KEEL_WORKER_REFRESH_MS while it does something; DeregisterWorker on a graceful stop) and deleted by the maintenance
-- pass (PruneWorkers) once not seen for KEEL_WORKER_RETENTION_MS. The jobs a worker holds are not kept here:
-- ListWorkers counts them from the hot rows' leases. keel_executor holds no table rights; it reaches the table only
-- through the procedures of R__085_workers.sql (ownership chaining). No move touches it: it takes no place in the
-- lock order.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF OBJECT_ID(N'keel.Workers', N'U') IS NULL
CREATE TABLE keel.Workers (
  WorkerId    nvarchar(200) NOT NULL CONSTRAINT PK_Workers PRIMARY KEY CLUSTERED, -- as JobsHot.WorkerId
  Host        nvarchar(256) NOT NULL,
  InstanceId  nvarchar(128) NULL,  -- WEBSITE_INSTANCE_ID on Azure Functions, when known
  Pid         int NOT NULL,
  AppVersion  nvarchar(64) NOT NULL,
  BuildId     nvarchar(128) NULL,  -- KEEL_BUILD_ID
  Queues      nvarchar(max) NULL,  -- comma-separated; NULL: every queue
  Concurrency int NOT NULL,
  JobsDone    bigint NOT NULL CONSTRAINT DF_Workers_JobsDone DEFAULT (0),
  StartedAt   datetime2(3) NOT NULL, -- the process's own clock
  LastSeenAt  datetime2(3) NOT NULL  -- the server's clock at its last registration
);
GO

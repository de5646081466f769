-- Keel job engine, SQL Server / Azure SQL: the three pillars, counters, metric buckets and queue settings.
-- Table access order in every procedure: Queues -> JobsHot -> JobsArchive -> JobsDLQ -> StatsSummary -> MetricBuckets.
-- No foreign keys between these tables: the moves are the only link, and FKs are the usual deadlock source in job stores.
-- Identity-like text columns (queue, type, idempotency key) use a binary collation so that they compare exactly
-- like the PostgreSQL twin (case- and accent-sensitive), whatever the database's default collation is.
-- Filtered indexes need ANSI_NULLS and QUOTED_IDENTIFIER ON when created and when the procedures that write the
-- table are created (the procedures capture the setting): every file sets them first.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF SCHEMA_ID(N'keel') IS NULL EXEC (N'CREATE SCHEMA keel AUTHORIZATION dbo');
GO

CREATE SEQUENCE keel.JobIdSeq AS bigint START WITH 1 INCREMENT BY 1 MINVALUE 1 NO CYCLE CACHE 50;
GO

CREATE TABLE keel.Queues (
  Name                     nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_Queues PRIMARY KEY CLUSTERED,
  Paused                   bit NOT NULL CONSTRAINT DF_Queues_Paused DEFAULT (0),
  MaxConcurrency           int NULL CONSTRAINT CK_Queues_MaxConcurrency CHECK (MaxConcurrency IS NULL OR MaxConcurrency >= 0),
  ZombieTimeoutSeconds     int NOT NULL CONSTRAINT DF_Queues_ZombieTimeout DEFAULT (300) CONSTRAINT CK_Queues_ZombieTimeout CHECK (ZombieTimeoutSeconds > 0),
  ZombiePolicy             varchar(8) NOT NULL CONSTRAINT DF_Queues_ZombiePolicy DEFAULT ('retry') CONSTRAINT CK_Queues_ZombiePolicy CHECK (ZombiePolicy IN ('dlq', 'retry')),
  MaxAttempts              int NOT NULL CONSTRAINT DF_Queues_MaxAttempts DEFAULT (5) CONSTRAINT CK_Queues_MaxAttempts CHECK (MaxAttempts > 0),
  ArchiveRetentionSeconds  int NOT NULL CONSTRAINT DF_Queues_ArchiveRetention DEFAULT (604800) CONSTRAINT CK_Queues_ArchiveRetention CHECK (ArchiveRetentionSeconds > 0),
  DlqRetentionSeconds      int NOT NULL CONSTRAINT DF_Queues_DlqRetention DEFAULT (2592000) CONSTRAINT CK_Queues_DlqRetention CHECK (DlqRetentionSeconds > 0),
  MetricsRetentionSeconds  int NOT NULL CONSTRAINT DF_Queues_MetricsRetention DEFAULT (604800) CONSTRAINT CK_Queues_MetricsRetention CHECK (MetricsRetentionSeconds > 0),
  UpdatedAt                datetime2(3) NOT NULL CONSTRAINT DF_Queues_UpdatedAt DEFAULT (SYSUTCDATETIME())
);
GO

CREATE TABLE keel.JobsHot (
  Id              bigint NOT NULL CONSTRAINT PK_JobsHot PRIMARY KEY CLUSTERED
                  CONSTRAINT DF_JobsHot_Id DEFAULT (NEXT VALUE FOR keel.JobIdSeq),
  Queue           nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Type            nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Payload         nvarchar(max) NOT NULL CONSTRAINT DF_JobsHot_Payload DEFAULT (N'null'),
  Priority        int NOT NULL CONSTRAINT DF_JobsHot_Priority DEFAULT (0),
  State           varchar(10) NOT NULL CONSTRAINT DF_JobsHot_State DEFAULT ('pending')
                  CONSTRAINT CK_JobsHot_State CHECK (State IN ('pending', 'fetched', 'processing')),
  RunAt           datetime2(3) NOT NULL CONSTRAINT DF_JobsHot_RunAt DEFAULT (SYSUTCDATETIME()),
  Attempts        int NOT NULL CONSTRAINT DF_JobsHot_Attempts DEFAULT (0),
  MaxAttempts     int NULL CONSTRAINT CK_JobsHot_MaxAttempts CHECK (MaxAttempts IS NULL OR MaxAttempts > 0),
  IdempotencyKey  nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL,
  Tags            nvarchar(max) NOT NULL CONSTRAINT DF_JobsHot_Tags DEFAULT (N'[]'), -- JSON array of strings
  LeaseId         uniqueidentifier NULL,
  WorkerId        nvarchar(200) NULL,
  FetchedAt       datetime2(3) NULL,
  LeaseExpiresAt  datetime2(3) NULL,
  StartedAt       datetime2(3) NULL,
  HeartbeatAt     datetime2(3) NULL,
  CancelRequested bit NOT NULL CONSTRAINT DF_JobsHot_CancelRequested DEFAULT (0),
  LastError       nvarchar(max) NULL,
  ExpiresAt       datetime2(3) NULL,
  CreatedAt       datetime2(3) NOT NULL CONSTRAINT DF_JobsHot_CreatedAt DEFAULT (SYSUTCDATETIME())
);
GO

-- Each hot query has the filtered index that fits it.
CREATE UNIQUE NONCLUSTERED INDEX UX_JobsHot_IdempotencyKey ON keel.JobsHot (IdempotencyKey)
  WHERE IdempotencyKey IS NOT NULL;
CREATE NONCLUSTERED INDEX IX_JobsHot_PendingDue ON keel.JobsHot (Queue, Priority DESC, RunAt, Id)
  INCLUDE (ExpiresAt) WHERE State = 'pending';
CREATE NONCLUSTERED INDEX IX_JobsHot_FetchedLease ON keel.JobsHot (LeaseExpiresAt)
  WHERE State = 'fetched';
CREATE NONCLUSTERED INDEX IX_JobsHot_ProcessingHeartbeat ON keel.JobsHot (HeartbeatAt)
  INCLUDE (Queue) WHERE State = 'processing';
CREATE NONCLUSTERED INDEX IX_JobsHot_RunningByQueue ON keel.JobsHot (Queue)
  WHERE State IN ('fetched', 'processing');
CREATE NONCLUSTERED INDEX IX_JobsHot_PendingExpiry ON keel.JobsHot (ExpiresAt)
  WHERE State = 'pending' AND ExpiresAt IS NOT NULL;
GO

CREATE TABLE keel.JobsArchive (
  Id              bigint NOT NULL CONSTRAINT PK_JobsArchive PRIMARY KEY CLUSTERED,
  Queue           nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Type            nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Payload         nvarchar(max) NOT NULL,
  Priority        int NOT NULL,
  Attempts        int NOT NULL,
  MaxAttempts     int NULL,
  IdempotencyKey  nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL,
  Tags            nvarchar(max) NOT NULL,
  CreatedAt       datetime2(3) NOT NULL,
  StartedAt       datetime2(3) NULL,
  FinishedAt      datetime2(3) NOT NULL,
  DurationMs      bigint NOT NULL,
  WorkerId        nvarchar(200) NULL
);
CREATE NONCLUSTERED INDEX IX_JobsArchive_Finished ON keel.JobsArchive (FinishedAt);
CREATE NONCLUSTERED INDEX IX_JobsArchive_QueueFinished ON keel.JobsArchive (Queue, FinishedAt);
GO

CREATE TABLE keel.JobsDLQ (
  Id              bigint NOT NULL CONSTRAINT PK_JobsDLQ PRIMARY KEY CLUSTERED,
  Queue           nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Type            nvarchar(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Payload         nvarchar(max) NOT NULL,
  Priority        int NOT NULL,
  Attempts        int NOT NULL,
  MaxAttempts     int NULL,
  IdempotencyKey  nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL,
  Tags            nvarchar(max) NOT NULL,
  CreatedAt       datetime2(3) NOT NULL,
  StartedAt       datetime2(3) NULL,
  FailedAt        datetime2(3) NOT NULL,
  DurationMs      bigint NULL,
  Reason          varchar(16) NOT NULL
                  CONSTRAINT CK_JobsDLQ_Reason CHECK (Reason IN ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired')),
  Error           nvarchar(max) NULL,
  WorkerId        nvarchar(200) NULL
);
CREATE NONCLUSTERED INDEX IX_JobsDLQ_Failed ON keel.JobsDLQ (FailedAt);
CREATE NONCLUSTERED INDEX IX_JobsDLQ_QueueFailed ON keel.JobsDLQ (Queue, FailedAt);
GO

CREATE TABLE keel.StatsSummary (
  Queue        nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_StatsSummary PRIMARY KEY CLUSTERED,
  Succeeded    bigint NOT NULL CONSTRAINT DF_StatsSummary_Succeeded DEFAULT (0),
  Failed       bigint NOT NULL CONSTRAINT DF_StatsSummary_Failed DEFAULT (0),
  Retried      bigint NOT NULL CONSTRAINT DF_StatsSummary_Retried DEFAULT (0),
  Cancelled    bigint NOT NULL CONSTRAINT DF_StatsSummary_Cancelled DEFAULT (0),
  Zombie       bigint NOT NULL CONSTRAINT DF_StatsSummary_Zombie DEFAULT (0),
  Resurrected  bigint NOT NULL CONSTRAINT DF_StatsSummary_Resurrected DEFAULT (0),
  UpdatedAt    datetime2(3) NOT NULL CONSTRAINT DF_StatsSummary_UpdatedAt DEFAULT (SYSUTCDATETIME())
);
GO

CREATE TABLE keel.MetricBuckets (
  BucketStart      datetime2(3) NOT NULL, -- truncated to the minute
  Queue            nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Outcome          varchar(10) NOT NULL CONSTRAINT CK_MetricBuckets_Outcome CHECK (Outcome IN ('succeeded', 'failed')),
  Reason           varchar(16) NOT NULL CONSTRAINT DF_MetricBuckets_Reason DEFAULT (''),
  [Count]          bigint NOT NULL CONSTRAINT DF_MetricBuckets_Count DEFAULT (0),
  TotalDurationMs  bigint NOT NULL CONSTRAINT DF_MetricBuckets_Total DEFAULT (0),
  MaxDurationMs    bigint NOT NULL CONSTRAINT DF_MetricBuckets_Max DEFAULT (0),
  CONSTRAINT PK_MetricBuckets PRIMARY KEY CLUSTERED (BucketStart, Queue, Outcome, Reason)
);
GO

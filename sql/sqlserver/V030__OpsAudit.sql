-- The ops audit trail (issue 24), the twin of sql/postgres/V030__ops_audit.sql: one row per write of the ops API and
-- per refused call (401/403, cross-site and content-type refusals). A write's row is recorded before the action runs
-- (Outcome 'started') and finished after it ('ok' or 'failed'): no row, no action. keel_executor holds no table
-- rights; it reaches the table only through the procedures of R__080_ops_audit.sql (ownership chaining): add rows,
-- finish a started one, read them, delete them only by age.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF OBJECT_ID(N'keel.OpsAudit', N'U') IS NULL
CREATE TABLE keel.OpsAudit (
  Id            bigint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_OpsAudit PRIMARY KEY CLUSTERED,
  At            datetime2(3) NOT NULL CONSTRAINT DF_OpsAudit_At DEFAULT (SYSUTCDATETIME()), -- the server's time
  PrincipalId   nvarchar(128) NULL, -- Entra object id (oid), when a principal was believed
  PrincipalName nvarchar(256) NULL,
  TenantId      nvarchar(64) NULL,
  AppId         nvarchar(64) NULL,  -- the calling application (appid/azp), for a workload identity
  AuthMethod    varchar(10) NOT NULL CONSTRAINT CK_OpsAudit_AuthMethod CHECK (AuthMethod IN ('key', 'principal', 'local', 'none')),
  Channel       varchar(8) NOT NULL CONSTRAINT CK_OpsAudit_Channel CHECK (Channel IN ('key', 'console')),
  Role          varchar(10) NULL CONSTRAINT CK_OpsAudit_Role CHECK (Role IN ('reader', 'producer', 'operator')),
  RequiredRole  varchar(10) NOT NULL CONSTRAINT CK_OpsAudit_RequiredRole CHECK (RequiredRole IN ('reader', 'producer', 'operator')),
  HttpMethod    varchar(8) NOT NULL,
  Action        nvarchar(64) NOT NULL, -- the route's operationId
  Target        nvarchar(400) NULL,    -- e.g. queue:emails, job:42, batch:<uuid>, transfer:orders
  Summary       nvarchar(2000) NULL,   -- path parameters and the body with payloads replaced by size and digest
  Outcome       varchar(8) NOT NULL CONSTRAINT CK_OpsAudit_Outcome CHECK (Outcome IN ('started', 'ok', 'refused', 'failed')),
  Status        int NULL,
  Reason        nvarchar(1000) NULL,
  Affected      bigint NULL,
  RequestId     nvarchar(128) NULL,
  ClientIp      nvarchar(64) NULL,
  FinishedAt    datetime2(3) NULL
);
GO

-- Retention purges and time-range searches.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'IX_OpsAudit_At' AND object_id = OBJECT_ID(N'keel.OpsAudit'))
CREATE NONCLUSTERED INDEX IX_OpsAudit_At ON keel.OpsAudit (At);
GO

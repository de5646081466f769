-- The ops audit trail's procedures over keel.OpsAudit (V030), the twins of sql/postgres/R__040_ops_audit_functions.sql.
-- Repeatable (sql/README.md). The table stands alone: each procedure touches only its rows, in one statement, so it
-- takes no place in the lock order.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

-- RecordAudit(...): adds one row and returns its Id. Outcome 'started' for a write about to run (FinishAudit closes
-- it), 'refused' for a refusal (a finished row at once).
CREATE OR ALTER PROCEDURE keel.RecordAudit
  @PrincipalId NVARCHAR(128),
  @PrincipalName NVARCHAR(256),
  @TenantId NVARCHAR(64),
  @AppId NVARCHAR(64),
  @AuthMethod VARCHAR(10),
  @Channel VARCHAR(8),
  @Role VARCHAR(10),
  @RequiredRole VARCHAR(10),
  @HttpMethod VARCHAR(8),
  @Action NVARCHAR(64),
  @Target NVARCHAR(400),
  @Summary NVARCHAR(2000),
  @Outcome VARCHAR(8),
  @Status INT,
  @Reason NVARCHAR(1000),
  @Affected BIGINT,
  @RequestId NVARCHAR(128),
  @ClientIp NVARCHAR(64)
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  INSERT keel.OpsAudit (PrincipalId, PrincipalName, TenantId, AppId, AuthMethod, Channel, Role, RequiredRole,
                        HttpMethod, Action, Target, Summary, Outcome, Status, Reason, Affected, RequestId, ClientIp,
                        FinishedAt)
  OUTPUT inserted.Id AS Result
  VALUES (@PrincipalId, @PrincipalName, @TenantId, @AppId, @AuthMethod, @Channel, @Role, @RequiredRole,
          @HttpMethod, @Action, @Target, @Summary, @Outcome, @Status, @Reason, @Affected, @RequestId, @ClientIp,
          CASE WHEN @Outcome = 'started' THEN NULL ELSE SYSUTCDATETIME() END);
END;
GO

-- FinishAudit(@Id, @Outcome, @Status, @Reason, @Affected): closes a 'started' row once, as 'ok' or 'failed'. A
-- finished row is never changed again: Result 0 when the row is not (or no longer) started.
CREATE OR ALTER PROCEDURE keel.FinishAudit
  @Id BIGINT,
  @Outcome VARCHAR(8),
  @Status INT,
  @Reason NVARCHAR(1000),
  @Affected BIGINT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  IF @Outcome IS NULL OR @Outcome NOT IN ('ok', 'failed')
    THROW 50080, N'FinishAudit: @Outcome must be ok or failed', 1;
  UPDATE keel.OpsAudit
  SET Outcome = @Outcome, Status = @Status, Reason = @Reason, Affected = @Affected, FinishedAt = SYSUTCDATETIME()
  WHERE Id = @Id AND Outcome = 'started';
  SELECT CAST(CASE WHEN @@ROWCOUNT = 1 THEN 1 ELSE 0 END AS bit) AS Result;
END;
GO

-- SearchAudit(...): newest first (by Id), below @BeforeId. Examines at most @ScanRows rows (the newest below
-- @BeforeId) and returns those matching, up to @Limit. When the scan stopped at its bound before the page filled, a
-- last row with a NULL Id carries ScanFloor, the lowest Id examined: the caller continues below it. @Principal
-- matches the object id or the name; @Target matches exactly, and a queue target (queue:<name>) also the records of
-- calls over several queues naming it (queue:a,b: an enqueue of a batch); the other filters match exactly.
CREATE OR ALTER PROCEDURE keel.SearchAudit
  @From DATETIME2(3),
  @To DATETIME2(3),
  @Principal NVARCHAR(256),
  @Action NVARCHAR(64),
  @Target NVARCHAR(400),
  @Outcome VARCHAR(8),
  @BeforeId BIGINT,
  @ScanRows INT,
  @Limit INT
AS
BEGIN
  SET NOCOUNT ON;
  IF @Limit IS NULL OR @Limit < 1 OR @ScanRows IS NULL OR @ScanRows < 1
    THROW 50081, N'SearchAudit: @Limit and @ScanRows must be positive integers', 1;
  DECLARE @Floor bigint, @Examined int;
  -- The window: the newest @ScanRows ids below @BeforeId (a walk down the clustered key, ids only).
  SELECT @Floor = MIN(w.Id), @Examined = COUNT(*)
  FROM (SELECT TOP (@ScanRows) a.Id FROM keel.OpsAudit AS a
        WHERE @BeforeId IS NULL OR a.Id < @BeforeId
        ORDER BY a.Id DESC) AS w;
  IF @Examined = 0 RETURN;
  IF @Examined < @ScanRows SET @Floor = NULL; -- the window reached the oldest row: no marker
  -- One result set: the matches, then the marker row (NULL Id, ScanFloor) when the scan stopped at its bound.
  SELECT u.* FROM (
    SELECT * FROM (
      SELECT TOP (@Limit) a.Id, a.At, a.PrincipalId, a.PrincipalName, a.TenantId, a.AppId, a.AuthMethod, a.Channel,
             a.Role, a.RequiredRole, a.HttpMethod, a.Action, a.Target, a.Summary, a.Outcome, a.Status, a.Reason,
             a.Affected, a.RequestId, a.ClientIp, a.FinishedAt, CONVERT(bigint, NULL) AS ScanFloor
      FROM keel.OpsAudit AS a
      WHERE a.Id >= ISNULL(@Floor, 0) AND (@BeforeId IS NULL OR a.Id < @BeforeId)
        AND (@From IS NULL OR a.At >= @From)
        AND (@To IS NULL OR a.At < @To)
        AND (@Principal IS NULL OR a.PrincipalId = @Principal OR a.PrincipalName = @Principal)
        AND (@Action IS NULL OR a.Action = @Action)
        AND (@Target IS NULL OR a.Target = @Target
             OR (LEFT(@Target, 6) = N'queue:' AND LEFT(a.Target, 6) = N'queue:' AND CHARINDEX(N',', a.Target) > 0
                 AND CHARINDEX(N',' + SUBSTRING(@Target, 7, 400) + N',', N',' + SUBSTRING(a.Target, 7, 400) + N',') > 0))
        AND (@Outcome IS NULL OR a.Outcome = @Outcome)
      ORDER BY a.Id DESC) AS found
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, @Floor
    WHERE @Floor IS NOT NULL) AS u
  ORDER BY IIF(u.Id IS NULL, 1, 0), u.Id DESC
  OPTION (RECOMPILE); -- a plan for this call's filters
END;
GO

-- PurgeAudit(@OlderThan, @BatchSize): deletes one batch of rows recorded before @OlderThan, oldest first; returns
-- rows deleted (Result). The only way the application can remove audit rows (the retention pass calls it).
CREATE OR ALTER PROCEDURE keel.PurgeAudit
  @OlderThan DATETIME2(3),
  @BatchSize INT
AS
BEGIN
  SET XACT_ABORT ON;
  SET NOCOUNT ON;
  SET DEADLOCK_PRIORITY LOW; -- as Purge: a retention batch yields
  IF @BatchSize IS NULL OR @BatchSize < 1
    THROW 50082, N'PurgeAudit: @BatchSize must be a positive integer', 1;
  IF @OlderThan IS NULL
    THROW 50083, N'PurgeAudit: @OlderThan is required', 1;
  WITH c AS (
    SELECT TOP (@BatchSize) a.Id FROM keel.OpsAudit AS a WITH (UPDLOCK, READPAST, READCOMMITTEDLOCK, ROWLOCK)
    WHERE a.At < @OlderThan
    ORDER BY a.At)
  DELETE FROM c;
  SELECT CAST(@@ROWCOUNT AS bigint) AS Result;
END;
GO

-- Keel post-provision step for Azure SQL: gives the function app's user-assigned managed identity a
-- contained database user whose only permission is membership of keel_executor (EXECUTE on schema keel;
-- the role is created by the SQL Server migrations, so run `npm run migrate` first).
--
-- Run as the server's Microsoft Entra administrator, connected to the Keel database, e.g.
--   sqlcmd -S <server>.database.windows.net -d keel --authentication-method ActiveDirectoryDefault -b \
--     -v IdentityName="<identity resource name>" IdentityClientId="<identity client (application) id>" \
--     -i infra/sql/post-provision.sql
-- infra/scripts/postprovision.sh does this for `azd up`. Safe to run again: every step checks first.
--
-- The user is created WITH SID = <client id>, TYPE = E: for a managed identity the SID Azure SQL matches
-- against the access token is its client (application) id, and this form needs no Microsoft Graph lookup,
-- so neither the server's identity nor the person or pipeline running it needs directory permissions.

SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @identity sysname = N'$(IdentityName)';
DECLARE @clientId uniqueidentifier = TRY_CONVERT(uniqueidentifier, N'$(IdentityClientId)');
DECLARE @sid varbinary(16) = CAST(@clientId AS varbinary(16));
DECLARE @sql nvarchar(max);

IF DATABASE_PRINCIPAL_ID(N'keel_executor') IS NULL
    THROW 50001, N'Role keel_executor does not exist in this database: install the schema first (npm run migrate).', 1;

IF @clientId IS NULL
    THROW 50002, N'IdentityClientId must be the managed identity''s client (application) id, a GUID.', 1;

IF DATABASE_PRINCIPAL_ID(@identity) IS NULL
BEGIN
    SET @sql = N'CREATE USER ' + QUOTENAME(@identity) + N' WITH SID = ' + CONVERT(nvarchar(34), @sid, 1)
             + N', TYPE = E;';
    EXEC sys.sp_executesql @sql;
    PRINT N'Created database user ' + QUOTENAME(@identity) + N'.';
END
ELSE IF NOT EXISTS (
    SELECT 1 FROM sys.database_principals
    WHERE name = @identity AND type = 'E' AND CAST(sid AS varbinary(16)) = @sid
)
    -- Same name, other identity (recreated identity, or a user made by hand from another principal).
    THROW 50003, N'A database user with the identity''s name exists but does not belong to this client id: drop it (DROP USER) and run this script again.', 1;
ELSE
    PRINT N'Database user ' + QUOTENAME(@identity) + N' already exists for this identity.';

IF NOT EXISTS (
    SELECT 1
    FROM sys.database_role_members AS rm
    JOIN sys.database_principals AS r ON r.principal_id = rm.role_principal_id
    JOIN sys.database_principals AS m ON m.principal_id = rm.member_principal_id
    WHERE r.name = N'keel_executor' AND m.name = @identity
)
BEGIN
    SET @sql = N'ALTER ROLE keel_executor ADD MEMBER ' + QUOTENAME(@identity) + N';';
    EXEC sys.sp_executesql @sql;
    PRINT N'Added ' + QUOTENAME(@identity) + N' to keel_executor.';
END
ELSE
    PRINT QUOTENAME(@identity) + N' is already a member of keel_executor.';

-- Least privilege: the identity must hold no other role and no direct permission beyond CONNECT.
IF EXISTS (
    SELECT 1
    FROM sys.database_role_members AS rm
    JOIN sys.database_principals AS r ON r.principal_id = rm.role_principal_id
    JOIN sys.database_principals AS m ON m.principal_id = rm.member_principal_id
    WHERE m.name = @identity AND r.name <> N'keel_executor'
)
    PRINT N'WARNING: ' + QUOTENAME(@identity) + N' is a member of roles other than keel_executor; review sys.database_role_members.';

IF EXISTS (
    SELECT 1
    FROM sys.database_permissions AS p
    WHERE p.grantee_principal_id = DATABASE_PRINCIPAL_ID(@identity)
      AND p.permission_name <> N'CONNECT'
)
    PRINT N'WARNING: ' + QUOTENAME(@identity) + N' holds direct permissions besides CONNECT; review sys.database_permissions.';

-- What keel_executor may do, for the deployment log.
SELECT r.name AS role_name, p.state_desc, p.permission_name, p.class_desc,
       CASE p.class WHEN 0 THEN DB_NAME() WHEN 1 THEN OBJECT_NAME(p.major_id) WHEN 3 THEN SCHEMA_NAME(p.major_id) END AS securable
FROM sys.database_permissions AS p
JOIN sys.database_principals AS r ON r.principal_id = p.grantee_principal_id
WHERE r.name = N'keel_executor';
GO

-- Creates the database user of the app's managed identity (Microsoft Entra ID) and gives it only keel_executor.
-- Run it in the application database (not master), connected as the server's Microsoft Entra admin, after the
-- migrations (R__900_executor_role.sql creates the role). Replace keel-func (twice) with the name of the Function App (system-assigned
-- identity) or of the user-assigned managed identity. Re-running it is harmless.
--   sqlcmd -S <server>.database.windows.net -d <database> -G -i sql/sqlserver/admin/create-identity-user.sql
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF DATABASE_PRINCIPAL_ID(N'keel-func') IS NULL
  CREATE USER [keel-func] FROM EXTERNAL PROVIDER;
GO

IF IS_ROLEMEMBER(N'keel_executor', N'keel-func') = 0
  ALTER ROLE keel_executor ADD MEMBER [keel-func];
GO

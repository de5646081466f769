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

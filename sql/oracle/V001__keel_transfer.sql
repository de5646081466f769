-- Keel transfer objects on an Oracle TARGET, in the schema Keel connects as. Applied by
-- shared/engines/oracle/transferMigrate.ts: blocks are separated by lines holding only "/"; each block is run as
-- one statement. Table DDL is idempotent (ORA-00955 "name is already used" is ignored); the package is
-- CREATE OR REPLACE. The Keel user needs SELECT/INSERT/UPDATE on the target tables, CREATE SESSION, CREATE TABLE,
-- CREATE PROCEDURE, a quota on its default tablespace (without one CREATE TABLE succeeds and the first insert fails
-- with ORA-01950), and for Transaction Guard EXECUTE on DBMS_APP_CONT; the exact statements are in docs/oracle.md.
-- KEEL_TRANSFER is AUTHID CURRENT_USER and Keel connects as the schema owner: a definer's-rights package runs with
-- the owner's DIRECT grants only (roles are disabled), so the CREATE TABLE of ENSURE_STAGING and the MERGE into a
-- table of another schema would fail with ORA-01031/ORA-00942 for a user whose privileges come from a role (e.g.
-- gvenzl/oracle-free's APP_USER, which holds only DB_DEVELOPER_ROLE).

-- One row per staging of a batch, written in the staging transaction: a committed row means the staged rows
-- are all there and matched the manifest. Its primary key serializes rival stagings; APPLY_BATCH locks it
-- first, which is what TRY_CLAIM waits on (with a bound) to learn whether an apply is still open.
DECLARE
  e_exists EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_exists, -955);
BEGIN
  EXECUTE IMMEDIATE q'[
    CREATE TABLE KEEL_TRANSFER_STAGED (
      BATCH_ID           VARCHAR2(36) NOT NULL,
      TRANSFER_NAME      VARCHAR2(64) NOT NULL,
      STATE              VARCHAR2(10) NOT NULL,
      EXPECTED_COUNT     NUMBER(19) NOT NULL,
      EXPECTED_CHECKSUM  VARCHAR2(24) NOT NULL,
      ROW_COUNT          NUMBER(19),
      CHECKSUM           VARCHAR2(24),
      STARTED_AT         TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL,
      STAGED_AT          TIMESTAMP,
      CONSTRAINT PK_KEEL_TRANSFER_STAGED PRIMARY KEY (BATCH_ID),
      CONSTRAINT CK_KEEL_TRANSFER_STAGED_STATE CHECK (STATE IN ('STAGING', 'STAGED'))
    )]';
EXCEPTION
  WHEN e_exists THEN NULL;
END;
/

-- The completion row: inserted first by APPLY_BATCH (the claim) and marked COMMITTED in the same transaction.
-- A visible row is COMMITTED (applied, for good) or FENCED: TRY_CLAIM ruled the batch "not applied" for every
-- attempt <= FENCED_THROUGH and committed that verdict, so a later APPLY_BATCH of such an attempt fails (ORA-20005)
-- instead of committing; a later attempt takes the row over. Abandon fences with 2147483647 (every attempt).
DECLARE
  e_exists EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_exists, -955);
BEGIN
  EXECUTE IMMEDIATE q'[
    CREATE TABLE KEEL_TRANSFER_COMPLETIONS (
      BATCH_ID       VARCHAR2(36) NOT NULL,
      TRANSFER_NAME  VARCHAR2(64) NOT NULL,
      STATE          VARCHAR2(10) NOT NULL,
      ROW_COUNT      NUMBER(19),
      CHECKSUM       VARCHAR2(24),
      ATTEMPT        NUMBER(19),
      FENCED_THROUGH NUMBER(19) DEFAULT 0 NOT NULL,
      CLAIMED_AT     TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL,
      COMMITTED_AT   TIMESTAMP,
      FENCED_AT      TIMESTAMP,
      CONSTRAINT PK_KEEL_TRANSFER_COMPLETIONS PRIMARY KEY (BATCH_ID),
      CONSTRAINT CK_KEEL_TRANSFER_COMPL_STATE CHECK (STATE IN ('CLAIMED', 'COMMITTED', 'FENCED'))
    )]';
EXCEPTION
  WHEN e_exists THEN NULL;
END;
/

-- Change windows carry deletes (docs/transfer.md, "Deletes"): the completion row also records how many target rows
-- APPLY_BATCH deleted (staged 'D' rows that found their key, and a baseline's mirror deletes), in the same
-- transaction. Idempotent: ORA-01430 "column being added already exists" is ignored.
DECLARE
  e_exists EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_exists, -1430);
BEGIN
  EXECUTE IMMEDIATE 'ALTER TABLE KEEL_TRANSFER_COMPLETIONS ADD (DELETED_COUNT NUMBER(19))';
EXCEPTION
  WHEN e_exists THEN NULL;
END;
/

-- Package KEEL_TRANSFER over the tables in V001__keel_transfer.sql. Repeatable (sql/README.md): CREATE OR REPLACE.
CREATE OR REPLACE PACKAGE KEEL_TRANSFER AUTHID CURRENT_USER AS
  -- 'NEW' (load rows in this transaction), 'ALREADY_STAGED' (same content), or ORA-20001 (different content).
  FUNCTION BEGIN_STAGE(p_batch_id IN VARCHAR2, p_transfer IN VARCHAR2, p_expected_count IN NUMBER, p_expected_checksum IN VARCHAR2) RETURN VARCHAR2;
  PROCEDURE FINISH_STAGE(p_batch_id IN VARCHAR2, p_count IN NUMBER, p_checksum IN VARCHAR2);
  -- Creates KEEL_STG_<TRANSFER> with the mapped target columns' types (re-creates it while empty if the mapping changed).
  -- p_ops = 1 (change windows, docs/transfer.md "Deletes"): also the operation column KEEL_OP ('U' upsert, 'D'
  -- delete by key), and every mapped column nullable (a delete row holds its key and NULLs).
  PROCEDURE ENSURE_STAGING(p_transfer IN VARCHAR2, p_owner IN VARCHAR2, p_table IN VARCHAR2, p_columns IN VARCHAR2, p_ops IN NUMBER,
                           o_staging OUT VARCHAR2);
  -- One transaction: lock the staging registry row, claim (insert the completion row, or take over a fence that
  -- ruled out only earlier attempts; ORA-20005 when p_attempt is fenced), MERGE, mark committed, COMMIT.
  -- p_changes (change windows; NULL: every staged row is an upsert): 'OPS' -- staged rows with KEEL_OP 'D' delete
  -- the target row of their key, 'U' rows are merged; 'MIRROR' (a baseline) -- 'OPS', then every target row whose
  -- key is not staged in the batch is deleted (a windowed baseline's key window, p_mirror_low/p_mirror_high not both
  -- NULL: only the target rows whose first key column, a NUMBER, is in (p_mirror_low, p_mirror_high], canonical
  -- integer texts, a NULL bound open on that side). All in the one transaction, with the completion row:
  -- o_row_count = upserts merged + 'D' rows staged, o_deleted = target rows deleted (NULL without p_changes).
  PROCEDURE APPLY_BATCH(p_batch_id IN VARCHAR2, p_transfer IN VARCHAR2, p_owner IN VARCHAR2, p_table IN VARCHAR2, p_staging IN VARCHAR2,
                        p_columns IN VARCHAR2, p_keys IN VARCHAR2, p_expected_count IN NUMBER, p_expected_checksum IN VARCHAR2,
                        p_attempt IN NUMBER, p_changes IN VARCHAR2, p_mirror_low IN VARCHAR2, p_mirror_high IN VARCHAR2, o_outcome OUT VARCHAR2, o_row_count OUT NUMBER, o_checksum OUT VARCHAR2,
                        o_deleted OUT NUMBER);
  -- Reconcile: 'COMMITTED' | 'NOT_APPLIED' | 'NOT_APPLIED_FINAL' | 'BLOCKED' (an apply still holds the claim after
  -- p_wait_seconds). NOT_APPLIED commits a fence through p_fence_through (0: probe only, nothing kept): final for
  -- those attempts; NOT_APPLIED_FINAL: the row holds the final fence (2147483647, abandon's), no apply can ever commit.
  PROCEDURE TRY_CLAIM(p_batch_id IN VARCHAR2, p_wait_seconds IN NUMBER, p_fence_through IN NUMBER, o_outcome OUT VARCHAR2,
                      o_row_count OUT NUMBER, o_checksum OUT VARCHAR2, o_staged OUT NUMBER);
  PROCEDURE PURGE_STAGED(p_batch_id IN VARCHAR2, p_staging IN VARCHAR2);
  -- The ids of the transfer's batches with a committed staging registry row after p_after (NULL: from the first),
  -- in id order, at most p_max_count (1..100), comma-separated (NULL: none): maintenance purges those the journal
  -- holds terminal, and asks after the last id it read next time (a cursor that wraps).
  PROCEDURE STAGED_BATCHES(p_transfer IN VARCHAR2, p_max_count IN NUMBER, p_after IN VARCHAR2, o_batch_ids OUT VARCHAR2);
END KEEL_TRANSFER;
/

CREATE OR REPLACE PACKAGE BODY KEEL_TRANSFER AS
  e_busy EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_busy, -30006); -- resource busy; acquire with WAIT timeout expired
  e_exists EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_exists, -955); -- name is already used by an existing object
  e_ddl_busy EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_ddl_busy, -54); -- resource busy and acquire with NOWAIT specified (DDL_LOCK_TIMEOUT 0)
  e_already_not_null EXCEPTION;
  PRAGMA EXCEPTION_INIT(e_already_not_null, -1442); -- column to be modified to NOT NULL is already NOT NULL

  TYPE t_names IS TABLE OF VARCHAR2(130) INDEX BY PLS_INTEGER;
  -- A column's declared type on the target and on the staging table (changed_columns), by column name.
  TYPE t_type_pair IS RECORD (target_type VARCHAR2(400), staged_type VARCHAR2(400));
  TYPE t_types_by_name IS TABLE OF t_type_pair INDEX BY VARCHAR2(130);

  -- Splits a comma-separated list of plain identifiers; each is checked by DBMS_ASSERT and returned quoted.
  FUNCTION split_names(p_list IN VARCHAR2) RETURN t_names IS
    v_out t_names;
    v_pos PLS_INTEGER := 1;
    v_next PLS_INTEGER;
    v_item VARCHAR2(130);
  BEGIN
    LOOP
      v_next := INSTR(p_list, ',', v_pos);
      v_item := CASE WHEN v_next = 0 THEN SUBSTR(p_list, v_pos) ELSE SUBSTR(p_list, v_pos, v_next - v_pos) END;
      v_out(v_out.COUNT + 1) := DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(v_item), FALSE);
      EXIT WHEN v_next = 0;
      v_pos := v_next + 1;
    END LOOP;
    RETURN v_out;
  END split_names;

  FUNCTION qualified(p_owner IN VARCHAR2, p_table IN VARCHAR2) RETURN VARCHAR2 IS
  BEGIN
    IF p_owner IS NULL THEN
      RETURN DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(p_table), FALSE);
    END IF;
    RETURN DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(p_owner), FALSE) || '.' ||
           DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(p_table), FALSE);
  END qualified;

  FUNCTION join_names(p_names IN t_names, p_prefix IN VARCHAR2) RETURN VARCHAR2 IS
    v_out VARCHAR2(32767);
  BEGIN
    FOR i IN 1 .. p_names.COUNT LOOP
      v_out := v_out || CASE WHEN i > 1 THEN ', ' END || p_prefix || p_names(i);
    END LOOP;
    RETURN v_out;
  END join_names;

  FUNCTION is_key(p_name IN VARCHAR2, p_keys IN t_names) RETURN BOOLEAN IS
  BEGIN
    FOR i IN 1 .. p_keys.COUNT LOOP
      IF p_keys(i) = p_name THEN RETURN TRUE; END IF;
    END LOOP;
    RETURN FALSE;
  END is_key;

  -- The staging table's columns (KEEL_BATCH_ID aside) as "A","B",... in column order. A loop into a 32,767-byte
  -- PL/SQL variable, not LISTAGG, whose SQL result is limited to 4,000 bytes (ORA-01489 on wide mappings).
  -- Staging tables and the KEEL_TRANSFER_* tables are named unqualified, so they live in the session's CURRENT_SCHEMA
  -- (the login's schema unless a logon trigger or the app ran ALTER SESSION SET CURRENT_SCHEMA): every dictionary
  -- read of them names that owner, never USER_* views (the login's own schema), which would miss them then and
  -- rebuild or refuse the staging table on every prepare.
  FUNCTION staging_columns(p_name IN VARCHAR2) RETURN VARCHAR2 IS
    v_out VARCHAR2(32767);
  BEGIN
    FOR r IN (SELECT COLUMN_NAME FROM ALL_TAB_COLUMNS
               WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND TABLE_NAME = p_name AND COLUMN_NAME <> 'KEEL_BATCH_ID'
               ORDER BY COLUMN_ID) LOOP
      v_out := v_out || CASE WHEN v_out IS NOT NULL THEN ',' END || '"' || r.COLUMN_NAME || '"';
    END LOOP;
    RETURN v_out;
  END staging_columns;

  -- Whether the target table still has a key on exactly p_keys (an enabled primary key or unique constraint, or a
  -- unique non-function-based index), by the rule the service's prepare checks once per process: APPLY_BATCH asks
  -- again under its table lock, since the MERGE runs without one but is exact only with it (two applies of
  -- overlapping windows at once would each insert a key they found absent). The PostgreSQL target checks the same.
  FUNCTION key_indexed(p_owner IN VARCHAR2, p_table IN VARCHAR2, p_keys IN t_names) RETURN BOOLEAN IS
    v_owner VARCHAR2(130) := NVL(p_owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA'));
    v_cols PLS_INTEGER;
    v_hits PLS_INTEGER;
  BEGIN
    FOR r IN (SELECT 'C' AS KIND, k.OWNER AS OWNER, k.CONSTRAINT_NAME AS NAME FROM ALL_CONSTRAINTS k
               WHERE k.OWNER = v_owner AND k.TABLE_NAME = p_table AND k.CONSTRAINT_TYPE IN ('P', 'U') AND k.STATUS = 'ENABLED'
              UNION ALL
              SELECT 'I', i.OWNER, i.INDEX_NAME FROM ALL_INDEXES i
               WHERE i.TABLE_OWNER = v_owner AND i.TABLE_NAME = p_table AND i.UNIQUENESS = 'UNIQUE'
                 AND i.INDEX_TYPE NOT LIKE 'FUNCTION-BASED%') LOOP
      -- Its columns, each looked up among the keys (enquoted as split_names makes them): as many, all keys, is the set.
      v_cols := 0;
      v_hits := 0;
      FOR c IN (SELECT cc.COLUMN_NAME FROM ALL_CONS_COLUMNS cc
                 WHERE r.KIND = 'C' AND cc.OWNER = r.OWNER AND cc.CONSTRAINT_NAME = r.NAME AND cc.TABLE_NAME = p_table
                UNION ALL
                SELECT ic.COLUMN_NAME FROM ALL_IND_COLUMNS ic
                 WHERE r.KIND = 'I' AND ic.INDEX_OWNER = r.OWNER AND ic.INDEX_NAME = r.NAME) LOOP
        v_cols := v_cols + 1;
        IF is_key('"' || c.COLUMN_NAME || '"', p_keys) THEN
          v_hits := v_hits + 1;
        END IF;
      END LOOP;
      IF v_cols = p_keys.COUNT AND v_hits = v_cols THEN
        RETURN TRUE;
      END IF;
    END LOOP;
    RETURN FALSE;
  END key_indexed;

  -- The mapped columns whose declared type on the target is not the staging table's (NULL: none). The staging table
  -- is made with the target's types (ENSURE_STAGING's CTAS) and the staged rows are verified in them: a target column
  -- altered since (an operator's ALTER TABLE: a narrower scale, another type) would convert the verified values on the
  -- way in and commit rows that are not the source's (the PostgreSQL target checks the same: apply_batch).
  -- One dictionary query for both tables (the target's columns joined by name to the staging table's; p_owner NULL:
  -- the current schema, where ENSURE_STAGING makes staging tables), not two lookups per mapped column. A declared
  -- type is described as type(length,precision,scale,char length and semantics); NULL on a side without the column.
  FUNCTION changed_columns(p_owner IN VARCHAR2, p_table IN VARCHAR2, p_staging IN VARCHAR2, p_cols IN t_names) RETURN VARCHAR2 IS
    v_out VARCHAR2(2000);
    v_types t_types_by_name;
    v_pair t_type_pair;
    v_name VARCHAR2(130);
    v_target VARCHAR2(400);
    v_staged VARCHAR2(400);
  BEGIN
    FOR r IN (SELECT NVL(t.COLUMN_NAME, s.COLUMN_NAME) AS COLUMN_NAME, t.TYPE_DESC AS TARGET_TYPE, s.TYPE_DESC AS STAGED_TYPE
                FROM (SELECT c.COLUMN_NAME,
                             c.DATA_TYPE || '(' || c.DATA_LENGTH || ',' || c.DATA_PRECISION || ',' || c.DATA_SCALE || ',' ||
                             c.CHAR_LENGTH || c.CHAR_USED || ')' AS TYPE_DESC
                        FROM ALL_TAB_COLUMNS c
                       WHERE c.OWNER = NVL(p_owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')) AND c.TABLE_NAME = p_table) t
                FULL OUTER JOIN
                     (SELECT c.COLUMN_NAME,
                             c.DATA_TYPE || '(' || c.DATA_LENGTH || ',' || c.DATA_PRECISION || ',' || c.DATA_SCALE || ',' ||
                             c.CHAR_LENGTH || c.CHAR_USED || ')' AS TYPE_DESC
                        FROM ALL_TAB_COLUMNS c
                       WHERE c.OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND c.TABLE_NAME = p_staging) s
                  ON s.COLUMN_NAME = t.COLUMN_NAME) LOOP
      v_pair.target_type := r.TARGET_TYPE;
      v_pair.staged_type := r.STAGED_TYPE;
      v_types(r.COLUMN_NAME) := v_pair;
    END LOOP;
    FOR i IN 1 .. p_cols.COUNT LOOP
      v_name := TRIM(BOTH '"' FROM p_cols(i));
      v_target := NULL;
      v_staged := NULL;
      IF v_types.EXISTS(v_name) THEN
        v_target := v_types(v_name).target_type;
        v_staged := v_types(v_name).staged_type;
      END IF;
      IF v_target IS NULL OR v_staged IS NULL OR v_target <> v_staged THEN
        v_out := SUBSTR(v_out || CASE WHEN v_out IS NOT NULL THEN '; ' END || p_cols(i) || ' is ' || NVL(v_target, 'dropped') ||
                        ', staged as ' || NVL(v_staged, 'missing'), 1, 2000);
      END IF;
    END LOOP;
    RETURN v_out;
  END changed_columns;

  FUNCTION BEGIN_STAGE(p_batch_id IN VARCHAR2, p_transfer IN VARCHAR2, p_expected_count IN NUMBER, p_expected_checksum IN VARCHAR2) RETURN VARCHAR2 IS
    v_state KEEL_TRANSFER_STAGED.STATE%TYPE;
    v_count KEEL_TRANSFER_STAGED.ROW_COUNT%TYPE;
    v_checksum KEEL_TRANSFER_STAGED.CHECKSUM%TYPE;
  BEGIN
    BEGIN
      -- A rival staging of the same batch blocks here until ours commits or rolls back.
      INSERT INTO KEEL_TRANSFER_STAGED (BATCH_ID, TRANSFER_NAME, STATE, EXPECTED_COUNT, EXPECTED_CHECKSUM)
      VALUES (p_batch_id, p_transfer, 'STAGING', p_expected_count, p_expected_checksum);
      RETURN 'NEW';
    EXCEPTION
      WHEN DUP_VAL_ON_INDEX THEN NULL;
    END;
    SELECT STATE, ROW_COUNT, CHECKSUM INTO v_state, v_count, v_checksum FROM KEEL_TRANSFER_STAGED WHERE BATCH_ID = p_batch_id;
    IF v_state = 'STAGED' AND v_count = p_expected_count AND v_checksum = p_expected_checksum THEN
      RETURN 'ALREADY_STAGED';
    END IF;
    RAISE_APPLICATION_ERROR(-20001, 'batch ' || p_batch_id || ' was staged earlier with different content (' || v_count || ' rows, checksum ' ||
      v_checksum || '; manifest says ' || p_expected_count || ' rows, checksum ' || p_expected_checksum || ')');
  END BEGIN_STAGE;

  PROCEDURE FINISH_STAGE(p_batch_id IN VARCHAR2, p_count IN NUMBER, p_checksum IN VARCHAR2) IS
  BEGIN
    UPDATE KEEL_TRANSFER_STAGED SET STATE = 'STAGED', ROW_COUNT = p_count, CHECKSUM = p_checksum, STAGED_AT = SYSTIMESTAMP
     WHERE BATCH_ID = p_batch_id;
  END FINISH_STAGE;

  PROCEDURE ENSURE_STAGING(p_transfer IN VARCHAR2, p_owner IN VARCHAR2, p_table IN VARCHAR2, p_columns IN VARCHAR2, p_ops IN NUMBER,
                           o_staging OUT VARCHAR2) IS
    v_name VARCHAR2(128) := 'KEEL_STG_' || UPPER(p_transfer);
    v_index VARCHAR2(128) := SUBSTR('KEEL_STG_' || UPPER(p_transfer), 1, 120) || '_B';
    v_cols t_names := split_names(p_columns);
    v_existing VARCHAR2(32767);
    v_wanted VARCHAR2(32767);
    v_rows NUMBER;
    v_nullable ALL_TAB_COLUMNS.NULLABLE%TYPE;
    v_not_null t_names;
  BEGIN
    IF NOT REGEXP_LIKE(p_transfer, '^[a-z][a-z0-9_]{0,39}$') THEN
      RAISE_APPLICATION_ERROR(-20004, 'transfer name ' || p_transfer || ' is not a plain identifier');
    END IF;
    o_staging := v_name;
    FOR i IN 1 .. v_cols.COUNT LOOP
      v_wanted := v_wanted || CASE WHEN i > 1 THEN ',' END || v_cols(i);
    END LOOP;
    IF p_ops = 1 THEN
      v_wanted := v_wanted || ',"KEEL_OP"';
    END IF;
    v_existing := staging_columns(v_name);
    -- The same names with other types (a target column altered since the staging table was made): made again, as for
    -- another column mapping, so that what is staged and verified is what the target column holds.
    IF v_existing = v_wanted AND changed_columns(p_owner, p_table, v_name, v_cols) IS NOT NULL THEN
      v_existing := v_existing || ' (other types)';
    END IF;
    IF v_existing IS NULL OR v_existing <> v_wanted THEN
      IF v_existing IS NOT NULL THEN
        EXECUTE IMMEDIATE 'SELECT COUNT(*) FROM ' || DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' WHERE ROWNUM = 1' INTO v_rows;
        IF v_rows > 0 THEN
          RAISE_APPLICATION_ERROR(-20004, 'staging table ' || v_name || ' holds rows for another column mapping or other column types; apply or purge those batches first');
        END IF;
        EXECUTE IMMEDIATE 'DROP TABLE ' || DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' PURGE';
      END IF;
      -- One DDL statement creates every column, KEEL_BATCH_ID and its NOT NULL included (a CTAS column list takes
      -- constraints without types). Two instances preparing the same transfer for the first time race here: the
      -- loser gets ORA-00955 and uses the winner's table if its columns are the ones wanted.
      BEGIN
        EXECUTE IMMEDIATE 'CREATE TABLE ' || DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' (KEEL_BATCH_ID NOT NULL, ' || join_names(v_cols, NULL) ||
                          CASE WHEN p_ops = 1 THEN ', KEEL_OP' END ||
                          ') AS SELECT CAST(NULL AS VARCHAR2(36)), ' || join_names(v_cols, NULL) ||
                          CASE WHEN p_ops = 1 THEN ', CAST(NULL AS VARCHAR2(1))' END ||
                          ' FROM ' || qualified(p_owner, p_table) || ' WHERE 1 = 0';
        IF p_ops = 1 THEN
          -- CTAS copies the target's NOT NULL constraints; a delete row holds only its key.
          -- (names first, then the DDL: no dictionary cursor open across it)
          SELECT COLUMN_NAME BULK COLLECT INTO v_not_null FROM ALL_TAB_COLUMNS
           WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND TABLE_NAME = v_name AND NULLABLE = 'N'
             AND COLUMN_NAME <> 'KEEL_BATCH_ID';
          FOR i IN 1 .. v_not_null.COUNT LOOP
            EXECUTE IMMEDIATE 'ALTER TABLE ' || DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' MODIFY (' ||
                              DBMS_ASSERT.ENQUOTE_NAME(v_not_null(i), FALSE) || ' NULL)';
          END LOOP;
        END IF;
      EXCEPTION
        WHEN e_exists THEN
          IF NVL(staging_columns(v_name), '-') <> v_wanted THEN
            RAISE_APPLICATION_ERROR(-20004, 'staging table ' || v_name || ' was just created by another session for another column mapping');
          END IF;
      END;
    END IF;
    -- Checked on every call, not only after a CREATE: the loser of the race above may already be staging (its open
    -- INSERT holds a TM lock) when the winner gets here, so this DDL can fail with ORA-00054; it is then left to
    -- the next call (the index is for speed, the NOT NULL a guard; neither decides anything).
    SELECT NULLABLE INTO v_nullable FROM ALL_TAB_COLUMNS
     WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND TABLE_NAME = v_name AND COLUMN_NAME = 'KEEL_BATCH_ID';
    IF v_nullable = 'Y' THEN
      BEGIN
        EXECUTE IMMEDIATE 'ALTER TABLE ' || DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' MODIFY (KEEL_BATCH_ID NOT NULL)';
      EXCEPTION
        WHEN e_ddl_busy OR e_already_not_null THEN NULL;
      END;
    END IF;
    SELECT COUNT(*) INTO v_rows FROM ALL_INDEXES
     WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND INDEX_NAME = v_index
       AND TABLE_OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND TABLE_NAME = v_name;
    IF v_rows = 0 THEN
      BEGIN
        EXECUTE IMMEDIATE 'CREATE INDEX ' || DBMS_ASSERT.ENQUOTE_NAME(v_index, FALSE) || ' ON ' ||
                          DBMS_ASSERT.ENQUOTE_NAME(v_name, FALSE) || ' (KEEL_BATCH_ID)';
      EXCEPTION
        WHEN e_ddl_busy OR e_exists THEN NULL; -- busy: the next call; exists: a rival created it meanwhile
      END;
    END IF;
  END ENSURE_STAGING;

  PROCEDURE APPLY_BATCH(p_batch_id IN VARCHAR2, p_transfer IN VARCHAR2, p_owner IN VARCHAR2, p_table IN VARCHAR2, p_staging IN VARCHAR2,
                        p_columns IN VARCHAR2, p_keys IN VARCHAR2, p_expected_count IN NUMBER, p_expected_checksum IN VARCHAR2,
                        p_attempt IN NUMBER, p_changes IN VARCHAR2, p_mirror_low IN VARCHAR2, p_mirror_high IN VARCHAR2, o_outcome OUT VARCHAR2, o_row_count OUT NUMBER, o_checksum OUT VARCHAR2,
                        o_deleted OUT NUMBER) IS
    v_cols t_names := split_names(p_columns);
    v_keys t_names := split_names(p_keys);
    v_state KEEL_TRANSFER_STAGED.STATE%TYPE;
    v_count KEEL_TRANSFER_STAGED.ROW_COUNT%TYPE;
    v_checksum KEEL_TRANSFER_STAGED.CHECKSUM%TYPE;
    v_on VARCHAR2(32767);
    v_set VARCHAR2(32767);
    v_sql CLOB; -- the MERGE names every column four times: wide mappings pass 32,767 bytes (ORA-06502 in a VARCHAR2)
    v_merged NUMBER;
    v_cstate KEEL_TRANSFER_COMPLETIONS.STATE%TYPE;
    v_fenced KEEL_TRANSFER_COMPLETIONS.FENCED_THROUGH%TYPE;
    v_stg VARCHAR2(130);
    v_upserts NUMBER;            -- staged rows to merge
    v_filter VARCHAR2(40);       -- the staged rows that are merged
    v_deleted NUMBER := 0;
    v_mirror CLOB;               -- the mirror's DELETE
    v_k1 VARCHAR2(130);          -- the first key column, as the MERGE names it
    v_ktype ALL_TAB_COLUMNS.DATA_TYPE%TYPE;
    v_changed VARCHAR2(2000);    -- mapped columns whose target type is not the staged one
    v_staged_rows NUMBER;        -- a change window's rows in the staging table, counted before its deletes
  BEGIN
    IF p_attempt IS NULL OR p_attempt < 1 THEN
      RAISE_APPLICATION_ERROR(-20006, 'APPLY_BATCH needs the journal attempt (>= 1)');
    END IF;
    IF p_changes IS NOT NULL AND p_changes NOT IN ('OPS', 'MIRROR') THEN
      RAISE_APPLICATION_ERROR(-20006, 'APPLY_BATCH: p_changes must be NULL, OPS or MIRROR, not ' || p_changes);
    END IF;
    -- A key-range mirror (a windowed baseline's key window) bounds a MIRROR only.
    IF (p_mirror_low IS NOT NULL OR p_mirror_high IS NOT NULL) AND NVL(p_changes, '-') <> 'MIRROR' THEN
      RAISE_APPLICATION_ERROR(-20006, 'APPLY_BATCH: p_mirror_low/p_mirror_high bound a MIRROR only');
    END IF;
    -- Already applied: a no-op that says so.
    BEGIN
      SELECT STATE, ROW_COUNT, CHECKSUM, DELETED_COUNT INTO v_cstate, o_row_count, o_checksum, o_deleted
        FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = p_batch_id;
      IF v_cstate = 'COMMITTED' THEN
        o_outcome := 'ALREADY_COMMITTED';
        ROLLBACK;
        RETURN;
      END IF;
    EXCEPTION
      WHEN NO_DATA_FOUND THEN NULL;
    END;
    -- Lock the staging registry row: a rival applier (or TRY_CLAIM) waits here until this transaction ends.
    BEGIN
      -- WAIT 30 (ORACLE_LOCK_WAIT_SECONDS in transferTarget.ts): a session left holding the row costs ORA-30006, which
      -- the client reports as a retryable 'target_busy', instead of a wait as long as the client's call timeout.
      SELECT STATE, ROW_COUNT, CHECKSUM INTO v_state, v_count, v_checksum FROM KEEL_TRANSFER_STAGED WHERE BATCH_ID = p_batch_id FOR UPDATE WAIT 30;
    EXCEPTION
      WHEN NO_DATA_FOUND THEN
        RAISE_APPLICATION_ERROR(-20002, 'batch ' || p_batch_id || ' is not staged on the target');
    END;
    -- Claim: insert the completion row; its primary key serializes rivals (the loser learns it here). A fence that
    -- TRY_CLAIM committed while it held the lock taken above is visible from here on: it is checked under a row lock.
    BEGIN
      INSERT INTO KEEL_TRANSFER_COMPLETIONS (BATCH_ID, TRANSFER_NAME, STATE, ATTEMPT) VALUES (p_batch_id, p_transfer, 'CLAIMED', p_attempt);
    EXCEPTION
      WHEN DUP_VAL_ON_INDEX THEN
        SELECT STATE, ROW_COUNT, CHECKSUM, FENCED_THROUGH, DELETED_COUNT INTO v_cstate, o_row_count, o_checksum, v_fenced, o_deleted
          FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = p_batch_id FOR UPDATE WAIT 30; -- bounded like the registry lock above (ORA-30006 -> target_busy)
        IF v_cstate = 'COMMITTED' THEN
          o_outcome := 'ALREADY_COMMITTED';
          ROLLBACK;
          RETURN;
        END IF;
        IF v_fenced >= p_attempt THEN
          RAISE_APPLICATION_ERROR(-20005, 'attempt ' || p_attempt || ' of batch ' || p_batch_id || ' was ruled out by reconcile (fenced through attempt ' ||
            v_fenced || '); nothing was applied');
        END IF;
        UPDATE KEEL_TRANSFER_COMPLETIONS SET STATE = 'CLAIMED', ATTEMPT = p_attempt, TRANSFER_NAME = p_transfer WHERE BATCH_ID = p_batch_id;
    END;
    IF v_state <> 'STAGED' THEN
      RAISE_APPLICATION_ERROR(-20002, 'batch ' || p_batch_id || ' is not staged on the target');
    END IF;
    IF v_count <> p_expected_count OR v_checksum <> p_expected_checksum THEN
      RAISE_APPLICATION_ERROR(-20001, 'batch ' || p_batch_id || ' staged ' || v_count || ' rows (checksum ' || v_checksum ||
        ') but the manifest says ' || p_expected_count || ' rows (checksum ' || p_expected_checksum || ')');
    END IF;

    FOR i IN 1 .. v_keys.COUNT LOOP
      v_on := v_on || CASE WHEN i > 1 THEN ' AND ' END || 't.' || v_keys(i) || ' = s.' || v_keys(i);
    END LOOP;
    FOR i IN 1 .. v_cols.COUNT LOOP
      IF NOT is_key(v_cols(i), v_keys) THEN
        v_set := v_set || CASE WHEN v_set IS NOT NULL THEN ', ' END || 't.' || v_cols(i) || ' = s.' || v_cols(i);
      END IF;
    END LOOP;
    v_stg := DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(p_staging), FALSE);
    v_upserts := v_count;
    -- The business table in row exclusive mode (what the MERGE takes anyway), with the same bounded wait: a table
    -- another session holds (LOCK TABLE, DDL) costs ORA-30006, a retryable 'target_busy' with nothing applied, instead
    -- of a wait as long as the client's call timeout (PostgreSQL: lock_timeout, KEEL_TRANSFER_LOCK_TIMEOUT_MS).
    EXECUTE IMMEDIATE 'LOCK TABLE ' || qualified(p_owner, p_table) || ' IN ROW EXCLUSIVE MODE WAIT 30';
    -- Checked under that lock, which an ALTER TABLE of the business table cannot pass (ORA-00054), so the types stay
    -- these until this transaction ends: a target column altered since the batch was staged refuses the batch (-20004:
    -- target_incompatible, its window released; the service checks the table again before the next).
    v_changed := changed_columns(p_owner, p_table, p_staging, v_cols);
    IF v_changed IS NOT NULL THEN
      RAISE_APPLICATION_ERROR(-20004, SUBSTR('batch ' || p_batch_id || ': target table ' || qualified(p_owner, p_table) ||
        ' changed since the batch was staged (' || v_changed || '); nothing applied, the next batch checks the table again', 1, 2000));
    END IF;
    IF NOT key_indexed(p_owner, p_table, v_keys) THEN
      RAISE_APPLICATION_ERROR(-20004, SUBSTR('batch ' || p_batch_id || ': target table ' || qualified(p_owner, p_table) ||
        ' has no primary key, unique constraint or unique index on exactly (' || join_names(v_keys, NULL) ||
        ') any more; nothing applied, the next batch checks the table again', 1, 2000));
    END IF;
    IF p_changes IS NOT NULL THEN
      -- The staged rows counted before anything is changed: the deletes and a mirror's are decided by what the staging
      -- table holds, so rows missing from it must fail the batch (-20003, as a merge that wrote other than the staged
      -- count: its window is extracted again) instead of committing a window that applied less (PostgreSQL: the same).
      EXECUTE IMMEDIATE 'SELECT COUNT(CASE WHEN KEEL_OP = ''U'' THEN 1 END), COUNT(*) FROM ' || v_stg || ' WHERE KEEL_BATCH_ID = :b'
        INTO v_upserts, v_staged_rows USING p_batch_id;
      IF v_staged_rows <> v_count THEN
        RAISE_APPLICATION_ERROR(-20003, 'batch ' || p_batch_id || ': the staging table holds ' || v_staged_rows || ' of its ' ||
          v_count || ' staged rows');
      END IF;
      -- Deletes first (a key is at most once in a batch: duplicates were refused at staging).
      EXECUTE IMMEDIATE TO_CLOB('DELETE FROM ') || qualified(p_owner, p_table) || ' t WHERE EXISTS (SELECT 1 FROM ' || v_stg ||
                        ' s WHERE s.KEEL_BATCH_ID = :b AND s.KEEL_OP = ''D'' AND ' || v_on || ')' USING p_batch_id;
      v_deleted := SQL%ROWCOUNT;
      v_filter := ' AND KEEL_OP = ''U''';
    END IF;
    v_sql := TO_CLOB('MERGE INTO ') || qualified(p_owner, p_table) || ' t USING (SELECT ' || join_names(v_cols, NULL) || ' FROM ' ||
             v_stg || ' WHERE KEEL_BATCH_ID = :b' || v_filter || ') s ON (' || v_on || ')' ||
             CASE WHEN v_set IS NOT NULL THEN ' WHEN MATCHED THEN UPDATE SET ' || v_set END ||
             ' WHEN NOT MATCHED THEN INSERT (' || join_names(v_cols, NULL) || ') VALUES (' || join_names(v_cols, 's.') || ')';
    EXECUTE IMMEDIATE v_sql USING p_batch_id;
    v_merged := SQL%ROWCOUNT;
    IF v_set IS NOT NULL AND v_merged <> v_upserts THEN
      RAISE_APPLICATION_ERROR(-20003, 'batch ' || p_batch_id || ' merged ' || v_merged || ' rows but ' || v_upserts || ' were staged');
    END IF;
    IF p_changes = 'MIRROR' THEN
      -- A baseline holds every row of the source table: a target row whose key is not in it was deleted at the source.
      v_mirror := TO_CLOB('DELETE FROM ') || qualified(p_owner, p_table) || ' t WHERE NOT EXISTS (SELECT 1 FROM ' || v_stg ||
                  ' s WHERE s.KEEL_BATCH_ID = :b AND ' || v_on || ')';
      IF p_mirror_low IS NULL AND p_mirror_high IS NULL THEN
        EXECUTE IMMEDIATE v_mirror USING p_batch_id;
      ELSE
        -- A windowed baseline's key window holds the source's rows of its key range only. The bounds are integer
        -- texts compared as NUMBER (exact to 38 digits), so the first key column must be a NUMBER: another type would
        -- compare differently from the source (and a text compare would mirror the wrong rows).
        v_k1 := v_keys(1);
        BEGIN
          SELECT DATA_TYPE INTO v_ktype FROM ALL_TAB_COLUMNS
           WHERE OWNER = NVL(p_owner, SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')) AND TABLE_NAME = p_table
             AND COLUMN_NAME = TRIM(BOTH '"' FROM v_k1);
        EXCEPTION
          WHEN NO_DATA_FOUND THEN v_ktype := NULL;
        END;
        IF v_ktype IS NULL OR v_ktype <> 'NUMBER' THEN
          RAISE_APPLICATION_ERROR(-20006, 'APPLY_BATCH: a key-range mirror needs a NUMBER first key column, not ' ||
            NVL(v_ktype, 'an unknown column') || ' (' || v_k1 || ')');
        END IF;
        -- One bind per placeholder, in order (dynamic SQL binds by position).
        IF p_mirror_low IS NOT NULL AND p_mirror_high IS NOT NULL THEN
          EXECUTE IMMEDIATE v_mirror || ' AND t.' || v_k1 || ' > TO_NUMBER(:lo) AND t.' || v_k1 || ' <= TO_NUMBER(:hi)'
            USING p_batch_id, p_mirror_low, p_mirror_high;
        ELSIF p_mirror_low IS NOT NULL THEN
          EXECUTE IMMEDIATE v_mirror || ' AND t.' || v_k1 || ' > TO_NUMBER(:lo)' USING p_batch_id, p_mirror_low;
        ELSE
          EXECUTE IMMEDIATE v_mirror || ' AND t.' || v_k1 || ' <= TO_NUMBER(:hi)' USING p_batch_id, p_mirror_high;
        END IF;
      END IF;
      v_deleted := v_deleted + SQL%ROWCOUNT;
    END IF;
    IF p_changes IS NOT NULL THEN
      v_merged := v_merged + (v_count - v_upserts); -- the 'D' rows count as applied, found or not
      o_deleted := v_deleted;
    ELSE
      o_deleted := NULL;
    END IF;

    UPDATE KEEL_TRANSFER_COMPLETIONS SET STATE = 'COMMITTED', ROW_COUNT = v_merged, CHECKSUM = v_checksum, COMMITTED_AT = SYSTIMESTAMP,
           DELETED_COUNT = o_deleted
     WHERE BATCH_ID = p_batch_id;
    o_outcome := 'APPLIED';
    o_row_count := v_merged;
    o_checksum := v_checksum;
    -- Durable when the call returns, whatever COMMIT_WAIT / COMMIT_LOGGING say (NOWAIT or BATCH would let a crash of
    -- the instance lose a commit the journal has recorded: the window's rows gone, never sent again).
    COMMIT WRITE WAIT IMMEDIATE;
  EXCEPTION
    WHEN OTHERS THEN
      ROLLBACK;
      RAISE;
  END APPLY_BATCH;

  PROCEDURE TRY_CLAIM(p_batch_id IN VARCHAR2, p_wait_seconds IN NUMBER, p_fence_through IN NUMBER, o_outcome OUT VARCHAR2,
                      o_row_count OUT NUMBER, o_checksum OUT VARCHAR2, o_staged OUT NUMBER) IS
    v_state KEEL_TRANSFER_STAGED.STATE%TYPE;
    v_cstate KEEL_TRANSFER_COMPLETIONS.STATE%TYPE;
    v_wait PLS_INTEGER := GREATEST(1, LEAST(60, CEIL(NVL(p_wait_seconds, 1))));
    v_fence NUMBER := GREATEST(0, NVL(p_fence_through, 0));
    v_fenced NUMBER := 0; -- the fence the completion row holds after this call
  BEGIN
    o_staged := 0;
    BEGIN
      SELECT STATE, ROW_COUNT, CHECKSUM INTO v_cstate, o_row_count, o_checksum FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = p_batch_id;
      IF v_cstate = 'COMMITTED' THEN
        o_outcome := 'COMMITTED';
        RETURN;
      END IF;
    EXCEPTION
      WHEN NO_DATA_FOUND THEN NULL;
    END;
    -- A missing completion row is not proof: take the lock APPLY_BATCH takes first, with a bounded wait.
    BEGIN
      EXECUTE IMMEDIATE 'SELECT STATE FROM KEEL_TRANSFER_STAGED WHERE BATCH_ID = :b FOR UPDATE WAIT ' || TO_CHAR(v_wait)
        INTO v_state USING p_batch_id;
      o_staged := CASE WHEN v_state = 'STAGED' THEN 1 ELSE 0 END;
    EXCEPTION
      WHEN NO_DATA_FOUND THEN
        o_staged := 0; -- nothing staged: no apply can hold the claim (it locks this row first)
      WHEN e_busy THEN
        o_outcome := 'BLOCKED';
        ROLLBACK;
        RETURN;
    END;
    -- Lock obtained: any apply of this batch has ended; its completion row is visible if it committed. Otherwise the
    -- verdict is "not applied", made final by the fence committed below (an apply still on its way fails on it).
    BEGIN
      EXECUTE IMMEDIATE 'SELECT STATE, ROW_COUNT, CHECKSUM, FENCED_THROUGH FROM KEEL_TRANSFER_COMPLETIONS WHERE BATCH_ID = :b FOR UPDATE WAIT ' || TO_CHAR(v_wait)
        INTO v_cstate, o_row_count, o_checksum, v_fenced USING p_batch_id;
      IF v_cstate = 'COMMITTED' THEN
        o_outcome := 'COMMITTED';
        ROLLBACK;
        RETURN;
      END IF;
      v_fenced := GREATEST(NVL(v_fenced, 0), v_fence);
      IF v_fence > 0 THEN
        UPDATE KEEL_TRANSFER_COMPLETIONS SET FENCED_THROUGH = GREATEST(FENCED_THROUGH, v_fence), FENCED_AT = SYSTIMESTAMP WHERE BATCH_ID = p_batch_id;
      END IF;
    EXCEPTION
      WHEN NO_DATA_FOUND THEN
        IF v_fence > 0 THEN
          BEGIN
            INSERT INTO KEEL_TRANSFER_COMPLETIONS (BATCH_ID, TRANSFER_NAME, STATE, FENCED_THROUGH, FENCED_AT)
            VALUES (p_batch_id, '(reconcile)', 'FENCED', v_fence, SYSTIMESTAMP);
            v_fenced := v_fence;
          EXCEPTION
            WHEN DUP_VAL_ON_INDEX THEN
              o_outcome := 'BLOCKED'; -- a rival wrote the row meanwhile: ask again for its outcome
              ROLLBACK;
              RETURN;
          END;
        END IF;
      WHEN e_busy THEN
        o_outcome := 'BLOCKED';
        ROLLBACK;
        RETURN;
    END;
    o_row_count := NULL;
    o_checksum := NULL;
    -- The final fence (abandon's): an abandon whose journal note was lost left the batch open; no apply can commit.
    o_outcome := CASE WHEN v_fenced >= 2147483647 THEN 'NOT_APPLIED_FINAL' ELSE 'NOT_APPLIED' END;
    COMMIT WRITE WAIT IMMEDIATE; -- the fence (if any) and the release of the lock, at once; durable (APPLY_BATCH)
  END TRY_CLAIM;

  -- The batch's rows, and those of any batch that can never be applied again (completion committed, or fenced for
  -- good by abandon): left when the purge after that batch's end failed, they go with the next purge.
  PROCEDURE PURGE_STAGED(p_batch_id IN VARCHAR2, p_staging IN VARCHAR2) IS
  BEGIN
    EXECUTE IMMEDIATE 'DELETE FROM ' || DBMS_ASSERT.ENQUOTE_NAME(DBMS_ASSERT.SIMPLE_SQL_NAME(p_staging), FALSE) ||
      ' s WHERE s.KEEL_BATCH_ID = :b OR EXISTS (SELECT 1 FROM KEEL_TRANSFER_COMPLETIONS c WHERE c.BATCH_ID = s.KEEL_BATCH_ID' ||
      ' AND (c.STATE = ''COMMITTED'' OR c.FENCED_THROUGH >= 2147483647))'
      USING p_batch_id;
    -- The staging registry's rows go with them (the same transaction): the batch's own (purged after its commit or its
    -- failure) and those of every batch that can never be applied again, so the registry stays as small as the open
    -- batches. A later APPLY_BATCH of such a batch finds its COMMITTED completion row first, or no registry row
    -- (ORA-20002, nothing applied) and its final fence; TRY_CLAIM reads "nothing staged".
    DELETE FROM KEEL_TRANSFER_STAGED s WHERE s.BATCH_ID = p_batch_id
       OR EXISTS (SELECT 1 FROM KEEL_TRANSFER_COMPLETIONS c WHERE c.BATCH_ID = s.BATCH_ID
                    AND (c.STATE = 'COMMITTED' OR c.FENCED_THROUGH >= 2147483647));
    COMMIT;
  END PURGE_STAGED;

  -- A plain read (no lock, no wait): an uncommitted staging is not seen, and the next maintenance pass finds it.
  -- At most 100 ids of 36 characters and their commas: within a VARCHAR2(4000) (joined in PL/SQL, no LISTAGG).
  PROCEDURE STAGED_BATCHES(p_transfer IN VARCHAR2, p_max_count IN NUMBER, p_after IN VARCHAR2, o_batch_ids OUT VARCHAR2) IS
    v_ids VARCHAR2(4000);
  BEGIN
    FOR r IN (SELECT BATCH_ID FROM KEEL_TRANSFER_STAGED WHERE TRANSFER_NAME = p_transfer
                 AND (p_after IS NULL OR BATCH_ID > p_after)
               ORDER BY BATCH_ID FETCH FIRST GREATEST(LEAST(p_max_count, 100), 1) ROWS ONLY) LOOP
      v_ids := CASE WHEN v_ids IS NULL THEN r.BATCH_ID ELSE v_ids || ',' || r.BATCH_ID END;
    END LOOP;
    o_batch_ids := v_ids;
  END STAGED_BATCHES;
END KEEL_TRANSFER;
/

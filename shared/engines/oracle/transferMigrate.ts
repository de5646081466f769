// Applies sql/oracle/V<n>__<name>.sql, then the repeatable R__<name>.sql scripts (CREATE OR REPLACE PACKAGE …)
// whose checksum changed, to an Oracle target: each file is split into blocks on lines holding only "/", each
// block runs as one statement, and applied files are recorded in KEEL_TRANSFER_MIGRATIONS (version, name,
// checksum) / KEEL_TRANSFER_REPEATABLES (name, checksum). A versioned file that changed after it was applied is
// refused. DDL commits implicitly in Oracle, so
// run this from one place at a time (deploy step or startup of a single instance); the blocks are idempotent.
// Exercised by test/transfer/oracle.test.ts when KEEL_TEST_ORACLE_URL is set (the GitHub workflow).
import oracledb from 'oracledb';
import { pendingMigrations, pendingRepeatables, readMigrationFiles, readRepeatableFiles } from '../migrationFiles.js';

export function splitOracleBlocks(script: string): string[] {
  const blocks: string[] = [];
  let current: string[] = [];
  for (const line of script.split(/\r?\n/)) {
    if (line.trim() === '/') {
      const text = current.join('\n').trim();
      if (text && !isOnlyComments(text)) blocks.push(text);
      current = [];
    } else current.push(line);
  }
  const rest = current.join('\n').trim();
  if (rest && !isOnlyComments(rest)) throw new Error('an Oracle migration block must end with a line holding only "/"');
  return blocks;
}

function isOnlyComments(text: string): boolean {
  return text.split('\n').every((l) => l.trim() === '' || l.trim().startsWith('--'));
}

export async function migrateOracleTarget(conn: oracledb.Connection, dir: string): Promise<string[]> {
  try {
    await conn.execute(
      `CREATE TABLE KEEL_TRANSFER_MIGRATIONS (VERSION NUMBER(10) PRIMARY KEY, NAME VARCHAR2(200) NOT NULL, CHECKSUM VARCHAR2(64) NOT NULL, APPLIED_AT TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL)`,
    );
  } catch (err) {
    if ((err as { errorNum?: number }).errorNum !== 955) throw err;
  }
  const done = new Map<number, string>();
  const rows = await conn.execute<[number, string]>(`SELECT VERSION, CHECKSUM FROM KEEL_TRANSFER_MIGRATIONS`, [], {
    outFormat: oracledb.OUT_FORMAT_ARRAY,
  });
  for (const r of rows.rows ?? []) done.set(Number(r[0]), String(r[1]));
  const applied: string[] = [];
  const runBlocks = async (file: string, text: string) => {
    for (const block of splitOracleBlocks(text)) {
      try {
        await conn.execute(block);
      } catch (err) {
        throw new Error(
          `Oracle migration ${file} failed: ${(err as Error).message}\n--- block ---\n${block.slice(0, 400)}`,
          { cause: err },
        );
      }
    }
    // CREATE PACKAGE succeeds with compilation errors (ORA-24344 is a warning in thin mode): check validity, in the
    // session's current schema, where the unqualified CREATE put it (USER_* views read the login's own schema).
    const invalid = await conn.execute<[string, string]>(
      `SELECT OBJECT_NAME, OBJECT_TYPE FROM ALL_OBJECTS WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND OBJECT_NAME = 'KEEL_TRANSFER' AND STATUS <> 'VALID'`,
      [],
      { outFormat: oracledb.OUT_FORMAT_ARRAY },
    );
    if ((invalid.rows ?? []).length > 0) {
      const errs = await conn.execute<[string, number, string]>(
        `SELECT NAME, LINE, TEXT FROM ALL_ERRORS WHERE OWNER = SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA') AND NAME = 'KEEL_TRANSFER' ORDER BY TYPE, SEQUENCE`,
        [],
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      throw new Error(
        `Oracle migration ${file}: KEEL_TRANSFER is invalid: ${(errs.rows ?? []).map((e) => `line ${e[1]}: ${e[2]}`).join('; ')}`,
      );
    }
  };
  for (const { file, name, text, checksum, version } of pendingMigrations(await readMigrationFiles(dir), done)) {
    await runBlocks(file, text);
    try {
      await conn.execute(
        `INSERT INTO KEEL_TRANSFER_MIGRATIONS (VERSION, NAME, CHECKSUM) VALUES (:v, :n, :c)`,
        { v: version, n: name, c: checksum },
        { autoCommit: true },
      );
    } catch (err) {
      // ORA-00001: another instance applied the same (idempotent) file at the same time and recorded it first.
      if ((err as { errorNum?: number }).errorNum !== 1) throw err;
      const rival = await conn.execute<[string]>(
        `SELECT CHECKSUM FROM KEEL_TRANSFER_MIGRATIONS WHERE VERSION = :v`,
        { v: version },
        { outFormat: oracledb.OUT_FORMAT_ARRAY },
      );
      if (String(rival.rows?.[0]?.[0]) !== checksum)
        throw new Error(`Oracle migration ${file} was recorded by another instance with a different checksum`);
      continue;
    }
    applied.push(file);
  }
  try {
    await conn.execute(
      `CREATE TABLE KEEL_TRANSFER_REPEATABLES (NAME VARCHAR2(200) PRIMARY KEY, CHECKSUM VARCHAR2(64) NOT NULL, APPLIED_AT TIMESTAMP DEFAULT SYSTIMESTAMP NOT NULL)`,
    );
  } catch (err) {
    if ((err as { errorNum?: number }).errorNum !== 955) throw err;
  }
  const doneRepeatable = new Map<string, string>();
  const repeatableRows = await conn.execute<[string, string]>(
    `SELECT NAME, CHECKSUM FROM KEEL_TRANSFER_REPEATABLES`,
    [],
    { outFormat: oracledb.OUT_FORMAT_ARRAY },
  );
  for (const r of repeatableRows.rows ?? []) doneRepeatable.set(String(r[0]), String(r[1]));
  for (const { file, name, text, checksum } of pendingRepeatables(
    await readRepeatableFiles(dir),
    doneRepeatable,
    applied.length > 0,
  )) {
    await runBlocks(file, text);
    // Idempotent upsert: a rival instance re-applying the same script at the same time records the same checksum.
    await conn.execute(
      `MERGE INTO KEEL_TRANSFER_REPEATABLES r USING (SELECT :n AS NAME, :c AS CHECKSUM FROM DUAL) s ON (r.NAME = s.NAME)
       WHEN MATCHED THEN UPDATE SET r.CHECKSUM = s.CHECKSUM, r.APPLIED_AT = SYSTIMESTAMP
       WHEN NOT MATCHED THEN INSERT (NAME, CHECKSUM) VALUES (s.NAME, s.CHECKSUM)`,
      { n: name, c: checksum },
      { autoCommit: true },
    );
    applied.push(file);
  }
  return applied;
}

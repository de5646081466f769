#!/usr/bin/env bash
# GitHub workflow only: sets up the Oracle service container (gvenzl/oracle-free) as docs/oracle.md tells a DBA to,
# so the suites run as a least-privilege user with a real quota, never the image's own app user (QUOTA UNLIMITED):
# - user keel: exactly the grants of docs/oracle.md "Required settings and grants", QUOTA 2G ON users;
# - service keel_tg with COMMIT_OUTCOME = TRUE (Transaction Guard), for the KEEL_TEST_ORACLE_TG=1 run;
# then checks what it made (the privileges and roles, the quota, the service's commit outcome, a login through it).
# Usage: .ci/oracle-setup.sh <container id>; KEEL_ORACLE_PASSWORD (keel's password) in the environment.
set -euo pipefail
container=$1
: "${KEEL_ORACLE_PASSWORD:?KEEL_ORACLE_PASSWORD is not set}"

# sqlplus in the container; $1: the connect string, the script on stdin.
sqlplus_in() { docker exec -i "$container" sqlplus -s -L "$1"; }
# As SYS through the container's own OS login (no password file needed), in container $1 (default FREEPDB1); any SQL
# error fails the script.
as_sys() {
  { printf '%s\n' 'WHENEVER SQLERROR EXIT FAILURE' "ALTER SESSION SET CONTAINER = ${1:-FREEPDB1};"; cat; } |
    sqlplus_in '/ as sysdba'
}

echo "== Oracle: user keel (least privilege, QUOTA 2G ON users) and service keel_tg (COMMIT_OUTCOME = TRUE)"
as_sys <<SQL
WHENEVER SQLERROR EXIT FAILURE
SET FEEDBACK OFF
CREATE USER keel IDENTIFIED BY "${KEEL_ORACLE_PASSWORD}" DEFAULT TABLESPACE users QUOTA 2G ON users;
GRANT CREATE SESSION, CREATE TABLE, CREATE PROCEDURE TO keel;
GRANT EXECUTE ON DBMS_APP_CONT TO keel;
DECLARE
  p DBMS_SERVICE.SVC_PARAMETER_ARRAY;
BEGIN
  p('commit_outcome') := 'true';
  p('retention_timeout') := '86400';
  DBMS_SERVICE.CREATE_SERVICE(service_name => 'keel_tg', network_name => 'keel_tg', parameter_array => p);
  DBMS_SERVICE.START_SERVICE('keel_tg');
END;
/
EXIT
SQL
# The listener learns a new service at its next registration (up to a minute); ask for it now (from the root).
printf 'ALTER SYSTEM REGISTER;\nEXIT\n' | as_sys 'CDB$ROOT' || true

echo "== Oracle: what the setup made"
report=$(as_sys <<'SQL'
WHENEVER SQLERROR EXIT FAILURE
SET FEEDBACK OFF HEADING OFF PAGESIZE 0 LINESIZE 200 TRIMOUT ON
SELECT 'sys_privs=' || LISTAGG(privilege, ',') WITHIN GROUP (ORDER BY privilege) FROM dba_sys_privs WHERE grantee = 'KEEL';
SELECT 'roles=' || COUNT(*) FROM dba_role_privs WHERE grantee = 'KEEL';
SELECT 'tab_privs=' || LISTAGG(owner || '.' || table_name || ':' || privilege, ',') WITHIN GROUP (ORDER BY table_name)
  FROM dba_tab_privs WHERE grantee = 'KEEL';
SELECT 'quota=' || tablespace_name || ':' || max_bytes FROM dba_ts_quotas WHERE username = 'KEEL';
SELECT 'commit_outcome=' || commit_outcome FROM v$services WHERE name = 'keel_tg';
EXIT
SQL
)
echo "$report"
expect_line() {
  if ! grep -qxF "$1" <<<"$report"; then
    echo "::error title=Oracle setup::expected '$1'" >&2
    exit 1
  fi
}
expect_line 'sys_privs=CREATE PROCEDURE,CREATE SESSION,CREATE TABLE'
expect_line 'roles=0'
expect_line 'tab_privs=SYS.DBMS_APP_CONT:EXECUTE'
expect_line 'quota=USERS:2147483648'
expect_line 'commit_outcome=YES'

# keel logs in through both services (FREEPDB1 for the suites, keel_tg for the Transaction Guard run).
for service in FREEPDB1 keel_tg; do
  for i in $(seq 1 30); do
    if printf 'WHENEVER SQLERROR EXIT FAILURE\nSELECT 1 FROM dual;\nEXIT\n' |
      sqlplus_in "keel/${KEEL_ORACLE_PASSWORD}@//localhost:1521/${service}" >/dev/null 2>&1; then
      echo "keel logs in through ${service}"
      continue 2
    fi
    sleep 2
  done
  echo "::error title=Oracle setup::keel cannot log in through service ${service}" >&2
  exit 1
done

#!/bin/sh
# azd postprovision hook (also runnable by hand after `az deployment sub create`, with the variables below
# exported from the deployment outputs): installs the Keel schema on Azure SQL (`npm run migrate`, as the
# Entra administrator you are signed in as) and creates the app identity's database user with the role
# keel_executor (infra/sql/post-provision.sql).
#
# Needs: node/npm, go-sqlcmd (`sqlcmd` with --authentication-method), a Microsoft Entra sign-in that
# DefaultAzureCredential finds (az login or azd auth login), and the SQL firewall admitting this machine.
# Set KEEL_SKIP_MIGRATE=true to skip the schema step (already installed).
set -eu

root="$(cd "$(dirname "$0")/../.." && pwd)"

: "${KEEL_SQLSERVER_SERVER:?missing (deployment output)}"
: "${KEEL_SQLSERVER_DATABASE:?missing (deployment output)}"
: "${KEEL_IDENTITY_NAME:?missing (deployment output)}"
: "${KEEL_IDENTITY_CLIENT_ID:?missing (deployment output)}"

if [ "${KEEL_SKIP_MIGRATE:-false}" != "true" ]; then
  echo "== installing the Keel schema on $KEEL_SQLSERVER_SERVER/$KEEL_SQLSERVER_DATABASE"
  (
    cd "$root"
    [ -d node_modules ] || npm ci --no-audit --no-fund
    KEEL_STORE_ENGINE=sqlserver \
    KEEL_SQLSERVER_AUTH=entra \
    KEEL_SQL_CONNECTION="Server=tcp:$KEEL_SQLSERVER_SERVER,1433;Database=$KEEL_SQLSERVER_DATABASE;Authentication=Active Directory Default;Encrypt=True;TrustServerCertificate=False" \
      npm run migrate
  )
fi

if ! command -v sqlcmd >/dev/null 2>&1; then
  echo "sqlcmd (go-sqlcmd) not found: install it, then run infra/sql/post-provision.sql as shown in docs/deploy.md" >&2
  exit 1
fi

echo "== database user for $KEEL_IDENTITY_NAME (role keel_executor)"
sqlcmd -S "tcp:$KEEL_SQLSERVER_SERVER,1433" -d "$KEEL_SQLSERVER_DATABASE" \
  --authentication-method ActiveDirectoryDefault -b \
  -v IdentityName="$KEEL_IDENTITY_NAME" IdentityClientId="$KEEL_IDENTITY_CLIENT_ID" \
  -i "$root/infra/sql/post-provision.sql"

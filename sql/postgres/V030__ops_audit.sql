-- The ops audit trail (issue 24): one row per write of the ops API (enqueue, cancel, resurrect, purge, queue and
-- schedule changes, transfer starts, resumes and reconciles) and per refused call (401/403, cross-site and
-- content-type refusals). A write's row is recorded before the action runs, with outcome 'started', and finished
-- after it ('ok' or 'failed', with the status and the count it affected): no row, no action. The application
-- reaches the table only through the functions of R__040_ops_audit_functions.sql (it holds no table rights,
-- roles/keel_executor.sql): it can add rows and finish a started one, read them, and delete them only by age.
create table if not exists keel.ops_audit (
  id             bigint generated always as identity primary key,
  at             timestamptz not null default clock_timestamp(), -- the server's time, never the caller's
  principal_id   text,          -- Entra object id (oid), when a principal was believed
  principal_name text,          -- its display or user name
  tenant_id      text,
  app_id         text,          -- the calling application (appid/azp), for a workload identity
  auth_method    text not null check (auth_method in ('key', 'principal', 'local', 'none')),
  channel        text not null check (channel in ('key', 'console')),
  role           text check (role in ('reader', 'producer', 'operator')), -- the highest level the caller held
  required_role  text not null check (required_role in ('reader', 'producer', 'operator')),
  http_method    text not null,
  action         text not null, -- the route's operationId
  target         text,          -- e.g. queue:emails, job:42, batch:<uuid>, transfer:orders
  summary        text,          -- path parameters and the body with payloads replaced by their size and digest
  outcome        text not null check (outcome in ('started', 'ok', 'refused', 'failed')),
  status         integer,
  reason         text,
  affected       bigint,
  request_id     text,
  client_ip      text,
  finished_at    timestamptz
);

-- Retention purges and time-range searches.
create index if not exists ops_audit_at on keel.ops_audit (at);

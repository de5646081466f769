-- The registry of live job processors (issue 30): one row per processor process, written by the process itself —
-- register_worker when it starts and again at most every KEEL_WORKER_REFRESH_MS while it does something (runs a job,
-- a timer fires), deregister_worker on a graceful stop — and deleted by the maintenance pass (prune_workers) once not
-- seen for KEEL_WORKER_RETENTION_MS (a process that died without stopping). The jobs a worker holds are not kept
-- here: list_workers counts them from the hot rows' leases, so they are never out of date. The application reaches
-- the table only through those functions (roles/keel_executor.sql: no table rights). It stands alone: no move
-- touches it, so it takes no place in the lock order (sql/README.md).
create table if not exists keel.workers (
  worker_id    text primary key,   -- the processor's id, the one its leases carry (jobs_hot.worker_id)
  host         text not null,      -- the machine's host name
  instance_id  text,               -- the hosting instance (WEBSITE_INSTANCE_ID on Azure Functions), when known
  pid          integer not null,
  app_version  text not null,      -- package.json's version
  build_id     text,               -- KEEL_BUILD_ID, when the deployment sets one
  queues       text,               -- the queues its dispatcher serves, comma-separated; null: every queue
  concurrency  integer not null,   -- the dispatcher's KEEL_DISPATCH_CONCURRENCY
  jobs_done    bigint not null default 0, -- jobs it finished since it started, as of last_seen_at
  started_at   timestamptz not null, -- when the process built its processor (its own clock)
  last_seen_at timestamptz not null  -- the server's clock at its last registration
);

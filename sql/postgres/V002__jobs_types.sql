-- Composite types the job engine functions return (R__010_jobs_functions.sql). Types are schema: they live in
-- versioned migrations, so the repeatable functions can be re-created without dropping them.

create type keel.claimed_job as (
  job_id             bigint,
  lease_id           uuid,
  queue              text,
  type               text,
  payload            jsonb,
  priority           integer,
  attempts           integer,
  max_attempts       integer,
  queue_max_attempts integer,
  idempotency_key    text,
  tags               text[],
  run_at             timestamptz,
  created_at         timestamptz,
  lease_expires_at   timestamptz
);

create type keel.job_record as (
  job_id            bigint,
  location          text,
  queue             text,
  type              text,
  payload           jsonb,
  priority          integer,
  state             text,
  attempts          integer,
  idempotency_key   text,
  tags              text[],
  created_at        timestamptz,
  run_at            timestamptz,
  started_at        timestamptz,
  finished_at       timestamptz,
  duration_ms       bigint,
  reason            text,
  last_error        text,
  cancel_requested  boolean,
  lease_id          uuid,
  worker_id         text
);

-- A claim also says how long its job may go without a confirmed heartbeat before the zombie rescue takes it back:
-- the queue's zombie_timeout_seconds (300 when the queue has no settings row, as rescue_zombies reads it). The worker
-- aborts a handler whose heartbeats have not been confirmed within it, before the rescue hands the job to another
-- worker (shared/jobs/processor.ts, docs/jobs.md "Leases and heartbeats"). claim_next and claim_by_id return this type;
-- claim_and_start declares its own columns (R__010_jobs_functions.sql).
alter type keel.claimed_job add attribute queue_zombie_timeout_seconds integer;

-- The job page's running attempt and its limit (issue 30): get_job returns the job's own max_attempts (null: the
-- type's or queue's limit applies), and for a hot job its lease expiry and last heartbeat. Only the record type
-- changes; the columns exist on jobs_hot since V001. The attempts themselves are entries of the logs column (V008).
alter type keel.job_record add attribute max_attempts integer, add attribute lease_expires_at timestamptz,
  add attribute heartbeat_at timestamptz;

-- What a job produced, how far it is and what it logged (issue 29). Both columns are nullable with no default: adding them rewrites
-- nothing, and jobs that use neither store nothing.
-- jobs_hot.progress: the latest ctx.progress() of the running attempt ({fraction, done, total, note}), written by
-- keel.report_progress under the attempt's lease (a HOT update, like a heartbeat: the column is in no index) and
-- cleared when the next attempt starts.
-- jobs_archive.result: the JSON value the handler returned, stored by the same complete_many move that archives it.
-- logs (all three pillars): the job's own ctx.log lines, a JSON array [{attempt, at, level, message, fields}] of the
-- newest KEEL_JOB_LOG_LINES, appended under the lease by keel.append_job_log and carried by every move (hot ->
-- archive, hot -> DLQ, DLQ -> hot) in the move's own transaction.
alter table keel.jobs_hot add column progress jsonb, add column logs jsonb;
alter table keel.jobs_archive add column result jsonb, add column logs jsonb;
alter table keel.jobs_dlq add column logs jsonb;
alter type keel.job_record add attribute progress jsonb, add attribute result jsonb, add attribute logs jsonb;

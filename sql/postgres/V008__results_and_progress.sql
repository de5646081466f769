-- What a job produced and how far it is (issue 29). Both columns are nullable with no default: adding them rewrites
-- nothing, and jobs that use neither store nothing.
-- jobs_hot.progress: the latest ctx.progress() of the running attempt ({fraction, done, total, note}), written by
-- keel.report_progress under the attempt's lease (a HOT update, like a heartbeat: the column is in no index) and
-- cleared when the next attempt starts.
-- jobs_archive.result: the JSON value the handler returned, stored by the same complete_many move that archives it.
alter table keel.jobs_hot add column progress jsonb;
alter table keel.jobs_archive add column result jsonb;
alter type keel.job_record add attribute progress jsonb, add attribute result jsonb;

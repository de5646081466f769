-- stats_summary and metric_buckets in slots (issue 22): one row per queue (per minute, outcome and reason) was
-- shared by every backend, so two completions committing at once queued on it — the second one's tally waited for
-- the first one's commit (a wait, not CPU: 5 % of complete_many's wall time with two processors, 0.45 -> 1.2 ms a
-- call with six). Now each backend adds to the row of its slot, pg_backend_pid() % 16 (as SQL Server's @@SPID % 16),
-- and the readers (stats, metrics, purge) sum the slots. The pool's backends are started one after another, so their
-- pids rarely share a slot; when two do, they wait as before, still once and last (sql/README.md, Lock order). At most
-- 16 rows where there was one, and no folding: a slot outlives its backend.
-- What is there so far stays in slot 0.
alter table keel.stats_summary add column slot smallint not null default 0;
alter table keel.stats_summary drop constraint stats_summary_pkey;
alter table keel.stats_summary add primary key (queue, slot);

alter table keel.metric_buckets add column slot smallint not null default 0;
alter table keel.metric_buckets drop constraint metric_buckets_pkey;
alter table keel.metric_buckets add primary key (bucket_start, queue, outcome, reason, slot);

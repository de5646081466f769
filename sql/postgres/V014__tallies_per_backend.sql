-- stats_summary and metric_buckets per backend (issue 22): one row per queue (and minute, outcome, reason) was shared
-- by every backend, so completions committing at once queued on it (Lock:transactionid, ~5 % of the workers'
-- backend samples with six Worker processes; the stats_summary upsert 0.54 -> 1.83 ms a call). Now, as the read
-- counters (V006), each backend adds only to rows of its own slot, pg_backend_pid() itself, which no live backend
-- shares: a tally row is never waited for. Readers (stats, metrics) sum the slots. keel._fold_counters() (zombie
-- rescue) moves the rows of exited backends into slot 0, and metric rows of past minutes into slot 0 whoever wrote
-- them, so both tables stay about as small as before. What is there so far is slot 0.
alter table keel.stats_summary add column slot integer not null default 0;
alter table keel.stats_summary drop constraint stats_summary_pkey;
alter table keel.stats_summary add primary key (queue, slot);

alter table keel.metric_buckets add column slot integer not null default 0;
alter table keel.metric_buckets drop constraint metric_buckets_pkey;
alter table keel.metric_buckets add primary key (bucket_start, queue, outcome, reason, slot);
-- The fold's way to the rows still to fold (slot <> 0) without reading the whole retention window: a few rows a
-- backend and queue, the current minute's.
create index metric_buckets_unfolded on keel.metric_buckets (bucket_start) where slot <> 0;

-- jobs_hot_running_by_queue (V001) goes. Its predicate (state in fetched/processing) made it the planner's choice for
-- every owner-scoped lookup `id = $1 and ... state = 'processing'` whenever jobs_hot's statistics said few jobs were
-- running (the usual case: analysed between batches): heartbeat, retry, fail, release and completion then walked
-- every running job's entry instead of one primary-key probe (499 entries removed per heartbeat at 500 in flight).
-- What read it now reads something else: queue limits count fetched + processing from keel.hot_counts (exact, kept
-- in the same transaction as every change; the claim holds the queue's settings row, so no other claim of that queue
-- is uncommitted while it counts), and zombie rescue, once a minute, scans jobs_hot. A claim also writes one index
-- entry fewer.
drop index if exists keel.jobs_hot_running_by_queue;

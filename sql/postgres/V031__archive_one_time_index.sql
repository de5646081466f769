-- The archive keeps one secondary index, (queue, finished_at): every success writes an archive row, and each index
-- entry it writes is CPU on the hot path (issue 22, bench/README.md runs 124–129: jobs_archive_finished cost ~2 us
-- of a completion's ~30 us a job on the stock server). The readers that used (finished_at) alone — a purge and a
-- count with no queue — walk (queue, finished_at) one queue at a time, the queues found by a skip over the same
-- index (keel._archive_queues), so each stays an index read bounded by what it returns times the queues.
drop index if exists keel.jobs_archive_finished;

-- The worker registry's functions over keel.workers (V012). Repeatable (sql/README.md). The table stands alone: each
-- function touches only its rows, in one statement, so it takes no place in the lock order. list_workers, which
-- joins the registry with the hot rows' leases, is in R__010_jobs_functions.sql with the other console reads.

-- register_worker(...): adds the worker's row or refreshes it (everything it reports, and last_seen_at: the server's
-- clock, returned). A row pruned while its process lived comes back at the next refresh.
create or replace function keel.register_worker(
  p_worker_id text, p_host text, p_instance_id text, p_pid integer, p_app_version text, p_build_id text,
  p_queues text, p_concurrency integer, p_started_at timestamptz, p_jobs_done bigint)
returns timestamptz
language sql as $$
  insert into keel.workers as w (worker_id, host, instance_id, pid, app_version, build_id, queues, concurrency,
                                 jobs_done, started_at, last_seen_at)
  values (p_worker_id, p_host, p_instance_id, p_pid, p_app_version, p_build_id, p_queues, p_concurrency,
          coalesce(p_jobs_done, 0), p_started_at, now())
  on conflict (worker_id) do update
    set host = excluded.host, instance_id = excluded.instance_id, pid = excluded.pid,
        app_version = excluded.app_version, build_id = excluded.build_id, queues = excluded.queues,
        concurrency = excluded.concurrency, jobs_done = excluded.jobs_done, started_at = excluded.started_at,
        last_seen_at = excluded.last_seen_at
  returning w.last_seen_at;
$$;

-- deregister_worker(worker_id): a graceful stop removes its row; false when there was none.
create or replace function keel.deregister_worker(p_worker_id text)
returns boolean
language sql as $$
  with gone as (delete from keel.workers w where w.worker_id = p_worker_id returning 1)
  select exists (select 1 from gone);
$$;

-- prune_workers(older_than): deletes the rows not seen since the cutoff (processes that died without stopping);
-- returns how many. The table holds a row per live or recently seen process: a scan of it is small.
create or replace function keel.prune_workers(p_older_than timestamptz)
returns bigint
language sql as $$
  with gone as (delete from keel.workers w where w.last_seen_at < p_older_than returning 1)
  select count(*) from gone;
$$;

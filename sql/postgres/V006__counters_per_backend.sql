-- Read counters per backend (issue 22: deadlocks on a stock server). hot_counts rows were shared by every backend with
-- the same pg_backend_pid() % 16, and they are written by statement triggers at the end of whichever statement moved
-- rows: complete_many wrote stats_summary inside its statement and hot_counts at its end, retry wrote hot_counts and
-- then stats_summary, and two such backends with the same slot deadlocked (11 a run in a six-process chaos test).
-- Now each backend writes only rows of its own slot, pg_backend_pid() itself, which no live backend shares: a counter
-- row is never waited for by another session, so the counters drop out of the lock graph whatever order the
-- statements of a transaction write them in. dlq_counts gets slots the same way. Slot 0 holds what exited backends
-- left; keel._fold_counters() (run by zombie rescue) moves their rows there, so the tables stay small.

-- What the 16 shared slots counted so far goes to slot 0 (pids are never 0).
insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
select h.queue, 0, sum(h.pending), sum(h.fetched), sum(h.processing)
from keel.hot_counts h where h.slot <> 0 group by h.queue
on conflict (queue, slot) do update
  set pending = c.pending + excluded.pending,
      fetched = c.fetched + excluded.fetched,
      processing = c.processing + excluded.processing;
delete from keel.hot_counts where slot <> 0;
alter table keel.hot_counts alter column slot type integer;

alter table keel.dlq_counts add column slot integer not null default 0;
alter table keel.dlq_counts drop constraint dlq_counts_pkey;
alter table keel.dlq_counts add primary key (queue, slot);

create or replace function keel._hot_counted_insert() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
  select n.queue, pg_backend_pid(), count(*) filter (where n.state = 'pending'),
         count(*) filter (where n.state = 'fetched'), count(*) filter (where n.state = 'processing')
  from hot_new n group by n.queue order by n.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing;
  return null;
end
$$;

create or replace function keel._hot_counted_delete() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
  select o.queue, pg_backend_pid(), -count(*) filter (where o.state = 'pending'),
         -count(*) filter (where o.state = 'fetched'), -count(*) filter (where o.state = 'processing')
  from hot_old o group by o.queue order by o.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing;
  return null;
end
$$;

-- As in V005: each transition table aggregated on its own; a statement that changed no state writes nothing.
create or replace function keel._hot_counted_update() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
  select v.queue, pg_backend_pid(), sum(v.pending)::bigint, sum(v.fetched)::bigint, sum(v.processing)::bigint
  from (
    select n.queue, count(*) filter (where n.state = 'pending') as pending,
           count(*) filter (where n.state = 'fetched') as fetched, count(*) filter (where n.state = 'processing') as processing
    from hot_new n group by n.queue
    union all
    select o.queue, -count(*) filter (where o.state = 'pending'), -count(*) filter (where o.state = 'fetched'),
           -count(*) filter (where o.state = 'processing')
    from hot_old o group by o.queue
  ) v
  group by v.queue
  having sum(v.pending) <> 0 or sum(v.fetched) <> 0 or sum(v.processing) <> 0
  order by v.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing;
  return null;
end
$$;

create or replace function keel._dlq_counted() returns trigger
language plpgsql as $$
begin
  if tg_op = 'TRUNCATE' then
    delete from keel.dlq_counts;
  elsif tg_op = 'INSERT' then
    insert into keel.dlq_counts as c (queue, slot, n)
    select t.queue, pg_backend_pid(), count(*) from dlq_new t group by t.queue order by t.queue
    on conflict (queue, slot) do update set n = c.n + excluded.n;
  else
    insert into keel.dlq_counts as c (queue, slot, n)
    select t.queue, pg_backend_pid(), -count(*) from dlq_old t group by t.queue order by t.queue
    on conflict (queue, slot) do update set n = c.n + excluded.n;
  end if;
  return null;
end
$$;

-- What one transaction moved, for keel._tally (R__010): parallel arrays of queue, outcome and duration, filled by the
-- moves and counted once at the end of the transaction.
create type keel.tally as (queues text[], outcomes text[], durations bigint[]);

-- jobs_hot_pending_due is now the only index of pending rows by queue. With stale statistics (a backlog enqueued
-- since the last analyze: the usual case for a queue) the planner answered a claim's level probe from
-- jobs_hot_pending_run_at and sorted every due row of the queue (4-7 ms a claim at 30k pending); stats() now reads
-- the oldest pending time and the due counts from jobs_hot_pending_due, one priority level at a time. Enqueue writes
-- one index entry fewer per job.
drop index keel.jobs_hot_pending_run_at;

-- Cheap reads at scale (issue 12): stats() reads maintained counters and bounded index ranges, never every row.

-- Hot rows per queue and state, kept exact by statement triggers on jobs_hot in the transaction of every change
-- (whichever function or operator made it). Each backend writes its own slot (pg_backend_pid() % 16), so the batched
-- claims, starts and completes of different connections do not queue on one counter row; stats() sums the slots.
-- Written at the end of each statement, after its other tables, in queue order.
create table keel.hot_counts (
  queue       text not null,
  slot        smallint not null,
  pending     bigint not null default 0,
  fetched     bigint not null default 0,
  processing  bigint not null default 0,
  primary key (queue, slot)
);

-- The oldest pending run_at of a queue is the first entry of this index, and due / not-yet-due pending rows are its
-- two ranges either side of now(): stats() counts at most 1,000 entries of one of them (keel.stats). Only rows that
-- become pending write it (enqueue, retry, release, rescue, resurrect); claims and starts leave the predicate.
create index jobs_hot_pending_run_at on keel.jobs_hot (queue, run_at) where state = 'pending';

-- A trigger with transition tables handles one event and sees only the tables it declares: one function per event.
create or replace function keel._hot_counted_insert() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
  select n.queue, pg_backend_pid() % 16, count(*) filter (where n.state = 'pending'),
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
  select o.queue, pg_backend_pid() % 16, -count(*) filter (where o.state = 'pending'),
         -count(*) filter (where o.state = 'fetched'), -count(*) filter (where o.state = 'processing')
  from hot_old o group by o.queue order by o.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing;
  return null;
end
$$;

create or replace function keel._hot_counted_update() returns trigger
language plpgsql as $$
begin
  -- Only rows whose state changed count; a heartbeat or cancel request statement writes nothing here.
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing)
  select v.queue, pg_backend_pid() % 16, sum(v.sign * (v.state = 'pending')::int),
         sum(v.sign * (v.state = 'fetched')::int), sum(v.sign * (v.state = 'processing')::int)
  from hot_new n
  join hot_old o on o.id = n.id
  cross join lateral (values (n.queue, n.state, 1), (o.queue, o.state, -1)) as v(queue, state, sign)
  where o.state <> n.state or o.queue <> n.queue
  group by v.queue order by v.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing;
  return null;
end
$$;

create or replace function keel._hot_counted_truncate() returns trigger
language plpgsql as $$
begin
  delete from keel.hot_counts;
  return null;
end
$$;

create trigger jobs_hot_count_ins after insert on keel.jobs_hot
  referencing new table as hot_new for each statement execute function keel._hot_counted_insert();
create trigger jobs_hot_count_upd after update on keel.jobs_hot
  referencing old table as hot_old new table as hot_new for each statement execute function keel._hot_counted_update();
create trigger jobs_hot_count_del after delete on keel.jobs_hot
  referencing old table as hot_old for each statement execute function keel._hot_counted_delete();
create trigger jobs_hot_count_truncate after truncate on keel.jobs_hot
  for each statement execute function keel._hot_counted_truncate();

-- Counts of rows already there when this migration runs (none on a new database).
insert into keel.hot_counts (queue, slot, pending, fetched, processing)
select h.queue, 0, count(*) filter (where h.state = 'pending'), count(*) filter (where h.state = 'fetched'),
       count(*) filter (where h.state = 'processing')
from keel.jobs_hot h group by h.queue;

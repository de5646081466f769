-- Continuations and fan-in (issue 29): a job enqueued with `after: [parent ids]` waits in jobs_hot, state 'waiting',
-- until every parent has finished; the parent's own final move (complete_many, a dead-letter) releases it in the
-- same transaction (R__010_jobs_functions.sql, keel._parents_finished). Jobs without dependencies pay nothing:
-- - 'waiting' rows are outside every claim index (jobs_hot_pending_due is `where state = 'pending'`), so claims,
--   starts and rescues never see them;
-- - has_dependents is set on a hot row only when a child is enqueued against it, and only the moves of flagged rows
--   look at keel.job_deps. Both new columns are nullable without a default: adding them rewrites nothing.
alter table keel.jobs_hot drop constraint jobs_hot_state_check;
alter table keel.jobs_hot add constraint jobs_hot_state_check
  check (state in ('pending', 'fetched', 'processing', 'waiting'));
alter table keel.jobs_hot add column has_dependents boolean, add column on_parent_failure text
  check (on_parent_failure in ('skip', 'run', 'deadLetter'));

-- Two reasons only a flow gives a dead letter: a parent failed and the child's policy is 'deadLetter'
-- ('parent_failed', counted as failed; resurrecting the parent brings the child back to waiting) or 'skip'
-- ('skipped': not a failure, counted in no failure metric, left where it is when the parent is resurrected).
alter table keel.jobs_dlq drop constraint jobs_dlq_reason_check;
alter table keel.jobs_dlq add constraint jobs_dlq_reason_check
  check (reason in ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed', 'skipped'));

-- The edges of every flow, kept until retention purges the child (keel.purge). parent_outcome is null while the
-- parent is hot, 'succeeded' once it was archived, 'failed' once it was dead-lettered (reset to null when it is
-- resurrected). An edge is written only by whoever holds the parent's row (its final move, its resurrect, or the
-- enqueue that locked it), and read by whoever holds the child's row: the lock order of sql/README.md.
-- No foreign keys (V001): rows of the three pillars move between tables.
create table keel.job_deps (
  parent_id       bigint not null,
  child_id        bigint not null,
  position        integer not null, -- the parent's place in the child's `after` list
  parent_outcome  text check (parent_outcome in ('succeeded', 'failed')),
  primary key (parent_id, child_id)
);
create index job_deps_child on keel.job_deps (child_id, parent_id);

-- hot_counts gets the waiting rows (not pending: they are not due, and a claim would not find them), and the
-- counter triggers (V006) count them.
alter table keel.hot_counts add column waiting bigint not null default 0;

create or replace function keel._hot_counted_insert() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing, waiting)
  select n.queue, pg_backend_pid(), count(*) filter (where n.state = 'pending'),
         count(*) filter (where n.state = 'fetched'), count(*) filter (where n.state = 'processing'),
         count(*) filter (where n.state = 'waiting')
  from hot_new n group by n.queue order by n.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing,
        waiting = c.waiting + excluded.waiting;
  return null;
end
$$;

create or replace function keel._hot_counted_delete() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing, waiting)
  select o.queue, pg_backend_pid(), -count(*) filter (where o.state = 'pending'),
         -count(*) filter (where o.state = 'fetched'), -count(*) filter (where o.state = 'processing'),
         -count(*) filter (where o.state = 'waiting')
  from hot_old o group by o.queue order by o.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing,
        waiting = c.waiting + excluded.waiting;
  return null;
end
$$;

create or replace function keel._hot_counted_update() returns trigger
language plpgsql as $$
begin
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing, waiting)
  select v.queue, pg_backend_pid(), sum(v.pending)::bigint, sum(v.fetched)::bigint, sum(v.processing)::bigint,
         sum(v.waiting)::bigint
  from (
    select n.queue, count(*) filter (where n.state = 'pending') as pending,
           count(*) filter (where n.state = 'fetched') as fetched, count(*) filter (where n.state = 'processing') as processing,
           count(*) filter (where n.state = 'waiting') as waiting
    from hot_new n group by n.queue
    union all
    select o.queue, -count(*) filter (where o.state = 'pending'), -count(*) filter (where o.state = 'fetched'),
           -count(*) filter (where o.state = 'processing'), -count(*) filter (where o.state = 'waiting')
    from hot_old o group by o.queue
  ) v
  group by v.queue
  having sum(v.pending) <> 0 or sum(v.fetched) <> 0 or sum(v.processing) <> 0 or sum(v.waiting) <> 0
  order by v.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing,
        waiting = c.waiting + excluded.waiting;
  return null;
end
$$;

-- A waiting child that goes to the DLQ (cancelled, or its parent failed) keeps its policy for when it comes back.
alter table keel.jobs_dlq add column on_parent_failure text;

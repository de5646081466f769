-- Keel job engine, PostgreSQL twin: the three pillars, counters, metric buckets and queue settings.
-- Table access order everywhere: queues -> jobs_hot -> jobs_archive -> jobs_dlq -> stats_summary -> metric_buckets.
-- No foreign keys between these tables: moves are the only link, and FKs are a classic deadlock source in job stores.

create schema if not exists keel;

create sequence keel.job_id_seq as bigint;

create table keel.queues (
  name                       text primary key,
  paused                     boolean not null default false,
  max_concurrency            integer check (max_concurrency is null or max_concurrency >= 0),
  zombie_timeout_seconds     integer not null default 300 check (zombie_timeout_seconds > 0),
  zombie_policy              text not null default 'retry' check (zombie_policy in ('dlq', 'retry')),
  max_attempts               integer not null default 5 check (max_attempts > 0),
  archive_retention_seconds  integer not null default 604800 check (archive_retention_seconds > 0),
  dlq_retention_seconds      integer not null default 2592000 check (dlq_retention_seconds > 0),
  metrics_retention_seconds  integer not null default 604800 check (metrics_retention_seconds > 0),
  updated_at                 timestamptz not null default now()
);

create table keel.jobs_hot (
  id                bigint primary key default nextval('keel.job_id_seq'),
  queue             text not null,
  type              text not null,
  payload           jsonb not null default 'null'::jsonb,
  priority          integer not null default 0,
  state             text not null default 'pending' check (state in ('pending', 'fetched', 'processing')),
  run_at            timestamptz not null default now(),
  attempts          integer not null default 0,
  max_attempts      integer check (max_attempts is null or max_attempts > 0),
  idempotency_key   text,
  tags              text[] not null default '{}',
  lease_id          uuid,
  worker_id         text,
  fetched_at        timestamptz,
  lease_expires_at  timestamptz,
  started_at        timestamptz,
  heartbeat_at      timestamptz,
  cancel_requested  boolean not null default false,
  last_error        text,
  expires_at        timestamptz,
  created_at        timestamptz not null default now()
) with (fillfactor = 70);

-- Each hot query has the partial index that fits it, and no more: every index whose key or predicate a state
-- change touches is written on every claim and start (those updates can never be HOT). Zombie rescue finds fetched
-- and processing rows through jobs_hot_running_by_queue (bounded by what is in flight), so lease_expires_at and
-- heartbeat_at are in no index: a heartbeat is a HOT update (fillfactor 70 leaves the page room for it).
create unique index jobs_hot_idempotency_key on keel.jobs_hot (idempotency_key) where idempotency_key is not null;
create index jobs_hot_pending_due on keel.jobs_hot (queue, priority desc, run_at, id) where state = 'pending';
create index jobs_hot_running_by_queue on keel.jobs_hot (queue) where state in ('fetched', 'processing');
create index jobs_hot_pending_expiry on keel.jobs_hot (expires_at) where state = 'pending' and expires_at is not null;

create table keel.jobs_archive (
  id               bigint primary key,
  queue            text not null,
  type             text not null,
  payload          jsonb not null,
  priority         integer not null,
  attempts         integer not null,
  max_attempts     integer,
  idempotency_key  text,
  tags             text[] not null,
  created_at       timestamptz not null,
  started_at       timestamptz,
  finished_at      timestamptz not null,
  duration_ms      bigint not null,
  worker_id        text
);
create index jobs_archive_finished on keel.jobs_archive (finished_at);
create index jobs_archive_queue_finished on keel.jobs_archive (queue, finished_at);

create table keel.jobs_dlq (
  id               bigint primary key,
  queue            text not null,
  type             text not null,
  payload          jsonb not null,
  priority         integer not null,
  attempts         integer not null,
  max_attempts     integer,
  idempotency_key  text,
  tags             text[] not null,
  created_at       timestamptz not null,
  started_at       timestamptz,
  failed_at        timestamptz not null,
  duration_ms      bigint,
  reason           text not null check (reason in ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired')),
  error            text,
  worker_id        text
);
create index jobs_dlq_failed on keel.jobs_dlq (failed_at);
create index jobs_dlq_queue_failed on keel.jobs_dlq (queue, failed_at);

-- Rows in the DLQ per queue, kept by statement triggers on jobs_dlq (every insert and delete, whichever procedure or
-- operator did it), so stats() reads a counter instead of counting the DLQ. Written after the statement's other
-- tables, so the lock order stays queues -> hot -> archive -> dlq -> stats -> buckets -> dlq_counts.
create table keel.dlq_counts (
  queue  text primary key,
  n      bigint not null default 0
);

create or replace function keel._dlq_counted() returns trigger
language plpgsql as $$
begin
  if tg_op = 'TRUNCATE' then
    delete from keel.dlq_counts;
  elsif tg_op = 'INSERT' then
    insert into keel.dlq_counts as c (queue, n)
    select t.queue, count(*) from dlq_new t group by t.queue order by t.queue
    on conflict (queue) do update set n = c.n + excluded.n;
  else
    update keel.dlq_counts c set n = c.n - d.k
    from (select t.queue, count(*) as k from dlq_old t group by t.queue order by t.queue) d
    where c.queue = d.queue;
  end if;
  return null;
end
$$;
create trigger jobs_dlq_count_ins after insert on keel.jobs_dlq
  referencing new table as dlq_new for each statement execute function keel._dlq_counted();
create trigger jobs_dlq_count_del after delete on keel.jobs_dlq
  referencing old table as dlq_old for each statement execute function keel._dlq_counted();
create trigger jobs_dlq_count_truncate after truncate on keel.jobs_dlq
  for each statement execute function keel._dlq_counted();

create table keel.stats_summary (
  queue        text primary key,
  succeeded    bigint not null default 0,
  failed       bigint not null default 0,
  retried      bigint not null default 0,
  cancelled    bigint not null default 0,
  zombie       bigint not null default 0,
  resurrected  bigint not null default 0,
  updated_at   timestamptz not null default now()
);

create table keel.metric_buckets (
  bucket_start       timestamptz not null,
  queue              text not null,
  outcome            text not null check (outcome in ('succeeded', 'failed')),
  reason             text not null default '',
  count              bigint not null default 0,
  total_duration_ms  bigint not null default 0,
  max_duration_ms    bigint not null default 0,
  primary key (bucket_start, queue, outcome, reason)
);

-- Recurring schedules (declared in handlers/ with defineSchedule): the state that must be shared by every instance.
-- last_tick is the latest tick already handled (enqueued, or passed over by the missed-tick policy); an instance
-- fires a tick only by moving last_tick from the value it read (compare-and-set) in the same transaction as the
-- enqueue, so each tick is enqueued exactly once however many schedulers run. Pause state lives here too.
create table if not exists keel.schedules (
  name        text primary key,
  paused      boolean not null default false,
  last_tick   timestamptz,
  resumed_at  timestamptz, -- ticks at or before this instant were passed while paused: never run
  last_job_id bigint,
  updated_at  timestamptz not null default now()
);

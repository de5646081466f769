-- Recurring-job functions over keel.schedules (V011). Repeatable (sql/README.md).
-- list_schedules(name): one schedule's state, or every schedule's (name null), by name.

create or replace function keel.list_schedules(p_name text)
returns table (name text, paused boolean, last_tick timestamptz, resumed_at timestamptz, last_job_id bigint, updated_at timestamptz)
language sql stable as $$
  select s.name, s.paused, s.last_tick, s.resumed_at, s.last_job_id, s.updated_at
  from keel.schedules s
  where p_name is null or s.name = p_name
  order by s.name;
$$;

-- set_schedule_paused(name, paused): pause, or resume (which records resumed_at so the paused ticks are never run).
-- Creates the row on first use. Returns the state after the change.
create or replace function keel.set_schedule_paused(p_name text, p_paused boolean)
returns table (name text, paused boolean, last_tick timestamptz, resumed_at timestamptz, last_job_id bigint, updated_at timestamptz)
language plpgsql as $$
#variable_conflict use_column
begin
  if p_name is null or p_paused is null then
    raise exception 'set_schedule_paused: name and paused are required' using errcode = '22004';
  end if;
  insert into keel.schedules as s (name, paused) values (p_name, p_paused)
  on conflict (name) do update
    set paused = excluded.paused,
        resumed_at = case when s.paused and not excluded.paused then now() else s.resumed_at end,
        updated_at = now();
  return query select * from keel.list_schedules(p_name);
end
$$;

-- fire_schedule(name, expected_tick, tick, jobs): if the schedule is not paused and its last_tick is still
-- expected_tick, move it to tick and enqueue jobs (an enqueue_many array; may be empty) in this same transaction.
-- Returns status 'fired' with one row per job (job_id, duplicate), or one row with status 'lost' (another instance
-- moved last_tick first) or 'paused'. Only here may a job carry a key starting "schedule:" (enqueue_many refuses
-- them), and a tick is never counted as fired on a job that is not the schedule's: a hot job holding the tick's key
-- with another payload, another priority or tags, or delayed past now without having run (a squatter's job from
-- before keys were reserved, V007) refuses the tick with 23505, as enqueue_many refuses a conflict; nothing is
-- recorded and the tick fires once that job is gone.
create or replace function keel.fire_schedule(p_name text, p_expected_tick timestamptz, p_tick timestamptz, p_jobs jsonb)
returns table (status text, job_id bigint, duplicate boolean)
language plpgsql as $$
#variable_conflict use_column
declare
  v_paused boolean;
  v_moved  integer;
  v_ids    bigint[];
  v_dups   boolean[];
  v_clash  bigint;
begin
  if p_name is null or p_tick is null then
    raise exception 'fire_schedule: name and tick are required' using errcode = '22004';
  end if;
  if p_expected_tick is not null and p_tick <= p_expected_tick then
    raise exception 'fire_schedule: tick must be after expected_tick' using errcode = '22023';
  end if;
  insert into keel.schedules (name) values (p_name) on conflict (name) do nothing;
  update keel.schedules s
  set last_tick = p_tick, updated_at = now()
  where s.name = p_name and not s.paused and s.last_tick is not distinct from p_expected_tick;
  get diagnostics v_moved = row_count;
  if v_moved = 0 then
    select s.paused into v_paused from keel.schedules s where s.name = p_name;
    return query select case when v_paused then 'paused' else 'lost' end, null::bigint, null::boolean;
    return;
  end if;
  if p_jobs is null or jsonb_array_length(p_jobs) = 0 then
    return query select 'fired'::text, null::bigint, null::boolean;
    return;
  end if;
  select e.job_ids, e.duplicates into v_ids, v_dups from keel._enqueue(p_jobs, true) e;
  -- Duplicates only (rare): the holder must be what this schedule would have enqueued (same payload: _enqueue).
  select min(u.n) into v_clash
  from unnest(v_ids, v_dups) with ordinality as u(id, dup, n)
  cross join lateral (select h.run_at, h.attempts, h.priority, h.tags from keel.jobs_hot h where h.id = u.id) h
  where u.dup
    and ((h.attempts = 0 and h.run_at > now())
         or h.priority <> coalesce((p_jobs->(u.n::integer - 1)->>'priority')::integer, 0)
         or h.tags <> array(select jsonb_array_elements_text(coalesce(p_jobs->(u.n::integer - 1)->'tags', '[]'))));
  if v_clash is not null then
    raise exception 'jobs[%].idempotencyKey: "%" is held by a hot job that schedule % did not enqueue',
        v_clash - 1, p_jobs->(v_clash::integer - 1)->>'idempotencyKey', p_name
      using errcode = '23505', constraint = 'jobs_hot_idempotency_scope',
            detail = jsonb_build_object('index', v_clash - 1, 'queue', p_jobs->(v_clash::integer - 1)->>'queue',
                                        'type', p_jobs->(v_clash::integer - 1)->>'type',
                                        'idempotencyKey', p_jobs->(v_clash::integer - 1)->>'idempotencyKey')::text;
  end if;
  update keel.schedules s set last_job_id = v_ids[cardinality(v_ids)] where s.name = p_name;
  return query select 'fired'::text, u.id, u.dup from unnest(v_ids, v_dups) with ordinality as u(id, dup, n) order by u.n;
end
$$;

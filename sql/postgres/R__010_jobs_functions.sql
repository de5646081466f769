-- Keel job engine functions (PostgreSQL). One function per contract operation (see shared/jobs/procedures.ts).
-- Repeatable: re-applied whenever this file changes (sql/README.md); tables and types are in the versioned files.
-- Each call runs in the caller's single implicit transaction: any error rolls the whole move back.
-- Owner-scoped functions match (job id, lease id, state); zero rows means 'lease_lost', never an error.
-- Every transaction takes its locks in the one order of sql/README.md ("Lock order"): queue settings rows by name,
-- job rows by id (claims skip locked rows instead of waiting), then the counters, each counter table at most once
-- per transaction (keel._tally), so two movers can never wait for each other in a cycle.
-- No function sets a planner option (enable_*): a disabled plan node costs ~1e10, far past jit_above_cost, and a
-- stock server (jit = on) then JIT-compiles every statement of the function on every call (issue 22). The plans are
-- right by construction instead: primary-key probes through LATERAL subqueries (a nested loop in the outer order)
-- and `id = any(array(select ...))` (an array whose length the planner cannot know: probed per element, never a
-- scan of the table, whatever the statistics say). test/engines/postgres.plans.test.ts checks every hot-path plan.

-- Milliseconds between two instants, never negative.
-- Whole milliseconds from p_from to p_to (0 if negative). date_part in double precision, not extract, which answers
-- in numeric since PostgreSQL 14 (~1 us a call, once per archived job); rounded to whole microseconds first, the
-- timestamps' resolution, so the floor is the exact one.
create or replace function keel._ms_between(p_from timestamptz, p_to timestamptz)
returns bigint language sql immutable as $$
  select greatest(0, round(date_part('epoch', p_to - p_from) * 1000000)::bigint / 1000)
$$;

-- Lease ids arrive as text; a malformed one simply matches nothing (lease_lost), it never raises.
create or replace function keel._lease(p_lease text)
returns uuid language sql immutable as $$
  select case when p_lease ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then p_lease::uuid end
$$;

-- The lease a batch claim mints for one of its jobs: the first 64 bits of a fresh random seed per claim statement (a
-- v4 UUID: 60 random bits) and the job id's 64 bits, as one UUID. Unique per job and claim (a claim takes a job once;
-- two claims share a prefix with probability 2^-60), and no more guessable without the seed than the seed itself:
-- what another lease of the same claim reveals is the prefix of leases its holder already holds. gen_random_uuid()
-- per row cost ~4 us a job (a strong random draw each), and md5(seed:id) ~2-3 us (an OpenSSL digest context per
-- call and the hex text parsed back): ~10 % of the claim's update (bench/README.md, runs 291-299).
create or replace function keel._lease_of(p_seed text, p_job_id bigint)
returns uuid language sql immutable as $$
  select (left(p_seed, 19) || lpad(to_hex(p_job_id), 16, '0'))::uuid
$$;

-- stable, as date_part(…, timestamptz) is: a wrapper declared immutable around it is not inlined. date_part, not
-- extract: extract answers in numeric since PostgreSQL 14 and the cast back cost ~0.7 us a call, three a claimed job;
-- the double is the same (the microseconds divided by 10^6, correctly rounded either way).
create or replace function keel._epoch_ms(p_at timestamptz)
returns double precision language sql stable as $$
  select date_part('epoch', p_at) * 1000
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- enqueue_many(jobs): the versioned SQL entry point for producers (docs/jobs.md, "Producing jobs from another
-- application"; the role keel_producer may execute it and nothing else). jobs is a JSON array of {queue, type,
-- payload, priority, runAt, delayMs, tags, idempotencyKey, maxAttempts, expiresAt}. Returns one row of two arrays
-- parallel to the input: each job's id and whether it was a duplicate of a hot job with the same (queue, type,
-- idempotency key) and the same payload (20,000 result rows cost the client more than the arrays). A plain function:
-- no COMMIT or ROLLBACK of its own, so it runs inside the caller's transaction, and its wake-ups (pg_notify) are
-- delivered only when that transaction commits. It validates every job as the HTTP API does (shared/jobs/validate.ts)
-- and refuses the batch with SQLSTATE 22023 naming the field ("jobs[3].priority: ..."); a key held by a hot job with
-- another payload refuses it with 23505 (constraint jobs_hot_idempotency_scope, the detail a JSON object naming the
-- job, queue, type and key). Keys starting "schedule:" are the scheduler's (fire_schedule) and refused here.
-- Rows are inserted in (idempotency key, queue, type) order, the index's, so concurrent batches that share keys wait on each
-- other in one order and never deadlock; ON CONFLICT DO NOTHING never raises for them.

-- The app's own session: its login is a member of keel_executor (or the schema owner, current_user inside the
-- SECURITY DEFINER entry points). The app has checked every job by these same rules in TypeScript one step before
-- the call (prepareEnqueue, shared/jobs/validate.ts), and it may call every other operation anyway, so _enqueue
-- checks the fields of every other session's jobs (producers, keel_producer) and spares the app's 20,000-job batches
-- a second pass (a third of the enqueue's time); the reserved "schedule:" keys it refuses to every session.
-- The payload limit: keel.max_payload_bytes (a role's or the database's setting: ALTER ROLE ... SET), else 256 KiB
-- (KEEL_MAX_PAYLOAD_BYTES' default), never more than 16 MiB (its bound). Measured on jsonb's text, whose separators
-- carry a space. The app's own login (a member of keel_executor) has measured each payload's compact JSON against
-- KEEL_MAX_PAYLOAD_BYTES before the call (shared/jobs/validate.ts): it gets the bound, so the two measures never
-- disagree about its jobs; so does the schema owner (current_user here, inside the SECURITY DEFINER entry points).
create or replace function keel._app_session()
returns boolean language sql stable as $$
  select session_user = current_user or pg_has_role(session_user, 'keel_executor', 'member')
$$;

create or replace function keel._max_payload_bytes()
returns bigint language sql stable as $$
  select case when keel._app_session() then 16777216
              else least(16777216, greatest(1024, coalesce(
                     case when current_setting('keel.max_payload_bytes', true) ~ '^[0-9]{1,9}$'
                          then current_setting('keel.max_payload_bytes', true)::bigint end, 262144))) end
$$;

-- What is wrong with one job document, as "field: message", or null: the rules of shared/jobs/validate.ts
-- (enqueueFields, LIMITS). One expression without subqueries, so the planner inlines it into the batch's one pass.
-- Names are matched by '+' with their length tested apart: a bounded repeat ({1,128}) is compiled into 128 copies
-- of the class and doubled the cost of a 20,000-job enqueue.
create or replace function keel._job_problem(d jsonb, p_scheduler boolean, p_max_payload bigint)
returns text language sql stable as $$
  select case
    when jsonb_typeof(d) is distinct from 'object' then '(job): must be a JSON object'
    when d - '{queue,type,payload,priority,runAt,delayMs,tags,idempotencyKey,maxAttempts,expiresAt,after,onFailure}'::text[] <> '{}'::jsonb
      then '(field): is not a job field'
    when jsonb_typeof(d->'queue') is distinct from 'string' or char_length(d->>'queue') > 128
         or not (d->>'queue') ~ '^[A-Za-z0-9_.:-]+$'
      then 'queue: must be a name of 1-128 letters, digits and _ . : -'
    when jsonb_typeof(d->'type') is distinct from 'string' or char_length(d->>'type') > 128
         or not (d->>'type') ~ '^[A-Za-z0-9_.:-]+$'
      then 'type: must be a name of 1-128 letters, digits and _ . : -'
    when d ? 'priority' and (jsonb_typeof(d->'priority') <> 'number' or (d->>'priority')::numeric % 1 <> 0
                             or abs((d->>'priority')::numeric) > 1000000)
      then 'priority: must be an integer from -1000000 to 1000000'
    when d ? 'delayMs' and (jsonb_typeof(d->'delayMs') <> 'number' or (d->>'delayMs')::numeric % 1 <> 0
                            or (d->>'delayMs')::numeric not between 0 and 31622400000)
      then 'delayMs: must be an integer from 0 to 31622400000 (366 days)'
    when d ? 'maxAttempts' and (jsonb_typeof(d->'maxAttempts') <> 'number' or (d->>'maxAttempts')::numeric % 1 <> 0
                                or (d->>'maxAttempts')::numeric not between 1 and 1000)
      then 'maxAttempts: must be an integer from 1 to 1000'
    when d ? 'runAt' and (jsonb_typeof(d->'runAt') <> 'string' or not (d->>'runAt') ~
           '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$')
      then 'runAt: must be an ISO 8601 date and time with its offset (Z or +hh:mm)'
    when d ? 'expiresAt' and (jsonb_typeof(d->'expiresAt') <> 'string' or not (d->>'expiresAt') ~
           '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$')
      then 'expiresAt: must be an ISO 8601 date and time with its offset (Z or +hh:mm)'
    when d ? 'runAt' and d ? 'delayMs' then 'runAt: give delayMs or runAt, not both'
    when d ? 'tags' and (jsonb_typeof(d->'tags') <> 'array' or jsonb_array_length(d->'tags') > 16
                         or jsonb_path_exists(d->'tags', '$[*] ? (@.type() != "string" || !(@ like_regex "^.{1,64}$" flag "s"))'))
      then 'tags: must be an array of at most 16 strings of 1-64 characters'
    when d ? 'idempotencyKey' and (jsonb_typeof(d->'idempotencyKey') <> 'string'
                                   or char_length(d->>'idempotencyKey') not between 1 and 200)
      then 'idempotencyKey: must be a string of 1-200 characters'
    when not p_scheduler and starts_with(d->>'idempotencyKey', 'schedule:')
      then 'idempotencyKey: keys starting with "schedule:" are reserved for the scheduler'
    when d ? 'payload' and octet_length((d->'payload')::text) > p_max_payload
      then format('payload: is %s bytes of JSON; the limit is %s bytes (keel.max_payload_bytes)',
                  octet_length((d->'payload')::text), p_max_payload)
  end
$$;

-- The batch's first invalid job as 'jobs[i].field: message' (i from 0, as the API names it), or null.
create or replace function keel._jobs_problem(p_docs jsonb[], p_scheduler boolean)
returns text language plpgsql stable as $$
declare
  v_max    bigint := keel._max_payload_bytes();
  v_at     bigint;
  v_doc    jsonb;
  v_msg    text;
begin
  select u.o, u.d, keel._job_problem(u.d, p_scheduler, v_max) into v_at, v_doc, v_msg
  from unnest(p_docs) with ordinality as u(d, o)
  where keel._job_problem(u.d, p_scheduler, v_max) is not null
  order by u.o limit 1;
  if v_msg is null then
    return null;
  end if;
  if v_msg like '(field):%' then
    v_msg := (select min(k) from jsonb_object_keys(v_doc) k
              where k <> all('{queue,type,payload,priority,runAt,delayMs,tags,idempotencyKey,maxAttempts,expiresAt,after,onFailure}'))
             || ': is not a job field (queue, type, payload, priority, runAt, delayMs, tags, idempotencyKey, maxAttempts, expiresAt, after, onFailure)';
  elsif v_msg like '(job):%' then
    return format('jobs[%s]: must be a JSON object', v_at - 1);
  end if;
  return format('jobs[%s].%s', v_at - 1, v_msg);
end
$$;

-- The enqueue behind enqueue_many (p_scheduler false) and fire_schedule (true: keys "schedule:..." allowed).
drop function if exists keel.enqueue_many(jsonb);
create or replace function keel._enqueue(p_jobs jsonb, p_scheduler boolean)
returns table (job_ids bigint[], duplicates boolean[])
language plpgsql as $$
#variable_conflict use_column
declare
  v_n        integer;
  v_docs     jsonb[];
  v_ids      bigint[];
  v_dups     boolean[];
  v_new      bigint[];
  v_left     integer;
  v_pass     integer := 0;
  v_fresh    bigint;
  v_inserted bigint;
  v_problem  text;
  v_clash    integer;
  v_flow     boolean;
  v_t        keel.tally;
begin
  if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' then
    raise exception 'jobs must be a JSON array' using errcode = '22023';
  end if;
  v_n := jsonb_array_length(p_jobs);
  if v_n = 0 then
    return;
  end if;
  if v_n > 20000 then
    raise exception 'jobs: at most 20000 jobs per batch (got %)', v_n using errcode = '22023';
  end if;
  -- Whole-array passes over parallel arrays in input order, and index probes per job: no per-element access into
  -- p_jobs or the arrays and no join whose plan could go quadratic, so a 20,000-job batch costs 20,000 x a job.
  v_docs := array(select e.j from jsonb_array_elements(p_jobs) with ordinality as e(j, o) order by e.o);
  if not keel._app_session() then
    v_problem := keel._jobs_problem(v_docs, p_scheduler);
  elsif not p_scheduler then
    -- The scheduler's keys are refused to every caller of enqueue_many, the app included.
    v_problem := (select format('jobs[%s].idempotencyKey: keys starting with "schedule:" are reserved for the scheduler',
                                u.o - 1)
                  from unnest(v_docs) with ordinality as u(d, o)
                  where starts_with(u.d->>'idempotencyKey', 'schedule:')
                  order by u.o limit 1);
  end if;
  if v_problem is not null then
    raise exception '%', v_problem using errcode = '22023';
  end if;
  -- Flows (V010): one pass over the documents; a batch without `after` or `onFailure` does nothing more for them.
  v_flow := exists (select 1 from unnest(v_docs) as d where d ? 'after' or d ? 'onFailure');
  if v_flow and p_scheduler then
    -- A schedule fires jobs, not flows: its tick must never wait on another job (the same refusal on SQL Server).
    raise exception 'jobs[%].after: a scheduled job cannot wait for other jobs',
      (select u.o - 1 from unnest(v_docs) with ordinality as u(d, o) where u.d ? 'after' or u.d ? 'onFailure'
       order by u.o limit 1) using errcode = '22023';
  end if;
  if v_flow then
    v_problem := keel._after_problem(v_docs);
    if v_problem is not null then
      raise exception '%', v_problem using errcode = '22023';
    end if;
  end if;
  v_ids := array_fill(null::bigint, array[v_n]);
  v_dups := array_fill(false, array[v_n]);

  -- The batch's distinct queues first, then one settings probe each (not one per job).
  insert into keel.queues (name)
  select n.name
  from (select distinct d->>'queue' as name from unnest(v_docs) as d) n
  where not exists (select 1 from keel.queues q where q.name = n.name)
  order by 1
  on conflict (name) do nothing;

  -- The parents named by id, locked before any row of the batch is inserted (sql/README.md, Lock order).
  if v_flow then
    perform keel._lock_parents(v_docs);
  end if;

  loop
    v_pass := v_pass + 1;
    -- A fresh id for every job that has none yet; insert those jobs.
    v_new := array(select case when u.id is null then nextval('keel.job_id_seq') end
                   from unnest(v_ids) with ordinality as u(id, o) order by u.o);
    v_fresh := (select count(*) from unnest(v_new) as x(id) where x.id is not null);
    with inserted as (
      insert into keel.jobs_hot as h (id, queue, type, payload, priority, run_at, max_attempts, idempotency_key, tags,
                                      expires_at, state, on_parent_failure)
      select u.new_id,
             u.j->>'queue',
             u.j->>'type',
             coalesce(u.j->'payload', 'null'::jsonb),
             coalesce((u.j->>'priority')::integer, 0),
             coalesce((u.j->>'runAt')::timestamptz, now() + coalesce((u.j->>'delayMs')::bigint, 0) * interval '1 millisecond'),
             (u.j->>'maxAttempts')::integer,
             u.j->>'idempotencyKey',
             case when coalesce(jsonb_array_length(u.j->'tags'), 0) = 0 then '{}'::text[]
                  else array(select jsonb_array_elements_text(u.j->'tags')) end,
             (u.j->>'expiresAt')::timestamptz,
             -- a job with parents waits (keel._settle_children below makes it due, or not, once they are linked)
             case when v_flow and jsonb_array_length(u.j->'after') > 0 then 'waiting' else 'pending' end,
             case when v_flow and jsonb_array_length(u.j->'after') > 0 then coalesce(u.j->>'onFailure', 'deadLetter') end
      from unnest(v_docs, v_new) with ordinality as u(j, new_id, o)
      where u.new_id is not null
      order by u.j->>'idempotencyKey' nulls first, u.j->>'queue', u.j->>'type', u.o
      on conflict (idempotency_key, queue, type) where idempotency_key is not null do nothing
      returning 1
    )
    select count(*) into v_inserted from inserted;

    -- Every fresh id went in (only an idempotency key can conflict): each job that had none has its fresh id.
    if v_inserted = v_fresh then
      v_ids := array(select coalesce(u.id, u.new_id) from unnest(v_ids, v_new) with ordinality as u(id, new_id, o)
                     order by u.o);
      exit;
    end if;
    -- Ours if the fresh id is in the table now (ids come from the sequence; nobody else sees them before we
    -- commit); otherwise a duplicate of the hot job holding the key in the job's queue and type, when its payload is
    -- the same: another payload is a conflict, never a silent success. This statement sees rows committed by
    -- concurrent enqueues and our own inserts.
    select array_agg(r.id order by r.o), array_agg(r.dup order by r.o), count(*) filter (where r.id is null),
           min(r.o) filter (where r.clash)
    into v_ids, v_dups, v_left, v_clash
    from (
      select u.o, coalesce(u.id, m.id, d.id) as id, u.dup or (u.id is null and m.id is null and d.id is not null) as dup,
             u.id is null and m.id is null and d.payload is distinct from coalesce(u.j->'payload', 'null'::jsonb)
               and d.id is not null as clash
      from unnest(v_ids, v_dups, v_new, v_docs) with ordinality as u(id, dup, new_id, j, o)
      left join lateral (select h.id from keel.jobs_hot h where h.id = u.new_id) m on true
      left join lateral (select h.id, h.payload from keel.jobs_hot h
                         where u.id is null and m.id is null and h.queue = u.j->>'queue' and h.type = u.j->>'type'
                           and h.idempotency_key = u.j->>'idempotencyKey') d on true
    ) r;

    if v_clash is not null then
      raise exception 'jobs[%].idempotencyKey: "%" is held by a hot job of queue "%" and type "%" with another payload',
          v_clash - 1, v_docs[v_clash]->>'idempotencyKey', v_docs[v_clash]->>'queue', v_docs[v_clash]->>'type'
        using errcode = '23505', constraint = 'jobs_hot_idempotency_scope',
              detail = jsonb_build_object('index', v_clash - 1, 'queue', v_docs[v_clash]->>'queue',
                                          'type', v_docs[v_clash]->>'type',
                                          'idempotencyKey', v_docs[v_clash]->>'idempotencyKey')::text;
    end if;
    exit when v_left = 0;
    -- The key's holder left the hot table between our insert and our lookup: insert again.
    if v_pass >= 5 then
      raise exception 'enqueue could not settle idempotency keys after % passes', v_pass using errcode = '40001';
    end if;
  end loop;

  if v_flow then
    -- Edges, flags and what each new child is now: due, waiting, or dead-lettered by its policy. Counted last.
    v_t := keel._link_children(v_docs, v_ids, v_dups);
    perform keel._tally(v_t);
  end if;

  -- Wake idle workers (LISTEN keel_jobs, shared/engines/postgres/wakeups.ts) at commit: one notification per queue
  -- that got a job due now. Delayed jobs are found by polling when they come due; waiting ones notify when released.
  perform pg_notify('keel_jobs', q.name)
  from (select distinct d->>'queue' as name
        from unnest(v_docs, v_dups) as u(d, dup)
        where not u.dup and not (v_flow and coalesce(jsonb_array_length(d->'after'), 0) > 0)
          and coalesce((d->>'runAt')::timestamptz <= now(), coalesce((d->>'delayMs')::bigint, 0) = 0)) q;

  return query select v_ids, v_dups;
end
$$;

create or replace function keel.enqueue_many(p_jobs jsonb)
returns table (job_ids bigint[], duplicates boolean[])
language sql as $$
  select e.job_ids, e.duplicates from keel._enqueue(p_jobs, false) e
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- Claims. Queues with a max_concurrency are serialised by locking their settings row (queues before jobs_hot),
-- so the count of fetched+processing jobs is exact across every host.
-- The best p_limit of the candidates (already locked by _pick_due; their tuple ids), in claim order. Only a claim
-- over several queues can have more candidates than its limit. PL/pgSQL, not SQL: PostgreSQL 15 parses and plans a
-- SQL function that cannot be inlined (this one has a sublink) on every call; PL/pgSQL keeps its plan.
drop function if exists keel._claim_best(bigint[], integer);
create or replace function keel._claim_best(p_tids tid[], p_limit integer)
returns tid[]
language plpgsql stable as $$
begin
  if cardinality(p_tids) <= p_limit then
    return p_tids;
  end if;
  return array(select h.ctid from keel.jobs_hot h where h.ctid = any(array(select unnest(p_tids)))
               order by h.priority desc, h.run_at, h.id limit p_limit);
end
$$;

-- The claim's update reads the rows _pick_due locked by their tuple ids (a TID scan: no second probe of
-- jobs_hot_pkey per row), as complete_many does (see keel._lock_owned: a version locked FOR UPDATE keeps its ctid
-- until commit), and checks that it moved every row it was given. `ctid = any(array(select unnest(...)))`: an
-- array whose length the planner cannot know, so a TID scan whatever the statistics say (a plain array parameter
-- of 500 ids once gave a scan of the whole hot table).
drop function if exists keel._claim_rows(bigint[], text, integer, integer);
create or replace function keel._claim_rows(p_tids tid[], p_worker_id text, p_lease_seconds integer, p_limit integer)
returns setof keel.claimed_job
language plpgsql as $$
declare
  v_tids tid[] := keel._claim_best(p_tids, p_limit);
  v_seed text := gen_random_uuid()::text;
  v_n    integer;
begin
  return query
  with upd as (
    update keel.jobs_hot h
    set state = 'fetched',
        lease_id = keel._lease_of(v_seed, h.id),
        worker_id = p_worker_id,
        fetched_at = now(),
        lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    where h.ctid = any(array(select unnest(v_tids)))
    returning h.*
  )
  select u.id, u.lease_id, u.queue, u.type, u.payload, u.priority, u.attempts, u.max_attempts,
         coalesce(s.max_attempts, 5), u.idempotency_key, u.tags, u.run_at, u.created_at, u.lease_expires_at,
         coalesce(s.zombie_timeout_seconds, 300) -- the lease a started job keeps by heartbeats (as rescue_zombies)
  from upd u left join keel.queues s on s.name = u.queue
  order by u.priority desc, u.run_at, u.id;
  get diagnostics v_n = row_count;
  if v_n <> cardinality(v_tids) then
    raise exception 'keel._claim_rows: locked % rows, moved %', cardinality(v_tids), v_n;
  end if;
end
$$;

-- Up to p_limit due pending jobs of the given queues in claim order (priority desc, run_at, id), locked skip-locked:
-- the tuple ids of the versions locked (the claim's update reads them by a TID scan, see keel._claim_rows).
-- Every probe is a scalar `queue = name` range of jobs_hot_pending_due, walked in index order: per priority level
-- (highest first, found with one index probe per queue) only the due rows of that level are read, so neither the
-- pending backlog nor delayed jobs (of any priority) make a claim slower. Within a level, each queue contributes its
-- oldest due rows and the level keeps the oldest across queues, so no queue starves another of equal priority.
-- jobs_hot_pending_due is the only index of pending rows by queue (V006 dropped jobs_hot_pending_run_at, which the
-- planner chose with stale statistics and then sorted every due row of the queue: 4-7 ms a claim at 30k pending).
-- One queue: the level probe also returns where the level's first visible pending row is, (run_at, id), and the
-- pick starts there. Before it in the index lie only entries the probe found not pending: the versions that
-- committed claims left behind (and deleted rows), which no scan may mark dead while a transaction older than their
-- claim runs. At a queue head where several workers claim, that is the last few claims' rows (bench/README runs
-- 800-819: ~100-250 entries, a heap visit each), and the pick walked them again after the probe. A row that turns
-- pending there after the probe (a release or retry committing during this claim) waits for the next claim, as one
-- committing just after this claim would; a row another claim holds is visible to the probe, so it is never before
-- the start: the pick skips it, as before.
drop function if exists keel._pick_due(text[], integer);
create or replace function keel._pick_due(p_queues text[], p_limit integer)
returns tid[]
language plpgsql as $$
declare
  v_tids  tid[] := '{}';
  v_need  integer := p_limit;
  v_prio  integer;
  v_run   timestamptz; -- one queue: the level's first pending row in index order, where the pick starts
  v_id    bigint;
begin
  if p_limit is null or p_limit < 1 or cardinality(p_queues) = 0 then
    return v_tids;
  end if;
  if cardinality(p_queues) = 1 then -- by a scalar key: the plan is kept (see keel._claim_candidates)
    select h.priority, h.run_at, h.id into v_prio, v_run, v_id from keel.jobs_hot h
    where h.state = 'pending' and h.queue = p_queues[1]
    order by h.priority desc, h.run_at, h.id limit 1;
  else
    select max(m.priority) into v_prio
    from unnest(p_queues) as n(name)
    cross join lateral (
      select h.priority from keel.jobs_hot h
      where h.state = 'pending' and h.queue = n.name
      order by h.priority desc limit 1) m;
  end if;
  while v_prio is not null and v_need > 0 loop
    if cardinality(p_queues) = 1 then
      -- By a scalar key, as the probes: over unnest(p_queues) this statement got a custom plan on every call (the
      -- custom plan knows the array's length; bench/README runs 300-309). Each value is read by a scalar subquery
      -- (an initplan): no plan, custom or generic, knows it, so every plan is the generic one, costed the same, and
      -- PostgreSQL keeps the cached plan after its five trial custom plans. With the values in the plan, a custom
      -- plan knew the LIMIT (the generic one costs it at 10 % of the rows) and the queue's row count, so at a
      -- backlog of more than a few hundred jobs it always looked cheaper: the pick was planned on every call, ~2x
      -- its execution in a claim of 20 (bench/README runs 800-819 and 1040-1059). The plan is the same either way:
      -- this index's scan, stopped by the LIMIT (at 10 % of the estimated rows it stays far cheaper than reading
      -- and sorting every due row). The same rows in the same order: one queue's oldest due rows of this level.
      v_tids := v_tids || array(
        select h.ctid from keel.jobs_hot h
        where h.state = 'pending' and h.queue = (select p_queues[1]) and h.priority = (select v_prio)
          and h.run_at <= now()
          and (h.run_at, h.id) >= ((select v_run), (select v_id)) -- past what the probe walked (above)
          and (h.expires_at is null or h.expires_at > now())
        order by h.run_at, h.id
        limit (select v_need)
        for update of h skip locked);
    else
      v_tids := v_tids || array(
        select c.ctid
        from unnest(p_queues) as n(name)
        cross join lateral (
          select h.ctid, h.id, h.run_at from keel.jobs_hot h
          where h.state = 'pending' and h.queue = n.name and h.priority = v_prio and h.run_at <= now()
            and (h.expires_at is null or h.expires_at > now())
          order by h.run_at, h.id
          limit v_need
          for update of h skip locked) c
        order by c.run_at, c.id
        limit v_need);
    end if;
    v_need := p_limit - cardinality(v_tids);
    exit when v_need <= 0;
    if cardinality(p_queues) = 1 then
      select h.priority, h.run_at, h.id into v_prio, v_run, v_id from keel.jobs_hot h
      where h.state = 'pending' and h.queue = p_queues[1] and h.priority < v_prio
      order by h.priority desc, h.run_at, h.id limit 1; -- no row: v_prio is null
    else
      select max(m.priority) into v_prio
      from unnest(p_queues) as n(name)
      cross join lateral (
        select h.priority from keel.jobs_hot h
        where h.state = 'pending' and h.queue = n.name and h.priority < v_prio
        order by h.priority desc limit 1) m;
    end if;
  end loop;
  return v_tids;
end
$$;

-- The jobs one claim takes (the tuple ids _pick_due locked): due pending jobs of the given queues in claim order,
-- locked skip-locked; at most p_limit, and for a queue with max_concurrency at most its free slots. Its settings rows
-- stay locked until the caller's transaction ends, so the claim that follows is counted before the next claimer counts.
-- The pause barrier: before reading a queue's settings, a claim takes the queue's claim lock in share mode (a
-- transaction-scoped advisory lock, keel._claim_lock_key; several in key order), held to its commit. Pausing
-- (keel.update_queue with p_paused) takes it exclusively first, so it waits for every claim that may have read
-- "not paused", and a claim that comes after reads the pause in its next statement. An advisory lock lives in the
-- lock table only: no row version, no multixact, nothing written; taking and releasing one costs a few microseconds,
-- well under 1 % of a claim (bench:claim showed no difference beyond its noise).
-- The key of a queue's claim lock (the pause barrier, keel._claim_candidates): one of 32, by the name's hash, so a
-- claim over many queues (the dispatcher's, over every queue) holds at most 32 of the server's fixed-size lock table
-- (max_locks_per_transaction) however many queues there are. Queues sharing a key: a pause of one also waits for
-- the other's claims in flight (each one short transaction), nothing worse. The class (first half) is Keel's.
create or replace function keel._claim_lock_key(p_queue text)
returns bigint
language sql immutable parallel safe as $$
  select (x'6b65656c'::bigint << 32) | (hashtext(p_queue) & 31)
$$;

drop function if exists keel._claim_candidates(text[], integer);
create or replace function keel._claim_candidates(p_queues text[], p_limit integer)
returns tid[]
language plpgsql as $$
declare
  v_candidates  tid[];
  v_open        text[];
  v_running     integer;
  v_cap         integer;
  v_paused      boolean;
  q             record;
begin
  if p_limit is null or p_limit < 1 or p_queues is null or cardinality(p_queues) = 0 then
    return '{}';
  end if;

  -- One queue (the processor's usual claim): its settings by key. A statement with the queue list as an array is
  -- planned anew on every call (a custom plan knows the array's length, so it always looks cheaper than the cached
  -- one: ~0.1-0.2 ms a statement); one by a scalar key keeps its plan. The same choice as below. keel.claim_and_start
  -- has this path inline (the lock, the settings read, _pick_due): a change here goes there too.
  if cardinality(p_queues) = 1 then
    if p_queues[1] is null then
      return '{}';
    end if;
    perform pg_advisory_xact_lock_shared(keel._claim_lock_key(p_queues[1]));
    select s.paused, s.max_concurrency into v_paused, v_cap from keel.queues s where s.name = p_queues[1];
    if not coalesce(v_paused, false) and v_cap is null then
      return keel._pick_due(p_queues, p_limit);
    end if;
  end if;

  perform pg_advisory_xact_lock_shared(x.k)
  from (select distinct keel._claim_lock_key(n.name) as k from unnest(p_queues) as n(name) where n.name is not null
        order by 1) x;
  -- Queues with no limit (and queues with no settings row yet), probed one by one in index order.
  v_open := array(
    select distinct n.name from unnest(p_queues) as n(name)
    where n.name is not null
      and not exists (select 1 from keel.queues s where s.name = n.name and (s.paused or s.max_concurrency is not null))
    order by 1);
  v_candidates := keel._pick_due(v_open, p_limit);

  -- Limited queues, locked in name order; each contributes at most its remaining capacity.
  for q in
    select s.name, s.max_concurrency from keel.queues s
    where s.name = any(p_queues) and not s.paused and s.max_concurrency is not null
    order by s.name
    for update of s
  loop
    -- keel.hot_counts (V004): exact as of the last commit, and no other claim of this queue is uncommitted (the row lock).
    select coalesce(sum(c.fetched + c.processing), 0) into v_running from keel.hot_counts c where c.queue = q.name;
    v_cap := least(p_limit, q.max_concurrency - v_running);
    if v_cap > 0 then
      v_candidates := v_candidates || keel._pick_due(array[q.name], v_cap);
    end if;
  end loop;
  return v_candidates;
end
$$;

-- Claim: pending -> fetched under a new lease; the caller starts the job (start_many) or releases it.
create or replace function keel.claim_next(p_worker_id text, p_queues text[], p_limit integer, p_lease_seconds integer)
returns setof keel.claimed_job
language plpgsql as $$
declare
  v_candidates tid[] := keel._claim_candidates(p_queues, p_limit);
begin
  if cardinality(v_candidates) = 0 then
    return;
  end if;
  return query select * from keel._claim_rows(v_candidates, p_worker_id, p_lease_seconds, p_limit);
end
$$;

-- Claim and start in one update: pending -> processing under a new lease, attempts + 1, started_at and heartbeat_at
-- now; the same choice as claim_next (priority, due time, pause, max_concurrency, expiry). One row version and one
-- round trip fewer per job than claim_next + start_many. attempts is the count before this attempt, as claim_next
-- returns it; attempt is the one now running. The times are epoch milliseconds: formatting three timestamptz per
-- row (and parsing them in the client) cost more than the rest of the row (~3.5 us a job on the server). The update
-- returns only the columns sent (`returning h.*` copied every column of every row, logs and result too, into the CTE:
-- ~6 % of the claim's backend CPU), and tags are null when there are none (the client reads null as no tags; parsing
-- '{}' cost the client's array parser ~1 us a job). The claim order's keys (priority, run_at, job_id) are the first
-- columns, fixed-width and never null: the sort reads them at fixed offsets. As resjunk keys after the text and
-- JSON columns, every comparison walked each row to them (nocachegetattr; all rows of one enqueue share priority and
-- run_at, so every comparison reached the id): ~1-2 us a job of the claim (bench/README.md, runs 291-299). The
-- client reads the columns by name (shared/jobs/rows.ts). run_at in epoch ms orders as the timestamp does: its
-- microseconds stay distinct in a double (spacing ~0.24 us at today's instants).
drop function if exists keel.claim_and_start(text, text[], integer, integer);
create or replace function keel.claim_and_start(p_worker_id text, p_queues text[], p_limit integer, p_lease_seconds integer)
returns table (priority integer, run_at double precision, job_id bigint, lease_id uuid, queue text, type text,
               payload jsonb, attempts integer, max_attempts integer, queue_max_attempts integer, idempotency_key text,
               tags text[], created_at double precision, lease_expires_at double precision, attempt integer,
               queue_zombie_timeout_seconds integer)
language plpgsql as $$
#variable_conflict use_column
declare
  v_tids   tid[];
  v_seed   text := gen_random_uuid()::text;
  v_n      integer;
  v_multi  boolean := coalesce(cardinality(p_queues), 0) > 1;
  v_paused boolean;
  v_cap    integer;
  v_qmax   integer; -- one queue: its settings, read once (below)
  v_qzt    integer;
begin
  -- One queue (the processor's claim): keel._claim_candidates' one-queue path inline (the pause barrier's claim lock,
  -- then the settings row by key, then the pick), its settings read by the same statement, and not joined to every
  -- claimed row (the join cost ~0.7 us a job, ~3 % of a batched job's server CPU, and the nested call ~10-20 us a
  -- claim; bench/README.md runs 1230-1259). A paused or limited queue, and several queues (the dispatcher's claim),
  -- go through keel._claim_candidates; there each row's settings are probed (`case when v_multi`, a constant false
  -- for one queue).
  if not v_multi and p_limit >= 1 and p_queues[1] is not null then
    perform pg_advisory_xact_lock_shared(keel._claim_lock_key(p_queues[1]));
    select s.paused, s.max_concurrency, s.max_attempts, s.zombie_timeout_seconds into v_paused, v_cap, v_qmax, v_qzt
    from keel.queues s where s.name = p_queues[1];
    if not coalesce(v_paused, false) and v_cap is null then
      v_tids := keel._pick_due(p_queues, p_limit);
    end if;
  end if;
  if v_tids is null then
    v_tids := keel._claim_candidates(p_queues, p_limit);
  end if;
  if cardinality(v_tids) = 0 then
    return;
  end if;
  if cardinality(v_tids) > p_limit then -- only a claim over several queues (keel._claim_best)
    v_tids := keel._claim_best(v_tids, p_limit);
  end if;
  return query
  with upd as (
    update keel.jobs_hot h
    set state = 'processing',
        lease_id = keel._lease_of(v_seed, h.id),
        worker_id = p_worker_id,
        fetched_at = now(),
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        attempts = h.attempts + 1,
        started_at = now(),
        heartbeat_at = now(),
        progress = null -- a new attempt: the last one's progress no longer says how far this one is
    where h.ctid = any(array(select unnest(v_tids))) -- the rows _pick_due locked, by a TID scan (see _claim_rows)
    returning h.id, h.lease_id, h.queue, h.type, h.payload, h.priority, h.attempts, h.max_attempts, h.idempotency_key,
              h.tags, h.run_at, h.created_at, h.lease_expires_at
  )
  select u.priority, keel._epoch_ms(u.run_at), u.id, u.lease_id, u.queue, u.type, u.payload, u.attempts - 1,
         u.max_attempts,
         coalesce(case when (select v_multi) then (select s.max_attempts from keel.queues s where s.name = u.queue) end, v_qmax, 5),
         u.idempotency_key, case when cardinality(u.tags) > 0 then u.tags end,
         keel._epoch_ms(u.created_at), keel._epoch_ms(u.lease_expires_at), u.attempts,
         -- the lease the worker keeps by heartbeats (as rescue_zombies)
         coalesce(case when (select v_multi) then (select s.zombie_timeout_seconds from keel.queues s where s.name = u.queue) end,
                  v_qzt, 300)
  from upd u
  order by 1 desc, 2, 3; -- priority desc, run_at, id: the claim order, read from the first three columns
  get diagnostics v_n = row_count;
  if v_n <> cardinality(v_tids) then
    raise exception 'keel.claim_and_start: locked % rows, moved %', cardinality(v_tids), v_n;
  end if;
end
$$;

create or replace function keel.claim_by_id(p_job_id bigint, p_worker_id text, p_lease_seconds integer)
returns setof keel.claimed_job
language plpgsql as $$
declare
  v_queue    text;
  v_settings record;
  v_running  integer;
  v_tid      tid;
begin
  -- By id alone (OFFSET 0 keeps the state test out of the probe): `state = 'pending'` inside would let the planner walk
  -- a pending partial index whole whenever the statistics say few jobs are pending.
  select x.queue into v_queue
  from (select h.queue, h.state from keel.jobs_hot h where h.id = p_job_id offset 0) x
  where x.state = 'pending';
  if not found then
    return;
  end if;
  perform pg_advisory_xact_lock_shared(keel._claim_lock_key(v_queue)); -- the pause barrier (_claim_candidates)
  select s.paused, s.max_concurrency into v_settings from keel.queues s where s.name = v_queue;
  if found and v_settings.paused then
    return;
  end if;
  if found and v_settings.max_concurrency is not null then
    perform 1 from keel.queues s where s.name = v_queue for update;
    select coalesce(sum(c.fetched + c.processing), 0) into v_running from keel.hot_counts c where c.queue = v_queue;
    if v_running >= v_settings.max_concurrency then
      return;
    end if;
  end if;
  select x.ctid into v_tid
  from (select h.ctid, h.state, h.run_at, h.expires_at from keel.jobs_hot h where h.id = p_job_id
        for update skip locked offset 0) x
  where x.state = 'pending' and x.run_at <= now() and (x.expires_at is null or x.expires_at > now());
  if v_tid is null then
    return;
  end if;
  return query select * from keel._claim_rows(array[v_tid], p_worker_id, p_lease_seconds, 1);
end
$$;

-- The due jobs claim_next would take now (the same choice: claim order, pause, max_concurrency's free slots, expiry; at
-- most p_limit), left pending: their ids in claim order. For posting their queue messages (the dispatcher's post mode,
-- a freed slot's hand-on, resume), whose runner then claims each by id. One transaction under the pause barrier
-- (keel._claim_candidates: the claim locks in share mode, limited queues' settings rows, the rows skip-locked, all
-- until it ends), so no row is ever fetched on the way: a pause that answered counted none of them in flight (claiming
-- and then releasing them did: they were fetched until the release, and then never ran).
create or replace function keel.pick_due(p_queues text[], p_limit integer)
returns table (job_id bigint)
language plpgsql as $$
declare
  v_tids tid[] := keel._claim_candidates(p_queues, p_limit);
begin
  if cardinality(v_tids) = 0 then
    return;
  end if;
  v_tids := keel._claim_best(v_tids, p_limit);
  return query
  select h.id from keel.jobs_hot h where h.ctid = any(array(select unnest(v_tids)))
  order by h.priority desc, h.run_at, h.id;
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- Owner-scoped transitions inside the hot table.
-- start_many(leases) and complete_many(leases): leases is a JSON array of {jobId, leaseId} (the store sends only
-- well-formed pairs; a malformed one is an error, 22P02). Each answers only the jobs it moved; a pair it does not
-- answer was not owned (lease_lost). The pairs are sorted by id and each is a LATERAL probe of jobs_hot by id alone:
-- a nested loop in the pairs' order whatever the statistics say, so rows are locked in id order, as every mover
-- locks them. Joined instead, the planner hash-joined the pairs against a scan of the whole table when jobs_hot's
-- statistics were stale (the usual case for a queue table), locking in no particular order; with the state tested
-- inside the probe, it walked a partial index of running jobs once per pair (103 us a job; gone since V004). So the
-- probe is by id alone, fenced with OFFSET 0 so the planner cannot push the state test into it, and the lease and
-- state are tested on the locked row: a pair whose job is no longer the caller's is locked until commit and left alone.
-- It answers the owned rows' tuple ids (ctid), in id order: the caller's update or delete then reads exactly those
-- rows by a TID scan, with no second probe of jobs_hot_pkey per row (~3 us a job of complete_many, bench/README.md
-- runs 180-189). The ctids stay true until commit: each is the version this transaction locked FOR UPDATE, which no
-- other transaction can update or delete before then, nor vacuum move. The caller holds them in a variable (a TID
-- scan needs a value fixed before the scan, not a volatile call) and checks that it moved as many rows as it locked.
-- PL/pgSQL, not SQL: PostgreSQL 15 parses and plans a SQL function it cannot inline on every call (~0.25 ms a
-- completion); PL/pgSQL keeps the plan (a generic one: the JSON's row count is unknown to a custom plan too).
drop function if exists keel._lock_owned(jsonb, text);
create or replace function keel._lock_owned(p_leases jsonb, p_state text)
returns tid[]
language plpgsql as $$
begin
  return array(
    select l.ctid
    from (select r."jobId" as id, r."leaseId" as lease from jsonb_to_recordset(p_leases) as r("jobId" bigint, "leaseId" uuid)
          order by 1) r
    cross join lateral (
      select h.ctid, h.id, h.lease_id, h.state from keel.jobs_hot h where h.id = r.id
      for update of h offset 0) l
    where l.lease_id = r.lease and l.state = p_state);
end
$$;

create or replace function keel.start_many(p_leases jsonb)
returns table (job_id bigint, status text, attempt integer)
language plpgsql as $$
#variable_conflict use_column
declare
  v_tids tid[] := keel._lock_owned(p_leases, 'fetched');
  v_n    integer;
begin
  return query
  with upd as (
    update keel.jobs_hot h
    set state = 'processing', attempts = h.attempts + 1, started_at = now(), heartbeat_at = now(), progress = null
    where h.ctid = any(array(select unnest(v_tids))) -- the rows locked above, by a TID scan (see _lock_owned)
    returning h.id, h.attempts
  )
  select u.id, 'ok'::text, u.attempts from upd u;
  get diagnostics v_n = row_count;
  if v_n <> cardinality(v_tids) and v_n <> (select count(distinct t) from unnest(v_tids) t) then -- a pair sent twice
    raise exception 'keel.start_many: locked % rows, moved %', cardinality(v_tids), v_n;
  end if;
end
$$;

-- heartbeat: the running attempt is alive. Returns the queue's zombie timeout as it is now (300 without a settings
-- row, as rescue_zombies reads it), so a worker learns a changed timeout at its next beat: it beats at least 4 times
-- a timeout and gives the job up before it runs out (shared/jobs/executor.ts, leaseTimes). Until that beat it keeps
-- the timeout it heard last: a timeout lowered below a running job's beat interval can still rescue it once
-- (docs/jobs.md, "Leases and heartbeats").
drop function if exists keel.heartbeat(bigint, text);
create or replace function keel.heartbeat(p_job_id bigint, p_lease_id text)
returns table (status text, cancel_requested boolean, zombie_timeout_seconds integer)
language plpgsql as $$
declare
  v_cancel boolean;
  v_queue  text;
begin
  update keel.jobs_hot h set heartbeat_at = now()
  where h.id = p_job_id and h.lease_id = keel._lease(p_lease_id) and h.state = 'processing'
  returning h.cancel_requested, h.queue into v_cancel, v_queue;
  if not found then
    return query select 'lease_lost'::text, false, null::integer;
  else
    return query select 'ok'::text, v_cancel,
      coalesce((select s.zombie_timeout_seconds from keel.queues s where s.name = v_queue), 300);
  end if;
end
$$;

-- heartbeat_many(leases): the heartbeat of every running attempt a worker's beat timer has due, in one statement
-- (a JSON array of {jobId, leaseId}): one round trip and one pool connection a tick, not one a job, so under load the
-- beats do not queue behind the claims and completions one by one (docs/jobs.md, "Leases and heartbeats"). Fenced
-- per row: a row still processing under its lease beats; one whose lease changed (rescued, cancelled and moved,
-- finished) is left alone and not returned, so the caller reports it lost. Returns, for each job that beat, its id, lease and what
-- keel.heartbeat returns. Lock order: the job rows in id order (_lock_owned), no counter (a beat moves nothing);
-- the queue settings are read unlocked, as keel.heartbeat reads them.
drop function if exists keel.heartbeat_many(jsonb);
create or replace function keel.heartbeat_many(p_leases jsonb)
returns table (job_id bigint, lease_id uuid, status text, cancel_requested boolean, zombie_timeout_seconds integer)
language plpgsql as $$
#variable_conflict use_column
declare
  v_tids tid[] := keel._lock_owned(p_leases, 'processing');
begin
  return query
  with upd as (
    update keel.jobs_hot h set heartbeat_at = now()
    where h.ctid = any(array(select unnest(v_tids))) -- the rows locked above, by a TID scan (see _lock_owned)
    returning h.id, h.lease_id, h.cancel_requested, h.queue
  )
  select u.id, u.lease_id, 'ok'::text, u.cancel_requested, coalesce(s.zombie_timeout_seconds, 300)
  from upd u
  left join keel.queues s on s.name = u.queue;
end
$$;

-- report_progress: the running attempt's latest progress ({fraction, done, total, note}, checked by the app:
-- shared/jobs/progress.ts), under its lease. A HOT update like a heartbeat (progress is in no index); the app throttles
-- it (KEEL_PROGRESS_INTERVAL_MS). 'lease_lost' when the job is no longer this attempt's.
create or replace function keel.report_progress(p_job_id bigint, p_lease_id text, p_progress jsonb)
returns text
language plpgsql as $$
begin
  update keel.jobs_hot h set progress = p_progress
  where h.id = p_job_id and h.lease_id = keel._lease(p_lease_id) and h.state = 'processing';
  return case when found then 'ok' else 'lease_lost' end;
end
$$;

-- The job's log column holds two kinds of entry: ctx.log lines ({attempt, at, level, message, fields}) and, one per
-- attempt that ended without success, {kind: 'attempt', attempt, worker, startedAt, endedAt, outcome, error},
-- appended by the move that ended it (retry, fail, interrupt, zombie rescue, a cancelled completion) in its own
-- statement: no extra round trip, and nothing on a successful completion (the archive row itself is that attempt).
-- Each kind is bounded on its own: the newest p_max_lines log lines (KEEL_JOB_LOG_LINES, from the app) and the newest
-- 100 attempt entries, so a chatty handler never pushes its own failed attempts out.
create or replace function keel._iso_ms(p_at timestamptz)
returns text language sql stable as $$
  select to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- p_max_lines null: the log lines are left as they are (they were bounded when appended).
create or replace function keel._job_log_keep(p_logs jsonb, p_max_lines integer)
returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(x.line order by x.n), '[]'::jsonb)
  from (select e.line, e.n, (e.line ->> 'kind') is not distinct from 'attempt' as is_attempt,
               row_number() over (partition by (e.line ->> 'kind') is not distinct from 'attempt' order by e.n desc) as r
        from jsonb_array_elements(coalesce(p_logs, '[]'::jsonb)) with ordinality as e(line, n)) x
  where x.r <= case when x.is_attempt then 100 else coalesce(p_max_lines, 2147483647) end
$$;

-- p_logs with one attempt entry appended (the error cut to 2,000 characters), attempt entries bounded. Below the
-- bound it only appends: counting the attempt entries (a jsonpath, in C) and a concatenation cost ~0.08 ms on a
-- 100-line log, where re-aggregating the array costs ~0.45 ms.
create or replace function keel._with_attempt(p_logs jsonb, p_attempt integer, p_worker text, p_started timestamptz,
                                              p_outcome text, p_error text)
returns jsonb language sql stable as $$
  select case when jsonb_array_length(jsonb_path_query_array(x.logs, '$[*] ? (@.kind == "attempt")')) < 100
              then x.logs || x.entry
              else keel._job_log_keep(x.logs || x.entry, null) end
  from (select coalesce(p_logs, '[]'::jsonb) as logs,
               jsonb_build_array(jsonb_build_object(
                 'kind', 'attempt', 'attempt', p_attempt, 'worker', p_worker, 'startedAt', keel._iso_ms(p_started),
                 'endedAt', keel._iso_ms(now()), 'outcome', p_outcome,
                 'error', case when length(p_error) > 2000 then left(p_error, 2000) || '…' else p_error end)) as entry) x
$$;

-- append_job_log: a running attempt's ctx.log lines (JSON array of {attempt, at, level, message, fields}, checked
-- and cut by the app: shared/jobs/jobLog.ts) appended to the job's log under the lease, keeping the newest
-- p_max_lines. A HOT update (logs is in no index). 'lease_lost' when the job is no longer this attempt's.
create or replace function keel.append_job_log(p_job_id bigint, p_lease_id text, p_lines jsonb, p_max_lines integer)
returns text
language plpgsql as $$
begin
  if p_max_lines is null or p_max_lines < 1 then
    raise exception 'max_lines must be a positive integer' using errcode = '22023';
  end if;
  if jsonb_typeof(p_lines) is distinct from 'array' then
    raise exception 'lines must be a JSON array' using errcode = '22023';
  end if;
  update keel.jobs_hot h
  set logs = keel._job_log_keep(coalesce(h.logs, '[]'::jsonb) || p_lines, p_max_lines)
  where h.id = p_job_id and h.lease_id = keel._lease(p_lease_id) and h.state in ('fetched', 'processing');
  return case when found then 'ok' else 'lease_lost' end;
end
$$;

create or replace function keel.release(p_job_id bigint, p_lease_id text)
returns text
language plpgsql as $$
begin
  update keel.jobs_hot h
  set state = 'pending', lease_id = null, worker_id = null, fetched_at = null, lease_expires_at = null
  where h.id = p_job_id and h.lease_id = keel._lease(p_lease_id) and h.state = 'fetched';
  return case when found then 'ok' else 'lease_lost' end;
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- The final moves. Delete from the source first, capturing exactly the deleted rows; insert those rows at the
-- destination; then count them (keel._tally): stats_summary and metric_buckets once each, last; all in the caller's
-- one transaction.

-- Counts what one transaction did, once, after all of its moves: one upsert of stats_summary, then one of
-- metric_buckets, each in queue order, into this backend's own rows (slot pg_backend_pid(), V014: no other live
-- backend writes them, so a tally never waits for another completion's commit; sql/README.md, Lock order). p_queues, p_outcomes and p_durations are parallel: outcome 'succeeded', a DLQ reason ('exhausted', 'fatal',
-- 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed'; counted as failed; 'skipped' is counted nowhere),
-- 'retried', 'zombie_retried' (a zombie handed back
-- to pending: counted as zombie, no bucket) or 'resurrected'. Durations (ms, null for none) feed the buckets.
drop function if exists keel._tally(text[], text[], bigint[]);
create or replace function keel._tally(p keel.tally)
returns void
language plpgsql as $$
begin
  if coalesce(cardinality(p.queues), 0) = 0 then
    return;
  end if;
  insert into keel.stats_summary as s (queue, slot, succeeded, failed, retried, cancelled, zombie, resurrected)
  select t.queue, pg_backend_pid(),
         count(*) filter (where t.outcome = 'succeeded'),
         count(*) filter (where t.outcome in ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed')),
         count(*) filter (where t.outcome = 'retried'),
         count(*) filter (where t.outcome = 'cancelled'),
         count(*) filter (where t.outcome in ('zombie', 'zombie_retried')),
         count(*) filter (where t.outcome = 'resurrected')
  from unnest(p.queues, p.outcomes) as t(queue, outcome)
  group by t.queue order by t.queue
  on conflict (queue, slot) do update
    set succeeded = s.succeeded + excluded.succeeded,
        failed = s.failed + excluded.failed,
        retried = s.retried + excluded.retried,
        cancelled = s.cancelled + excluded.cancelled,
        zombie = s.zombie + excluded.zombie,
        resurrected = s.resurrected + excluded.resurrected,
        updated_at = now();
  insert into keel.metric_buckets as b (bucket_start, queue, outcome, reason, slot, count, total_duration_ms, max_duration_ms)
  select date_trunc('minute', now()), t.queue, t.bucket, t.reason, pg_backend_pid(), count(*), coalesce(sum(t.duration_ms), 0),
         coalesce(max(t.duration_ms), 0)
  from (select u.queue, u.duration_ms,
               case when u.outcome = 'succeeded' then 'succeeded' else 'failed' end as bucket,
               case when u.outcome = 'succeeded' then '' else u.outcome end as reason
        from unnest(p.queues, p.outcomes, p.durations) as u(queue, outcome, duration_ms)
        where u.outcome in ('succeeded', 'exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed')) t
  group by t.queue, t.bucket, t.reason order by t.queue, t.bucket, t.reason
  on conflict (bucket_start, queue, outcome, reason, slot) do update
    set count = b.count + excluded.count,
        total_duration_ms = b.total_duration_ms + excluded.total_duration_ms,
        max_duration_ms = greatest(b.max_duration_ms, excluded.max_duration_ms);
end
$$;

-- The moves of two statements of one transaction as one tally: a caller with several moves counts them once, at its end.
create or replace function keel._tally_plus(a keel.tally, b keel.tally)
returns keel.tally
language sql immutable as $$
  select row(a.queues || b.queues, a.outcomes || b.outcomes, a.durations || b.durations)::keel.tally
$$;

-- complete_many counts a batch of successes itself (below): keel._tally_succeeded's two upserts are inlined there.
drop function if exists keel._tally_succeeded(text[], bigint[], bigint[], bigint[]);

-- Hot -> Archive for every (job id, lease id) still processing under that lease. One row: the ids archived (ok) and
-- the ids dead-lettered as cancelled; a pair in neither was not owned (lease_lost). Arrays, not a row per job: 500
-- result rows cost more to send and to read than the move's own bookkeeping.
-- The owned rows are locked first, in id order (keel._lock_owned), then deleted by their tuple ids, archived, and counted.
-- p_results: null, or a JSON object of the handlers' results by job id ({"123": <value>}); a job absent from it
-- archives with result null. Jobs without a result pay nothing for the column.
-- The delete returns the archive's columns only, and the whole row only for a cancelled job (keel._bury takes it):
-- `returning h.*` copied every column of every row (lease, times, progress) into the CTE for nothing (bench/README.md,
-- runs 410-429).
drop function if exists keel.complete_many(jsonb);
create or replace function keel.complete_many(p_leases jsonb, p_results jsonb default null)
returns table (ok bigint[], cancelled bigint[])
language plpgsql as $$
#variable_conflict use_column
declare
  v_tids       tid[];
  v_ok_deps    bigint[];
  v_dead_deps  bigint[];
  v_moved      bigint;
  v_ok         bigint[];
  v_cancelled  keel.jobs_hot[];
  v_t          keel.tally;
  v_dead       keel.tally;
  v_parents    bigint[];
  v_queues     text[];
  v_jobs       bigint[];
  v_total_ms   bigint[];
  v_max_ms     bigint[];
begin
  -- keel._lock_owned's statement, which also says which of the locked rows have dependents (rare). The rows are
  -- locked in id order by the lateral probe (the pairs sorted); the tuple ids' array needs no order of its own (the
  -- delete's TID scan sorts them): an ordered aggregate sorted them again for nothing.
  select coalesce(array_agg(l.ctid), '{}'),
         array_agg(l.id order by l.id) filter (where l.has_dependents and not l.cancel_requested),
         array_agg(l.id order by l.id) filter (where l.has_dependents and l.cancel_requested)
  into v_tids, v_ok_deps, v_dead_deps
  from (select r."jobId" as id, r."leaseId" as lease from jsonb_to_recordset(p_leases) as r("jobId" bigint, "leaseId" uuid)
        order by 1) r
  cross join lateral (
    select h.ctid, h.id, h.lease_id, h.state, h.has_dependents, h.cancel_requested from keel.jobs_hot h where h.id = r.id
    for update of h offset 0) l
  where l.lease_id = r.lease and l.state = 'processing';
  if cardinality(v_tids) = 0 then
    return query select '{}'::bigint[], '{}'::bigint[];
    return;
  end if;
  if v_ok_deps is not null or v_dead_deps is not null then
    -- The waiting rows these moves settle, locked before anything is deleted (keel._lock_settled).
    perform keel._lock_settled(v_ok_deps, v_dead_deps);
  end if;
  -- A job whose cancel was requested while it ran goes to the DLQ as 'cancelled' even when its handler finished
  -- first: the operator was told 'cancel_requested', and that is how such a job ends (as with retry).
  with moved as (
    delete from keel.jobs_hot h
    where h.ctid = any(array(select unnest(v_tids))) -- the rows locked above, by a TID scan (see _lock_owned)
    returning h.id, h.queue, h.type, h.payload, h.priority, h.attempts, h.max_attempts, h.idempotency_key, h.tags,
              h.created_at, h.started_at, h.worker_id, h.logs, h.cancel_requested, h.has_dependents,
              case when h.cancel_requested then h end as whole -- the whole row only for _bury (rare)
  ), archived as (
    insert into keel.jobs_archive (id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, tags,
                                   created_at, started_at, finished_at, duration_ms, worker_id, result, logs)
    select m.id, m.queue, m.type, m.payload, m.priority, m.attempts, m.max_attempts, m.idempotency_key, m.tags,
           m.created_at, m.started_at, now(), keel._ms_between(coalesce(m.started_at, now()), now()), m.worker_id,
           case when p_results is not null then p_results -> m.id::text end, m.logs
    from moved m
    where not m.cancel_requested
    returning id, queue, duration_ms
  )
  select (select coalesce(array_agg(a.id order by a.id), '{}') from archived a), g.queues, g.jobs, g.total_ms, g.max_ms,
         (select array_agg(m.whole order by m.id) from moved m where m.cancel_requested),
         (select array_agg(m.id order by m.id) from moved m where m.has_dependents and not m.cancel_requested),
         (select count(*) from moved)
  into v_ok, v_queues, v_jobs, v_total_ms, v_max_ms, v_cancelled, v_parents, v_moved
  from (select array_agg(q.queue order by q.queue) as queues, array_agg(q.jobs order by q.queue) as jobs,
               array_agg(q.total_ms order by q.queue) as total_ms, array_agg(q.max_ms order by q.queue) as max_ms
        from (select a.queue, count(*) as jobs, sum(a.duration_ms)::bigint as total_ms, max(a.duration_ms) as max_ms
              from archived a group by a.queue) q) g;
  if v_moved <> cardinality(v_tids) and v_moved <> (select count(distinct t) from unnest(v_tids) t) then -- a pair sent twice
    raise exception 'keel.complete_many: locked % rows, moved %', cardinality(v_tids), v_moved;
  end if;
  if v_cancelled is null and v_parents is null then
    -- Successes only (the common case): counted per queue as grouped above, keel._tally's two upserts in its order
    -- (stats_summary, then metric_buckets; this backend's rows, queues in order) with one row per queue instead of
    -- an unnest and grouping of one entry per job (~2 us a job). Here, not in a function of their own: that call
    -- cost about what its two statements cost, once per completion batch (~2-5 us a job in the Worker's batches of
    -- ~20; bench/README.md runs 1040-1059).
    insert into keel.stats_summary as s (queue, slot, succeeded)
    select t.queue, pg_backend_pid(), t.jobs from unnest(v_queues, v_jobs) as t(queue, jobs) order by t.queue
    on conflict (queue, slot) do update
      set succeeded = s.succeeded + excluded.succeeded,
          updated_at = now();
    insert into keel.metric_buckets as b (bucket_start, queue, outcome, reason, slot, count, total_duration_ms, max_duration_ms)
    select date_trunc('minute', now()), t.queue, 'succeeded', '', pg_backend_pid(), t.jobs, t.total_ms, t.max_ms
    from unnest(v_queues, v_jobs, v_total_ms, v_max_ms) as t(queue, jobs, total_ms, max_ms) order by t.queue
    on conflict (bucket_start, queue, outcome, reason, slot) do update
      set count = b.count + excluded.count,
          total_duration_ms = b.total_duration_ms + excluded.total_duration_ms,
          max_duration_ms = greatest(b.max_duration_ms, excluded.max_duration_ms);
    return query select v_ok, '{}'::bigint[];
    return;
  end if;
  -- Other moves too: one tally of every job (the counters are written once per transaction); the archived jobs are
  -- read back by key.
  select array_agg(a.queue), array_agg('succeeded'::text), array_agg(a.duration_ms)
  into v_t.queues, v_t.outcomes, v_t.durations
  from keel.jobs_archive a where a.id = any(array(select unnest(v_ok)));
  if v_cancelled is not null then
    v_dead := keel._bury(v_cancelled, 'cancelled', 'cancel requested while running; the handler finished before it saw the request');
    v_t := keel._tally_plus(v_t, v_dead);
  end if;
  if v_parents is not null then
    -- Jobs others wait for (V010): their children are settled in this same transaction. Null for every other batch.
    v_t := keel._tally_plus(v_t, keel._parents_finished(v_parents, 'succeeded'));
  end if;
  perform keel._tally(v_t);
  return query
  select v_ok, coalesce(array(select c.id from unnest(v_cancelled) c), '{}'); -- v_cancelled is in id order already
end
$$;

-- Puts hot rows their caller has just deleted into the DLQ with reason and error (the row's last error if none).
-- Returns what to count (keel._tally); the caller counts once, after all of its moves.
drop function if exists keel._bury(keel.jobs_hot[], text, text);
-- A buried row with dependents (has_dependents) settles its waiting children here, in the same transaction: every
-- Hot -> DLQ move comes through this function.
create or replace function keel._bury(p_rows keel.jobs_hot[], p_reason text, p_error text)
returns keel.tally
language plpgsql as $$
declare
  v_t keel.tally;
begin
  with dead as (
    insert into keel.jobs_dlq (id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, tags,
                               created_at, started_at, failed_at, duration_ms, reason, error, worker_id, logs,
                               on_parent_failure)
    select m.id, m.queue, m.type, m.payload, m.priority, m.attempts, m.max_attempts, m.idempotency_key, m.tags,
           m.created_at, m.started_at, now(),
           case when m.started_at is null then null else keel._ms_between(m.started_at, now()) end,
           p_reason, coalesce(p_error, m.last_error), m.worker_id,
           -- a running attempt ends here: recorded with the job (a pending or fetched one never started)
           case when m.state = 'processing'
                then keel._with_attempt(m.logs, m.attempts, m.worker_id, m.started_at, p_reason, coalesce(p_error, m.last_error))
                else m.logs end,
           m.on_parent_failure
    from unnest(p_rows) m
    returning queue, coalesce(duration_ms, 0) as duration_ms
  )
  select coalesce(array_agg(d.queue), '{}'), coalesce(array_agg(p_reason), '{}'), coalesce(array_agg(d.duration_ms), '{}')
  into v_t.queues, v_t.outcomes, v_t.durations
  from dead d;
  if exists (select 1 from unnest(p_rows) m where m.has_dependents) then
    v_t := keel._tally_plus(v_t, keel._parents_finished(
      array(select m.id from unnest(p_rows) m where m.has_dependents order by m.id), 'failed'));
  end if;
  return v_t;
end
$$;

-- Hot -> DLQ for the given ids that are in one of p_states (and, when p_lease is given, still under that lease),
-- locked in id order. Used by rescue alone, which has taken them skip-locked (cancel_many, a flow's settle and the
-- one-row moves hold their rows already: keel._dead_letter_held). Returns what to count (keel._tally);
-- cardinality(queues) is how many it moved.
-- The waiting descendants of a row with dependents are the caller's already: rescue locks those of every row it
-- dead-letters at once, in one id order, before its first delete (keel._lock_settled), so they are not locked again.
drop function if exists keel._dead_letter(bigint[], uuid, text[], text, text);
create or replace function keel._dead_letter(p_ids bigint[], p_lease uuid, p_states text[], p_reason text, p_error text)
returns keel.tally
language plpgsql as $$
declare
  v_ids  bigint[];
begin
  select coalesce(array_agg(l.id order by l.id), '{}')
  into v_ids
  from (select h.id from keel.jobs_hot h
        where h.id = any(array(select unnest(p_ids))) and h.state = any(p_states)
          and (p_lease is null or h.lease_id = p_lease)
        order by h.id
        for update of h) l;
  return keel._dead_letter_held(v_ids, null, p_reason, p_error);
end
$$;

-- keel._dead_letter's move, for rows the caller has locked already (fail, and retry and interrupt of a job whose
-- cancel was requested, lock their one row to read it first: locking it again here would be a second scan and lock
-- of the same row). p_ids: the locked rows, in id order; p_deps: those of them with dependents (has_dependents, as
-- read under the lock), in id order, or null. Their waiting descendants are locked before anything is deleted
-- (keel._lock_settled); null when the caller has locked them (rescue, a flow's settle).
create or replace function keel._dead_letter_held(p_ids bigint[], p_deps bigint[], p_reason text, p_error text)
returns keel.tally
language plpgsql as $$
declare
  v_rows keel.jobs_hot[];
begin
  if p_deps is not null then
    perform keel._lock_settled(null, p_deps);
  end if;
  with moved as (
    delete from keel.jobs_hot h where h.id = any(array(select unnest(p_ids)))
    returning h.*
  )
  select coalesce(array_agg(row(m.*)::keel.jobs_hot order by m.id), '{}') into v_rows from moved m;
  return keel._bury(v_rows, p_reason, p_error);
end
$$;

-- Fetched or processing under that lease -> DLQ with the reason, or as 'cancelled' (answer 'cancelled') when its
-- cancel was requested: such a job always ends so (docs/jobs.md, step 4).
create or replace function keel.fail(p_job_id bigint, p_lease_id text, p_reason text, p_error text)
returns text
language plpgsql as $$
declare
  v_lease  uuid := keel._lease(p_lease_id);
  v_cancel boolean;
  v_deps   boolean;
  v_t      keel.tally;
begin
  if p_reason is null or p_reason not in ('exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired') then
    raise exception 'reason must be one of exhausted, fatal, timeout, cancelled, zombie, expired (got %)', coalesce(p_reason, 'null')
      using errcode = '22023';
  end if;
  if v_lease is null then
    return 'lease_lost';
  end if;
  -- The row first, locked once (keel._dead_letter_held then moves it): a job whose cancel was requested ends as
  -- 'cancelled' whatever the handler's failure (the operator was told 'cancel_requested'), and the answer says so,
  -- as complete's does.
  select h.cancel_requested, h.has_dependents into v_cancel, v_deps from keel.jobs_hot h
  where h.id = p_job_id and h.lease_id = v_lease and h.state in ('fetched', 'processing')
  for update;
  if not found then
    return 'lease_lost';
  end if;
  v_t := keel._dead_letter_held(array[p_job_id], case when v_deps then array[p_job_id] end,
                                case when v_cancel then 'cancelled' else p_reason end, p_error);
  perform keel._tally(v_t);
  return case when v_cancel and p_reason <> 'cancelled' then 'cancelled' else 'ok' end;
end
$$;

-- Back to pending at run_at (attempt already counted by start). A job whose cancel was requested goes to the DLQ
-- as cancelled instead: the operator's cancel wins over the handler's retry.
-- Due again at p_run_at, or p_delay_ms after now() (the processor's backoff, by this server's clock: the one every
-- claim's due test reads, so a worker's skewed clock cannot cut the backoff short), or now when neither is given.
drop function if exists keel.retry(bigint, text, timestamptz, text);
create or replace function keel.retry(p_job_id bigint, p_lease_id text, p_run_at timestamptz, p_error text,
                                      p_delay_ms bigint default null)
returns text
language plpgsql as $$
declare
  v_lease  uuid := keel._lease(p_lease_id);
  v_row    record;
  v_t      keel.tally;
begin
  select h.queue, h.cancel_requested, h.has_dependents into v_row from keel.jobs_hot h
  where h.id = p_job_id and h.lease_id = v_lease and h.state = 'processing'
  for update;
  if not found then
    return 'lease_lost';
  end if;
  if v_row.cancel_requested then
    -- the row is locked above: moved as it is (keel._dead_letter_held), not looked up and locked again
    v_t := keel._dead_letter_held(array[p_job_id], case when v_row.has_dependents then array[p_job_id] end,
                                  'cancelled', coalesce(p_error, 'cancelled'));
    perform keel._tally(v_t);
    return 'cancelled'; -- not 'ok': the worker reports where the job went (as complete's answer does)
  else
    update keel.jobs_hot h
    set state = 'pending', run_at = coalesce(p_run_at, now() + p_delay_ms * interval '1 millisecond', now()),
        lease_id = null, worker_id = null, fetched_at = null,
        lease_expires_at = null, heartbeat_at = null, last_error = p_error,
        logs = keel._with_attempt(h.logs, h.attempts, h.worker_id, h.started_at, 'retried', p_error)
    where h.id = p_job_id;
    v_t := row(array[v_row.queue], array['retried'], array[null::bigint]);
  end if;
  perform keel._tally(v_t);
  return 'ok';
end
$$;

-- A running job handed back by its worker's graceful shutdown: back to pending now, and the attempt that start
-- counted is given back, since the handler did not fail (a crash, found by zombie rescue, still uses it). Not a
-- retry: stats_summary.retried is left alone. A job whose cancel was requested goes to the DLQ as cancelled, as
-- with retry.
create or replace function keel.interrupt(p_job_id bigint, p_lease_id text, p_error text)
returns text
language plpgsql as $$
declare
  v_lease  uuid := keel._lease(p_lease_id);
  v_cancel boolean;
  v_deps   boolean;
  v_t      keel.tally;
begin
  select h.cancel_requested, h.has_dependents into v_cancel, v_deps from keel.jobs_hot h
  where h.id = p_job_id and h.lease_id = v_lease and h.state = 'processing'
  for update;
  if not found then
    return 'lease_lost';
  end if;
  if v_cancel then
    -- the row is locked above: moved as it is (keel._dead_letter_held), not looked up and locked again
    v_t := keel._dead_letter_held(array[p_job_id], case when v_deps then array[p_job_id] end,
                                  'cancelled', coalesce(p_error, 'cancelled'));
    perform keel._tally(v_t);
    return 'cancelled'; -- not 'ok': the worker reports where the job went (as complete's answer does)
  end if;
  update keel.jobs_hot h
  set state = 'pending', run_at = now(), attempts = greatest(h.attempts - 1, 0), lease_id = null, worker_id = null,
      fetched_at = null, lease_expires_at = null, heartbeat_at = null, last_error = p_error,
      logs = keel._with_attempt(h.logs, h.attempts, h.worker_id, h.started_at, 'interrupted', p_error)
  where h.id = p_job_id;
  return 'ok';
end
$$;

-- pending/fetched/waiting -> DLQ cancelled at once; processing -> cancel requested (the heartbeat tells the handler).
create or replace function keel.cancel(p_job_id bigint)
returns text
language plpgsql as $$
declare
  v_state text;
  v_deps  boolean;
  v_t     keel.tally;
begin
  select h.state, h.has_dependents into v_state, v_deps from keel.jobs_hot h where h.id = p_job_id for update;
  if not found then
    return 'not_found';
  end if;
  if v_state = 'processing' then
    update keel.jobs_hot h set cancel_requested = true where h.id = p_job_id;
    return 'cancel_requested';
  end if;
  -- pending, fetched or waiting, and locked above: moved as it is, not looked up and locked again
  v_t := keel._dead_letter_held(array[p_job_id], case when v_deps then array[p_job_id] end, 'cancelled',
                                'cancelled by operator');
  perform keel._tally(v_t);
  return 'cancelled';
end
$$;

-- keel.cancel for many jobs in one transaction (the ops API's cancel by selection sends its ids in chunks): per
-- distinct id what keel.cancel would answer. Locks (sql/README.md): the rows that are not waiting, by id; then, all
-- in one id order, the waiting rows named and every waiting descendant of the rows to be dead-lettered (their
-- cascade, taken at once as keel._lock_settled takes a failure's); then the moves, one keel._dead_letter_held for
-- them all, and the counters once, last. A row named as waiting that was released in between is locked with the
-- waiting ones (keel._lock_parents' case). Jobs in no flow read no edge.
create or replace function keel.cancel_many(p_job_ids bigint[])
returns table (job_id bigint, status text)
language plpgsql as $$
#variable_conflict use_column
declare
  v_ids      bigint[];
  v_waiting  bigint[];
  v_roots    bigint[];
  v_more     bigint[];
  v_running  bigint[];
  v_dead     bigint[];
  v_deps     bigint[];
  v_held     bigint[];
  v_t        keel.tally;
begin
  v_ids := array(select distinct x.id from unnest(p_job_ids) as x(id) where x.id is not null order by 1);
  if cardinality(v_ids) = 0 then
    return;
  end if;
  v_waiting := array(select h.id from keel.jobs_hot h
                     where h.id = any(array(select unnest(v_ids))) and h.state = 'waiting' order by 1);
  -- v_held: the named rows this call locked. A row that was not hot when it looked (a dead-lettered job that a
  -- resurrect brought back meanwhile) is not: it is answered not_found, as if the cancel came first.
  select coalesce(array_agg(l.id), '{}') into v_held
  from (select x.id from unnest(v_ids) as x(id) where x.id <> all(v_waiting) order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id for update of h offset 0) l;
  -- Waiting rows: those named, and the descendants of the rows that will be dead-lettered (pending, fetched, waiting)
  -- when any of them has dependents.
  v_roots := array(select h.id from keel.jobs_hot h
                   where h.id = any(array(select unnest(v_held || v_waiting)))
                     and h.state in ('pending', 'fetched', 'waiting') and h.has_dependents);
  v_more := v_waiting;
  if cardinality(v_roots) > 0 then
    v_more := array(
      with recursive d(id) as (
        select unnest(v_roots)
        union
        select e.child_id from d join keel.job_deps e on e.parent_id = d.id and e.parent_outcome is null
      )
      select d.id from d union select unnest(v_waiting) order by 1);
  end if;
  -- (The rows of v_roots that are not waiting are ours already: locking them again waits for no one.)
  select v_held || coalesce(array_agg(l.id) filter (where l.id = any(v_ids)), '{}') into v_held
  from (select unnest(v_more) as id order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id for update of h offset 0) l;
  -- Every named row locked above is ours: its state stays as read here until commit, so the rows to dead-letter are
  -- moved as read (keel._dead_letter_held), not looked up and locked again.
  select coalesce(array_agg(h.id order by h.id) filter (where h.state = 'processing'), '{}'),
         coalesce(array_agg(h.id order by h.id) filter (where h.state in ('pending', 'fetched', 'waiting')), '{}'),
         array_agg(h.id order by h.id) filter (where h.state in ('pending', 'fetched', 'waiting') and h.has_dependents)
  into v_running, v_dead, v_deps
  from keel.jobs_hot h
  where h.id = any(array(select unnest(v_held)));
  if cardinality(v_running) > 0 then
    update keel.jobs_hot h set cancel_requested = true where h.id = any(array(select unnest(v_running)));
  end if;
  if cardinality(v_dead) > 0 then
    v_t := keel._dead_letter_held(v_dead, v_deps, 'cancelled', 'cancelled by operator');
    perform keel._tally(v_t);
  end if;
  return query
  select x.id,
         case when x.id = any(v_dead) then 'cancelled'
              when x.id = any(v_running) then 'cancel_requested'
              else 'not_found' end
  from unnest(v_ids) as x(id);
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- Flows (issue 29; tables in V010): a job enqueued with `after` waits (state 'waiting', in no claim index) until its
-- parents have finished. Each parent's own final move settles its children in the same transaction: complete_many
-- (archived: 'succeeded') and keel._bury, behind every Hot -> DLQ move ('failed'). Only rows flagged has_dependents
-- (set when a child is enqueued against them) do any of this, so a job nobody waits for pays one boolean.
-- A child whose parent failed follows its on_parent_failure: 'deadLetter' (the default: nothing runs on a failed
-- input, and the child is not lost: it waits in the DLQ as 'parent_failed' and comes back when the parent is
-- resurrected), 'skip' (DLQ 'skipped', not a failure; stays there) or 'run' (the failed parent counts as finished).
-- Locks: job rows that are not waiting first, by id; then waiting rows, by id; the edges (job_deps) of a parent are
-- written only under its row's lock (sql/README.md, Lock order).

-- The `after` references of a batch: o the job's place (1-based), k the reference's (1-based); ext a job id, idx
-- an earlier job of the batch (0-based), both null when the reference is neither.
create or replace function keel._after_refs(p_docs jsonb[])
returns table (o integer, k integer, ext bigint, idx integer)
language sql immutable as $$
  select u.o::integer, a.k::integer,
         case when jsonb_typeof(a.p) in ('number', 'string') and (a.p #>> '{}') ~ '^[1-9][0-9]{0,18}$'
                   and (a.p #>> '{}')::numeric <= 9223372036854775807 then (a.p #>> '{}')::bigint end,
         case when jsonb_typeof(a.p) = 'object' and a.p - 'index' = '{}'::jsonb and jsonb_typeof(a.p->'index') = 'number'
                   and (a.p->>'index') ~ '^[0-9]{1,5}$' then (a.p->>'index')::integer end
  from unnest(p_docs) with ordinality as u(d, o)
  cross join lateral jsonb_array_elements(case when jsonb_typeof(u.d->'after') = 'array' then u.d->'after'
                                               else '[]'::jsonb end) with ordinality as a(p, k)
$$;

-- The batch's first wrong `after` or `onFailure`, as 'jobs[i].after[k]: message', or null. Every session's batch is
-- checked (the app's too: a missing parent only the database can see). An in-batch reference may only name an
-- earlier job, and an id names a job that exists before the batch (ids only grow): so no flow can hold a cycle.
create or replace function keel._after_problem(p_docs jsonb[])
returns text language sql stable as $$
  select x.msg from (
    select u.o, 0 as k,
           case when u.d ? 'after' and (jsonb_typeof(u.d->'after') is distinct from 'array'
                                         or jsonb_array_length(u.d->'after') > 1000)
                  then format('jobs[%s].after: must be an array of at most 1000 parents: job ids, or {"index": n} for an earlier job of this batch', u.o - 1)
                when u.d ? 'onFailure' and not coalesce((u.d->>'onFailure') in ('skip', 'run', 'deadLetter'), false)
                  then format('jobs[%s].onFailure: must be skip, run or deadLetter', u.o - 1)
                when u.d ? 'onFailure' and coalesce(jsonb_array_length(u.d->'after'), 0) = 0
                  then format('jobs[%s].onFailure: applies only to a job with parents (after)', u.o - 1)
           end as msg
    from unnest(p_docs) with ordinality as u(d, o)
    union all
    select r.o, r.k,
           case when r.ext is null and r.idx is null
                  then format('jobs[%s].after[%s]: must be a job id or {"index": n} naming an earlier job of this batch', r.o - 1, r.k - 1)
                when r.idx is not null and r.idx >= r.o - 1
                  then format('jobs[%s].after[%s]: {"index": %s} must name an earlier job of this batch (%s); a job cannot wait for itself or a later job',
                              r.o - 1, r.k - 1, r.idx, case when r.o = 1 then 'the first job has none' else format('0 to %s', r.o - 2) end)
           end
    from keel._after_refs(p_docs) r
  ) x
  where x.msg is not null
  order by x.o, x.k
  limit 1
$$;

-- Locks the hot rows of the parents a batch names by id before the batch inserts anything, so none of them can
-- finish before its edge exists: rows that are not waiting first, then waiting ones, each in id order; DLQ parents
-- are share-locked first, so a resurrect cannot move one while its failure is being applied. A parent missing from
-- hot, archive and DLQ refuses the batch, naming the reference.
create or replace function keel._lock_parents(p_docs jsonb[])
returns void
language plpgsql as $$
declare
  v_ext     bigint[];
  v_hot     bigint[];
  v_waiting bigint[];
  v_missing record;
begin
  v_ext := array(select distinct r.ext from keel._after_refs(p_docs) r where r.ext is not null order by 1);
  -- A keyed job of the batch named by { index } turns out a duplicate when a hot job holds its key: that job is then
  -- the parent, flagged after the inserts. Its holder as of now is locked here with the parents named by id, so the
  -- flag waits for no one while this batch holds keys (an enqueue naming that job by id held it and waited for our
  -- key: a deadlock, test/engines/postgres.flowKeys.test.ts). A holder that changes in between is the one exception
  -- left (sql/README.md).
  v_hot := array(
    select distinct x.id from (
      select unnest(v_ext) as id
      union all
      select h.id from (select distinct r.idx from keel._after_refs(p_docs) r where r.idx is not null) r
      cross join lateral (select h.id from keel.jobs_hot h
                          where h.idempotency_key = p_docs[r.idx + 1]->>'idempotencyKey'
                            and h.queue = p_docs[r.idx + 1]->>'queue' and h.type = p_docs[r.idx + 1]->>'type') h
      where p_docs[r.idx + 1] ? 'idempotencyKey') x
    order by 1);
  if cardinality(v_hot) = 0 then
    return;
  end if;
  perform l.id from (select unnest(v_ext) as id order by 1) x
  cross join lateral (select d.id from keel.jobs_dlq d where d.id = x.id for share of d offset 0) l;
  v_waiting := array(select h.id from keel.jobs_hot h where h.id = any(array(select unnest(v_hot))) and h.state = 'waiting');
  perform l.id from (select x.id from unnest(v_hot) as x(id) where x.id <> all(v_waiting) order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id for update of h offset 0) l;
  perform l.id from (select x.id from unnest(v_waiting) as x(id) order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id for update of h offset 0) l;
  -- A new statement: it sees a parent that left the hot table while we waited for its row, at its destination.
  select r.o, r.k, r.ext into v_missing
  from keel._after_refs(p_docs) r
  where r.ext is not null
    and not exists (select 1 from keel.jobs_hot h where h.id = r.ext)
    and not exists (select 1 from keel.jobs_archive a where a.id = r.ext)
    and not exists (select 1 from keel.jobs_dlq d where d.id = r.ext)
  order by r.o, r.k limit 1;
  if found then
    raise exception 'jobs[%].after[%]: job % does not exist (it is not hot, archived or dead-lettered)',
      v_missing.o - 1, v_missing.k - 1, v_missing.ext using errcode = '22023';
  end if;
end
$$;

-- After a batch is inserted: its edges, the has_dependents flag of each hot parent, and each new child settled
-- (keel._settle_children). A parent already archived counts as succeeded, one in the DLQ as failed.
-- Returns what to count (keel._tally).
create or replace function keel._link_children(p_docs jsonb[], p_ids bigint[], p_dups boolean[])
returns keel.tally
language plpgsql as $$
declare
  v_p        bigint[];
  v_c        bigint[];
  v_pos      integer[];
  v_hot      bigint[];
begin
  -- The edges as parallel arrays (parent, child, place in the child's list), one per distinct pair.
  select array_agg(x.parent_id order by x.parent_id, x.child_id), array_agg(x.child_id order by x.parent_id, x.child_id),
         array_agg(x.pos order by x.parent_id, x.child_id)
  into v_p, v_c, v_pos
  from (select coalesce(r.ext, p_ids[r.idx + 1]) as parent_id, p_ids[r.o] as child_id, min(r.k) - 1 as pos
        from keel._after_refs(p_docs) r
        where not p_dups[r.o]
        group by 1, 2) x;
  if v_p is null then
    return row('{}', '{}', '{}')::keel.tally; -- every child was a duplicate: its edges are the held job's
  end if;
  -- Parents by id are locked (keel._lock_parents), the batch's own rows are ours; a parent named by index that was
  -- a duplicate of an older hot job is the one row locked here, after the inserts.
  with flagged as (
    update keel.jobs_hot h set has_dependents = true
    where h.id = any(array(select distinct unnest(v_p)))
    returning h.id
  )
  select coalesce(array_agg(f.id), '{}') into v_hot from flagged f;
  insert into keel.job_deps (parent_id, child_id, position, parent_outcome)
  select e.parent_id, e.child_id, e.pos,
         case when e.parent_id = any(v_hot) then null
              when exists (select 1 from keel.jobs_archive a where a.id = e.parent_id) then 'succeeded'
              else 'failed' end
  from unnest(v_p, v_c, v_pos) as e(parent_id, child_id, pos);
  return keel._settle_children(array(select distinct unnest(v_c) order by 1));
end
$$;

-- Decides what each of the given waiting children is now, from its edges; the caller holds their rows. A parent
-- failed and the policy is not 'run': to the DLQ ('parent_failed' or 'skipped'), which settles its own children in
-- turn (keel._bury); no parent left unfinished: due now (pending, and workers of its queue woken at commit); else it
-- keeps waiting. Returns what to count.
create or replace function keel._settle_children(p_ids bigint[])
returns keel.tally
language plpgsql as $$
declare
  v_due          bigint[];
  v_dead         bigint[];
  v_skipped      bigint[];
  v_t            keel.tally := row('{}', '{}', '{}');
begin
  if coalesce(cardinality(p_ids), 0) = 0 then
    return v_t;
  end if;
  select array_agg(c.id order by c.id) filter (where c.failed and c.policy = 'deadLetter'),
         array_agg(c.id order by c.id) filter (where c.failed and c.policy = 'skip'),
         array_agg(c.id) filter (where not c.open and not (c.failed and c.policy <> 'run'))
  into v_dead, v_skipped, v_due
  from (select h.id, coalesce(h.on_parent_failure, 'deadLetter') as policy,
               coalesce(e.open, false) as open, coalesce(e.failed, false) as failed
        from keel.jobs_hot h
        cross join lateral (select bool_or(d.parent_outcome is null) as open, bool_or(d.parent_outcome = 'failed') as failed
                            from keel.job_deps d where d.child_id = h.id) e
        where h.id = any(array(select unnest(p_ids))) and h.state = 'waiting') c;
  if v_due is not null then
    update keel.jobs_hot h set state = 'pending', run_at = greatest(h.run_at, now())
    where h.id = any(array(select unnest(v_due)));
    perform pg_notify('keel_jobs', q.queue)
    from (select distinct h.queue from keel.jobs_hot h where h.id = any(array(select unnest(v_due)))) q;
  end if;
  -- The caller holds these rows and their state was read above: moved as read (keel._dead_letter_held), not looked
  -- up and locked again. A row a cascade of the first move took meanwhile is no longer hot: the second deletes
  -- nothing of it. Their own waiting descendants are the caller's already (no deps passed: not locked again): a
  -- final move locked its whole cascade before its first delete (keel._lock_settled), and a batch's new children
  -- (keel._link_children) have no children but the batch's own rows.
  if v_dead is not null then
    v_t := keel._tally_plus(v_t, keel._dead_letter_held(v_dead, null, 'parent_failed',
                                                       'a parent job was dead-lettered (onFailure: deadLetter)'));
  end if;
  if v_skipped is not null then
    v_t := keel._tally_plus(v_t, keel._dead_letter_held(v_skipped, null, 'skipped',
                                                       'a parent job was dead-lettered (onFailure: skip)'));
  end if;
  return v_t;
end
$$;

-- Locks the hot rows the final moves of the given rows (the caller's, locked, not yet moved) will settle: the open
-- children of those that will succeed, every open descendant of those that will fail; all in one id order, the
-- closure read again once locked: keel._parents_finished then settles them without locking them again. A move takes
-- them before it deletes anything: an enqueue with `after` holds the waiting parents it names while it inserts its
-- keyed jobs, and an insert of a key whose row a move has deleted waits for that move to commit. Locked after the
-- delete, a completion batch holding a job of the key and the parent of the enqueue's waiting parent waited for the
-- enqueue, and the enqueue for it: a deadlock (test/engines/postgres.flowKeys.test.ts).
create or replace function keel._lock_settled(p_succeeded bigint[], p_failed bigint[])
returns void
language plpgsql as $$
declare
  v_locked bigint[] := '{}';
  v_more   bigint[];
begin
  if coalesce(cardinality(p_succeeded), 0) = 0 and coalesce(cardinality(p_failed), 0) = 0 then
    return;
  end if;
  loop
    v_more := array(
      with recursive d(id) as (
        select e.child_id from keel.job_deps e
        where e.parent_id = any(array(select unnest(p_failed))) and e.parent_outcome is null
        union
        select e.child_id from d join keel.job_deps e on e.parent_id = d.id and e.parent_outcome is null
      )
      select x.id from (select d.id from d
                        union
                        select e.child_id from keel.job_deps e
                        where e.parent_id = any(array(select unnest(p_succeeded))) and e.parent_outcome is null) x
      where x.id <> all(v_locked)
      order by 1);
    exit when cardinality(v_more) = 0;
    perform l.id from (select unnest(v_more) as id order by 1) x
    cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id for update of h offset 0) l;
    v_locked := v_locked || v_more;
  end loop;
end
$$;

-- The given parents (rows flagged has_dependents, just moved by the caller) finished: 'succeeded' (archived) or
-- 'failed' (dead-lettered). The edges are marked, then the children settled. Every row this settles — the open
-- children of a success, every open descendant of a failure, a failure's cascade included — the caller has locked
-- before its first delete (keel._lock_settled, sql/README.md "Lock order", 3a), and no edge can open meanwhile (an
-- edge is written only by the holder of its parent's row): nothing is locked again here. Locking them a second
-- time was a second pass of probes over the same rows, and a lock taken after the move's deletes. Returns what to
-- count.
create or replace function keel._parents_finished(p_parent_ids bigint[], p_outcome text)
returns keel.tally
language plpgsql as $$
declare
  v_children bigint[];
begin
  if coalesce(cardinality(p_parent_ids), 0) = 0 then
    return row('{}', '{}', '{}')::keel.tally;
  end if;
  with marked as (
    update keel.job_deps e set parent_outcome = p_outcome
    where e.parent_id = any(array(select unnest(p_parent_ids))) and e.parent_outcome is null
    returning e.child_id
  )
  select array(select distinct m.child_id from marked m order by 1) into v_children;
  return keel._settle_children(v_children);
end
$$;

-- A job's parents and children, for the API, the console and the handler's ctx.parents(): relation 'parent' (in
-- the order of its `after` list; result: the archived parent's result) or 'child' (the first 1,000 by id); where
-- each is now (location, state: pending ... waiting, succeeded, dead) and, for a parent, the outcome its child saw.
create or replace function keel.job_links(p_job_id bigint)
returns table (relation text, job_id bigint, type text, queue text, location text, state text, outcome text,
               result jsonb)
language sql stable as $$
  select x.relation, x.id, coalesce(h.type, a.type, d.type), coalesce(h.queue, a.queue, d.queue),
         case when h.id is not null then 'hot' when a.id is not null then 'archive' when d.id is not null then 'dlq' end,
         coalesce(h.state, case when a.id is not null then 'succeeded' when d.id is not null then 'dead' end),
         x.outcome, case when x.relation = 'parent' then a.result end
  from (
    select 'parent'::text as relation, e.parent_id as id, e.parent_outcome as outcome, e.position as n
    from keel.job_deps e where e.child_id = p_job_id
    union all
    select 'child', c.child_id, c.parent_outcome, null
    from (select e.child_id, e.parent_outcome from keel.job_deps e where e.parent_id = p_job_id
          order by e.child_id limit 1000) c
  ) x
  left join keel.jobs_hot h on h.id = x.id
  left join keel.jobs_archive a on a.id = x.id and h.id is null
  left join keel.jobs_dlq d on d.id = x.id and h.id is null and a.id is null
  order by x.relation desc, x.n nulls last, x.id
$$;

-- Counter rows of backends that have exited go to slot 0 (V006, V014: each live backend writes only its own slot,
-- its pid), and so do metric rows of past minutes, whoever wrote them (a live backend only writes the minute its
-- transaction started in; one that still writes an older one just starts a new row of its slot). Each table in one
-- statement (delete returning, upsert into slot 0), so a reader sees every count once, before or after it. Rows
-- another transaction holds are skipped, and a new backend that reuses a pid just keeps adding to its row. Bounded:
-- one row per queue and backend that wrote since the last fold (metric rows: per minute, outcome and reason too).
-- Tables in the counters' order (hot, DLQ, stats_summary, metric_buckets), slot-0 rows in key order.
create or replace function keel._fold_counters()
returns void
language plpgsql as $$
begin
  with gone as (
    delete from keel.hot_counts c
    where (c.queue, c.slot) in (
      select x.queue, x.slot from keel.hot_counts x
      where x.slot <> 0 and not exists (select 1 from pg_stat_activity a where a.pid = x.slot)
      for update skip locked)
    returning c.queue, c.pending, c.fetched, c.processing, c.waiting
  )
  insert into keel.hot_counts as c (queue, slot, pending, fetched, processing, waiting)
  select g.queue, 0, sum(g.pending), sum(g.fetched), sum(g.processing), sum(g.waiting)
  from gone g group by g.queue order by g.queue
  on conflict (queue, slot) do update
    set pending = c.pending + excluded.pending,
        fetched = c.fetched + excluded.fetched,
        processing = c.processing + excluded.processing,
        waiting = c.waiting + excluded.waiting;
  with gone as (
    delete from keel.dlq_counts c
    where (c.queue, c.slot) in (
      select x.queue, x.slot from keel.dlq_counts x
      where x.slot <> 0 and not exists (select 1 from pg_stat_activity a where a.pid = x.slot)
      for update skip locked)
    returning c.queue, c.n
  )
  insert into keel.dlq_counts as c (queue, slot, n)
  select g.queue, 0, sum(g.n) from gone g group by g.queue order by g.queue
  on conflict (queue, slot) do update set n = c.n + excluded.n;
  with gone as (
    delete from keel.stats_summary s
    where (s.queue, s.slot) in (
      select x.queue, x.slot from keel.stats_summary x
      where x.slot <> 0 and not exists (select 1 from pg_stat_activity a where a.pid = x.slot)
      for update skip locked)
    returning s.*
  )
  insert into keel.stats_summary as s (queue, slot, succeeded, failed, retried, cancelled, zombie, resurrected, updated_at)
  select g.queue, 0, sum(g.succeeded), sum(g.failed), sum(g.retried), sum(g.cancelled), sum(g.zombie),
         sum(g.resurrected), max(g.updated_at)
  from gone g group by g.queue order by g.queue
  on conflict (queue, slot) do update
    set succeeded = s.succeeded + excluded.succeeded,
        failed = s.failed + excluded.failed,
        retried = s.retried + excluded.retried,
        cancelled = s.cancelled + excluded.cancelled,
        zombie = s.zombie + excluded.zombie,
        resurrected = s.resurrected + excluded.resurrected,
        updated_at = greatest(s.updated_at, excluded.updated_at);
  with gone as (
    delete from keel.metric_buckets b
    where (b.bucket_start, b.queue, b.outcome, b.reason, b.slot) in (
      select x.bucket_start, x.queue, x.outcome, x.reason, x.slot from keel.metric_buckets x
      where x.slot <> 0 -- metric_buckets_unfolded
        and (x.bucket_start < date_trunc('minute', now())
             or not exists (select 1 from pg_stat_activity a where a.pid = x.slot))
      for update skip locked)
    returning b.*
  )
  insert into keel.metric_buckets as b (bucket_start, queue, outcome, reason, slot, count, total_duration_ms, max_duration_ms)
  select g.bucket_start, g.queue, g.outcome, g.reason, 0, sum(g.count), sum(g.total_duration_ms), max(g.max_duration_ms)
  from gone g group by g.bucket_start, g.queue, g.outcome, g.reason
  order by g.bucket_start, g.queue, g.outcome, g.reason
  on conflict (bucket_start, queue, outcome, reason, slot) do update
    set count = b.count + excluded.count,
        total_duration_ms = b.total_duration_ms + excluded.total_duration_ms,
        max_duration_ms = greatest(b.max_duration_ms, excluded.max_duration_ms);
end
$$;

-- Zombies, in bounded batches:
--   fetched past its lease -> pending (no attempt was used);
--   processing past the queue's heartbeat timeout -> DLQ zombie (policy dlq or attempts exhausted), DLQ cancelled
--   (cancel requested), or pending (policy retry);
--   pending past expires_at -> DLQ expired.
-- Every row it takes it locks skip-locked (a row another mover holds is left for the next pass); everything is
-- counted once at the end. Then the counter rows of exited backends are folded (keel._fold_counters).
create or replace function keel.rescue_zombies(p_limit integer, p_type_max_attempts jsonb default null)
returns table (released_fetched integer, retried integer, dead_lettered integer, expired integer)
language plpgsql as $$
declare
  v_released  integer := 0;
  v_retried   integer := 0;
  v_dead      integer := 0;
  v_expired   integer := 0;
  v_retry_ids bigint[];
  v_zombie_ids bigint[];
  v_cancel_ids bigint[];
  v_ids       bigint[];
  v_t         keel.tally := row('{}', '{}', '{}');
  v_moved     keel.tally;
begin
  with c as (
    select h.id from keel.jobs_hot h
    where h.state = 'fetched' and h.lease_expires_at < now()
    order by h.id limit p_limit
    for update of h skip locked
  )
  update keel.jobs_hot h
  set state = 'pending', lease_id = null, worker_id = null, fetched_at = null, lease_expires_at = null
  from c where h.id = c.id;
  get diagnostics v_released = row_count;

  with c as (
    select h.id, h.attempts, h.cancel_requested,
           -- the job's own limit, else its handler's (p_type_max_attempts: {"type": n}), else the queue's
           coalesce(h.max_attempts, (p_type_max_attempts ->> h.type)::integer, s.max_attempts, 5) as max_attempts,
           coalesce(s.zombie_policy, 'retry') as policy
    from keel.jobs_hot h left join keel.queues s on s.name = h.queue
    where h.state = 'processing'
      and h.heartbeat_at < now() - make_interval(secs => coalesce(s.zombie_timeout_seconds, 300))
    order by h.id limit p_limit
    for update of h skip locked
  )
  select array_agg(c.id) filter (where c.cancel_requested),
         array_agg(c.id) filter (where not c.cancel_requested and (c.policy = 'dlq' or c.attempts >= c.max_attempts)),
         array_agg(c.id) filter (where not c.cancel_requested and c.policy = 'retry' and c.attempts < c.max_attempts)
  into v_cancel_ids, v_zombie_ids, v_retry_ids
  from c;

  v_ids := array(
    select h.id from keel.jobs_hot h
    where h.state = 'pending' and h.expires_at is not null and h.expires_at <= now()
    order by h.id limit p_limit
    for update of h skip locked);
  -- Every row this pass dead-letters is ours now: the waiting descendants of those with dependents are locked, in
  -- one id order, before the first of them is deleted (keel._lock_settled).
  perform keel._lock_settled(null, array(
    select h.id from keel.jobs_hot h
    where h.id = any(array(select unnest(coalesce(v_zombie_ids, '{}') || coalesce(v_cancel_ids, '{}') || v_ids)))
      and h.has_dependents
    order by 1));

  if v_retry_ids is not null then
    with upd as (
      update keel.jobs_hot h
      set state = 'pending', run_at = now(), lease_id = null, worker_id = null, fetched_at = null,
          lease_expires_at = null, heartbeat_at = null,
          last_error = 'zombie: no heartbeat since ' || to_char(h.heartbeat_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
          logs = keel._with_attempt(h.logs, h.attempts, h.worker_id, h.started_at, 'zombie',
                   'zombie: no heartbeat since ' || to_char(h.heartbeat_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
      where h.id = any(array(select unnest(v_retry_ids)))
      returning h.queue
    )
    select array_agg(u.queue), array_agg('zombie_retried'::text), array_agg(null::bigint)
    into v_moved.queues, v_moved.outcomes, v_moved.durations from upd u;
    v_t := keel._tally_plus(v_t, v_moved);
    v_retried := cardinality(v_moved.queues);
  end if;
  if v_zombie_ids is not null then
    v_moved := keel._dead_letter(v_zombie_ids, null, array['processing'], 'zombie', 'zombie: heartbeat timed out');
    v_t := keel._tally_plus(v_t, v_moved);
    v_dead := v_dead + cardinality(v_moved.queues);
  end if;
  if v_cancel_ids is not null then
    v_moved := keel._dead_letter(v_cancel_ids, null, array['processing'], 'cancelled', 'cancelled; worker lost before it stopped');
    v_t := keel._tally_plus(v_t, v_moved);
    v_dead := v_dead + cardinality(v_moved.queues);
  end if;

  if cardinality(v_ids) > 0 then
    v_moved := keel._dead_letter(v_ids, null, array['pending'], 'expired', 'expired before it started');
    v_t := keel._tally_plus(v_t, v_moved);
    v_expired := cardinality(v_moved.queues);
  end if;

  perform keel._tally(v_t);
  perform keel._fold_counters();
  return query select v_released, v_retried, v_dead, v_expired;
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- DLQ -> Hot. The DLQ rows are locked first (id order), so two concurrent resurrects of one job yield exactly one hot
-- job: the second finds the row gone once the first commits. Attempts reset, idempotency key kept; a job whose key is
-- held by a hot job of its queue and type stays in the DLQ, and so do all but the newest of several DLQ jobs of one
-- key and scope in one call (as SQL Server's Resurrect). The hot insert comes before the DLQ delete and skips a held
-- key (ON CONFLICT DO NOTHING, the unique index's wait for an enqueue of the same key still in flight included); only
-- the rows it inserted leave the DLQ. Checking the key beforehand alone failed the whole resurrect with a unique
-- violation whenever two DLQ jobs shared a key, or an enqueue of the key committed after the check.
-- keel._revive moves one round of rows and says which; keel.resurrect counts them once, at the end.
create or replace function keel._revive(p_job_ids bigint[])
returns table (job_id bigint, queue text)
language sql as $$
  with locked as (
    select d.id from keel.jobs_dlq d
    where d.id = any(p_job_ids)
      and (d.idempotency_key is null
           or not exists (select 1 from keel.jobs_hot h
                          where h.queue = d.queue and h.type = d.type and h.idempotency_key = d.idempotency_key))
    order by d.id
    for update of d
  ), revived as (
    insert into keel.jobs_hot (id, queue, type, payload, priority, state, run_at, attempts, max_attempts,
                               idempotency_key, tags, created_at, last_error, logs, on_parent_failure)
    select m.id, m.queue, m.type, m.payload, m.priority, 'pending', now(), 0, m.max_attempts,
           m.idempotency_key, m.tags, m.created_at, m.error, m.logs, m.on_parent_failure
    from keel.jobs_dlq m
    where m.id = any(array(select l.id from locked l)) -- probed by key, as in _claim_rows
    -- key order, as enqueue_many inserts them; of one key the newest first, so it is the one that comes back
    order by m.idempotency_key nulls first, m.queue, m.type, m.id desc
    on conflict (idempotency_key, queue, type) where idempotency_key is not null do nothing
    returning id, queue
  ), moved as (
    delete from keel.jobs_dlq d where d.id = any(array(select r.id from revived r))
  )
  select r.id, r.queue from revived r order by r.id
$$;

-- For jobs being revived (p_ids: the DLQ rows resurrect takes), the parents they do not bring back with them, locked
-- in the lock order (sql/README.md, 3a): those not waiting first, by id; then the waiting ones together with the
-- waiting children whose edges from p_ids open again, by id. Returns those parents. resurrect calls it before its
-- first insert (with every row its rounds may revive) and again once they are revived (locking again waits for
-- no one).
create or replace function keel._lock_revival_parents(p_ids bigint[])
returns bigint[]
language plpgsql as $$
declare
  v_parents bigint[];
begin
  v_parents := array(select distinct e.parent_id from keel.job_deps e
                     where e.child_id = any(p_ids) and e.parent_id <> all(p_ids) order by 1);
  perform l.id from (select x.id from unnest(v_parents) as x(id) order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id and h.state <> 'waiting'
                      for update of h offset 0) l;
  perform l.id
  from (select e.child_id as id from keel.job_deps e
        where e.parent_id = any(p_ids) and e.parent_outcome = 'failed' and e.child_id <> all(p_ids)
        union
        select x.id from unnest(v_parents) as x(id)
        order by 1) x
  cross join lateral (select h.id from keel.jobs_hot h where h.id = x.id and h.state = 'waiting'
                      for update of h offset 0) l;
  return v_parents;
end
$$;

-- Flows (V010): a resurrected parent brings back, in further rounds, the children its failure dead-lettered as
-- 'parent_failed' (and theirs); its edges to them, and to children still waiting in the hot table (onFailure 'run'),
-- open again, so they wait for it once more. A resurrected job with a parent still hot (or resurrected with it)
-- waits for it; one whose parent is still dead is run: the operator asked for it.
drop function if exists keel.resurrect(bigint[]);
create or replace function keel.resurrect(p_job_ids bigint[])
returns table (job_id bigint)
language plpgsql as $$
#variable_conflict use_column
declare
  v_round  bigint[] := p_job_ids;
  v_ids    bigint[] := '{}';
  v_parents bigint[];
  v_queues text[] := '{}';
  v_new    bigint[];
  v_q      text[];
  v_cand   bigint[];
begin
  -- Flows: every row this call may take is locked before the first insert, in the lock order (sql/README.md, 3a):
  -- the DLQ rows of every round (those named, and the parent_failed children their revival may bring back), by id;
  -- then the hot parents of those rows that are not waiting, by id; then the waiting ones with the waiting children
  -- whose edges open again, by id. The rounds' inserts of keyed rows come last: an enqueue with `after` holds the
  -- parents it names while its insert of a key waits for ours, so taking a parent after our insert deadlocked with it
  -- (test/engines/postgres.flowKeys.test.ts). The statements below lock these rows again, waiting for no one.
  if exists (select 1 from keel.job_deps e where e.child_id = any(p_job_ids) or e.parent_id = any(p_job_ids)) then
    v_cand := array(
      with recursive c(id) as (
        select d.id from keel.jobs_dlq d where d.id = any(p_job_ids)
        union
        select e.child_id from c join keel.job_deps e on e.parent_id = c.id and e.parent_outcome = 'failed'
        join keel.jobs_dlq d on d.id = e.child_id and d.reason = 'parent_failed'
      )
      select c.id from c order by 1);
    perform l.id from (select unnest(v_cand) as id order by 1) x
    cross join lateral (select d.id from keel.jobs_dlq d where d.id = x.id for update of d offset 0) l;
    v_parents := keel._lock_revival_parents(v_cand);
  end if;
  loop
    select coalesce(array_agg(r.job_id order by r.job_id), '{}'), coalesce(array_agg(r.queue order by r.job_id), '{}')
    into v_new, v_q from keel._revive(v_round) r;
    exit when cardinality(v_new) = 0;
    v_ids := v_ids || v_new;
    v_queues := v_queues || v_q;
    -- The next round: children this round's failure dead-lettered, once none of their failed parents is left in
    -- the DLQ (a child with another parent still dead stays, and comes back with that one).
    v_round := array(select distinct e.child_id from keel.job_deps e
                     join keel.jobs_dlq d on d.id = e.child_id and d.reason = 'parent_failed'
                     where e.parent_id = any(v_new) and e.parent_outcome = 'failed'
                       and not exists (select 1 from keel.job_deps f join keel.jobs_dlq fd on fd.id = f.parent_id
                                       where f.child_id = e.child_id and f.parent_outcome = 'failed')
                     order by 1);
    exit when cardinality(v_round) = 0;
  end loop;
  if cardinality(v_ids) = 0 then
    return;
  end if;
  if exists (select 1 from keel.job_deps e where e.parent_id = any(v_ids) or e.child_id = any(v_ids)) then
    -- Parents of the revived jobs that were not revived with them: an edge from one still hot (retried, resurrected
    -- earlier, or never failed) opens again below, so that parent's own final move must settle the child: it is
    -- flagged has_dependents (else it would finish without reading its edges and the child would wait for ever).
    -- Its row is locked before the edges are read, so it cannot finish unseen in between: rows that are not
    -- waiting first, by id; then the waiting ones with the waiting children below (sql/README.md, Lock order 3a).
    v_parents := keel._lock_revival_parents(v_ids);
    update keel.job_deps e set parent_outcome = null
    where e.parent_id = any(v_ids) and e.parent_outcome = 'failed'
      and exists (select 1 from keel.jobs_hot h where h.id = e.child_id and h.state = 'waiting');
    -- A revived job's own parents as they are now: hot (open), archived (succeeded) or still dead (failed: a job the
    -- operator resurrected in spite of it runs).
    update keel.job_deps e
    set parent_outcome = case when exists (select 1 from keel.jobs_hot h where h.id = e.parent_id) then null
                              when exists (select 1 from keel.jobs_archive a where a.id = e.parent_id) then 'succeeded'
                              else 'failed' end
    where e.child_id = any(v_ids);
    update keel.jobs_hot h set has_dependents = true
    where h.id = any(v_parents) and h.has_dependents is not true
      and exists (select 1 from keel.job_deps e where e.parent_id = h.id and e.parent_outcome is null);
    update keel.jobs_hot h
    set has_dependents = case when exists (select 1 from keel.job_deps e where e.parent_id = h.id and e.parent_outcome is null)
                              then true end,
        state = case when exists (select 1 from keel.job_deps e where e.child_id = h.id and e.parent_outcome is null)
                     then 'waiting' else h.state end
    where h.id = any(v_ids);
  end if;
  perform keel._tally(row(v_queues, array_fill('resurrected'::text, array[cardinality(v_queues)]),
                          array_fill(null::bigint, array[cardinality(v_queues)]))::keel.tally);
  return query select x.id from unnest(v_ids) as x(id) order by 1;
end
$$;

create or replace function keel.resurrect_by_filter(p_queue text, p_type text, p_reason text, p_failed_after timestamptz,
                                                    p_failed_before timestamptz, p_limit integer, p_dry_run boolean)
returns table (job_id bigint)
language plpgsql as $$
declare
  v_ids bigint[];
begin
  if p_limit is null or p_limit < 1 then
    raise exception 'limit must be a positive integer' using errcode = '22023';
  end if;
  v_ids := array(
    select d.id from keel.jobs_dlq d
    where (p_queue is null or d.queue = p_queue)
      and (p_type is null or d.type = p_type)
      and (p_reason is null or d.reason = p_reason)
      and (p_failed_after is null or d.failed_at >= p_failed_after)
      and (p_failed_before is null or d.failed_at < p_failed_before)
    order by d.failed_at, d.id
    limit p_limit);
  if coalesce(p_dry_run, true) then
    return query select unnest(v_ids);
  else
    return query select * from keel.resurrect(v_ids);
  end if;
end
$$;

-- The queues that have archived jobs, in name order: one probe of jobs_archive_queue_finished per queue (a skip scan
-- written out), never a read of their rows. For the readers of the archive by time over every queue (V031).
create or replace function keel._archive_queues()
returns setof text
language sql stable as $$
  with recursive q(queue) as (
    (select a.queue from keel.jobs_archive a order by a.queue limit 1)
    union all
    select (select a.queue from keel.jobs_archive a where a.queue > q.queue order by a.queue limit 1)
    from q where q.queue is not null)
  select q.queue from q where q.queue is not null
$$;

-- One batch of retention: archive/dlq rows finished before the cutoff, or metric buckets that started before it.
create or replace function keel.purge(p_target text, p_queue text, p_older_than timestamptz, p_batch_size integer)
returns bigint
language plpgsql as $$
declare
  v_deleted bigint := 0;
begin
  if p_batch_size is null or p_batch_size < 1 then
    raise exception 'batch_size must be a positive integer' using errcode = '22023';
  end if;
  if p_target = 'archive' and p_queue is not null then
    with c as (
      select a.id from keel.jobs_archive a
      where a.queue = p_queue and a.finished_at < p_older_than
      order by a.finished_at limit p_batch_size
      for update skip locked
    ), gone as (
      delete from keel.jobs_archive a where a.id = any(array(select c.id from c)) returning a.id -- probed by key
    ), edges as (
      -- a flow's edges leave with their child (V010); probed by key, as in _claim_rows
      delete from keel.job_deps e where e.child_id = any(array(select g.id from gone g))
    )
    select count(*) into v_deleted from gone;
  elsif p_target = 'archive' then
    -- Every queue: the oldest p_batch_size of each queue's range of jobs_archive_queue_finished (V031: the archive's
    -- only time index), merged, then those rows locked by key in id order, skip-locked (locking inside each queue's
    -- walk would lock up to p_batch_size rows per queue to delete p_batch_size in all).
    with pick as (
      select x.id from unnest(array(select keel._archive_queues())) as n(queue)
      cross join lateral (
        select a.id, a.finished_at from keel.jobs_archive a
        where a.queue = n.queue and a.finished_at < p_older_than
        order by a.finished_at limit p_batch_size) x
      order by x.finished_at limit p_batch_size
    ), c as (
      select l.id from (select p.id from pick p order by 1) p
      cross join lateral (
        select a.id from keel.jobs_archive a where a.id = p.id and a.finished_at < p_older_than
        for update of a skip locked offset 0) l
    ), gone as (
      delete from keel.jobs_archive a where a.id = any(array(select c.id from c)) returning a.id -- probed by key
    ), edges as (
      -- a flow's edges leave with their child (V010); probed by key, as in _claim_rows
      delete from keel.job_deps e where e.child_id = any(array(select g.id from gone g))
    )
    select count(*) into v_deleted from gone;
  elsif p_target = 'dlq' then
    with c as (
      select d.id from keel.jobs_dlq d
      where d.failed_at < p_older_than and (p_queue is null or d.queue = p_queue)
      order by d.failed_at limit p_batch_size
      for update skip locked
    ), gone as (
      delete from keel.jobs_dlq d where d.id = any(array(select c.id from c)) returning d.id -- probed by key
    ), edges as (
      -- a flow's edges leave with their child (V010); probed by key, as in _claim_rows
      delete from keel.job_deps e where e.child_id = any(array(select g.id from gone g))
    )
    select count(*) into v_deleted from gone;
  elsif p_target = 'metrics' then
    with c as (
      select b.bucket_start, b.queue, b.outcome, b.reason, b.slot from keel.metric_buckets b
      where b.bucket_start < p_older_than and (p_queue is null or b.queue = p_queue)
      order by b.bucket_start limit p_batch_size
      for update skip locked
    )
    delete from keel.metric_buckets b using c
    where b.bucket_start = c.bucket_start and b.queue = c.queue and b.outcome = c.outcome and b.reason = c.reason
      and b.slot = c.slot;
    get diagnostics v_deleted = row_count;
  else
    raise exception 'target must be archive, dlq or metrics (got %)', coalesce(p_target, 'null') using errcode = '22023';
  end if;
  return v_deleted;
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- Reads.
-- Every field is a maintained counter or a bounded index read (never a table scan), whatever the size of the three pillars:
--   pending, fetched, processing, waiting (a flow's jobs whose parents are unfinished): keel.hot_counts (statement triggers on jobs_hot), summed over its slots;
--   dlq: keel.dlq_counts (statement triggers on jobs_dlq), summed over its slots;
--   succeeded ... resurrected: keel.stats_summary, summed over its slots (V014);
--   oldest_due_age_ms and due: read from jobs_hot_pending_due one pending priority level at a time, highest first,
--   at most 64 levels a queue (one probe finds the next level). oldest_due_age_ms is the oldest of the levels' first
--   entries, when it is due. due is exact when each level has at most 1,000 due or at most 1,000 not-yet-due pending
--   rows (it counts the smaller side up to 1,000 a level; the other side is pending minus it) and the queue has at
--   most 64 levels; past that due is at least 1,000 (or what the first 64 levels hold) and due_exact false.
-- One small statement per queue and level, not one statement over all of them: with the small tables unanalysed the
-- planner estimated ~1,500 queues and the one statement past jit_above_cost (postgres.plans.test.ts).
drop function if exists keel.stats();
create or replace function keel.stats()
returns table (queue text, pending bigint, due bigint, due_exact boolean, fetched bigint, processing bigint,
               dlq bigint, oldest_due_age_ms bigint, succeeded bigint, failed bigint, retried bigint,
               cancelled bigint, zombie bigint, resurrected bigint, waiting bigint)
language plpgsql stable as $$
#variable_conflict use_column
declare
  r         record;
  v_levels  integer[];
  v_level   integer;
  v_oldest  timestamptz;
  v_due     bigint;
  v_not_due bigint;
  v_capped  boolean;
begin
  for r in
    with counts as (
      select c.queue, sum(c.pending)::bigint as pending, sum(c.fetched)::bigint as fetched,
             sum(c.processing)::bigint as processing, sum(c.waiting)::bigint as waiting
      from keel.hot_counts c group by c.queue
    ), dead as (
      select c.queue, sum(c.n)::bigint as n from keel.dlq_counts c group by c.queue
    ), summary as (
      select s.queue, sum(s.succeeded)::bigint as succeeded, sum(s.failed)::bigint as failed,
             sum(s.retried)::bigint as retried, sum(s.cancelled)::bigint as cancelled, sum(s.zombie)::bigint as zombie,
             sum(s.resurrected)::bigint as resurrected
      from keel.stats_summary s group by s.queue
    ), names as (
      select q.name from keel.queues q
      union select s.queue from summary s
      union select c.queue from counts c where c.pending <> 0 or c.fetched <> 0 or c.processing <> 0 or c.waiting <> 0
    )
    select n.name, coalesce(c.pending, 0) as pending, coalesce(c.fetched, 0) as fetched, coalesce(c.waiting, 0) as waiting,
           coalesce(c.processing, 0) as processing, coalesce(d.n, 0) as dlq,
           coalesce(s.succeeded, 0) as succeeded, coalesce(s.failed, 0) as failed, coalesce(s.retried, 0) as retried,
           coalesce(s.cancelled, 0) as cancelled, coalesce(s.zombie, 0) as zombie,
           coalesce(s.resurrected, 0) as resurrected
    from names n
    left join counts c on c.queue = n.name
    left join dead d on d.queue = n.name
    left join summary s on s.queue = n.name
    order by n.name
  loop
    v_levels := '{}';
    v_oldest := null;
    v_due := 0;
    v_not_due := null;
    v_level := (select h.priority from keel.jobs_hot h where h.queue = r.name and h.state = 'pending'
                order by h.priority desc limit 1);
    while v_level is not null and cardinality(v_levels) < 64 loop
      v_levels := v_levels || v_level;
      v_oldest := least(v_oldest, (select h.run_at from keel.jobs_hot h
                                   where h.queue = r.name and h.state = 'pending' and h.priority = v_level
                                   order by h.run_at limit 1));
      v_due := v_due + (select count(*) from (
                          select 1 from keel.jobs_hot h
                          where h.queue = r.name and h.state = 'pending' and h.priority = v_level and h.run_at <= now()
                          limit 1000) x);
      v_level := (select h.priority from keel.jobs_hot h
                  where h.queue = r.name and h.state = 'pending' and h.priority < v_level
                  order by h.priority desc limit 1);
    end loop;
    v_capped := v_level is not null; -- levels past the 64th were not read
    if v_due >= 1000 then
      v_not_due := 0;
      foreach v_level in array v_levels loop
        v_not_due := v_not_due + (select count(*) from (
                                    select 1 from keel.jobs_hot h
                                    where h.queue = r.name and h.state = 'pending' and h.priority = v_level
                                      and h.run_at > now()
                                    limit 1000) x);
      end loop;
    end if;
    queue := r.name;
    pending := r.pending;
    due := case when v_due < 1000 then v_due when v_not_due < 1000 then r.pending - v_not_due else 1000 end;
    due_exact := not v_capped and (v_due < 1000 or v_not_due < 1000);
    fetched := r.fetched;
    processing := r.processing;
    dlq := r.dlq;
    oldest_due_age_ms := case when v_oldest <= now() then keel._ms_between(v_oldest, now()) end;
    succeeded := r.succeeded;
    failed := r.failed;
    retried := r.retried;
    cancelled := r.cancelled;
    zombie := r.zombie;
    resurrected := r.resurrected;
    waiting := r.waiting;
    return next;
  end loop;
end
$$;

create or replace function keel.metrics(p_window_minutes integer, p_queue text)
returns table (bucket_start timestamptz, queue text, outcome text, reason text, count bigint,
               total_duration_ms bigint, max_duration_ms bigint)
language sql stable as $$
  -- a bucket's rows of every slot (V014) as one
  select b.bucket_start, b.queue, b.outcome, b.reason, sum(b.count)::bigint, sum(b.total_duration_ms)::bigint,
         max(b.max_duration_ms)
  from keel.metric_buckets b
  where b.bucket_start >= date_trunc('minute', now()) - make_interval(mins => greatest(coalesce(p_window_minutes, 60), 1) - 1)
    and (p_queue is null or b.queue = p_queue)
  group by b.bucket_start, b.queue, b.outcome, b.reason
  order by b.bucket_start, b.queue, b.outcome, b.reason
$$;

create or replace function keel.list_queues(p_name text)
returns setof keel.queues
language sql stable as $$
  select * from keel.queues q where p_name is null or q.name = p_name order by q.name
$$;

-- Null arguments leave a setting unchanged; clear_max_concurrency makes the queue unlimited. Returns the row after
-- this call's change (not a later read: another instance's change may follow at once) and whether this call created
-- it: of calls creating a queue at once, the insert that waited on the other's key does nothing, so one is told so.
-- A pause first takes the queue's claim lock exclusively (keel._claim_candidates): it waits until every claim in
-- flight that may have read "not paused" has committed, so once it returns no claim of the queue starts a job.
-- p_expected (compare-and-set): {"setting": value the caller saw, ...} in the API's names. Compared with the row
-- locked for the change (a queue without settings: the defaults); the first differing setting, in name order, is
-- returned as conflict with the row as it is, and nothing is written (a row this call inserted is deleted again).
-- Unless the row already holds every value the call sets (at least one): then it is a retry of a change that applied
-- and whose answer was lost (the caller's expected values are those it saw before it), and it succeeds unchanged
-- (unchanged = true, conflict null, nothing written). A compare-and-set on absolute values is idempotent that way.
-- p_expected defaults to null: a build from before it calls without it (sql/README.md, "Rolling deploys").
drop function if exists keel.update_queue(text, boolean, integer, boolean, integer, text, integer, integer, integer,
                                          integer);
drop function if exists keel.update_queue(text, boolean, integer, boolean, integer, text, integer, integer, integer,
                                          integer, jsonb);
create or replace function keel.update_queue(p_name text, p_paused boolean, p_max_concurrency integer,
                                             p_clear_max_concurrency boolean, p_zombie_timeout_seconds integer,
                                             p_zombie_policy text, p_max_attempts integer,
                                             p_archive_retention_seconds integer, p_dlq_retention_seconds integer,
                                             p_metrics_retention_seconds integer,
                                             p_expected jsonb default null)
returns table (name text, paused boolean, max_concurrency integer, zombie_timeout_seconds integer,
               zombie_policy text, max_attempts integer, archive_retention_seconds integer,
               dlq_retention_seconds integer, metrics_retention_seconds integer, updated_at timestamptz,
               created boolean, conflict text, unchanged boolean)
language plpgsql as $$
#variable_conflict use_column
declare
  v_created  boolean;
  v_row      keel.queues;
  v_conflict text;
  v_holds    boolean;
begin
  if p_expected is not null and (jsonb_typeof(p_expected) <> 'object' or exists (
      select 1 from jsonb_object_keys(p_expected) k
      where k not in ('maxConcurrency', 'zombieTimeoutSeconds', 'zombiePolicy', 'maxAttempts',
                      'archiveRetentionSeconds', 'dlqRetentionSeconds', 'metricsRetentionSeconds'))) then
    raise exception 'expected: must be an object of queue settings' using errcode = '22023';
  end if;
  -- The claim barrier (keel._claim_candidates): a pause, and a limit set, wait for every claim in flight that may
  -- have read the queue's settings before (not paused; no limit: such a claim counts nothing and takes up to its
  -- batch), and a claim after them reads the change. A claim of a limited queue already counts under the settings
  -- row, which the update below waits for; one that read "no limit" holds no such lock.
  if p_paused or p_max_concurrency is not null then
    perform pg_advisory_xact_lock(keel._claim_lock_key(p_name));
  end if;
  insert into keel.queues (name) values (p_name) on conflict (name) do nothing;
  v_created := found;
  if p_expected is not null then
    select * into v_row from keel.queues s where s.name = p_name for no key update;
    select e.key into v_conflict
    from jsonb_each(p_expected) e
    where e.value is distinct from coalesce(case e.key
            when 'maxConcurrency' then to_jsonb(v_row.max_concurrency)
            when 'zombieTimeoutSeconds' then to_jsonb(v_row.zombie_timeout_seconds)
            when 'zombiePolicy' then to_jsonb(v_row.zombie_policy)
            when 'maxAttempts' then to_jsonb(v_row.max_attempts)
            when 'archiveRetentionSeconds' then to_jsonb(v_row.archive_retention_seconds)
            when 'dlqRetentionSeconds' then to_jsonb(v_row.dlq_retention_seconds)
            when 'metricsRetentionSeconds' then to_jsonb(v_row.metrics_retention_seconds) end, 'null'::jsonb)
    order by e.key
    limit 1;
    if v_conflict is not null then
      -- A retry of a change that applied: every setting the call sets already has its value.
      v_holds := (p_paused is not null or p_max_concurrency is not null or coalesce(p_clear_max_concurrency, false)
                  or p_zombie_timeout_seconds is not null or p_zombie_policy is not null or p_max_attempts is not null
                  or p_archive_retention_seconds is not null or p_dlq_retention_seconds is not null
                  or p_metrics_retention_seconds is not null)
        and (p_paused is null or v_row.paused = p_paused)
        and (case when coalesce(p_clear_max_concurrency, false) then v_row.max_concurrency is null
                  else p_max_concurrency is null or v_row.max_concurrency = p_max_concurrency end)
        and (p_zombie_timeout_seconds is null or v_row.zombie_timeout_seconds = p_zombie_timeout_seconds)
        and (p_zombie_policy is null or v_row.zombie_policy = p_zombie_policy)
        and (p_max_attempts is null or v_row.max_attempts = p_max_attempts)
        and (p_archive_retention_seconds is null or v_row.archive_retention_seconds = p_archive_retention_seconds)
        and (p_dlq_retention_seconds is null or v_row.dlq_retention_seconds = p_dlq_retention_seconds)
        and (p_metrics_retention_seconds is null or v_row.metrics_retention_seconds = p_metrics_retention_seconds);
      if v_created then
        delete from keel.queues s where s.name = p_name;
      end if;
      return query select v_row.name, v_row.paused, v_row.max_concurrency, v_row.zombie_timeout_seconds,
                          v_row.zombie_policy, v_row.max_attempts, v_row.archive_retention_seconds,
                          v_row.dlq_retention_seconds, v_row.metrics_retention_seconds, v_row.updated_at, false,
                          case when v_holds then null else v_conflict end, v_holds;
      return;
    end if;
  end if;
  return query
  update keel.queues as q
    set paused = coalesce(p_paused, q.paused),
        max_concurrency = case when coalesce(p_clear_max_concurrency, false) then null
                               else coalesce(p_max_concurrency, q.max_concurrency) end,
        zombie_timeout_seconds = coalesce(p_zombie_timeout_seconds, q.zombie_timeout_seconds),
        zombie_policy = coalesce(p_zombie_policy, q.zombie_policy),
        max_attempts = coalesce(p_max_attempts, q.max_attempts),
        archive_retention_seconds = coalesce(p_archive_retention_seconds, q.archive_retention_seconds),
        dlq_retention_seconds = coalesce(p_dlq_retention_seconds, q.dlq_retention_seconds),
        metrics_retention_seconds = coalesce(p_metrics_retention_seconds, q.metrics_retention_seconds),
        updated_at = now()
  where q.name = p_name
  returning q.name, q.paused, q.max_concurrency, q.zombie_timeout_seconds, q.zombie_policy, q.max_attempts,
            q.archive_retention_seconds, q.dlq_retention_seconds, q.metrics_retention_seconds, q.updated_at,
            v_created, null::text, false;
end
$$;

-- A job as get_job and search_jobs return it. p_full: get_job's whole record, with the result and the job's log;
-- searches leave both out (a page of 1,000 would carry up to 1,000 results of KEEL_MAX_RESULT_BYTES and logs of
-- KEEL_JOB_LOG_LINES lines each).
drop function if exists keel._hot_record(keel.jobs_hot);
create or replace function keel._hot_record(h keel.jobs_hot, p_full boolean)
returns keel.job_record language sql stable as $$
  select row(h.id, 'hot', h.queue, h.type, h.payload, h.priority, h.state, h.attempts, h.idempotency_key, h.tags,
             h.created_at, h.run_at, h.started_at, null::timestamptz, null::bigint, null::text, h.last_error,
             h.cancel_requested, h.lease_id, h.worker_id, h.progress, null::jsonb,
             case when p_full then h.logs end, h.max_attempts, h.lease_expires_at, h.heartbeat_at)::keel.job_record
$$;

drop function if exists keel._archive_record(keel.jobs_archive);
create or replace function keel._archive_record(a keel.jobs_archive, p_full boolean)
returns keel.job_record language sql stable as $$
  select row(a.id, 'archive', a.queue, a.type, a.payload, a.priority, 'succeeded', a.attempts, a.idempotency_key,
             a.tags, a.created_at, null::timestamptz, a.started_at, a.finished_at, a.duration_ms, null::text,
             null::text, false, null::uuid, a.worker_id, null::jsonb,
             case when p_full then a.result end, case when p_full then a.logs end, a.max_attempts, null::timestamptz,
             null::timestamptz)::keel.job_record
$$;

drop function if exists keel._dlq_record(keel.jobs_dlq);
create or replace function keel._dlq_record(d keel.jobs_dlq, p_full boolean)
returns keel.job_record language sql stable as $$
  select row(d.id, 'dlq', d.queue, d.type, d.payload, d.priority, 'dead', d.attempts, d.idempotency_key, d.tags,
             d.created_at, null::timestamptz, d.started_at, d.failed_at, d.duration_ms, d.reason, d.error, false,
             null::uuid, d.worker_id, null::jsonb, null::jsonb, case when p_full then d.logs end, d.max_attempts,
             null::timestamptz, null::timestamptz)::keel.job_record
$$;

create or replace function keel.get_job(p_job_id bigint)
returns setof keel.job_record
language sql stable as $$
  select (keel._hot_record(h, true)).* from keel.jobs_hot h where h.id = p_job_id
  union all
  select (keel._archive_record(a, true)).* from keel.jobs_archive a where a.id = p_job_id
  union all
  select (keel._dlq_record(d, true)).* from keel.jobs_dlq d where d.id = p_job_id
$$;

-- Newest first (p_oldest: oldest first) with keyset paging on id. text matches a substring of the payload or the
-- last error; p_priority an exact priority; p_idempotency_key an exact key (a job's siblings).
-- p_scan_rows bounds the work (a search never scans a whole table): only the next p_scan_rows ids past p_after_id,
-- in the chosen order, are examined (a range of the primary key). When more rows lie past that range, a last marker
-- row (location 'scan_bound', job_id the last id examined) follows the matches: pass it as p_after_id to continue.
-- The store sets it for archive and DLQ searches (JobSearch.scanRows).
drop function if exists keel.search_jobs(text, text, text, text, text, text, timestamptz, timestamptz, text, bigint, integer);
drop function if exists keel.search_jobs(text, text, text, text, text, text, timestamptz, timestamptz, text, bigint, integer, integer);
create or replace function keel.search_jobs(p_location text, p_queue text, p_type text, p_tag text, p_state text,
                                            p_reason text, p_from timestamptz, p_to timestamptz, p_text text,
                                            p_after_id bigint, p_scan_rows integer, p_limit integer,
                                            p_priority integer, p_idempotency_key text, p_oldest boolean)
returns setof keel.job_record
language plpgsql stable as $$
declare
  v_like text := case when p_text is null then null
                      else '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%' end;
  v_limit integer := least(greatest(coalesce(p_limit, 50), 1), 1000);
  v_asc boolean := coalesce(p_oldest, false);
  -- The id range examined, [v_lo, v_hi]: below p_after_id newest first, above it oldest first; narrowed to the
  -- scanned range when p_scan_rows is set. Plain ranges (never "param is null or ..."): index conditions on the key.
  v_lo bigint := case when v_asc then coalesce(p_after_id, -1) + 1 else 0 end;
  v_hi bigint := case when v_asc then 9223372036854775807 else coalesce(p_after_id, 9223372036854775807) - 1 end;
  v_edge bigint;
  v_seen integer := 0;
  v_marker keel.job_record;
begin
  if p_scan_rows is not null then
    if p_scan_rows < 1 then
      raise exception 'scan_rows must be a positive integer' using errcode = '22023';
    end if;
    if p_location = 'hot' then
      if v_asc then
        select max(x.id), count(*) into v_edge, v_seen from (
          select h.id from keel.jobs_hot h where h.id >= v_lo order by h.id limit p_scan_rows) x;
      else
        select min(x.id), count(*) into v_edge, v_seen from (
          select h.id from keel.jobs_hot h where h.id <= v_hi order by h.id desc limit p_scan_rows) x;
      end if;
    elsif p_location = 'archive' then
      if v_asc then
        select max(x.id), count(*) into v_edge, v_seen from (
          select a.id from keel.jobs_archive a where a.id >= v_lo order by a.id limit p_scan_rows) x;
      else
        select min(x.id), count(*) into v_edge, v_seen from (
          select a.id from keel.jobs_archive a where a.id <= v_hi order by a.id desc limit p_scan_rows) x;
      end if;
    elsif p_location = 'dlq' then
      if v_asc then
        select max(x.id), count(*) into v_edge, v_seen from (
          select d.id from keel.jobs_dlq d where d.id >= v_lo order by d.id limit p_scan_rows) x;
      else
        select min(x.id), count(*) into v_edge, v_seen from (
          select d.id from keel.jobs_dlq d where d.id <= v_hi order by d.id desc limit p_scan_rows) x;
      end if;
    end if;
    if v_seen < p_scan_rows then
      v_edge := null; -- the range reaches the end of the table: nothing past it to continue with
    elsif v_asc then
      v_hi := v_edge;
    else
      v_lo := v_edge;
    end if;
  end if;
  if p_location = 'hot' then
    -- One statement per direction: each an ordered walk of the primary key that stops at the limit.
    if v_asc then
      return query
      select (keel._hot_record(h, false)).* from keel.jobs_hot h
      where (p_queue is null or h.queue = p_queue) and (p_type is null or h.type = p_type)
        and (p_tag is null or h.tags @> array[p_tag]) and (p_state is null or h.state = p_state)
        and (p_priority is null or h.priority = p_priority)
        and (p_idempotency_key is null or h.idempotency_key = p_idempotency_key)
        and (p_from is null or h.created_at >= p_from) and (p_to is null or h.created_at < p_to)
        and (v_like is null or h.payload::text ilike v_like or coalesce(h.last_error, '') ilike v_like)
        and h.id between v_lo and v_hi
      order by h.id limit v_limit;
    else
      return query
      select (keel._hot_record(h, false)).* from keel.jobs_hot h
      where (p_queue is null or h.queue = p_queue) and (p_type is null or h.type = p_type)
        and (p_tag is null or h.tags @> array[p_tag]) and (p_state is null or h.state = p_state)
        and (p_priority is null or h.priority = p_priority)
        and (p_idempotency_key is null or h.idempotency_key = p_idempotency_key)
        and (p_from is null or h.created_at >= p_from) and (p_to is null or h.created_at < p_to)
        and (v_like is null or h.payload::text ilike v_like or coalesce(h.last_error, '') ilike v_like)
        and h.id between v_lo and v_hi
      order by h.id desc limit v_limit;
    end if;
  elsif p_location = 'archive' then
    if v_asc then
      return query
      select (keel._archive_record(a, false)).* from keel.jobs_archive a
      where (p_queue is null or a.queue = p_queue) and (p_type is null or a.type = p_type)
        and (p_tag is null or a.tags @> array[p_tag])
        and (p_priority is null or a.priority = p_priority)
        and (p_idempotency_key is null or a.idempotency_key = p_idempotency_key)
        and (p_from is null or a.finished_at >= p_from) and (p_to is null or a.finished_at < p_to)
        and (v_like is null or a.payload::text ilike v_like)
        and a.id between v_lo and v_hi
      order by a.id limit v_limit;
    else
      return query
      select (keel._archive_record(a, false)).* from keel.jobs_archive a
      where (p_queue is null or a.queue = p_queue) and (p_type is null or a.type = p_type)
        and (p_tag is null or a.tags @> array[p_tag])
        and (p_priority is null or a.priority = p_priority)
        and (p_idempotency_key is null or a.idempotency_key = p_idempotency_key)
        and (p_from is null or a.finished_at >= p_from) and (p_to is null or a.finished_at < p_to)
        and (v_like is null or a.payload::text ilike v_like)
        and a.id between v_lo and v_hi
      order by a.id desc limit v_limit;
    end if;
  elsif p_location = 'dlq' then
    if v_asc then
      return query
      select (keel._dlq_record(d, false)).* from keel.jobs_dlq d
      where (p_queue is null or d.queue = p_queue) and (p_type is null or d.type = p_type)
        and (p_tag is null or d.tags @> array[p_tag]) and (p_reason is null or d.reason = p_reason)
        and (p_priority is null or d.priority = p_priority)
        and (p_idempotency_key is null or d.idempotency_key = p_idempotency_key)
        and (p_from is null or d.failed_at >= p_from) and (p_to is null or d.failed_at < p_to)
        and (v_like is null or d.payload::text ilike v_like or coalesce(d.error, '') ilike v_like)
        and d.id between v_lo and v_hi
      order by d.id limit v_limit;
    else
      return query
      select (keel._dlq_record(d, false)).* from keel.jobs_dlq d
      where (p_queue is null or d.queue = p_queue) and (p_type is null or d.type = p_type)
        and (p_tag is null or d.tags @> array[p_tag]) and (p_reason is null or d.reason = p_reason)
        and (p_priority is null or d.priority = p_priority)
        and (p_idempotency_key is null or d.idempotency_key = p_idempotency_key)
        and (p_from is null or d.failed_at >= p_from) and (p_to is null or d.failed_at < p_to)
        and (v_like is null or d.payload::text ilike v_like or coalesce(d.error, '') ilike v_like)
        and d.id between v_lo and v_hi
      order by d.id desc limit v_limit;
    end if;
  else
    raise exception 'location must be hot, archive or dlq (got %)', coalesce(p_location, 'null') using errcode = '22023';
  end if;
  if v_edge is not null then
    v_marker.job_id := v_edge;
    v_marker.location := 'scan_bound';
    return next v_marker;
  end if;
end
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- Console reads (issue 30): exact counts for previews, dead letters grouped in SQL, and the lease holders.

-- How many jobs match a filter, counted in SQL and bounded: at most p_cap + 1 rows are read, so matched is exact
-- when exact is true and "at least matched" otherwise. The filters mean what they mean in search_jobs (p_from/p_to
-- bound created_at, finished_at or failed_at); as_of is the transaction's instant, the bound a purge preview keeps.
create or replace function keel.count_jobs(p_location text, p_queue text, p_type text, p_tag text, p_state text,
                                           p_reason text, p_from timestamptz, p_to timestamptz, p_cap integer)
returns table (matched bigint, exact boolean, as_of timestamptz)
language plpgsql stable as $$
declare
  v_cap integer := least(greatest(coalesce(p_cap, 10000), 1), 1000000);
  v_n bigint;
begin
  if p_location = 'hot' then
    select count(*) into v_n from (
      select 1 from keel.jobs_hot h
      where (p_queue is null or h.queue = p_queue) and (p_type is null or h.type = p_type)
        and (p_tag is null or h.tags @> array[p_tag]) and (p_state is null or h.state = p_state)
        and (p_from is null or h.created_at >= p_from) and (p_to is null or h.created_at < p_to)
      limit v_cap + 1) x;
  elsif p_location = 'archive' and p_queue is null and (p_from is not null or p_to is not null) then
    -- A time range over every queue: each queue's range of jobs_archive_queue_finished (V031: the archive's only time
    -- index), one queue after another, stopping at p_cap + 1 rows in all.
    select count(*) into v_n from (
      select 1 from unnest(array(select keel._archive_queues())) as n(queue)
      cross join lateral (
        select 1 from keel.jobs_archive a
        where a.queue = n.queue
          and a.finished_at >= coalesce(p_from, '-infinity') and a.finished_at < coalesce(p_to, 'infinity')
          and (p_type is null or a.type = p_type) and (p_tag is null or a.tags @> array[p_tag])
        order by a.finished_at -- the index's order: a limit over an unordered filter was planned as a table scan
        limit v_cap + 1) x
      limit v_cap + 1) y;
  elsif p_location = 'archive' then
    select count(*) into v_n from (
      select 1 from keel.jobs_archive a
      where (p_queue is null or a.queue = p_queue) and (p_type is null or a.type = p_type)
        and (p_tag is null or a.tags @> array[p_tag])
        and (p_from is null or a.finished_at >= p_from) and (p_to is null or a.finished_at < p_to)
      limit v_cap + 1) x;
  elsif p_location = 'dlq' then
    select count(*) into v_n from (
      select 1 from keel.jobs_dlq d
      where (p_queue is null or d.queue = p_queue) and (p_type is null or d.type = p_type)
        and (p_tag is null or d.tags @> array[p_tag]) and (p_reason is null or d.reason = p_reason)
        and (p_from is null or d.failed_at >= p_from) and (p_to is null or d.failed_at < p_to)
      limit v_cap + 1) x;
  else
    raise exception 'location must be hot, archive or dlq (got %)', coalesce(p_location, 'null') using errcode = '22023';
  end if;
  return query select least(v_n, v_cap::bigint), v_n <= v_cap, now();
end
$$;

-- Dead letters grouped by reason, type and queue, counted in SQL over the newest p_scan_rows dead letters (of one
-- queue, or all): at most p_scan_rows + 1 rows are read, newest first along jobs_dlq_failed / jobs_dlq_queue_failed,
-- so the read is bounded however large the DLQ grows. Largest group first, a page of p_limit groups from p_offset.
-- Every row carries the number of groups and of dead letters counted, and more: the DLQ holds older dead letters
-- that were not counted (the totals are then lower bounds). The row past the cap only sets more: it is the oldest
-- read, so it never raises a group's newest_failed_at, and a group it alone would form is dropped.
drop function if exists keel.dlq_groups(text, integer, integer);
create or replace function keel.dlq_groups(p_queue text, p_offset integer, p_limit integer, p_scan_rows integer)
returns table (reason text, type text, queue text, jobs bigint, newest_failed_at timestamptz, total_groups bigint,
               total_jobs bigint, more boolean)
language plpgsql stable as $$
declare
  v_scan integer := least(greatest(coalesce(p_scan_rows, 100000), 1), 1000000);
begin
  return query
  with s as (
    select d.reason, d.type, d.queue, d.failed_at, row_number() over (order by d.failed_at desc) > v_scan as extra
    from keel.jobs_dlq d
    where p_queue is null or d.queue = p_queue
    order by d.failed_at desc
    limit v_scan + 1
  ), g as (
    select s.reason, s.type, s.queue, count(*) filter (where not s.extra) as jobs, max(s.failed_at) as newest,
           bool_or(s.extra) as extra
    from s
    group by s.reason, s.type, s.queue
  ), w as (
    select g.*, count(*) filter (where g.jobs > 0) over () as groups, sum(g.jobs) over () as dead,
           bool_or(g.extra) over () as beyond
    from g
  )
  select w.reason, w.type, w.queue, w.jobs, w.newest, w.groups, w.dead::bigint, w.beyond
  from w
  where w.jobs > 0
  order by w.jobs desc, w.reason, w.type, w.queue
  offset greatest(coalesce(p_offset, 0), 0)
  limit least(greatest(coalesce(p_limit, 50), 1), 500);
end
$$;

-- The workers: every processor of the registry (keel.workers, V012: host, version, queues served, concurrency, last
-- seen) and every lease holder (per worker id, the hot jobs it holds, fetched or processing; its oldest and newest
-- sign of life: the heartbeat, else the start, else the claim; its earliest lease expiry), joined by worker id. A
-- registered worker holding nothing is listed (idle); a lease holder with no row is listed with a null registration
-- (registered false: a process that never registered or whose row was pruned). Lease holders first, the stalest
-- first; then the idle, the most recently seen first. Bounded by the registry (pruned by maintenance) and by what is
-- in flight.
drop function if exists keel.list_workers();
create or replace function keel.list_workers()
returns table (worker_id text, registered boolean, host text, instance_id text, pid integer, app_version text,
               build_id text, queues_served text, concurrency integer, jobs_done bigint, started_at timestamptz,
               last_seen_at timestamptz, jobs_held bigint, processing bigint, queues text,
               oldest_heartbeat_at timestamptz, newest_heartbeat_at timestamptz,
               earliest_lease_expires_at timestamptz, as_of timestamptz)
language sql stable as $$
  with held as (
    select h.worker_id, count(*) as jobs_held, count(*) filter (where h.state = 'processing') as processing,
           string_agg(distinct h.queue, ',' order by h.queue) as queues,
           min(coalesce(h.heartbeat_at, h.started_at, h.fetched_at)) as oldest,
           max(coalesce(h.heartbeat_at, h.started_at, h.fetched_at)) as newest,
           min(h.lease_expires_at) as earliest_expiry
    from keel.jobs_hot h
    where h.state in ('fetched', 'processing') and h.worker_id is not null
    group by h.worker_id
  )
  select coalesce(w.worker_id, l.worker_id), w.worker_id is not null, w.host, w.instance_id, w.pid, w.app_version,
         w.build_id, w.queues, w.concurrency, w.jobs_done, w.started_at, w.last_seen_at,
         coalesce(l.jobs_held, 0), coalesce(l.processing, 0), l.queues, l.oldest, l.newest, l.earliest_expiry, now()
  from keel.workers w
  full join held l on l.worker_id = w.worker_id
  order by l.oldest nulls last, w.last_seen_at desc nulls last, coalesce(w.worker_id, l.worker_id)
$$;

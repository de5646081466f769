-- Transfer journal functions over keel.transfer_batches / transfer_batch_events (V020). Repeatable (sql/README.md).
-- ---------------------------------------------------------------------------------------------------------------
-- The application reaches the journal only through these (no table SQL in TypeScript), each
-- one statement and so one short transaction: a connection lost mid-call leaves either all of it or nothing, and
-- no client is ever held between statements. SECURITY DEFINER with a pinned search_path: they run with the
-- owner's table rights, so the app role only needs EXECUTE on them (and USAGE on schema keel).
-- Names and parameters are JOURNAL_PROCEDURES (shared/transfer/journalProcedures.ts), the same as SQL Server's
-- (R__070_transfer_journal.sql); test/engines/parity.test.ts compares them with this database's catalog.
-- ---------------------------------------------------------------------------------------------------------------

-- Inserts a batch in state 'extracting' with its 'created' event. outcome:
--   inserted            the batch (columns of transfer_batches follow)
--   transfer_paused     the transfer (a replay: the transfer it replays) is paused; nothing was written
--   duplicate_batch_id  a batch with this id exists (conflict_batch_id = it, conflict_state its state)
--   open_batch_exists   the transfer has an open batch, or (a replay, '<transfer>@replay-<n>') a replay of the same
--                       range is open in another replay chain (conflict_batch_id/state name it); timestamp and
--                       rowversion windows: a replay of the transfer is open, or (a replay) the transfer's own batch is
--   window_taken        a live batch of the transfer shares the window's low or high bound (it is named)
-- First the transfer's lock (keel._transfer_lock, sql/README.md "Lock order"), held to commit: the pause and the
-- open replay are read under it, so a pause that committed first is seen, a pause that comes later waits for this
-- insert to commit (it returns after the batch exists, never before a batch it did not stop), and two replays of
-- one range take turns, the second reading the first's batch. Then a unique index decides the chain's own rules;
-- which one is read from committed rows afterwards, never from error text. ON CONFLICT waits for a rival's insert
-- to commit or roll back, so the reads below see the row that refused this one.
-- A new replay chain is asked for as '<transfer>@replay-' (nothing after the mark): its name is completed here with
-- the batch's seq, a number the journal issues, so two replays never share a chain (named by the host's milliseconds,
-- two in one millisecond did, the second refused open_batch_exists) and the numbers follow the order the chains were
-- created in whatever the hosts' clocks say. A name with a number already (written by an older version) is kept.

-- The transfer's lock (a transaction-scoped advisory lock on its name, a replay chain's on the transfer it
-- replays): taken first by every journal transaction that creates a batch or pauses/resumes the transfer.
create or replace function keel._transfer_lock(p_transfer_name text)
returns void language sql volatile set search_path = pg_catalog, pg_temp as $$
  select pg_advisory_xact_lock(hashtextextended('keel.transfer:' || split_part(p_transfer_name, '@replay-', 1), 0))
$$;

-- p_detail: the 'created' event's detail.
drop function if exists keel.transfer_batch_insert(uuid, text, text, text, text, text, jsonb);
create or replace function keel.transfer_batch_insert(p_batch_id uuid, p_transfer_name text, p_boundary_kind text,
  p_boundary_low text, p_boundary_high text, p_schema_hash text, p_schema_columns jsonb, p_detail jsonb)
returns table (outcome text, conflict_batch_id uuid, conflict_state text, batch keel.transfer_batches)
language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row keel.transfer_batches;
  v_id uuid;
  v_state text;
  v_name text := p_transfer_name;
  v_seq bigint;
begin
  perform keel._transfer_lock(p_transfer_name);
  if exists (select 1 from keel.transfer_controls c
              where c.transfer_name = split_part(p_transfer_name, '@replay-', 1) and c.paused) then
    return query select 'transfer_paused'::text, null::uuid, null::text, null::keel.transfer_batches;
    return;
  end if;
  if position('@replay-' in p_transfer_name) > 0 then
    -- Open batches are few (one per chain): read through transfer_batches_by_state.
    select b.batch_id, b.state into v_id, v_state from keel.transfer_batches b
     where b.state in ('extracting', 'staged', 'applying', 'unresolved')
       and starts_with(b.transfer_name, split_part(p_transfer_name, '@replay-', 1) || '@replay-')
       and b.boundary_low is not distinct from p_boundary_low and b.boundary_high = p_boundary_high
     limit 1;
    if found then
      return query select 'open_batch_exists'::text, v_id, v_state, null::keel.transfer_batches;
      return;
    end if;
  end if;
  -- Timestamp and rowversion windows: an update moves a row out of its committed window into the next one, so a replay
  -- (which stages its range as the source is then) and the transfer's own window must not be open at once: the live
  -- window could carry a row's new version before the replay's apply writes the old one back over it, for good. Each
  -- waits for the other's open batch (read under the transfer's lock, like the replays above). Key windows need not:
  -- a row never leaves its key window, so a replay's range and a live window never share a row.
  if p_boundary_kind in ('timestamp', 'rowversion') then
    select b.batch_id, b.state into v_id, v_state from keel.transfer_batches b
     where b.state in ('extracting', 'staged', 'applying', 'unresolved')
       and case when position('@replay-' in p_transfer_name) > 0
                then b.transfer_name = split_part(p_transfer_name, '@replay-', 1)
                else starts_with(b.transfer_name, p_transfer_name || '@replay-') end
     limit 1;
    if found then
      return query select 'open_batch_exists'::text, v_id, v_state, null::keel.transfer_batches;
      return;
    end if;
  end if;
  -- A refusing row can leave the way between the insert and the read (it failed and released its window):
  -- then the insert is simply tried again.
  for i in 1..5 loop
    v_seq := nextval(pg_get_serial_sequence('keel.transfer_batches', 'seq'));
    if right(p_transfer_name, 8) = '@replay-' then
      v_name := p_transfer_name || v_seq;
    end if;
    insert into keel.transfer_batches (seq, batch_id, transfer_name, state, boundary_kind, boundary_low, boundary_high, schema_hash, schema_columns)
    overriding system value
    values (v_seq, p_batch_id, v_name, 'extracting', p_boundary_kind, p_boundary_low, p_boundary_high, p_schema_hash, p_schema_columns)
    on conflict do nothing
    returning * into v_row;
    if v_row.batch_id is not null then
      insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
      values (p_batch_id, null, 'extracting', 'created', p_detail);
      return query select 'inserted'::text, null::uuid, null::text, v_row;
      return;
    end if;
    select b.state into v_state from keel.transfer_batches b where b.batch_id = p_batch_id;
    if found then
      return query select 'duplicate_batch_id'::text, p_batch_id, v_state, null::keel.transfer_batches;
      return;
    end if;
    select b.batch_id, b.state into v_id, v_state from keel.transfer_batches b
     where b.transfer_name = v_name and b.state in ('extracting', 'staged', 'applying', 'unresolved')
     limit 1;
    if found then
      return query select 'open_batch_exists'::text, v_id, v_state, null::keel.transfer_batches;
      return;
    end if;
    select b.batch_id, b.state into v_id, v_state from keel.transfer_batches b
     where b.transfer_name = v_name and b.state <> 'failed'
       and (coalesce(b.boundary_low, '') = coalesce(p_boundary_low, '') or b.boundary_high = p_boundary_high)
     limit 1;
    if found then
      return query select 'window_taken'::text, v_id, v_state, null::keel.transfer_batches;
      return;
    end if;
  end loop;
  raise exception 'transfer %: batch % was refused by a unique index that no committed batch explains (5 tries)', p_transfer_name, p_batch_id
    using errcode = '40001';
end $$;

-- Compare-and-set state change with a patch and an event, in one transaction. Returns the updated row, or no
-- row when the batch is not in one of p_from_states (someone else moved it). Each patchable column comes with a
-- p_set_<column> flag: true sets the column to p_<column> (null clears it), false leaves it; the manifest (row_count,
-- checksum) is the exception: once recorded it is never replaced. p_stamp names one of the *_at columns to set to now().
-- p_if_version (null: the state alone decides) also fences the move on the version the caller read (V032): a writer
-- that decided on an older record -- reconcile's verdict, asked of the target while another run started an apply or
-- an operator moved the batch -- moves nothing (no row), and its event is still recorded, on the row as it is, with
-- {"stale": true, "version": <the row's>} in its detail (as transfer_batch_note's).
-- p_if_version defaults to null: a build from before it calls without it (sql/README.md, "Rolling deploys").
drop function if exists keel.transfer_batch_transition(uuid, text[], text, jsonb, boolean, text, text, jsonb);
drop function if exists keel.transfer_batch_transition(uuid, text[], text, boolean, bigint, boolean, text, boolean,
  bigint, boolean, text, boolean, bigint, boolean, text, boolean, text, boolean, text, boolean, text, text, jsonb);
create or replace function keel.transfer_batch_transition(p_batch_id uuid, p_from_states text[], p_to_state text,
  p_set_row_count boolean, p_row_count bigint, p_set_checksum boolean, p_checksum text,
  p_set_staged_count boolean, p_staged_count bigint, p_set_staged_checksum boolean, p_staged_checksum text,
  p_set_applied_count boolean, p_applied_count bigint, p_set_last_error boolean, p_last_error text,
  p_set_last_error_code boolean, p_last_error_code text,
  p_set_target_reconcile_token boolean, p_target_reconcile_token text,
  p_increment_attempts boolean, p_stamp text, p_event text, p_detail jsonb, p_if_version bigint default null)
returns setof keel.transfer_batches
language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_prev text;
  v_version bigint;
  v_row keel.transfer_batches;
begin
  if p_stamp is not null and p_stamp not in ('extracted_at', 'staged_at', 'apply_started_at', 'committed_at', 'failed_at') then
    raise exception 'unknown stamp %', p_stamp using errcode = '22023';
  end if;
  select b.state, b.version into v_prev, v_version from keel.transfer_batches b where b.batch_id = p_batch_id for update;
  if not found then
    return;
  end if;
  if not (v_prev = any(p_from_states)) or v_version <> coalesce(p_if_version, v_version) then
    if p_if_version is not null then
      insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
      values (p_batch_id, v_prev, v_prev, p_event,
              (case when jsonb_typeof(p_detail) = 'object' then p_detail else '{}'::jsonb end)
                || jsonb_build_object('stale', true, 'version', v_version));
    end if;
    return;
  end if;
  update keel.transfer_batches b set
      state = p_to_state,
      updated_at = now(),
      -- The manifest is written once: a second run of the batch that counted the window again (a redelivered
      -- message racing the first) gets the first manifest back and is verified against it.
      row_count = case when p_set_row_count and b.row_count is null then p_row_count else b.row_count end,
      checksum = case when p_set_checksum and b.checksum is null then p_checksum else b.checksum end,
      staged_count = case when p_set_staged_count then p_staged_count else b.staged_count end,
      staged_checksum = case when p_set_staged_checksum then p_staged_checksum else b.staged_checksum end,
      applied_count = case when p_set_applied_count then p_applied_count else b.applied_count end,
      last_error = case when p_set_last_error then p_last_error else b.last_error end,
      last_error_code = case when p_set_last_error_code then p_last_error_code else b.last_error_code end,
      target_reconcile_token = case when p_set_target_reconcile_token then p_target_reconcile_token else b.target_reconcile_token end,
      attempts = b.attempts + case when coalesce(p_increment_attempts, false) then 1 else 0 end,
      version = b.version + 1,
      extracted_at = case when p_stamp = 'extracted_at' then now() else b.extracted_at end,
      staged_at = case when p_stamp = 'staged_at' then now() else b.staged_at end,
      apply_started_at = case when p_stamp = 'apply_started_at' then now() else b.apply_started_at end,
      committed_at = case when p_stamp = 'committed_at' then now() else b.committed_at end,
      failed_at = case when p_stamp = 'failed_at' then now() else b.failed_at end
    where b.batch_id = p_batch_id
    returning b.* into v_row;
  insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
  values (p_batch_id, v_prev, p_to_state, p_event, p_detail);
  return next v_row;
end $$;

-- Records an event (and optionally last error / reconcile token, flagged as in transfer_batch_transition) without
-- changing the state. A note that writes a column raises the row's version and touches updated_at. p_if_version
-- (null: unconditional) fences the write on the version the caller read: when the row changed since (another run
-- moved it or noted a newer error), nothing of the row is written -- a stale writer never replaces a newer record --
-- and the event is still recorded, its detail saying {"stale": true, "version": <the row's>}. Returns false when
-- there is no such batch or the fence kept the row as it was.
drop function if exists keel.transfer_batch_note(uuid, text, jsonb, jsonb);
drop function if exists keel.transfer_batch_note(uuid, text, jsonb, boolean, text, boolean, text, boolean, text);
create or replace function keel.transfer_batch_note(p_batch_id uuid, p_event text, p_detail jsonb,
  p_set_last_error boolean, p_last_error text, p_set_last_error_code boolean, p_last_error_code text,
  p_set_target_reconcile_token boolean, p_target_reconcile_token text, p_if_version bigint)
returns boolean
language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_state text;
  v_version bigint;
  v_touch boolean := coalesce(p_set_last_error or p_set_last_error_code or p_set_target_reconcile_token, false);
begin
  update keel.transfer_batches b set
      last_error = case when p_set_last_error then p_last_error else b.last_error end,
      last_error_code = case when p_set_last_error_code then p_last_error_code else b.last_error_code end,
      target_reconcile_token = case when p_set_target_reconcile_token then p_target_reconcile_token else b.target_reconcile_token end,
      updated_at = case when v_touch then now() else b.updated_at end,
      version = b.version + case when v_touch then 1 else 0 end
    where b.batch_id = p_batch_id and (p_if_version is null or b.version = p_if_version)
    returning b.state into v_state;
  if found then
    insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
    values (p_batch_id, v_state, v_state, p_event, p_detail);
    return true;
  end if;
  select b.state, b.version into v_state, v_version from keel.transfer_batches b where b.batch_id = p_batch_id;
  if found then
    insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
    values (p_batch_id, v_state, v_state, p_event,
            (case when jsonb_typeof(p_detail) = 'object' then p_detail else '{}'::jsonb end) || jsonb_build_object('stale', true, 'version', v_version));
  end if;
  return false;
end $$;

create or replace function keel.transfer_batch_get(p_batch_id uuid)
returns setof keel.transfer_batches
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select b.* from keel.transfer_batches b where b.batch_id = p_batch_id
$$;

-- The transfer's open batch (if any) and its latest committed batch (if any): zero, one or two rows, told apart
-- by state. Latest by seq (V033), the order the batches were inserted in, never by a clock's stamp.
create or replace function keel.transfer_batch_last(p_transfer_name text)
returns setof keel.transfer_batches
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  (select b.* from keel.transfer_batches b
    where b.transfer_name = p_transfer_name and b.state in ('extracting', 'staged', 'applying', 'unresolved')
    limit 1)
  union all
  (select b.* from keel.transfer_batches b
    where b.transfer_name = p_transfer_name and b.state = 'committed'
    order by b.seq desc
    limit 1)
$$;

-- Newest first (by seq, V033); p_after_id: keyset pagination (batches created before that one; an unknown id gives
-- no rows, as on SQL Server).
create or replace function keel.transfer_batch_list(p_transfer_name text, p_state text, p_after_id uuid, p_limit integer)
returns setof keel.transfer_batches
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select b.* from keel.transfer_batches b
   where (p_transfer_name is null or b.transfer_name = p_transfer_name)
     and (p_state is null or b.state = p_state)
     and (p_after_id is null
          or b.seq < (select a.seq from keel.transfer_batches a where a.batch_id = p_after_id))
   order by b.seq desc
   limit greatest(1, least(coalesce(p_limit, 100), 1000))
$$;

-- (Named like SQL Server's keel.TransferBatchEventList, which cannot share its table's name.)
drop function if exists keel.transfer_batch_events(uuid);
create or replace function keel.transfer_batch_event_list(p_batch_id uuid)
returns setof keel.transfer_batch_events
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select e.* from keel.transfer_batch_events e where e.batch_id = p_batch_id order by e.event_id
$$;

-- Batches in the given states not updated for p_older_than_ms, oldest first.
create or replace function keel.transfer_batch_stale(p_states text[], p_older_than_ms bigint, p_limit integer)
returns setof keel.transfer_batches
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select b.* from keel.transfer_batches b
   where b.state = any(p_states) and b.updated_at < now() - make_interval(secs => p_older_than_ms / 1000.0)
   order by b.updated_at
   limit greatest(1, least(coalesce(p_limit, 20), 1000))
$$;

-- Pauses or resumes a transfer (an upsert of its control row, V021); returns the row. Under the transfer's lock
-- (transfer_batch_insert): a batch insert in flight commits first, and none starts after this one commits.
create or replace function keel.transfer_control_set(p_transfer_name text, p_paused boolean, p_reason text, p_changed_by text)
returns setof keel.transfer_controls
language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform keel._transfer_lock(p_transfer_name);
  return query
  insert into keel.transfer_controls as c (transfer_name, paused, reason, changed_by, changed_at)
  values (p_transfer_name, p_paused, p_reason, p_changed_by, now())
  on conflict (transfer_name) do update
    set paused = excluded.paused, reason = excluded.reason, changed_by = excluded.changed_by, changed_at = excluded.changed_at
  returning c.*;
end $$;

-- Every transfer's control row (only transfers an operator ever paused have one).
create or replace function keel.transfer_control_list()
returns setof keel.transfer_controls
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select c.* from keel.transfer_controls c order by c.transfer_name
$$;

-- The journal server's clock: the hosts' clocks may be off it by hours, so the transfer timer, its freshness figures
-- and GET /transfers measure the ages of the journal's stamps against this (shared/transfer/service.ts journalNow).
create or replace function keel.transfer_journal_now()
returns table (journal_now timestamptz)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select now()
$$;

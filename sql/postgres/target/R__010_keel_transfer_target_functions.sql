-- Target-side transfer functions (stage checks, apply with its fence, reconcile probes) over the tables in V001.
-- Repeatable (sql/README.md): a signature change drops the old function first.

create or replace function keel_transfer.qualified(p_schema text, p_table text) returns text
language sql immutable as $$
  select case when p_schema is null then quote_ident(p_table) else quote_ident(p_schema) || '.' || quote_ident(p_table) end
$$;

-- Creates (or re-creates while empty) keel_transfer.stg_<transfer> with the mapped target columns' types, and with
-- p_ops the operation column keel_op ('U' upsert, 'D' delete by key: change windows, docs/transfer.md "Deletes").
drop function if exists keel_transfer.ensure_staging(text, text, text, text[]);
create or replace function keel_transfer.ensure_staging(p_transfer text, p_target_schema text, p_target_table text, p_columns text[],
                                                        p_ops boolean default false)
returns text language plpgsql as $$
declare
  v_name text := 'stg_' || p_transfer;
  v_wanted text[] := case when p_ops then p_columns || array['keel_op'] else p_columns end;
  v_existing text[];
  v_nonempty boolean;
  v_cols text;
begin
  if p_transfer !~ '^[a-z][a-z0-9_]{0,39}$' then
    raise exception using errcode = 'KT004', message = format('transfer name %L is not a plain identifier', p_transfer);
  end if;
  perform pg_advisory_xact_lock(hashtext('keel_transfer.ensure_staging:' || p_transfer));
  -- Names and declared types: a staging table made before the target's column was altered (an operator's ALTER
  -- TABLE) is made again, so that what is staged and verified is what the target column holds.
  select array_agg(a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod) order by a.attnum) into v_existing
    from pg_attribute a
   where a.attrelid = to_regclass(format('keel_transfer.%I', v_name)) and a.attnum > 0 and not a.attisdropped and a.attname <> 'keel_batch_id';
  select array_agg(u.c || ' ' || coalesce(case when u.c = 'keel_op' and p_ops and u.o > cardinality(p_columns) then 'text' end,
                                          (select format_type(a.atttypid, a.atttypmod) from pg_attribute a
                                            where a.attrelid = keel_transfer.qualified(p_target_schema, p_target_table)::regclass
                                              and a.attname = u.c and a.attnum > 0 and not a.attisdropped), '?')
                   order by u.o)
    into v_wanted from unnest(v_wanted) with ordinality as u(c, o);
  if v_existing is not null and v_existing = v_wanted then
    return v_name;
  end if;
  if v_existing is not null then
    -- The lock first (as purge_staged does): a staging of another run still open (its COPY not committed: no row
    -- seen yet) is waited for and its rows counted, instead of being dropped with the table once it committed
    -- (its batch then staged on the target and in the journal, its rows gone); the wait is the lock_timeout's.
    execute format('lock table keel_transfer.%I in access exclusive mode', v_name);
    execute format('select exists (select 1 from keel_transfer.%I)', v_name) into v_nonempty;
    if v_nonempty then
      raise exception using errcode = 'KT004',
        message = format('staging table keel_transfer.%I holds rows for another column mapping or other column types; apply or purge those batches first', v_name);
    end if;
    execute format('drop table keel_transfer.%I', v_name);
  end if;
  select string_agg(quote_ident(c), ', ' order by o) into v_cols from unnest(p_columns) with ordinality as u(c, o);
  execute format('create unlogged table keel_transfer.%I as select %s from %s with no data', v_name, v_cols, keel_transfer.qualified(p_target_schema, p_target_table));
  if p_ops then
    execute format('alter table keel_transfer.%I add column keel_op text check (keel_op in (''U'', ''D''))', v_name);
  end if;
  execute format('alter table keel_transfer.%I add column keel_batch_id uuid not null default (nullif(current_setting(''keel.batch_id'', true), ''''))::uuid', v_name);
  return v_name;
end $$;

-- Opens a staging: 'new' (caller loads rows in this transaction), 'already_staged' (same content, nothing to do),
-- or raises KT001 when an earlier staging of the same batch id holds different content.
create or replace function keel_transfer.begin_stage(p_batch_id uuid, p_transfer text, p_expected_count bigint, p_expected_checksum text)
returns text language plpgsql as $$
#variable_conflict use_column
declare
  v_inserted integer;
  r keel_transfer.staged%rowtype;
begin
  insert into keel_transfer.staged (batch_id, transfer_name, state, expected_count, expected_checksum)
  values (p_batch_id, p_transfer, 'staging', p_expected_count, p_expected_checksum)
  on conflict (batch_id) do nothing;
  get diagnostics v_inserted = row_count;
  if v_inserted = 1 then
    return 'new';
  end if;
  select * into r from keel_transfer.staged s where s.batch_id = p_batch_id;
  if r.state = 'staged' and r.row_count = p_expected_count and r.checksum = p_expected_checksum then
    return 'already_staged';
  end if;
  raise exception using errcode = 'KT001',
    message = format('batch %s was staged earlier with different content (%s rows, checksum %s; manifest says %s rows, checksum %s)',
                     p_batch_id, r.row_count, r.checksum, p_expected_count, p_expected_checksum);
end $$;

create or replace function keel_transfer.finish_stage(p_batch_id uuid, p_count bigint, p_checksum text)
returns void language sql as $$
  update keel_transfer.staged set state = 'staged', row_count = p_count, checksum = p_checksum, staged_at = clock_timestamp()
   where batch_id = p_batch_id
$$;

-- Apply: one call, one local transaction (the caller's statement, autocommit).
--   1. claim the batch id by inserting its completion row (or taking over a fence that ruled out only earlier
--      attempts): the primary key serializes rivals, a rival waits here and then finds the committed row
--      ('already_committed'); an attempt that reconcile ruled out (p_attempt <= fenced_through) fails with KT005;
--   2. merge the staged rows into the business table:
--      a. fast path, only when the table has a valid, immediate (not deferrable) unique index on exactly the key
--         columns (looked up after the table is locked in row exclusive mode -- the lock any insert takes -- so the
--         index cannot be dropped in between) and no row of the table has a value of that index's leading column
--         within the staged rows' range (one index probe): a plain INSERT .. SELECT of the staged rows in a
--         sub-transaction. It either inserts every staged row -- then no key of the batch existed, and inserting all
--         of them is exactly what the merge does -- or it fails with unique_violation (a key appeared meanwhile) and
--         is rolled back entirely, and then:
--      b. the merge as before: MERGE (PostgreSQL 15+) or INSERT .. ON CONFLICT (keys) DO UPDATE.
--      The range probe only chooses the path; correctness rests on the unique index and the fallback. Batches that
--      touch existing rows pay one range probe and the scan for the staged range, then merge as before.
--   3. mark the completion row committed with count and checksum.
-- p_changes (change windows, docs/transfer.md "Deletes"; null: every staged row is an upsert): 'ops' -- staged rows
-- with keel_op 'D' delete the target row of their key, 'U' rows are merged as above; 'mirror' (a baseline) -- 'ops',
-- then every target row whose key is not staged in the batch is deleted (a windowed baseline's key window: only the
-- target rows whose first key column is in (p_mirror_low, p_mirror_high], a null bound open on that side). All in
-- this one transaction, with the completion row: the deletes commit exactly when the batch does. row_count = upserts
-- merged + 'D' rows staged; deleted_count = target rows deleted.
-- The claim every apply makes (apply_batch, begin_direct): a new completion row, or the take-over of a fence that
-- ruled out only earlier attempts. A rival holding the row uncommitted (an apply, or a reconcile writing its fence)
-- makes this wait for its outcome. Returns null when p_attempt now holds the batch, the completion row when the batch
-- is committed; an attempt reconcile ruled out fails with KT005 (nothing applied).
-- Every transaction that claims a batch id takes this lock on the id first (claim_batch; the one-read direct apply
-- before its window's rows, docs/transfer.md): two runs of one batch at once (a duplicate message) then queue here,
-- before either holds a completion row or a key of the window, instead of meeting on those in opposite orders
-- (claim first, or rows first) and deadlocking. Transaction-scoped: released at commit or rollback.
create or replace function keel_transfer.lock_batch(p_batch_id uuid)
returns void language sql as $$
  select pg_advisory_xact_lock(hashtextextended('keel_transfer.batch:' || p_batch_id::text, 0))
$$;

-- A transaction that claims or fences a batch (claim_batch, try_claim) commits with synchronous_commit at least 'on'
-- whatever the server's or the database's default: with 'off' (a setting DBAs choose for bulk loads) a crash of the
-- target right after the commit returned can lose the commit, and the journal, which already recorded it, would say
-- committed for a window whose rows and completion row are gone (never transferred again), or released a window on
-- a fence that is gone. Raised only from 'off': a stronger default (remote_apply) or 'local' is the DBA's.
create or replace function keel_transfer.durable_commit()
returns void language sql as $$
  select case when current_setting('synchronous_commit') = 'off' then set_config('synchronous_commit', 'on', true) end
$$;

create or replace function keel_transfer.claim_batch(p_batch_id uuid, p_transfer text, p_attempt bigint)
returns keel_transfer.completions language plpgsql as $$
declare
  v_inserted integer;
  f keel_transfer.completions%rowtype;
begin
  perform keel_transfer.durable_commit();
  perform keel_transfer.lock_batch(p_batch_id);
  insert into keel_transfer.completions as c (batch_id, transfer_name, state, attempt) values (p_batch_id, p_transfer, 'claimed', p_attempt)
  on conflict (batch_id) do update set state = 'claimed', attempt = excluded.attempt, transfer_name = excluded.transfer_name
   where c.state = 'fenced' and c.fenced_through < excluded.attempt;
  get diagnostics v_inserted = row_count;
  if v_inserted = 1 then
    return null;
  end if;
  select * into f from keel_transfer.completions c where c.batch_id = p_batch_id;
  if f.state = 'committed' then
    return f;
  end if;
  raise exception using errcode = 'KT005',
    message = format('attempt %s of batch %s was ruled out by reconcile (fenced through attempt %s at %s); nothing was applied',
                     p_attempt, p_batch_id, f.fenced_through, f.fenced_at);
end $$;

drop function if exists keel_transfer.apply_batch(uuid, text, text, text, text, text[], text[], bigint, text);
drop function if exists keel_transfer.apply_batch(uuid, text, text, text, text, text[], text[], bigint, text, bigint);
drop function if exists keel_transfer.apply_batch(uuid, text, text, text, text, text[], text[], bigint, text, bigint, text);
create or replace function keel_transfer.apply_batch(
  p_batch_id uuid, p_transfer text, p_target_schema text, p_target_table text, p_staging_table text,
  p_columns text[], p_keys text[], p_expected_count bigint, p_expected_checksum text, p_attempt bigint,
  p_changes text default null, p_mirror_low text default null, p_mirror_high text default null)
returns table (outcome text, row_count bigint, checksum text, deleted_count bigint)
language plpgsql as $$
#variable_conflict use_column
declare
  v_count bigint;
  r keel_transfer.staged%rowtype;
  f keel_transfer.completions%rowtype;
  v_cols text;
  v_keys text;
  v_set text;
  v_src text;
  v_on text;
  v_lead text;
  v_overlap boolean;
  v_done boolean := false;
  v_upserts_only text := '';  -- the filter of the staged rows that are merged
  v_upserts bigint;           -- staged rows to merge
  v_deleted bigint := 0;
  v_n bigint;
  v_match text;
  v_range text := '';         -- a windowed baseline's key range (mirror)
  v_ktype text;
  v_changed text;             -- mapped columns whose target type is not the staged one
begin
  if p_attempt is null or p_attempt < 1 then
    raise exception using errcode = '22023', message = 'apply_batch needs the journal attempt (>= 1)';
  end if;
  if p_changes is not null and p_changes not in ('ops', 'mirror') then
    raise exception using errcode = '22023', message = format('apply_batch: p_changes must be null, ops or mirror, not %L', p_changes);
  end if;
  -- The claim (claim_batch): null when this attempt now holds the batch; the completion row when it is committed.
  f := keel_transfer.claim_batch(p_batch_id, p_transfer, p_attempt);
  if f.state = 'committed' then
    return query select 'already_committed'::text, f.row_count, f.checksum, f.deleted_count;
    return;
  end if;

  select * into r from keel_transfer.staged s where s.batch_id = p_batch_id and s.state = 'staged';
  if not found then
    raise exception using errcode = 'KT002', message = format('batch %s is not staged on the target', p_batch_id);
  end if;
  if r.row_count <> p_expected_count or r.checksum <> p_expected_checksum then
    raise exception using errcode = 'KT001',
      message = format('batch %s staged %s rows (checksum %s) but the manifest says %s rows (checksum %s)',
                       p_batch_id, r.row_count, r.checksum, p_expected_count, p_expected_checksum);
  end if;

  select string_agg(quote_ident(c), ', ' order by o) into v_cols from unnest(p_columns) with ordinality as u(c, o);
  select string_agg(quote_ident(c), ', ' order by o) into v_keys from unnest(p_keys) with ordinality as u(c, o);
  select string_agg(format('%I = excluded.%I', c, c), ', ' order by o) into v_set
    from unnest(p_columns) with ordinality as u(c, o) where c <> all (p_keys);
  execute format('lock table %s in row exclusive mode', keel_transfer.qualified(p_target_schema, p_target_table));
  -- The staging table has the target columns' declared types as they were when it was made (ensure_staging), and
  -- the staged rows were verified in those types. A target column altered since (an ALTER TABLE after prepare: a
  -- narrower scale, another type) would convert the verified values on the way in -- rounded, truncated -- and
  -- commit rows that are not the source's. Refused instead (KT004: no retry changes it); checked under the lock
  -- above, which an ALTER TABLE waits for, so the types stay these until this transaction ends.
  select string_agg(format('%I is %s, staged as %s', u.c, coalesce(tt.typ, 'dropped'), coalesce(st.typ, 'missing')), '; ' order by u.o)
    into v_changed
    from unnest(p_columns) with ordinality as u(c, o)
    left join lateral (select format_type(a.atttypid, a.atttypmod) as typ from pg_attribute a
                        where a.attrelid = keel_transfer.qualified(p_target_schema, p_target_table)::regclass
                          and a.attname = u.c and a.attnum > 0 and not a.attisdropped) tt on true
    left join lateral (select format_type(a.atttypid, a.atttypmod) as typ from pg_attribute a
                        where a.attrelid = format('keel_transfer.%I', p_staging_table)::regclass
                          and a.attname = u.c and a.attnum > 0 and not a.attisdropped) st on true
   where tt.typ is distinct from st.typ;
  if v_changed is not null then
    raise exception using errcode = 'KT004',
      message = format('batch %s: target table %s changed since the batch was staged (%s); nothing applied, the next batch checks the table again',
                       p_batch_id, keel_transfer.qualified(p_target_schema, p_target_table), v_changed);
  end if;
  -- The key's unique index, under the same lock (a DROP INDEX or ALTER TABLE .. DROP CONSTRAINT waits for it), by
  -- prepare's rule: prepare required one, but checks once per process, and the table may have lost it since (an
  -- operator recreating it). The merge runs without it, but is exact only with it: two applies of overlapping windows
  -- at once (replays of overlapping ranges) would each find a key absent and insert it twice. Refused like an
  -- altered column (KT004).
  if not exists (
    select 1 from pg_index i
     where i.indrelid = keel_transfer.qualified(p_target_schema, p_target_table)::regclass
       and i.indisunique and i.indpred is null and i.indexprs is null
       and (select array_agg(a.attname::text order by a.attname) from pg_attribute a
             where a.attrelid = i.indrelid and a.attnum = any (i.indkey::int2[]))
           = (select array_agg(k order by k) from unnest(p_keys) k)) then
    raise exception using errcode = 'KT004',
      message = format('batch %s: target table %s has no unique index or primary key on exactly (%s) any more; nothing applied, the next batch checks the table again',
                       p_batch_id, keel_transfer.qualified(p_target_schema, p_target_table), array_to_string(p_keys, ', '));
  end if;
  v_upserts := r.row_count;
  if p_changes is not null then
    -- The staged rows counted before anything is changed: the 'D' rows and a mirror's deletes are counted from what
    -- the staging table holds, so rows gone from it (never expected: a staging table dropped under a staging) must
    -- fail the batch (KT003, as a merge that wrote other than the staged count: its window is extracted again)
    -- instead of committing a window that applied nothing.
    execute format('select count(*) filter (where keel_op = ''U''), count(*) from keel_transfer.%I where keel_batch_id = $1', p_staging_table)
      into v_upserts, v_n using p_batch_id;
    if v_n <> r.row_count then
      raise exception using errcode = 'KT003',
        message = format('batch %s: the staging table holds %s of its %s staged rows', p_batch_id, v_n, r.row_count);
    end if;
    -- Deletes first (a key is at most once in a batch: duplicates were refused at staging).
    select string_agg(format('t.%I = s.%I', c, c), ' and ' order by o) into v_match from unnest(p_keys) with ordinality as u(c, o);
    execute format('delete from %s t using keel_transfer.%I s where s.keel_batch_id = $1 and s.keel_op = ''D'' and %s',
                   keel_transfer.qualified(p_target_schema, p_target_table), p_staging_table, v_match)
      using p_batch_id;
    get diagnostics v_deleted = row_count;
    v_upserts_only := ' and keel_op = ''U''';
  end if;
  -- 2a. Fast path (see above).
  select a.attname::text into v_lead
    from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
   where i.indrelid = keel_transfer.qualified(p_target_schema, p_target_table)::regclass
     and i.indisunique and i.indimmediate and i.indisvalid and i.indisready and i.indpred is null and i.indexprs is null
     and i.indnatts = cardinality(p_keys)
     and (select array_agg(a2.attname::text order by a2.attname) from pg_attribute a2
           where a2.attrelid = i.indrelid and a2.attnum = any (i.indkey::int2[]))
         = (select array_agg(k order by k) from unnest(p_keys) k)
   limit 1;
  if v_lead is not null then
    execute format('select exists (select 1 from %s t where t.%I between (select min(s.%I) from keel_transfer.%I s where s.keel_batch_id = $1)
                                                              and (select max(s.%I) from keel_transfer.%I s where s.keel_batch_id = $1))',
                   keel_transfer.qualified(p_target_schema, p_target_table), v_lead, v_lead, p_staging_table, v_lead, p_staging_table)
      into v_overlap using p_batch_id;
    if not v_overlap then
      begin
        execute format('insert into %s (%s) select %s from keel_transfer.%I where keel_batch_id = $1%s',
                       keel_transfer.qualified(p_target_schema, p_target_table), v_cols, v_cols, p_staging_table, v_upserts_only)
          using p_batch_id;
        get diagnostics v_count = row_count;
        v_done := true;
      exception when unique_violation then
        v_done := false; -- a key exists after all (inserted meanwhile): the merge decides
      end;
    end if;
  end if;

  -- 2b. The merge.
  if not v_done then
    if current_setting('server_version_num')::int >= 150000 then
      -- MERGE joins staging and target in bulk (faster than per-row speculative insertion); duplicate keys
      -- within a batch were refused at staging.
      select string_agg(format('s.%I', c), ', ' order by o) into v_src from unnest(p_columns) with ordinality as u(c, o);
      select string_agg(format('t.%I = s.%I', c, c), ' and ' order by o) into v_on from unnest(p_keys) with ordinality as u(c, o);
      select string_agg(format('%I = s.%I', c, c), ', ' order by o) into v_set
        from unnest(p_columns) with ordinality as u(c, o) where c <> all (p_keys);
      execute format('merge into %s as t using (select %s from keel_transfer.%I where keel_batch_id = $1%s) as s on %s %s when not matched then insert (%s) values (%s)',
                     keel_transfer.qualified(p_target_schema, p_target_table), v_cols, p_staging_table, v_upserts_only, v_on,
                     case when v_set is null then '' else 'when matched then update set ' || v_set end, v_cols, v_src)
        using p_batch_id;
    else
      execute format('insert into %s (%s) select %s from keel_transfer.%I where keel_batch_id = $1%s on conflict (%s) do %s',
                     keel_transfer.qualified(p_target_schema, p_target_table), v_cols, v_cols, p_staging_table, v_upserts_only, v_keys,
                     case when v_set is null then 'nothing' else 'update set ' || v_set end)
        using p_batch_id;
    end if;
    get diagnostics v_count = row_count;
  end if;
  -- (A key-only table's merge leaves existing keys uncounted; its plain insert, the fast path, counts every row.)
  if (v_set is not null or v_done) and v_count <> v_upserts then
    raise exception using errcode = 'KT003', message = format('batch %s merged %s rows but %s were staged', p_batch_id, v_count, v_upserts);
  end if;
  if p_changes = 'mirror' then
    -- A baseline holds every row of the source table: a target row whose key is not in it was deleted at the source.
    -- A windowed baseline's key window holds the source's rows of its key range only: the bounds are cast to the key
    -- column's own type, so the delete walks the key's index over that range.
    if p_mirror_low is not null or p_mirror_high is not null then
      select format_type(a.atttypid, a.atttypmod) into v_ktype from pg_attribute a
       where a.attrelid = keel_transfer.qualified(p_target_schema, p_target_table)::regclass and a.attname = p_keys[1] and not a.attisdropped;
      if p_mirror_low is not null then v_range := v_range || format(' and t.%I > $2::%s', p_keys[1], v_ktype); end if;
      if p_mirror_high is not null then v_range := v_range || format(' and t.%I <= $3::%s', p_keys[1], v_ktype); end if;
    end if;
    execute format('delete from %s t where not exists (select 1 from keel_transfer.%I s where s.keel_batch_id = $1 and %s)%s',
                   keel_transfer.qualified(p_target_schema, p_target_table), p_staging_table, v_match, v_range)
      using p_batch_id, p_mirror_low, p_mirror_high;
    get diagnostics v_n = row_count;
    v_deleted := v_deleted + v_n;
  end if;
  if p_changes is not null then
    v_count := v_count + (r.row_count - v_upserts); -- the 'D' rows count as applied, found or not
  end if;

  update keel_transfer.completions
     set state = 'committed', row_count = v_count, checksum = r.checksum, committed_at = clock_timestamp(),
         deleted_count = case when p_changes is null then null else v_deleted end
   where batch_id = p_batch_id;
  return query select 'applied'::text, v_count, r.checksum, case when p_changes is null then null else v_deleted end;
end $$;

-- Direct apply (docs/transfer.md, "Direct apply"): a PostgreSQL -> PostgreSQL key window written straight into the
-- business table, in ONE target transaction that also holds the claim and the completion row, instead of staging
-- it first and copying it over (every row written twice). The caller's transaction:
--   1. begin_direct: claims the batch id exactly as apply_batch does (a rival waits on the row; an attempt reconcile
--      ruled out fails with KT005; a committed row answers 'already_committed'), locks the table in row exclusive
--      mode, and answers 'not_eligible' (the caller rolls back: nothing was written, not even the claim) unless the
--      table has a valid, immediate unique index on exactly p_key and no row with p_key in (p_low, p_high];
--   2. the caller COPYs the window's rows into the table and checksums the table's rows in (p_low, p_high] with the
--      manifest's algorithm: they must be exactly the manifest (count and checksum), else it rolls back;
--   3. finish_direct marks the completion row committed; the caller commits. Rows, claim and completion row commit
--      together or not at all, and nothing is committed before it matched the manifest.
-- With one source read (the row path: the manifest and the journal's attempt exist only once the rows have passed)
-- step 1 is split: direct_window_open before the rows, claim_batch after them (its KT005 and committed row as above).
-- The window's checks of a direct apply (begin_direct; the one-read row path calls it before its rows and claims
-- after them, docs/transfer.md "Direct apply of the row path"): locks the table in row exclusive mode and answers
-- whether it has a valid, immediate unique index on exactly p_key and no row with p_key in (p_low, p_high].
create or replace function keel_transfer.direct_window_open(
  p_batch_id uuid, p_target_schema text, p_target_table text, p_key text, p_low bigint, p_high bigint)
returns boolean
language plpgsql as $$
declare
  v_table text := keel_transfer.qualified(p_target_schema, p_target_table);
  v_indexed boolean;
  v_taken boolean;
begin
  perform keel_transfer.lock_batch(p_batch_id); -- held already when claim_batch came first (begin_direct)
  execute format('lock table %s in row exclusive mode', v_table);
  select exists (
    select 1 from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
     where i.indrelid = v_table::regclass and i.indisunique and i.indimmediate and i.indisvalid and i.indisready
       and i.indpred is null and i.indexprs is null and i.indnatts = 1 and a.attname = p_key) into v_indexed;
  if not v_indexed then
    return false;
  end if;
  if p_low is null then
    execute format('select exists (select 1 from %s t where t.%I <= $1)', v_table, p_key) into v_taken using p_high;
  else
    execute format('select exists (select 1 from %s t where t.%I > $1 and t.%I <= $2)', v_table, p_key, p_key) into v_taken using p_low, p_high;
  end if;
  return not v_taken;
end $$;

create or replace function keel_transfer.begin_direct(
  p_batch_id uuid, p_transfer text, p_target_schema text, p_target_table text, p_key text,
  p_low bigint, p_high bigint, p_attempt bigint)
returns table (outcome text, row_count bigint, checksum text)
language plpgsql as $$
#variable_conflict use_column
declare
  f keel_transfer.completions%rowtype;
begin
  if p_attempt is null or p_attempt < 1 then
    raise exception using errcode = '22023', message = 'begin_direct needs the journal attempt (>= 1)';
  end if;
  -- The claim, as in apply_batch.
  f := keel_transfer.claim_batch(p_batch_id, p_transfer, p_attempt);
  if f.state = 'committed' then
    return query select 'already_committed'::text, f.row_count, f.checksum;
    return;
  end if;
  if not keel_transfer.direct_window_open(p_batch_id, p_target_schema, p_target_table, p_key, p_low, p_high) then
    return query select 'not_eligible'::text, null::bigint, null::text;
    return;
  end if;
  return query select 'claimed'::text, null::bigint, null::text;
end $$;

create or replace function keel_transfer.finish_direct(p_batch_id uuid, p_count bigint, p_checksum text)
returns void language plpgsql as $$
begin
  update keel_transfer.completions
     set state = 'committed', row_count = p_count, checksum = p_checksum, committed_at = clock_timestamp()
   where batch_id = p_batch_id and state = 'claimed';
  if not found then
    raise exception using errcode = 'KT002', message = format('batch %s holds no claim in this transaction', p_batch_id);
  end if;
end $$;

-- Reconcile: read the durable outcome, and make a "not applied" verdict final.
--   committed   -- a committed completion row: the batch is applied.
--   blocked     -- the row is held by an open transaction (an apply in progress) beyond p_wait_ms: no verdict.
--   not_applied -- no committed completion row, and none can appear for attempts <= p_fence_through: the fence
--                  (state 'fenced', fenced_through = greatest(old, p_fence_through)) is committed with this verdict,
--                  so an apply of a ruled-out attempt still on its way to the server fails (KT005) when it arrives.
--   not_applied_final -- the same, and the row holds the final fence (2147483647, abandon's): no apply of this batch
--                  can ever commit. An abandon whose journal note was lost leaves such a batch open in the journal;
--                  this answer lets the journal fail it instead of retrying an apply the fence refuses for ever.
-- p_fence_through = 0 only probes (nothing can be in flight: the journal never started an apply); no row is kept.
-- The caller runs this in its own short transaction (autocommit): the fence is durable when the verdict returns.
drop function if exists keel_transfer.try_claim(uuid, integer);
create or replace function keel_transfer.try_claim(p_batch_id uuid, p_wait_ms integer, p_fence_through bigint)
returns table (outcome text, row_count bigint, checksum text, staged boolean)
language plpgsql as $$
#variable_conflict use_column
declare
  v_staged boolean;
  v_state text;
  v_fenced bigint;
begin
  if p_fence_through is null or p_fence_through < 0 then
    raise exception using errcode = '22023', message = 'try_claim needs the attempt to fence (>= 0)';
  end if;
  perform set_config('lock_timeout', greatest(p_wait_ms, 1)::text || 'ms', true);
  perform keel_transfer.durable_commit(); -- the fence is a verdict others act on (claim_batch)
  begin
    insert into keel_transfer.completions as c (batch_id, transfer_name, state, fenced_through, fenced_at)
    values (p_batch_id, '(reconcile)', 'fenced', p_fence_through, clock_timestamp())
    on conflict (batch_id) do update set fenced_through = greatest(c.fenced_through, excluded.fenced_through), fenced_at = excluded.fenced_at
     where c.state = 'fenced'
    returning c.state, c.fenced_through into v_state, v_fenced;
    if v_state is not null and p_fence_through = 0 then
      raise exception using errcode = 'KT009', message = 'probe only; undoing it';
    end if;
  exception
    when sqlstate 'KT009' then
      null; -- v_state = 'fenced': not applied, nothing kept
    when lock_not_available then
      select exists (select 1 from keel_transfer.staged s where s.batch_id = p_batch_id and s.state = 'staged') into v_staged;
      return query select 'blocked'::text, null::bigint, null::text, v_staged;
      return;
  end;
  -- Read after the row is settled: a staging registry row seen now is the one any later apply would use.
  select exists (select 1 from keel_transfer.staged s where s.batch_id = p_batch_id and s.state = 'staged') into v_staged;
  if v_state = 'fenced' then
    -- (a probe's row is undone above, but v_fenced still says what fence the row held)
    return query select case when v_fenced >= 2147483647 then 'not_applied_final' else 'not_applied' end,
                        null::bigint, null::text, v_staged;
    return;
  end if;
  -- The row exists and is not a fence: a committed completion (a 'claimed' row is never visible committed).
  return query select 'committed'::text, c.row_count, c.checksum, v_staged from keel_transfer.completions c where c.batch_id = p_batch_id;
end $$;

create or replace function keel_transfer.purge_staged(p_batch_id uuid, p_staging_table text)
returns bigint language plpgsql as $$
declare
  v_count bigint;
  v_other boolean;
begin
  -- Only one batch of a transfer is open at a time, so usually the table holds just this batch: truncate is
  -- then far cheaper than delete. Rows of any other batch are kept. The lock comes first, so that a staging of
  -- the next batch cannot slip in between the check and the truncate; the wait for it is bounded.
  -- Rows of a batch that can never be applied again (its completion row committed, or fenced for good by abandon)
  -- are garbage too: left when the purge after that batch's end failed (a cut connection, a lock wait that ran
  -- out). They neither keep the table from being truncated nor stay behind a delete, so they go with the next purge.
  perform set_config('lock_timeout', '5s', true);
  execute format('lock table keel_transfer.%I in access exclusive mode', p_staging_table);
  -- The staging registry's rows go with the staged rows (the same transaction): the batch's own (purged after its
  -- commit or its failure: no apply of it can commit any more) and those of every batch that can never be applied
  -- again, so the registry stays as small as the open batches (docs/transfer.md, "Staging cleanup"). A later run of
  -- such a batch finds its completion row (committed: 'already committed') or its final fence (KT005) first.
  delete from keel_transfer.staged s
   where s.batch_id = p_batch_id
      or exists (select 1 from keel_transfer.completions c where c.batch_id = s.batch_id
                   and (c.state = 'committed' or c.fenced_through >= 2147483647));
  execute format('select exists (select 1 from keel_transfer.%I s where s.keel_batch_id <> $1
                    and not exists (select 1 from keel_transfer.completions c where c.batch_id = s.keel_batch_id
                                      and (c.state = ''committed'' or c.fenced_through >= 2147483647)))', p_staging_table)
    into v_other using p_batch_id;
  if not v_other then
    execute format('truncate keel_transfer.%I', p_staging_table);
    return -1;
  end if;
  execute format('delete from keel_transfer.%I s where s.keel_batch_id = $1
                    or exists (select 1 from keel_transfer.completions c where c.batch_id = s.keel_batch_id
                                 and (c.state = ''committed'' or c.fenced_through >= 2147483647))', p_staging_table)
    using p_batch_id;
  get diagnostics v_count = row_count;
  return v_count;
end $$;

-- The ids of a transfer's batches with a committed staging registry row after p_after (null: from the first), in
-- id order, at most p_max_count, comma-separated (null: none). Maintenance asks the journal which of them can never
-- be applied again and purges those (purge_staged): rows a failed purge left, or a staging that committed after its
-- batch had failed. It asks after the last id it read next time, and from the first again when fewer came back: a
-- cursor, so ids it must keep (open batches, another app's) never hide the ones behind them. A plain read: it waits
-- on nothing and locks nothing (an uncommitted staging is not seen; the next pass finds it).
drop function if exists keel_transfer.staged_batches(text, integer);
create or replace function keel_transfer.staged_batches(p_transfer text, p_max_count integer, p_after uuid)
returns text language sql stable as $$
  select string_agg(s.batch_id::text, ',' order by s.batch_id)
    from (select batch_id from keel_transfer.staged
           where transfer_name = p_transfer and (p_after is null or batch_id > p_after)
           order by batch_id
           limit greatest(least(p_max_count, 100), 1)) s;
$$;

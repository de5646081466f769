-- Change-capture functions on a PostgreSQL SOURCE (tables in V001; docs/transfer.md, "Deletes"). Repeatable.
--
-- <table>_changes (in the tracked table's schema):
--   seq      bigserial  -- insertion order (for one key also commit order: its writers are serialized by the row)
--   version  bigint     -- NULL until stamped; then the stamp that first saw the change committed
--   op       'I','U','D' (an update that changes the key is a 'D' of the old key and an 'I' of the new one)
--   the key columns, with the tracked table's types

-- Security definer (the owner of keel_changes, who created the change tables): the business table's writers need no
-- privilege on the change table.
create or replace function keel_changes.capture() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
-- tg_argv[0]: insert into <changes> (op, k...) values ($1, ($2).k...); tg_argv[1]: select ($1).k... is distinct
-- from ($2).k... (an update that moves the key).
declare
  v_moved boolean;
begin
  if tg_op = 'INSERT' then
    execute tg_argv[0] using 'I', new;
  elsif tg_op = 'DELETE' then
    execute tg_argv[0] using 'D', old;
  else
    execute tg_argv[1] into v_moved using old, new;
    if v_moved then
      execute tg_argv[0] using 'D', old;
      execute tg_argv[0] using 'I', new;
    else
      execute tg_argv[0] using 'U', new;
    end if;
  end if;
  return null;
end $$;

-- A truncate removes rows without a change per row: like Change Tracking, it invalidates every version so far
-- (min_valid_version moves past them), so a reader re-baselines instead of missing the deletes.
create or replace function keel_changes.capture_truncate() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  update keel_changes.tracked set min_valid_version = nextval('keel_changes.versions'),
         current_version = currval('keel_changes.versions')
   where source_table = tg_relid::regclass;
  return null;
end $$;

-- Starts tracking p_table: creates <table>_changes and the triggers (idempotent: an enabled table is left as it is,
-- with the same key columns). Changes before this call are not recorded: a reader's first window is a baseline.
create or replace function keel_changes.enable(p_table regclass, p_keys text[])
returns regclass language plpgsql as $$
declare
  v_schema text;
  v_name text;
  v_change regclass;
  v_cols text;
  v_defs text;
  v_vals text;
  v_moved text;
  v_known text[];
begin
  select key_columns into v_known from keel_changes.tracked where source_table = p_table;
  if found then
    if v_known <> p_keys then
      raise exception using errcode = 'KC002',
        message = format('%s is tracked with key columns (%s), not (%s); keel_changes.disable it first',
                         p_table, array_to_string(v_known, ', '), array_to_string(p_keys, ', '));
    end if;
    return (select change_table from keel_changes.tracked where source_table = p_table);
  end if;
  if p_keys is null or cardinality(p_keys) = 0 then
    raise exception using errcode = 'KC002', message = 'keel_changes.enable needs the key columns';
  end if;
  select n.nspname, c.relname into v_schema, v_name
    from pg_class c join pg_namespace n on n.oid = c.relnamespace where c.oid = p_table;
  select string_agg(format('%I %s not null', k, format_type(a.atttypid, a.atttypmod)), ', ' order by o),
         string_agg(format('%I', k), ', ' order by o),
         string_agg(format('($2).%I', k), ', ' order by o),
         string_agg(format('($1).%I is distinct from ($2).%I', k, k), ' or ' order by o)
    into v_defs, v_cols, v_vals, v_moved
    from unnest(p_keys) with ordinality as u(k, o)
    left join pg_attribute a on a.attrelid = p_table and a.attname = u.k and a.attnum > 0 and not a.attisdropped;
  if v_defs is null or exists (select 1 from unnest(p_keys) k where not exists (
       select 1 from pg_attribute a where a.attrelid = p_table and a.attname = k and a.attnum > 0 and not a.attisdropped)) then
    raise exception using errcode = 'KC002',
      message = format('%s has no column among (%s)', p_table, array_to_string(p_keys, ', '));
  end if;
  execute format('create table %I.%I (seq bigserial primary key, version bigint, op char(1) not null check (op in (''I'', ''U'', ''D'')), %s)',
                 v_schema, v_name || '_changes', v_defs);
  v_change := format('%I.%I', v_schema, v_name || '_changes')::regclass;
  -- stamping finds the new changes, windows the stamped ones
  execute format('create index on %s (seq) where version is null', v_change);
  execute format('create index on %s (version)', v_change);
  execute format('create trigger keel_changes_capture after insert or update or delete on %s for each row execute function keel_changes.capture(%L, %L)',
                 p_table,
                 format('insert into %I.%I (op, %s) values ($1, %s)', v_schema, v_name || '_changes', v_cols, v_vals),
                 format('select %s', v_moved));
  execute format('create trigger keel_changes_truncate after truncate on %s for each statement execute function keel_changes.capture_truncate()', p_table);
  insert into keel_changes.tracked (source_table, change_table, key_columns) values (p_table, v_change, p_keys);
  return v_change;
end $$;

create or replace function keel_changes.disable(p_table regclass) returns void
language plpgsql as $$
declare
  v_change regclass;
begin
  select change_table into v_change from keel_changes.tracked where source_table = p_table;
  if not found then return; end if;
  execute format('drop trigger if exists keel_changes_capture on %s', p_table);
  execute format('drop trigger if exists keel_changes_truncate on %s', p_table);
  execute format('drop table if exists %s', v_change);
  delete from keel_changes.tracked where source_table = p_table;
end $$;

-- CHANGE_TRACKING_CURRENT_VERSION(): gives the next version to every change committed and not stamped yet, and
-- returns the newest version. Stampers of one table are serialized (a transaction-level advisory lock), and each
-- commits before the next starts, so versions follow the order in which changes became visible.
-- Security definer: the transfer's source login needs only EXECUTE on it and SELECT on keel_changes.tracked and the
-- change tables (docs/transfer.md, "Deletes"), not the right to write them.
create or replace function keel_changes.current_version(p_table regclass) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  t keel_changes.tracked%rowtype;
  v bigint;
  n bigint;
begin
  select * into t from keel_changes.tracked where source_table = p_table;
  if not found then
    raise exception using errcode = 'KC001', message = format('%s has no change capture: run select keel_changes.enable(%L, array[<key columns>])', p_table, p_table::text);
  end if;
  perform pg_advisory_xact_lock(hashtext('keel_changes.stamp'), p_table::oid::integer);
  v := nextval('keel_changes.versions');
  execute format('update %s set version = $1 where version is null', t.change_table) using v;
  get diagnostics n = row_count;
  if n = 0 then
    return (select current_version from keel_changes.tracked where source_table = p_table);
  end if;
  update keel_changes.tracked set current_version = v where source_table = p_table;
  return v;
end $$;

-- Retention (the twin of Change Tracking's auto cleanup): removes the changes stamped at or before p_through and
-- moves min_valid_version up to it. A reader whose last version is older must re-baseline.
create or replace function keel_changes.retain(p_table regclass, p_through bigint) returns bigint
language plpgsql as $$
declare
  t keel_changes.tracked%rowtype;
  n bigint;
begin
  select * into t from keel_changes.tracked where source_table = p_table for update;
  if not found then
    raise exception using errcode = 'KC001', message = format('%s has no change capture', p_table);
  end if;
  p_through := least(p_through, t.current_version);
  execute format('delete from %s where version <= $1', t.change_table) using p_through;
  get diagnostics n = row_count;
  update keel_changes.tracked set min_valid_version = greatest(min_valid_version, p_through) where source_table = p_table;
  return n;
end $$;

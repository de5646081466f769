-- Least privilege for the application (the twin of keel_executor on SQL Server, sql/sqlserver/R__900_executor_role.sql): run by the
-- migration runner after every migration run, as the owner of schema keel, under the migration lock.
--
-- The role keel_executor may only EXECUTE Keel's public functions (names not starting with "_"): no table, sequence
-- or ledger rights at all, and no internal function (keel._dead_letter and the other "_" helpers), so a job can only
-- be moved through the lease-fenced contract operations. The public functions are SECURITY DEFINER: they run with
-- the rights of their owner (the migration owner) and a pinned search_path, so that nothing the caller puts on its
-- search_path (or in pg_temp) can stand in for a table, type or operator. Every function in the schema is covered,
-- whichever migration created it, so functions added later need no grant of their own.
--
-- The application's login is a member of keel_executor: CREATE ROLE keel_app LOGIN PASSWORD '...' IN ROLE keel_executor
-- (docs/postgres.md); tests and `npm start` make one the same way.

-- Roles are cluster-wide; databases migrated at the same time may race to create it.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'keel_executor') then
    begin
      create role keel_executor nologin;
    exception when duplicate_object or unique_violation then
      null; -- made meanwhile by the migration of another database on this server
    end;
  end if;
end
$$;

revoke all on schema keel from public;
grant usage on schema keel to keel_executor;
revoke all on all tables in schema keel from public, keel_executor;
revoke all on all sequences in schema keel from public, keel_executor;
revoke execute on all functions in schema keel from public;
-- Functions the owner creates later start without PUBLIC's default EXECUTE, until the loop below classifies them.
-- (A per-schema default cannot take away a global one, so this is the owner's default in this database.)
alter default privileges revoke execute on functions from public;

do $$
declare
  f record;
begin
  for f in
    select p.oid::regprocedure as sig, p.proname
    from pg_proc p
    join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = 'keel' and p.prokind = 'f'
    order by p.oid
  loop
    if left(f.proname, 1) = '_' then
      -- Internal: callable only by the owner, i.e. from inside the public SECURITY DEFINER functions.
      execute format('revoke execute on function %s from keel_executor', f.sig);
    else
      execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', f.sig);
      execute format('grant execute on function %s to keel_executor', f.sig);
    end if;
  end loop;
end
$$;

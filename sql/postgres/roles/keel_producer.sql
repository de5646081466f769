-- The enqueue-only role (issue 25): a producer in another application may execute keel.enqueue_many and nothing
-- else — no other function, no table, no sequence. Run after keel_executor.sql (which makes enqueue_many SECURITY
-- DEFINER with a pinned search_path), as the owner of schema keel, after every migration run: a re-created function
-- has lost its grants until this script gives them back.
--
-- A producer's login is a member of keel_producer: CREATE ROLE billing_app LOGIN PASSWORD '...' IN ROLE keel_producer
-- (docs/jobs.md, "Producing jobs from another application"). Its payload limit is keel.max_payload_bytes
-- (ALTER ROLE billing_app SET keel.max_payload_bytes = 1048576), 256 KiB when unset.

do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'keel_producer') then
    begin
      create role keel_producer nologin;
    exception when duplicate_object or unique_violation then
      null; -- made meanwhile by the migration of another database on this server
    end;
  end if;
end
$$;

grant usage on schema keel to keel_producer;
revoke all on all tables in schema keel from keel_producer;
revoke all on all sequences in schema keel from keel_producer;
revoke execute on all functions in schema keel from keel_producer;
grant execute on function keel.enqueue_many(jsonb) to keel_producer;

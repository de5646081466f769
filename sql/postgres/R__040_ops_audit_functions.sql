-- The ops audit trail's functions over keel.ops_audit (V030). Repeatable (sql/README.md). The table stands alone:
-- each function touches only its rows, in one statement, so it takes no place in the lock order.

-- record_audit(...): adds one row and returns its id. outcome 'started' for a write about to run (finish_audit
-- closes it), 'refused' for a refusal (a finished row at once).
create or replace function keel.record_audit(
  p_principal_id text, p_principal_name text, p_tenant_id text, p_app_id text, p_auth_method text, p_channel text,
  p_role text, p_required_role text, p_http_method text, p_action text, p_target text, p_summary text,
  p_outcome text, p_status integer, p_reason text, p_affected bigint, p_request_id text, p_client_ip text)
returns bigint
language sql as $$
  insert into keel.ops_audit (principal_id, principal_name, tenant_id, app_id, auth_method, channel, role,
                              required_role, http_method, action, target, summary, outcome, status, reason,
                              affected, request_id, client_ip, finished_at)
  values (p_principal_id, p_principal_name, p_tenant_id, p_app_id, p_auth_method, p_channel, p_role,
          p_required_role, p_http_method, p_action, p_target, p_summary, p_outcome, p_status, p_reason,
          p_affected, p_request_id, p_client_ip, case when p_outcome = 'started' then null else clock_timestamp() end)
  returning id;
$$;

-- finish_audit(id, outcome, status, reason, affected): closes a 'started' row once, as 'ok' or 'failed'. A finished
-- row is never changed again: false when the row is not (or no longer) started.
create or replace function keel.finish_audit(p_id bigint, p_outcome text, p_status integer, p_reason text,
                                             p_affected bigint)
returns boolean
language plpgsql as $$
declare
  v_n integer;
begin
  if p_outcome is null or p_outcome not in ('ok', 'failed') then
    raise exception 'finish_audit: outcome must be ok or failed (got %)', coalesce(p_outcome, 'null')
      using errcode = '22023';
  end if;
  update keel.ops_audit a
  set outcome = p_outcome, status = p_status, reason = p_reason, affected = p_affected, finished_at = clock_timestamp()
  where a.id = p_id and a.outcome = 'started';
  get diagnostics v_n = row_count;
  return v_n = 1;
end
$$;

-- search_audit(...): newest first (by id), below before_id. Examines at most scan_rows rows (the newest below
-- before_id) and returns those matching, up to limit. When the scan stopped at its bound before the page filled, a
-- last row with a null id carries scan_floor, the lowest id examined: the caller continues below it.
-- principal matches the object id or the name; target matches exactly, and a queue target (queue:<name>) also the
-- records of calls over several queues naming it (queue:a,b: an enqueue of a batch); the other filters match exactly.
create or replace function keel.search_audit(
  p_from timestamptz, p_to timestamptz, p_principal text, p_action text, p_target text, p_outcome text,
  p_before_id bigint, p_scan_rows integer, p_limit integer)
returns table (id bigint, at timestamptz, principal_id text, principal_name text, tenant_id text, app_id text,
               auth_method text, channel text, role text, required_role text, http_method text, action text,
               target text, summary text, outcome text, status integer, reason text, affected bigint,
               request_id text, client_ip text, finished_at timestamptz, scan_floor bigint)
language plpgsql stable as $$
#variable_conflict use_column
declare
  v_floor bigint;
  v_examined integer;
  v_returned integer;
begin
  if p_limit is null or p_limit < 1 or p_scan_rows is null or p_scan_rows < 1 then
    raise exception 'search_audit: limit and scan_rows must be positive integers' using errcode = '22023';
  end if;
  -- The window: the newest scan_rows ids below before_id (a walk down the primary key, ids only).
  select min(w.id), count(*) into v_floor, v_examined
  from (select a.id from keel.ops_audit a
        where p_before_id is null or a.id < p_before_id
        order by a.id desc limit p_scan_rows) w;
  if v_examined = 0 then
    return;
  end if;
  return query
    select a.id, a.at, a.principal_id, a.principal_name, a.tenant_id, a.app_id, a.auth_method, a.channel, a.role,
           a.required_role, a.http_method, a.action, a.target, a.summary, a.outcome, a.status, a.reason, a.affected,
           a.request_id, a.client_ip, a.finished_at, null::bigint
    from keel.ops_audit a
    where a.id >= v_floor and (p_before_id is null or a.id < p_before_id)
      and (p_from is null or a.at >= p_from)
      and (p_to is null or a.at < p_to)
      and (p_principal is null or a.principal_id = p_principal or a.principal_name = p_principal)
      and (p_action is null or a.action = p_action)
      and (p_target is null or a.target = p_target
           or (left(p_target, 6) = 'queue:' and left(a.target, 6) = 'queue:' and strpos(a.target, ',') > 0
               and strpos(',' || substr(a.target, 7) || ',', ',' || substr(p_target, 7) || ',') > 0))
      and (p_outcome is null or a.outcome = p_outcome)
    order by a.id desc
    limit p_limit;
  get diagnostics v_returned = row_count;
  if v_returned < p_limit and v_examined = p_scan_rows then
    return query select null::bigint, null::timestamptz, null::text, null::text, null::text, null::text, null::text,
                        null::text, null::text, null::text, null::text, null::text, null::text, null::text, null::text,
                        null::integer, null::text, null::bigint, null::text, null::text, null::timestamptz, v_floor;
  end if;
end
$$;

-- purge_audit(older_than, batch_size): deletes one batch of rows recorded before older_than, oldest first; returns
-- rows deleted. The only way the application can remove audit rows (the retention pass calls it).
create or replace function keel.purge_audit(p_older_than timestamptz, p_batch_size integer)
returns bigint
language plpgsql as $$
declare
  v_deleted bigint;
begin
  if p_batch_size is null or p_batch_size < 1 then
    raise exception 'purge_audit: batch_size must be a positive integer' using errcode = '22023';
  end if;
  if p_older_than is null then
    raise exception 'purge_audit: older_than is required' using errcode = '22004';
  end if;
  with c as (
    select a.id from keel.ops_audit a
    where a.at < p_older_than
    order by a.at limit p_batch_size
    for update skip locked
  )
  delete from keel.ops_audit a using c where a.id = c.id;
  get diagnostics v_deleted = row_count;
  return v_deleted;
end
$$;

-- Idempotency keys are unique per (queue, type, key) among hot jobs (issue 25), no longer across the whole table: a
-- producer's key can no longer collide with (or squat) another queue's or another job type's key. Existing rows
-- migrate as they are: keys unique across the table are unique within each (queue, type) too, so the new index
-- builds over them without a change. The key leads: it tells rows apart at once (a batch shares one queue and type),
-- and inserts (enqueue_many, resurrect) take the key rows in this index order, key then queue then type
-- (sql/README.md, "Lock order").
create unique index jobs_hot_idempotency_scope on keel.jobs_hot (idempotency_key, queue, type)
  where idempotency_key is not null;
drop index keel.jobs_hot_idempotency_key;

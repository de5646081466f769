-- Keel transfer objects on a PostgreSQL TARGET database (applied by shared/engines/postgres/migrate.ts with the
-- ledger keel_transfer.schema_migrations). Staging tables (one per transfer, keel_transfer.stg_<transfer>) are
-- created by keel_transfer.ensure_staging from the target table's own column types.
create schema if not exists keel_transfer;

-- One row per staging of a batch, written in the same transaction as its rows: a committed row means the
-- batch's rows are all there and matched the manifest. The primary key also serializes rival stagings.
-- Staging is transient: this registry and the staging tables are UNLOGGED (no WAL, much faster loads). A crash
-- or failover empties both together, so a batch then reads as "not staged" and is staged again (same id).
-- The completion table below is logged: it is the durable outcome.
create unlogged table if not exists keel_transfer.staged (
  batch_id           uuid primary key,
  transfer_name      text not null,
  state              text not null check (state in ('staging', 'staged')),
  expected_count     bigint not null,
  expected_checksum  text not null,
  row_count          bigint,
  checksum           text,
  started_at         timestamptz not null default clock_timestamp(),
  staged_at          timestamptz
);

-- The completion row of a batch, and its fence. States:
--   'committed' -- written by apply_batch in the same transaction as the merge: the batch is applied, for good.
--   'claimed'   -- only ever seen inside an open apply transaction (apply inserts it, or takes over a fence row, and
--                  marks it committed before it commits); never visible to others.
--   'fenced'    -- written and committed by try_claim when reconcile (or abandon) rules a batch "not applied": every
--                  apply whose attempt is <= fenced_through fails (KT005) instead of committing, so the verdict is
--                  final. A later attempt (> fenced_through) takes the row over and may commit. Abandon fences
--                  with the largest attempt (2147483647): then no apply of that batch id can ever commit.
-- The primary key serializes apply and reconcile on one row: whoever holds it uncommitted makes the other wait.
create table if not exists keel_transfer.completions (
  batch_id        uuid primary key,
  transfer_name   text not null,
  state           text not null check (state in ('claimed', 'committed', 'fenced')),
  row_count       bigint,
  checksum        text,
  attempt         bigint,                   -- the journal attempt that committed (or holds the claim)
  fenced_through  bigint not null default 0, -- attempts <= this are ruled out
  claimed_at      timestamptz not null default clock_timestamp(),
  committed_at    timestamptz,
  fenced_at       timestamptz
);

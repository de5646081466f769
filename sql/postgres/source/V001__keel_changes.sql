-- Change capture on a PostgreSQL SOURCE database: the twin of SQL Server Change Tracking, so that transfers with
-- boundary kind 'changes' (docs/transfer.md, "Deletes") run the same version windows here. Applied by
-- migratePostgresChangeCapture (shared/engines/postgres/changeCapture.ts) with the ledger
-- keel_changes.schema_migrations, or by hand (psql -f, then the R__ file). A table is tracked with
-- keel_changes.enable(table, key columns), which creates <table>_changes beside it and the trigger that fills it.
create schema if not exists keel_changes;

-- One row per tracked table.
--   current_version   -- the newest version stamped (keel_changes.current_version), CHANGE_TRACKING_CURRENT_VERSION()
--   min_valid_version -- changes at or before it may be gone (retention, a truncate): a reader whose last version is
--                        older cannot tell what it missed and must re-baseline (CHANGE_TRACKING_MIN_VALID_VERSION)
create table if not exists keel_changes.tracked (
  source_table      regclass primary key,
  change_table      regclass not null,
  key_columns       text[] not null,
  current_version   bigint not null default 0,
  min_valid_version bigint not null default 0,
  enabled_at        timestamptz not null default now()
);

-- Versions of every tracked table. A version is given to changes only once they are committed and visible (the
-- stamp in keel_changes.current_version, serialized per table), so versions follow commit order: a window
-- (low, high] read after high was stamped never misses a change that commits later (it gets a larger version).
create sequence if not exists keel_changes.versions;

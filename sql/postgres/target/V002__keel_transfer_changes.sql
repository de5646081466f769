-- Change windows carry deletes (docs/transfer.md, "Deletes"): the completion row also records how many target rows
-- the apply deleted (staged 'D' rows that found their key, and a baseline's mirror deletes), in the same transaction.
alter table keel_transfer.completions add column if not exists deleted_count bigint;

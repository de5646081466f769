-- Change windows (boundary kind 'changes': version windows of the source's change tracking that carry deletes,
-- docs/transfer.md "Deletes") are journalled like any window.
alter table keel.transfer_batches drop constraint if exists transfer_batches_boundary_kind_check;
alter table keel.transfer_batches add constraint transfer_batches_boundary_kind_check
  check (boundary_kind in ('key', 'timestamp', 'rowversion', 'changes'));

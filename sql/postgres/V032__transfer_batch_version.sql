-- A batch row's version: raised by every change of the row (each transition, each note that writes a column), so a
-- writer that read the row can make its note conditional on nothing having changed since (transfer_batch_note's
-- p_if_version): a stale writer -- reconcile noting a verdict it read the batch for before another run moved it
-- or wrote a newer error -- never replaces a newer record (docs/transfer.md, "Reconcile and the fence").
alter table keel.transfer_batches add column if not exists version bigint not null default 0;

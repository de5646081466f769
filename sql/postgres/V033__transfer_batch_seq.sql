-- A batch row's place in the journal: an identity taken at insert, as SQL Server's keel.TransferBatches.Seq. The
-- transfer's last committed window and the newest-first listing are read by it, not by created_at: a journal server
-- clock that steps back (an NTP correction, a failover to a host whose clock is behind) would make an older batch
-- look newer, and the next window start again after a window already committed (refused window_taken at every try,
-- the transfer stalled). Batches of one transfer are inserted under its lock (keel._transfer_lock), so their seq
-- order is the order they were created in, and a transfer's committed windows follow one another in seq order.
alter table keel.transfer_batches add column if not exists seq bigint;
-- Rows journalled before: the order they were read in until now.
update keel.transfer_batches b set seq = o.n
  from (select batch_id, row_number() over (order by created_at, batch_id) as n from keel.transfer_batches) o
 where o.batch_id = b.batch_id and b.seq is null;
alter table keel.transfer_batches alter column seq set not null;
alter table keel.transfer_batches alter column seq add generated always as identity;
select setval(pg_get_serial_sequence('keel.transfer_batches', 'seq'), coalesce(max(seq), 0) + 1, false)
  from keel.transfer_batches;
create unique index if not exists transfer_batches_seq on keel.transfer_batches (seq);
create index if not exists transfer_batches_by_transfer_seq on keel.transfer_batches (transfer_name, seq desc);
drop index if exists keel.transfer_batches_by_transfer;
drop index if exists keel.transfer_batches_by_created;

-- Per-transfer controls set by operators (docs/transfer.md, "Pause and resume"). A paused transfer gets no new batch
-- from the timer or from catch-up, and its queue steps leave its open batch where it is until it is resumed.
-- One row per transfer an operator ever paused; no row = running.
create table if not exists keel.transfer_controls (
  transfer_name text primary key,
  paused        boolean not null,
  reason        text,
  changed_by    text,
  changed_at    timestamptz not null default now()
);

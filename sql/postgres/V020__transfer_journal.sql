-- Transfer batch journal (control database). One row per batch plus its event history.
-- A batch covers the window (boundary_low, boundary_high] of its transfer. Failed batches release their window;
-- any other state holds it, and a transfer has at most one open batch (not committed, not failed).
create schema if not exists keel;

create table if not exists keel.transfer_batches (
  batch_id          uuid primary key,
  transfer_name     text not null,
  state             text not null check (state in ('extracting', 'staged', 'applying', 'committed', 'failed', 'unresolved')),
  attempts          integer not null default 0,
  boundary_kind     text not null check (boundary_kind in ('key', 'timestamp', 'rowversion')),
  boundary_low      text,
  boundary_high     text not null,
  schema_hash       text not null,
  schema_columns    jsonb not null,
  row_count         bigint,
  checksum          text,
  staged_count      bigint,
  staged_checksum   text,
  applied_count     bigint,
  last_error        text,
  last_error_code   text,
  target_reconcile_token text, -- opaque, from the target adapter (docs/transfer.md)
  created_at        timestamptz not null default now(),
  updated_at        timestamptz not null default now(),
  extracted_at      timestamptz,
  staged_at         timestamptz,
  apply_started_at  timestamptz,
  committed_at      timestamptz,
  failed_at         timestamptz
);

-- A second batch for an already-covered window is refused: windows chain (next low = last high), so two
-- live batches of one transfer may share neither their low nor their high bound.
create unique index if not exists transfer_batches_window_low
  on keel.transfer_batches (transfer_name, coalesce(boundary_low, '')) where state <> 'failed';
create unique index if not exists transfer_batches_window_high
  on keel.transfer_batches (transfer_name, boundary_high) where state <> 'failed';
create unique index if not exists transfer_batches_one_open
  on keel.transfer_batches (transfer_name) where state in ('extracting', 'staged', 'applying', 'unresolved');
create index if not exists transfer_batches_by_transfer on keel.transfer_batches (transfer_name, created_at desc, batch_id desc);
create index if not exists transfer_batches_by_created on keel.transfer_batches (created_at desc, batch_id desc);
create index if not exists transfer_batches_by_state on keel.transfer_batches (state, updated_at);

create table if not exists keel.transfer_batch_events (
  event_id    bigserial primary key,
  batch_id    uuid not null,
  at          timestamptz not null default now(),
  from_state  text,
  to_state    text,
  event       text not null,
  detail      jsonb
);
create index if not exists transfer_batch_events_by_batch on keel.transfer_batch_events (batch_id, event_id);


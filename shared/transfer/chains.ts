// Replay batches are journalled under "<transfer>@replay-<ms>": a chain of their own, so the committed windows they
// cover again do not collide with the transfer's window ledger (its unique bounds, its one open batch).
export const REPLAY_MARK = '@replay-';
export function baseTransferName(journalName: string): string {
  const i = journalName.indexOf(REPLAY_MARK);
  return i < 0 ? journalName : journalName.slice(0, i);
}

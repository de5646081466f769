// Replay batches are journalled under "<transfer>@replay-<n>": a chain of their own, so the committed windows they
// cover again do not collide with the transfer's window ledger (its unique bounds, its one open batch). n is the
// batch's seq, issued by the journal's insert when it is asked for a name that ends with the mark (newChainName):
// unique, and in the order the chains were created whatever the hosts' clocks say (it was the host's milliseconds:
// two replays in one millisecond shared a chain, the second refused while the first was open). Older journals hold
// names with milliseconds; both read the same way here.
export const REPLAY_MARK = '@replay-';
export function newChainName(transferName: string): string {
  return `${transferName}${REPLAY_MARK}`;
}
export function baseTransferName(journalName: string): string {
  const i = journalName.indexOf(REPLAY_MARK);
  return i < 0 ? journalName : journalName.slice(0, i);
}

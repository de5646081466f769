// The transfer batch's state machine as one table: every move TransferService makes, with the states the journal's
// compare-and-set accepts it from, the states it may end in and the events it may record. The service moves a
// batch only through these rows (BatchMoves.move, moves.ts), the journals read OPEN_STATES from here, and the table in
// docs/transfer.md ("Every move") is checked against it (test/transfer/lifecycle.test.ts).
import { BATCH_STATES, type BatchState } from './types.js';

// A batch in one of these holds its transfer's window: the next batch waits for it to commit or fail.
export const OPEN_STATES: readonly BatchState[] = BATCH_STATES.filter((s) => s !== 'committed' && s !== 'failed');
// A committed completion on the target always wins: the journal takes it from any state but 'committed'.
export const NOT_COMMITTED: readonly BatchState[] = BATCH_STATES.filter((s) => s !== 'committed');
// An apply was started and its outcome is not known: what reconcile resolves.
export const APPLY_UNKNOWN: readonly BatchState[] = ['applying', 'unresolved'];
// What reconcile asks the target about (maintenance's stale sweep): an unknown apply outcome, and 'staged' too, for
// an apply that committed after a reconcile had moved its batch back.
export const RECONCILABLE: readonly BatchState[] = [...APPLY_UNKNOWN, 'staged'];

export interface Move {
  readonly from: readonly BatchState[];
  readonly to: readonly BatchState[];
  readonly events: readonly string[];
  readonly when: string; // what makes it, for the docs
}

export const MOVES = {
  record_manifest: {
    from: ['extracting'],
    to: ['extracting'],
    events: ['manifest_recorded'],
    when: 'extract: the window counted and checksummed',
  },
  stage: {
    from: ['extracting'],
    to: ['staged'],
    events: ['staged', 'already_staged'],
    when: 'stage: the target verified the staged rows against the manifest',
  },
  start_apply: {
    from: ['staged', 'extracting'],
    to: ['applying'],
    events: ['apply_started'],
    when: 'apply: the attempt counted, durable before the call goes out (from extracting: a direct apply)',
  },
  commit: {
    from: NOT_COMMITTED,
    to: ['committed'],
    events: ['applied', 'already_committed', 'reconciled_committed'],
    when: 'the target says committed (apply reply or any reconcile)',
  },
  reconcile_error: {
    from: APPLY_UNKNOWN,
    to: ['unresolved'],
    events: ['reconcile_error'],
    when: 'reconcile: the target gave no answer',
  },
  not_applied: {
    from: APPLY_UNKNOWN,
    to: ['staged', 'extracting'],
    events: ['reconciled_not_applied'],
    when: 'reconcile: not applied, fence committed (extracting: the staged rows are gone)',
  },
  staging_gone: {
    from: ['staged'],
    to: ['extracting'],
    events: ['reconciled_not_applied'],
    when: 'reconcile of a staged batch: not applied, and the staged rows are gone',
  },
  blocked: {
    from: RECONCILABLE,
    to: ['unresolved'],
    events: ['reconciled_blocked'],
    when: 'reconcile: an open transaction holds the claim',
  },
  fail: {
    from: OPEN_STATES,
    to: ['failed'],
    events: ['failed'],
    when: 'abandon or a terminal error, once no apply can commit (final fence): the window is released',
  },
} as const satisfies Record<string, Move>;

export type MoveName = keyof typeof MOVES;

// The journal call of one move: `to` and `event` must be ones the row allows (the first when not given), and `from`
// may narrow the row's. A call outside the table is a bug in the service, so it throws.
export function journalMove(
  name: MoveName,
  pick: { to?: BatchState; event?: string; from?: readonly BatchState[] } = {},
): { from: readonly BatchState[]; to: BatchState; event: string } {
  const m: Move = MOVES[name];
  const to = pick.to ?? m.to[0]!;
  const event = pick.event ?? m.events[0]!;
  const from = pick.from ?? m.from;
  if (!m.to.includes(to) || !m.events.includes(event) || from.some((s) => !m.from.includes(s)))
    throw new Error(`transfer move ${name} does not allow ${JSON.stringify({ from, to, event })}`);
  return { from, to, event };
}

// The table as the Markdown rows docs/transfer.md shows.
export function movesTable(): string {
  const states = (s: readonly BatchState[]) =>
    s.length === NOT_COMMITTED.length && s.every((x) => NOT_COMMITTED.includes(x))
      ? 'any but `committed`'
      : s.map((x) => `\`${x}\``).join(', ');
  return [
    '| move | from | to | events | when |',
    '|---|---|---|---|---|',
    ...Object.entries(MOVES).map(
      ([name, m]) =>
        `| \`${name}\` | ${states(m.from)} | ${states(m.to)} | ${m.events.map((e) => `\`${e}\``).join(', ')} | ${m.when} |`,
    ),
  ].join('\n');
}

// What the preview-bound bulk actions show: a count that says "at least" when the store stopped counting, and the
// confirm's per-row report (previewed rows that changed meanwhile, matches that arrived after the preview).
import { h, fmtNum, type Child } from './dom';

export function countText(matched: { count: number; exact: boolean } | undefined, fallback: number): string {
  if (!matched) return fmtNum(fallback);
  return matched.exact ? fmtNum(matched.count) : `≥ ${fmtNum(matched.count)}`;
}

export function idLinks(ids: string[], max = 10): Child[] {
  const shown = ids.slice(0, max);
  return [
    ...shown.flatMap((id, i) => [i ? ', ' : '', h('a', { href: `#/jobs/${id}` }, id)]),
    ids.length > shown.length ? ` and ${fmtNum(ids.length - shown.length)} more` : '',
  ];
}

const WHY: Record<string, string> = {
  not_in_dlq: 'no longer in the DLQ',
  gone: 'gone (purged)',
  key_held: 'still in the DLQ: a hot job of its queue and type holds its idempotency key',
  not_hot: 'no longer hot',
};

// The confirm's report of previewed ids that were not acted on, each with where it is now.
export function skippedList(rows: { id: string; why: string; location: string | null; state: string | null }[]) {
  if (!rows.length) return null;
  return h(
    'div',
    { 'data-test': 'skipped' },
    h(
      'p',
      null,
      `${rows.length} previewed job${rows.length === 1 ? ' changed meanwhile and was' : 's changed meanwhile and were'} left alone:`,
    ),
    h(
      'ul',
      { class: 'sample' },
      ...rows.map((r) =>
        h(
          'li',
          { 'data-id': r.id },
          h('a', { href: `#/jobs/${r.id}` }, r.id),
          `: ${WHY[r.why] ?? r.why}${r.location && r.why !== 'key_held' ? ` (now ${r.location}${r.state ? ` · ${r.state}` : ''})` : ''}`,
        ),
      ),
    ),
  );
}

export function arrivedList(a: { count: number; exact: boolean; ids: string[] } | undefined, verb: string) {
  if (!a || a.count === 0) return null;
  return h(
    'p',
    { 'data-test': 'arrived' },
    `${a.exact ? fmtNum(a.count) : `≥ ${fmtNum(a.count)}`} job${a.count === 1 ? '' : 's'} matching the filter arrived after the preview and ${a.count === 1 ? 'was' : 'were'} not ${verb}: `,
    ...idLinks(a.ids),
  );
}

// Audit: the ops audit trail (GET /audit, operator only): every write and every refused call, who made it, what it
// was about and what came of it; filters (principal, action, target, outcome, time range) and keyset paging.
import { h, replace, fmtNum, fmtTime, isoToLocal, localToIso } from '../dom';
import { api, isOperatorClaimed, q } from '../api';
import {
  badge,
  clear,
  empty,
  field,
  go,
  hashParams,
  notice,
  pageHead,
  select,
  showError,
  table,
  type Cleanup,
} from '../ui';

const OUTCOMES: [string, string][] = [
  ['', 'any'],
  ['ok', 'ok'],
  ['failed', 'failed'],
  ['refused', 'refused'],
  ['started', 'started (end not recorded)'],
];

export function outcomeBadge(r: any): HTMLElement {
  const text = r.status !== null ? `${r.outcome} · ${r.status}` : r.outcome;
  return badge(text, r.outcome === 'ok' ? 'ok' : r.outcome === 'started' ? 'warn' : 'bad');
}

export function who(r: any): HTMLElement {
  const name = r.principalName ?? r.principalId ?? (r.authMethod === 'key' ? 'function key' : 'anonymous');
  const detail = [
    r.principalId && `object id ${r.principalId}`,
    r.tenantId && `tenant ${r.tenantId}`,
    r.appId && `app ${r.appId}`,
  ]
    .filter(Boolean)
    .join(', ');
  return h('span', { title: detail || name }, name, h('span', { class: 'muted' }, ` · ${r.authMethod}`));
}

export function auditPage(main: HTMLElement): Cleanup {
  const p = hashParams();
  const box = notice();
  const results = h('div', { class: 'results' }, h('p', { class: 'loading' }, 'Loading…'));
  const input = (name: string, placeholder: string) =>
    h('input', { name, value: p.get(name) ?? '', placeholder, autocomplete: 'off' });
  const outcome = select('outcome', OUTCOMES, p.get('outcome') ?? '');
  const from = h('input', { type: 'datetime-local', name: 'from', value: isoToLocal(p.get('from')) });
  const to = h('input', { type: 'datetime-local', name: 'to', value: isoToLocal(p.get('to')) });
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Search the audit trail' },
    field('Principal', input('principal', 'object id or name')),
    field('Action', input('action', 'e.g. cancelJob')),
    field('Target', input('target', 'e.g. queue:emails, job:42')),
    field('Outcome', outcome),
    field('From', from),
    field('To', to),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Search')),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    const val = (k: string) => String(fd.get(k) ?? '').trim() || undefined;
    go('/audit', {
      principal: val('principal'),
      action: val('action'),
      target: val('target'),
      outcome: val('outcome'),
      from: localToIso(String(fd.get('from') ?? '')),
      to: localToIso(String(fd.get('to') ?? '')),
    });
  });
  replace(
    main,
    pageHead('Audit trail'),
    h(
      'p',
      { class: 'hint' },
      'Every write and every refused call of the ops API, newest first. Operator only: it names every caller.',
    ),
    form,
    box,
    results,
  );

  const search: Record<string, string | undefined> = {};
  for (const k of ['principal', 'action', 'target', 'outcome', 'from', 'to', 'beforeId'])
    search[k] = p.get(k) ?? undefined;
  const pageStack = (p.get('pages') ?? '').split(',').filter(Boolean); // beforeIds of the earlier pages

  void (async () => {
    try {
      const r = await api('GET', `audit${q({ ...search, limit: 50 })}`);
      clear(box);
      const items = r.items as any[];
      const pager = h(
        'div',
        { class: 'pager' },
        pageStack.length || search.beforeId
          ? h(
              'button',
              {
                type: 'button',
                onclick: () => {
                  const prev = pageStack.slice(0, -1);
                  const last = pageStack[pageStack.length - 1];
                  go('/audit', {
                    ...search,
                    beforeId: last === '-' ? undefined : last,
                    pages: prev.join(',') || undefined,
                  });
                },
              },
              '← Newer',
            )
          : null,
        h(
          'span',
          { class: 'muted' },
          `${items.length} record${items.length === 1 ? '' : 's'} on this page` +
            (r.scanBounded ? ' (the search stopped at its row bound; Older → searches further)' : ''),
        ),
        r.nextBeforeId
          ? h(
              'button',
              {
                type: 'button',
                onclick: () =>
                  go('/audit', {
                    ...search,
                    beforeId: r.nextBeforeId,
                    pages: [...pageStack, search.beforeId ?? '-'].join(','),
                  }),
              },
              'Older →',
            )
          : null,
      );
      replace(
        results,
        items.length === 0
          ? empty(
              r.scanBounded
                ? 'No match in the part searched so far; Older → searches further.'
                : 'No audit records match these filters.',
            )
          : table(
              ['when', 'who', 'role', 'action', 'target', 'outcome', 'affected', 'reason', 'request'],
              items.map((a) => [
                fmtTime(a.at),
                who(a),
                a.role ?? '—',
                h('span', { title: a.summary ?? '' }, `${a.httpMethod} ${a.action}`),
                a.target ? h('span', { class: 'clip', title: a.target }, a.target) : '—',
                outcomeBadge(a),
                a.affected === null ? '—' : fmtNum(a.affected),
                a.reason ? h('span', { class: 'clip', title: a.reason }, a.reason) : '—',
                // The invocation id, shortened; the whole id and the caller's address in the tooltip.
                h(
                  'span',
                  {
                    class: 'muted',
                    title: [a.requestId, a.clientIp && `from ${a.clientIp}`].filter(Boolean).join(' '),
                  },
                  a.requestId ? a.requestId.slice(0, 8) : '—',
                ),
              ]),
              { caption: 'Audit records, newest first', className: 'audit-table' },
            ),
        pager,
      );
    } catch (err) {
      replace(results);
      showError(box, err);
    }
  })();
  return () => undefined;
}

// Who acted on one job or queue (target "job:42", "queue:emails"): its newest audit records, for the job page and the
// queues page. The audit is operator-only; without the role the card says so instead of failing the page.
export function auditCard(target: string, heading: string): HTMLElement {
  const body = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const card = h(
    'section',
    { class: 'card', 'data-test': 'audit-card' },
    h('h2', null, heading),
    body,
    h('p', null, h('a', { href: `#/audit${q({ target })}` }, 'Every record for this target →')),
  );
  // Asked only with the operator role: a refused read would itself be recorded, on every page view.
  if (!isOperatorClaimed()) {
    replace(body, empty('The audit trail needs the operator role.'));
    return card;
  }
  void (async () => {
    try {
      const r = await api('GET', `audit${q({ target, limit: 10 })}`);
      const items = r.items as any[];
      replace(
        body,
        items.length === 0
          ? empty('No operator action is recorded for it (in the audit retention).')
          : table(
              ['when', 'who', 'action', 'outcome', 'affected'],
              items.map((a) => [
                fmtTime(a.at),
                who(a),
                h('span', { title: a.summary ?? '' }, `${a.httpMethod} ${a.action}`),
                outcomeBadge(a),
                a.affected === null ? '—' : fmtNum(a.affected),
              ]),
              { caption: `${heading}, newest first`, className: 'audit-table' },
            ),
      );
    } catch (err) {
      replace(body, empty((err as Error).message));
    }
  })();
  return card;
}

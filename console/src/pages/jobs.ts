// Jobs: search hot, archive and DLQ (queue, type, tag, state, reason, time range, text) with keyset paging; hot
// jobs cancelled by selection or by filter (preview, then exactly the previewed ids); a job's detail with cancel
// (hot) and resurrect (DLQ).
import { h, replace, fmtAge, fmtNum, fmtTime, isoToLocal, localToIso, type Child } from '../dom';
import { api, q } from '../api';
import { arrivedList, countText, idLinks } from '../bulk';
import { auditCard } from './audit';
import {
  badge,
  busy,
  clear,
  confirmStep,
  copyable,
  empty,
  field,
  go,
  hashParams,
  kv,
  notice,
  pageHead,
  pre,
  select,
  show,
  showError,
  table,
  type Cleanup,
} from '../ui';

const REASONS = ['exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed', 'skipped'];

export function stateBadge(job: any): HTMLElement {
  if (job.location === 'archive') return badge('succeeded', 'ok');
  if (job.location === 'dlq') return badge(`DLQ · ${job.reason ?? 'dead'}`, 'bad');
  return badge(
    job.cancelRequested ? `${job.state} · cancel requested` : job.state,
    job.state === 'processing' ? 'info' : 'muted',
  );
}

export function jobsPage(main: HTMLElement): Cleanup {
  const p = hashParams();
  const location = p.get('location') ?? 'hot';
  const box = notice();
  const results = h('div', { class: 'results' }, h('p', { class: 'loading' }, 'Searching…'));
  const locationSel = select(
    'location',
    [
      ['hot', 'Hot (pending, running)'],
      ['archive', 'Archive (succeeded)'],
      ['dlq', 'Dead letters'],
    ],
    location,
  );
  const input = (name: string, attrs: Record<string, string> = {}) =>
    h('input', { name, value: p.get(name) ?? '', ...attrs });
  const state = select(
    'state',
    [
      ['', 'any'],
      ['pending', 'pending'],
      ['fetched', 'fetched'],
      ['processing', 'processing'],
      ['waiting', 'waiting (a flow: parents unfinished)'],
    ],
    p.get('state') ?? '',
  );
  const reason = select(
    'reason',
    [['', 'any'], ...REASONS.map((r) => [r, r] as [string, string])],
    p.get('reason') ?? '',
  );
  const from = h('input', { type: 'datetime-local', name: 'from', value: isoToLocal(p.get('from')) });
  const to = h('input', { type: 'datetime-local', name: 'to', value: isoToLocal(p.get('to')) });
  const limit = select(
    'limit',
    [
      ['20', '20'],
      ['50', '50'],
      ['100', '100'],
      ['500', '500'],
    ],
    p.get('limit') ?? '50',
  );
  const order = select(
    'order',
    [
      ['newest', 'Newest first'],
      ['oldest', 'Oldest first'],
    ],
    p.get('order') ?? 'newest',
  );
  const stateField = field('State', state, 'hot only');
  const reasonField = field('Reason', reason, 'DLQ only');
  const sync = () => {
    stateField.hidden = locationSel.value !== 'hot';
    reasonField.hidden = locationSel.value !== 'dlq';
  };
  locationSel.addEventListener('change', sync);
  sync();
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Search jobs' },
    field('Where', locationSel),
    field('Queue', input('queue', { placeholder: 'any', autocomplete: 'off' })),
    field('Type', input('type', { placeholder: 'any', autocomplete: 'off' })),
    field('Tag', input('tag', { placeholder: 'any', autocomplete: 'off' })),
    stateField,
    reasonField,
    field('From', from),
    field('To', to),
    field('Text', input('text', { placeholder: 'payload or last error', type: 'search' })),
    field('Priority', input('priority', { placeholder: 'any', inputmode: 'numeric', autocomplete: 'off' })),
    field('Idempotency key', input('idempotencyKey', { placeholder: 'any', autocomplete: 'off' })),
    field('Order', order),
    field('Per page', limit),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Search')),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    const val = (k: string) => String(fd.get(k) ?? '').trim() || undefined;
    const loc = val('location') ?? 'hot';
    go('/jobs', {
      location: loc,
      queue: val('queue'),
      type: val('type'),
      tag: val('tag'),
      state: loc === 'hot' ? val('state') : undefined,
      reason: loc === 'dlq' ? val('reason') : undefined,
      from: localToIso(String(fd.get('from') ?? '')),
      to: localToIso(String(fd.get('to') ?? '')),
      text: val('text'),
      priority: val('priority'),
      idempotencyKey: val('idempotencyKey'),
      order: val('order') === 'oldest' ? 'oldest' : undefined,
      limit: val('limit'),
    });
  });
  // Straight to one job by its id, wherever it is (hot, archive or DLQ).
  const lookupInput = h('input', {
    name: 'jobId',
    inputmode: 'numeric',
    autocomplete: 'off',
    placeholder: 'e.g. 1234',
    'aria-label': 'Job id',
  });
  const lookup = h(
    'form',
    { class: 'lookup', role: 'search', 'aria-label': 'Open a job by id' },
    field('Job id', lookupInput),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Open')),
  );
  lookup.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = lookupInput.value.trim();
    if (!/^\d{1,19}$/.test(id)) {
      show(box, 'error', 'A job id is a whole number (digits only).');
      lookupInput.focus();
      return;
    }
    go(`/jobs/${id}`);
  });
  const confirmHost = h('div', { class: 'confirm-host' });
  replace(main, pageHead('Jobs'), lookup, form, box, confirmHost, results);

  const search: Record<string, string | undefined> = {};
  const keys = ['location', 'queue', 'type', 'tag', 'state', 'reason', 'from', 'to', 'text', 'priority'];
  for (const k of [...keys, 'idempotencyKey', 'order', 'limit', 'afterId']) search[k] = p.get(k) ?? undefined;
  search.location = location;
  const pageStack = (p.get('pages') ?? '').split(',').filter(Boolean); // afterIds of the earlier pages

  void (async () => {
    try {
      const r = await api('GET', `jobs${q(search)}`);
      clear(box);
      const items = r.items as any[];
      const where = location === 'dlq' ? 'the dead letters' : location === 'archive' ? 'the archive' : 'the hot jobs';
      const oldest = search.order === 'oldest';
      const pager = h(
        'div',
        { class: 'pager' },
        pageStack.length || search.afterId
          ? h(
              'button',
              {
                type: 'button',
                onclick: () => {
                  const prev = pageStack.slice(0, -1);
                  go('/jobs', {
                    ...search,
                    afterId: pageStack[pageStack.length - 1] === '-' ? undefined : pageStack[pageStack.length - 1],
                    pages: prev.join(',') || undefined,
                  });
                },
              },
              oldest ? '← Older' : '← Newer',
            )
          : null,
        h(
          'span',
          { class: 'muted' },
          `${items.length} job${items.length === 1 ? '' : 's'} on this page` +
            // A bounded archive/DLQ text search stops after a fixed number of rows: "Older" searches further down.
            (r.scanBounded
              ? ` (text search stopped at its row bound; ${oldest ? 'Newer' : 'Older'} → searches further)`
              : ''),
        ),
        r.nextAfterId
          ? h(
              'button',
              {
                type: 'button',
                onclick: () =>
                  go('/jobs', {
                    ...search,
                    afterId: r.nextAfterId,
                    pages: [...pageStack, search.afterId ?? '-'].join(','),
                  }),
              },
              oldest ? 'Newer →' : 'Older →',
            )
          : null,
      );
      const hot = location === 'hot';
      const boxes = new Map<string, HTMLInputElement>();
      const bulk = hot && items.length ? cancelTools(items, boxes) : null;
      replace(
        results,
        bulk,
        items.length === 0
          ? empty(
              r.scanBounded
                ? `No match in the part of ${where} searched so far; ${oldest ? 'Newer' : 'Older'} → searches further.`
                : // Hot is the default and finished jobs leave it: a first look after a job ran finds nothing here.
                  `No jobs match these filters in ${where}.${hot ? ' Finished jobs are in Archive (succeeded) or Dead letters: choose one under Where.' : ''}`,
            )
          : table(
              [
                ...(hot ? [''] : []),
                'id',
                'queue',
                'type',
                'state',
                'attempts',
                location === 'hot' ? 'created' : location === 'archive' ? 'finished' : 'failed',
                'tags',
                'payload',
                'last error',
              ],
              items.map((j) => [
                ...(hot ? [checkbox(j.id)] : []),
                h('a', { href: `#/jobs/${j.id}` }, j.id),
                j.queue,
                j.type,
                stateBadge(j),
                fmtNum(j.attempts),
                fmtTime(location === 'hot' ? j.createdAt : j.finishedAt),
                j.tags?.length ? j.tags.join(', ') : '—',
                // Searches return a preview (size and first characters); the job page shows the whole payload.
                h(
                  'span',
                  { class: 'clip', title: `${fmtNum(j.payloadBytes)} bytes` },
                  `${j.payloadPreview}${j.payloadTruncated ? '…' : ''}`,
                ),
                j.lastError ? h('span', { class: 'clip', title: j.lastError }, j.lastError) : '—',
              ]),
              {
                caption: `${oldest ? 'Oldest' : 'Newest'} first in ${where}`,
                className: hot ? 'jobs-table selectable' : 'jobs-table',
              },
            ),
        pager,
      );
      function checkbox(id: string): HTMLInputElement {
        const cb = h('input', { type: 'checkbox', 'aria-label': `Select job ${id}`, value: id });
        boxes.set(id, cb);
        return cb;
      }
    } catch (err) {
      replace(results);
      showError(box, err);
    }
  })();

  // Cancel by selection (the ticked rows) or by filter (every hot job the search's queue, type, tag and state
  // match): a preview lists the ids, and the confirm cancels exactly those, reporting per id.
  function cancelTools(items: any[], boxes: Map<string, HTMLInputElement>): HTMLElement {
    const count = h('span', { class: 'muted', 'aria-live': 'polite' }, '0 selected');
    const sel = h(
      'button',
      { type: 'button', class: 'danger', disabled: true, 'data-test': 'cancel-selected' },
      'Cancel selected…',
    );
    const all = h('input', { type: 'checkbox', 'aria-label': 'Select all shown' });
    const update = () => {
      const n = [...boxes.values()].filter((b) => b.checked).length;
      count.textContent = `${n} selected`;
      sel.disabled = n === 0;
    };
    queueMicrotask(() => {
      for (const b of boxes.values()) b.addEventListener('change', update);
    });
    all.addEventListener('change', () => {
      for (const b of boxes.values()) b.checked = all.checked;
      update();
    });
    const filter = {
      ...(search.queue ? { queue: search.queue } : {}),
      ...(search.type ? { type: search.type } : {}),
      ...(search.tag ? { tag: search.tag } : {}),
      ...(search.state ? { state: search.state } : {}),
    };
    const byFilter = h(
      'button',
      { type: 'button', class: 'danger', 'data-test': 'cancel-matching' },
      'Cancel all matching…',
    );
    // Cancel by filter takes queue, type, tag and state only: any other filter shown would make it act on more.
    byFilter.disabled =
      Object.keys(filter).length === 0 ||
      Boolean(search.text || search.from || search.to || search.priority || search.idempotencyKey);
    byFilter.title = byFilter.disabled
      ? 'Filter by queue, type, tag or state (no text, time range, priority or key) to cancel by filter'
      : 'Preview every hot job these filters match';
    sel.addEventListener('click', () => {
      const ids = items.filter((j) => boxes.get(j.id)?.checked).map((j) => j.id as string);
      void preview(sel, { ids }, `${ids.length} selected`);
    });
    byFilter.addEventListener('click', () => void preview(byFilter, { ...filter, limit: 500 }, 'matching'));
    return h(
      'div',
      { class: 'pager bulk' },
      h('label', { class: 'check inline' }, all, h('span', null, 'all shown')),
      count,
      sel,
      byFilter,
    );
  }

  async function preview(btn: HTMLButtonElement, body: Record<string, unknown>, what: string): Promise<void> {
    await busy(btn, box, async () => {
      const p = await api('POST', 'jobs/cancel', { ...body, dryRun: true });
      clear(box);
      if (p.count === 0) {
        clear(confirmHost);
        show(box, 'info', 'None of these jobs is hot any more: nothing to cancel.');
        return;
      }
      const running = (p.rows as any[]).filter((r) => r.outcome === 'would_request_cancel').length;
      const total = countText(p.matched, p.count);
      confirmStep({
        host: confirmHost,
        title: `Cancel ${p.count} hot job${p.count === 1 ? '' : 's'}?`,
        preview: [
          h(
            'p',
            { 'data-test': 'preview-count' },
            body.ids
              ? `${p.count} of the ${what} job${p.count === 1 ? ' is' : 's are'} hot. `
              : `${total} hot job${total === '1' ? ' matches' : 's match'}; the newest ${fmtNum(p.count)} are listed and cancelled. `,
            `Pending ones go to the DLQ as "cancelled" at once${running ? `; ${running} running one${running === 1 ? ' is' : 's are'} asked to stop` : ''}.`,
          ),
          h('p', { class: 'sample' }, 'Ids: ', ...idLinks(p.ids)),
          h(
            'p',
            { class: 'hint' },
            'The confirm acts on exactly these ids: a job that arrives meanwhile is reported, not cancelled.',
          ),
        ],
        confirmLabel: `Cancel ${p.count}`,
        danger: true,
        onConfirm: async (b) => {
          await busy(b, box, async () => {
            const r = await api('POST', 'jobs/cancel', {
              ...(body.ids ? {} : body),
              ids: p.ids,
              limit: p.ids.length,
              dryRun: false,
            });
            clear(confirmHost);
            const left = (r.rows as any[]).filter((x) => x.outcome === 'not_hot' || x.outcome === 'gone');
            show(
              box,
              left.length || r.arrivedAfterPreview?.count ? 'info' : 'ok',
              h(
                'span',
                { 'data-test': 'result' },
                `Cancelled ${r.count} of the ${p.ids.length} previewed job${p.ids.length === 1 ? '' : 's'}.`,
              ),
              left.length
                ? h(
                    'ul',
                    { class: 'sample', 'data-test': 'skipped' },
                    ...left.map((x) =>
                      h(
                        'li',
                        null,
                        h('a', { href: `#/jobs/${x.id}` }, x.id),
                        `: ${x.outcome === 'gone' ? 'gone' : `no longer hot (now ${x.location})`}`,
                      ),
                    ),
                  )
                : null,
              arrivedList(r.arrivedAfterPreview, 'cancelled'),
            );
          });
        },
      });
    });
  }
  return () => undefined;
}

// The job's own ctx.log lines, per attempt, oldest first (as stored: its newest KEEL_JOB_LOG_LINES).
function jobLogView(
  lines: { attempt: number; at: string; level: string; message: string; fields?: unknown }[] | undefined,
) {
  if (!lines?.length) return empty('The handler logged nothing through ctx.log.');
  return table(
    ['Attempt', 'Time', 'Level', 'Message'],
    lines.map((l) => [
      String(l.attempt),
      fmtTime(l.at),
      l.level,
      l.fields === undefined ? l.message : `${l.message} ${JSON.stringify(l.fields)}`,
    ]),
    { caption: 'Job log', className: 'job-log' },
  );
}

type Attempt = {
  attempt: number;
  worker: string | null;
  startedAt: string | null;
  endedAt: string | null;
  outcome: string;
  error: string | null;
};
const OUTCOME_TONE: Record<string, 'ok' | 'warn' | 'bad' | 'muted' | 'info'> = {
  succeeded: 'ok',
  running: 'info',
  retried: 'warn',
  interrupted: 'muted',
};

// A flow around the job (GET /jobs/{id} parents and children): three columns, parents -> this job -> children, each
// a link with where it is now; a parent shows the outcome its child saw. Nothing for a job in no flow.
function flowView(j: any): HTMLElement[] {
  const parents: any[] = j.parents ?? [];
  const children: any[] = j.children ?? [];
  if (parents.length === 0 && children.length === 0) return [];
  const node = (l: any) =>
    h(
      'li',
      null,
      h('a', { href: `#/jobs/${l.id}` }, `#${l.id}`),
      ' ',
      l.type ?? '(purged)',
      ' ',
      l.location ? stateBadge({ ...l, reason: l.state === 'dead' ? 'dead' : null, cancelRequested: false }) : '',
    );
  const column = (title: string, items: any[], none: string) =>
    h(
      'div',
      { class: 'flow-col' },
      h('h3', null, title),
      items.length ? h('ul', null, ...items.map(node)) : empty(none),
    );
  return [
    h(
      'section',
      { class: 'card' },
      h('h2', null, 'Flow'),
      h(
        'div',
        { class: 'flow-graph' },
        column(`Waits for (${parents.length})`, parents, 'No parents.'),
        h('div', { class: 'flow-arrow' }, '→'),
        h(
          'div',
          { class: 'flow-col' },
          h('h3', null, 'This job'),
          h('ul', null, h('li', null, `#${j.id} ${j.type} `, stateBadge(j))),
        ),
        h('div', { class: 'flow-arrow' }, '→'),
        column(`Then (${children.length}${children.length >= 1000 ? '+' : ''})`, children, 'No children.'),
      ),
    ),
  ];
}

// Every attempt, oldest first (GET /jobs/{id} timeline): the recorded failed ones, then the success or the one running.
function attemptsView(timeline: Attempt[] | undefined, limit: number, attempts: number) {
  if (!timeline?.length)
    return empty(
      attempts > 0
        ? `${fmtNum(attempts)} attempt${attempts === 1 ? '' : 's'} used; none recorded (before attempt history was kept).`
        : 'Not started yet.',
    );
  return table(
    ['Attempt', 'Worker', 'Started', 'Ended', 'Took', 'Outcome', 'Error'],
    timeline.map((a) => {
      const took =
        a.startedAt && a.endedAt ? fmtAge(new Date(a.endedAt).getTime() - new Date(a.startedAt).getTime()) : '—';
      return [
        `${a.attempt} of ${limit}`,
        a.worker ?? '—',
        fmtTime(a.startedAt),
        a.endedAt ? fmtTime(a.endedAt) : 'running',
        took,
        badge(a.outcome, OUTCOME_TONE[a.outcome] ?? 'bad'),
        a.error ? h('span', { class: 'clip', title: a.error }, a.error) : '—',
      ];
    }),
    { caption: 'Attempts, oldest first', className: 'attempts' },
  );
}

// An idempotency key links to the jobs that share it, in each place a job can be (a key is unique per queue and type
// among hot jobs only: archived and dead-lettered jobs may repeat it).
function siblingLinks(key: string): HTMLElement {
  const link = (location: string, text: string) =>
    h('a', { href: `#/jobs?location=${location}&idempotencyKey=${encodeURIComponent(key)}`, class: 'sibling' }, text);
  return h(
    'span',
    { class: 'key-links' },
    link('hot', key),
    ' (jobs with this key: ',
    link('hot', 'hot'),
    ' · ',
    link('archive', 'archive'),
    ' · ',
    link('dlq', 'DLQ'),
    ')',
  );
}

// How long ago (a past instant) or how far ahead (a future one), beside the time itself.
function relTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const ms = new Date(iso).getTime() - Date.now();
  return `${fmtTime(iso)} (${ms >= 0 ? `in ${fmtAge(ms)}` : `${fmtAge(-ms)} ago`})`;
}

// A running job's latest ctx.progress(): a bar when a fraction is known, the count and the note beside it.
function progressView(
  p: { fraction: number | null; done: number | null; total: number | null; note: string | null } | null,
) {
  if (!p) return '—';
  const parts: string[] = [];
  if (p.fraction !== null) parts.push(`${Math.round(p.fraction * 1000) / 10}%`);
  if (p.done !== null) parts.push(p.total !== null ? `${fmtNum(p.done)} of ${fmtNum(p.total)}` : fmtNum(p.done));
  if (p.note) parts.push(p.note);
  return h(
    'span',
    { class: 'progress' },
    p.fraction !== null ? h('progress', { max: 1, value: p.fraction, 'aria-label': 'progress' }) : '',
    ` ${parts.join(' · ')}`,
  );
}

export function jobPage(main: HTMLElement, id: string): Cleanup {
  const box = notice();
  const body = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const actions = h('div', { class: 'confirm-host' });
  replace(
    main,
    pageHead(`Job ${id}`, h('a', { href: '#/jobs', class: 'button ghost' }, '← Search')),
    box,
    actions,
    body,
  );

  async function load(): Promise<void> {
    try {
      const j = await api('GET', `jobs/${id}`);
      const buttons: HTMLElement[] = [];
      if (j.location === 'hot') {
        buttons.push(
          h(
            'button',
            {
              type: 'button',
              class: 'danger',
              onclick: () =>
                confirmStep({
                  host: actions,
                  title: `Cancel job ${id}?`,
                  preview: [
                    h(
                      'p',
                      null,
                      j.state === 'pending' || j.state === 'waiting'
                        ? `It is ${j.state}: it moves to the DLQ as "cancelled" at once.`
                        : 'It is running: it is asked to stop, then dead-lettered as "cancelled".',
                    ),
                    h('p', { class: 'hint' }, 'Needs the operator role.'),
                  ],
                  confirmLabel: 'Cancel the job',
                  danger: true,
                  onConfirm: async (b) => {
                    await busy(b, box, async () => {
                      const r = await api('POST', `jobs/${id}/cancel`, {});
                      clear(actions);
                      show(
                        box,
                        'ok',
                        `Job ${id}: ${r.result === 'cancelled' ? 'cancelled (now in the DLQ)' : 'cancel requested; the worker stops it'}.`,
                      );
                      await load();
                    });
                  },
                }),
            },
            'Cancel job…',
          ),
        );
      }
      if (j.location === 'dlq') {
        buttons.push(
          h(
            'button',
            {
              type: 'button',
              class: 'primary',
              onclick: () =>
                confirmStep({
                  host: actions,
                  title: `Resurrect job ${id}?`,
                  preview: [
                    h(
                      'p',
                      null,
                      `Back to hot on queue "${j.queue}": pending, attempts reset, idempotency key kept; its message is posted.`,
                    ),
                  ],
                  confirmLabel: 'Resurrect',
                  onConfirm: async (b) => {
                    await busy(b, box, async () => {
                      const r = await api('POST', `dlq/${id}/resurrect`, {});
                      clear(actions);
                      show(
                        box,
                        'ok',
                        `Job ${id} resurrected${r.flowChildren?.length ? `, with ${r.flowChildren.length} flow child${r.flowChildren.length === 1 ? '' : 'ren'} waiting for it again` : ''}${r.posted ? '' : ' (message not posted: the dispatcher runs it)'}.`,
                      );
                      await load();
                    });
                  },
                }),
            },
            'Resurrect…',
          ),
        );
      }
      replace(
        body,
        h('div', { class: 'job-actions' }, ...buttons),
        h(
          'section',
          { class: 'card' },
          kv([
            ['Where', stateBadge(j)],
            ['Queue', h('a', { href: `#/jobs?queue=${encodeURIComponent(j.queue)}&location=${j.location}` }, j.queue)],
            ['Type', j.type],
            [
              'Attempts',
              j.location === 'hot' && j.state === 'processing'
                ? `attempt ${fmtNum(j.attempts)} of ${fmtNum(j.attemptLimit)}`
                : `${fmtNum(j.attempts)} of ${fmtNum(j.attemptLimit)} used`,
            ],
            ['Priority', String(j.priority)],
            ['Tags', j.tags?.length ? j.tags.join(', ') : '—'],
            ['Idempotency key', j.idempotencyKey ? siblingLinks(j.idempotencyKey) : '—'],
            ['Created', fmtTime(j.createdAt)],
            ['Run at', fmtTime(j.runAt)],
            ['Started', fmtTime(j.startedAt)],
            [j.location === 'dlq' ? 'Failed' : 'Finished', fmtTime(j.finishedAt)],
            ['Duration', j.durationMs === null ? '—' : `${fmtNum(j.durationMs)} ms`],
            ['DLQ reason', j.reason ?? '—'],
            ['Lease', j.leaseId ?? '—'],
            ...(j.location === 'hot' && j.leaseExpiresAt
              ? [['Lease expires', relTime(j.leaseExpiresAt)] as [string, Child]]
              : []),
            ...(j.location === 'hot' && j.state === 'processing'
              ? [['Last heartbeat', j.heartbeatAt ? relTime(j.heartbeatAt) : 'none yet'] as [string, Child]]
              : []),
            ['Worker', j.workerId ?? '—'],
            ['Cancel requested', j.cancelRequested ? 'yes' : 'no'],
            ...(j.location === 'hot' ? [['Progress', progressView(j.progress)] as [string, Child]] : []),
          ]),
        ),
        ...flowView(j),
        ...(j.location === 'archive'
          ? [
              h(
                'section',
                { class: 'card' },
                h('h2', null, 'Result'),
                j.result !== undefined ? pre(j.result) : empty('The handler returned nothing.'),
              ),
            ]
          : []),
        h(
          'section',
          { class: 'card' },
          h('h2', null, 'Attempts'),
          attemptsView(j.timeline, j.attemptLimit, j.attempts),
        ),
        h(
          'section',
          { class: 'card' },
          h('h2', null, 'Last error'),
          j.lastError ? pre(j.lastError) : empty('No error recorded.'),
        ),
        h('section', { class: 'card' }, h('h2', null, 'Payload'), copyable(j.payload ?? null, 'payload')),
        h('section', { class: 'card' }, h('h2', null, 'Job log'), jobLogView(j.logs)),
        auditCard(`job:${j.id}`, 'Who acted on this job'),
      );
    } catch (err) {
      replace(body);
      showError(box, err);
    }
  }
  void load();
  return () => undefined;
}

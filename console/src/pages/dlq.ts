// Dead letters: grouped by reason and type; resurrect by selection or by filter and purge by age, always as a
// preview (count and sample) followed by a confirm, with the result shown.
import { h, replace, fmtNum, fmtTime, localToIso, isoToLocal } from '../dom';
import { api, q, ApiError } from '../api';
import {
  busy,
  clear,
  confirmStep,
  empty,
  field,
  go,
  hashParams,
  notice,
  pageHead,
  select,
  show,
  showError,
  table,
  type Cleanup,
} from '../ui';

const REASONS = ['exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired'];
const SCAN = 500;

interface Filter {
  queue?: string;
  type?: string;
  reason?: string;
  failedAfter?: string;
  failedBefore?: string;
  limit: number;
}

function sampleList(ids: string[]): HTMLElement {
  const shown = ids.slice(0, 10);
  return h(
    'p',
    { class: 'sample' },
    'Sample: ',
    ...shown.flatMap((id, i) => [i ? ', ' : '', h('a', { href: `#/jobs/${id}` }, id)]),
    ids.length > shown.length ? ` and ${ids.length - shown.length} more` : '',
  );
}

export function dlqPage(main: HTMLElement): Cleanup {
  const p = hashParams();
  const queue = p.get('queue') ?? '';
  const box = notice();
  const confirmHost = h('div', { class: 'confirm-host' });
  const groupsBox = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const listBox = h('div');
  const queueSel = select('queue', [['', 'all queues']], queue);
  queueSel.addEventListener('change', () => go('/dlq', { queue: queueSel.value || undefined }));

  // Resurrect by filter.
  const fQueue = h('input', { name: 'queue', value: queue, placeholder: 'any', autocomplete: 'off' });
  const fType = h('input', { name: 'type', placeholder: 'any', autocomplete: 'off' });
  const fReason = select('reason', [['', 'any'], ...REASONS.map((r) => [r, r] as [string, string])], '');
  const fAfter = h('input', { type: 'datetime-local', name: 'failedAfter' });
  const fBefore = h('input', { type: 'datetime-local', name: 'failedBefore' });
  const fLimit = h('input', {
    type: 'number',
    name: 'limit',
    value: '100',
    min: '1',
    max: '1000',
    inputmode: 'numeric',
  });
  const filterForm = h(
    'form',
    { class: 'filters', 'aria-labelledby': 'rf-h' },
    field('Queue', fQueue),
    field('Type', fType),
    field('Reason', fReason),
    field('Failed after', fAfter),
    field('Failed before', fBefore),
    field('At most', fLimit, '1–1000 per call'),
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', class: 'primary', 'data-test': 'preview-resurrect' }, 'Preview resurrect'),
    ),
  );
  const filter = (): Filter => ({
    ...(fQueue.value.trim() ? { queue: fQueue.value.trim() } : {}),
    ...(fType.value.trim() ? { type: fType.value.trim() } : {}),
    ...(fReason.value ? { reason: fReason.value } : {}),
    ...(localToIso(fAfter.value) ? { failedAfter: localToIso(fAfter.value) } : {}),
    ...(localToIso(fBefore.value) ? { failedBefore: localToIso(fBefore.value) } : {}),
    limit: Number(fLimit.value || '0'),
  });
  filterForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = filter();
    const btn = ev.submitter instanceof HTMLButtonElement ? ev.submitter : null;
    void busy(btn, box, async () => {
      const preview = await api('POST', 'dlq/resurrect', { ...f, dryRun: true });
      clear(box);
      if (preview.count === 0) {
        show(box, 'info', 'No dead letters match this filter: nothing to resurrect.');
        clear(confirmHost);
        return;
      }
      confirmStep({
        host: confirmHost,
        title: `Resurrect ${preview.count} dead letter${preview.count === 1 ? '' : 's'}?`,
        preview: [
          h(
            'p',
            { 'data-test': 'preview-count' },
            `${preview.count} job${preview.count === 1 ? '' : 's'} match${preview.count === 1 ? 'es' : ''} ${describe(f)}. They go back to hot (pending, attempts reset) and their messages are posted.`,
          ),
          sampleList(preview.ids),
        ],
        confirmLabel: `Resurrect ${preview.count}`,
        onConfirm: async (b) => {
          await busy(b, box, async () => {
            const r = await api('POST', 'dlq/resurrect', { ...f, dryRun: false });
            clear(confirmHost);
            show(
              box,
              'ok',
              h(
                'span',
                { 'data-test': 'result' },
                `Resurrected ${r.count} job${r.count === 1 ? '' : 's'} (${r.posted} message${r.posted === 1 ? '' : 's'} posted): `,
              ),
              sampleList(r.ids),
            );
            await loadGroups();
          });
        },
      });
    });
  });

  // Purge by age.
  const pQueue = h('input', { name: 'queue', value: queue, placeholder: 'every queue', autocomplete: 'off' });
  const pOlder = h('input', {
    type: 'datetime-local',
    name: 'olderThan',
    value: isoToLocal(new Date(Date.now() - 7 * 86_400_000).toISOString()),
    required: true,
  });
  const purgeForm = h(
    'form',
    { class: 'filters', 'aria-labelledby': 'pg-h' },
    field('Queue', pQueue),
    field('Failed before', pOlder),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'danger' }, 'Preview purge')),
  );
  purgeForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    // The input has minute precision: a minute still running (or later) means "up to now" (the API refuses the future).
    const picked = localToIso(pOlder.value);
    const olderThan = picked && new Date(picked).getTime() > Date.now() ? new Date().toISOString() : picked;
    const qn = pQueue.value.trim() || undefined;
    const btn = ev.submitter instanceof HTMLButtonElement ? ev.submitter : null;
    void busy(btn, box, async () => {
      if (!olderThan) throw new ApiError(400, 'invalid_request', 'give a date and time', 'olderThan', null);
      const preview = await api('POST', 'purge', {
        target: 'dlq',
        olderThan,
        ...(qn ? { queue: qn } : {}),
        dryRun: true,
      });
      const sample = await api('GET', `jobs${q({ location: 'dlq', to: olderThan, queue: qn, limit: 10 })}`);
      clear(box);
      if (preview.matched === 0) {
        show(box, 'info', 'No dead letters failed before that instant: nothing to purge.');
        clear(confirmHost);
        return;
      }
      confirmStep({
        host: confirmHost,
        title: `Delete ${preview.matched}${preview.capped ? '+' : ''} dead letters for good?`,
        preview: [
          h(
            'p',
            null,
            `${preview.matched}${preview.capped ? ' or more' : ''} DLQ jobs${qn ? ` of queue "${qn}"` : ''} failed before ${fmtTime(olderThan)}. Purged rows cannot be resurrected.`,
          ),
          sampleList((sample.items as any[]).map((j) => j.id)),
        ],
        confirmLabel: 'Delete them',
        danger: true,
        onConfirm: async (b) => {
          await busy(b, box, async () => {
            const r = await api('POST', 'purge', {
              target: 'dlq',
              olderThan,
              ...(qn ? { queue: qn } : {}),
              dryRun: false,
            });
            clear(confirmHost);
            show(
              box,
              'ok',
              `Deleted ${r.deleted} dead letter${r.deleted === 1 ? '' : 's'} in ${r.batches} batch${r.batches === 1 ? '' : 'es'}${r.mayHaveMore ? '; more may remain: purge again' : ''}.`,
            );
            await loadGroups();
          });
        },
      });
    });
  });

  replace(
    main,
    pageHead('Dead letters', field('Queue', queueSel)),
    box,
    confirmHost,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'groups-h' },
      h('h2', { id: 'groups-h' }, 'By reason and type'),
      groupsBox,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'list-h' },
      h('h2', { id: 'list-h' }, 'Newest dead letters'),
      listBox,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'rf-h' },
      h('h2', { id: 'rf-h' }, 'Resurrect by filter'),
      h(
        'p',
        { class: 'hint' },
        'Preview first; the confirm resurrects what the same filter matches then (operator role).',
      ),
      filterForm,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'pg-h' },
      h('h2', { id: 'pg-h' }, 'Purge by age'),
      h(
        'p',
        { class: 'hint' },
        'The API deletes dead letters by queue and age (POST /api/ops/purge, operator role); single jobs are not deleted one by one.',
      ),
      purgeForm,
    ),
  );

  function describe(f: Filter): string {
    const parts = [
      f.queue && `queue "${f.queue}"`,
      f.type && `type "${f.type}"`,
      f.reason && `reason "${f.reason}"`,
      f.failedAfter && `failed after ${fmtTime(f.failedAfter)}`,
      f.failedBefore && `failed before ${fmtTime(f.failedBefore)}`,
    ].filter(Boolean);
    return parts.length ? parts.join(', ') : 'any filter';
  }

  function useGroup(g: { queue: string | undefined; type: string; reason: string }): void {
    fQueue.value = g.queue ?? '';
    fType.value = g.type;
    fReason.value = g.reason;
    filterForm.requestSubmit();
  }

  async function loadGroups(): Promise<void> {
    try {
      const [page, stats] = await Promise.all([
        api('GET', `jobs${q({ location: 'dlq', queue: queue || undefined, limit: SCAN })}`),
        api('GET', 'stats'),
      ]);
      const queues = (stats.queues as any[]).map((x) => x.queue as string);
      replace(
        queueSel,
        h('option', { value: '' }, 'all queues'),
        ...queues.map((n) => h('option', { value: n, ...(n === queue ? { selected: true } : {}) }, n)),
      );
      const total = (stats.queues as any[]).filter((x) => !queue || x.queue === queue).reduce((a, x) => a + x.dlq, 0);
      const items = page.items as any[];
      const groups = new Map<
        string,
        { reason: string; type: string; count: number; newest: string; queues: Set<string> }
      >();
      for (const j of items) {
        const k = `${j.reason}\u0000${j.type}`;
        const g = groups.get(k) ?? {
          reason: j.reason ?? 'unknown',
          type: j.type,
          count: 0,
          newest: j.finishedAt,
          queues: new Set<string>(),
        };
        g.count++;
        g.queues.add(j.queue);
        if (j.finishedAt > g.newest) g.newest = j.finishedAt;
        groups.set(k, g);
      }
      const sorted = [...groups.values()].sort((a, b) => b.count - a.count);
      replace(
        groupsBox,
        sorted.length === 0
          ? empty(
              queue ? `No dead letters on queue "${queue}".` : 'No dead letters. Jobs that fail for good land here.',
            )
          : [
              table(
                ['reason', 'type', 'jobs', 'queues', 'newest failure', ''],
                sorted.map((g) => [
                  g.reason,
                  g.type,
                  fmtNum(g.count),
                  [...g.queues].join(', '),
                  fmtTime(g.newest),
                  h(
                    'button',
                    {
                      type: 'button',
                      class: 'small',
                      onclick: () =>
                        useGroup({
                          queue: queue || (g.queues.size === 1 ? [...g.queues][0] : undefined),
                          type: g.type,
                          reason: g.reason,
                        }),
                    },
                    'Resurrect group…',
                  ),
                ]),
                {
                  caption: page.nextAfterId
                    ? `Grouped over the newest ${items.length} of ${fmtNum(total)} dead letters`
                    : `${fmtNum(items.length)} dead letter${items.length === 1 ? '' : 's'}`,
                },
              ),
            ],
      );
      renderList(items.slice(0, 50));
    } catch (err) {
      replace(groupsBox);
      showError(box, err);
    }
  }

  function renderList(items: any[]): void {
    if (items.length === 0) {
      replace(listBox, empty('Nothing to select.'));
      return;
    }
    const boxes = new Map<string, HTMLInputElement>();
    const count = h('span', { class: 'muted', 'aria-live': 'polite' }, '0 selected');
    const resurrectSel = h(
      'button',
      { type: 'button', class: 'primary', disabled: true, 'data-test': 'resurrect-selected' },
      'Resurrect selected…',
    );
    const update = () => {
      const n = [...boxes.values()].filter((b) => b.checked).length;
      count.textContent = `${n} selected`;
      resurrectSel.disabled = n === 0;
    };
    const all = h('input', { type: 'checkbox', 'aria-label': 'Select all shown' });
    all.addEventListener('change', () => {
      for (const b of boxes.values()) b.checked = all.checked;
      update();
    });
    const rows = items.map((j) => {
      const cb = h('input', { type: 'checkbox', 'aria-label': `Select job ${j.id}`, value: j.id });
      cb.addEventListener('change', update);
      boxes.set(j.id, cb);
      return [
        cb,
        h('a', { href: `#/jobs/${j.id}` }, j.id),
        j.queue,
        j.type,
        j.reason ?? '—',
        fmtNum(j.attempts),
        fmtTime(j.finishedAt),
        j.lastError ? h('span', { class: 'clip', title: j.lastError }, j.lastError) : '—',
      ];
    });
    resurrectSel.addEventListener('click', () => {
      const chosen = items.filter((j) => boxes.get(j.id)?.checked);
      confirmStep({
        host: confirmHost,
        title: `Resurrect ${chosen.length} selected job${chosen.length === 1 ? '' : 's'}?`,
        preview: [
          h(
            'p',
            { 'data-test': 'preview-count' },
            `${chosen.length} job${chosen.length === 1 ? '' : 's'} go back to hot (pending, attempts reset) and their messages are posted.`,
          ),
          h(
            'ul',
            { class: 'sample' },
            ...chosen.slice(0, 10).map((j) => h('li', null, `${j.id} · ${j.type} · ${j.reason}`)),
          ),
        ],
        confirmLabel: `Resurrect ${chosen.length}`,
        onConfirm: async (b) => {
          await busy(b, box, async () => {
            const done: string[] = [];
            const failed: string[] = [];
            for (const j of chosen) {
              try {
                await api('POST', `dlq/${j.id}/resurrect`, {});
                done.push(j.id);
              } catch (err) {
                failed.push(`${j.id}: ${err instanceof ApiError ? err.describe() : String(err)}`);
              }
            }
            clear(confirmHost);
            show(
              box,
              failed.length ? 'error' : 'ok',
              h('span', { 'data-test': 'result' }, `Resurrected ${done.length} of ${chosen.length}.`),
              failed.length ? h('ul', null, ...failed.map((f) => h('li', null, f))) : sampleList(done),
            );
            await loadGroups();
          });
        },
      });
    });
    replace(
      listBox,
      h(
        'div',
        { class: 'pager' },
        h('label', { class: 'check inline' }, all, h('span', null, 'all shown')),
        count,
        resurrectSel,
      ),
      table(['', 'id', 'queue', 'type', 'reason', 'attempts', 'failed', 'last error'], rows, {
        caption: `The newest ${items.length}`,
        className: 'jobs-table',
      }),
    );
  }

  void loadGroups();
  return () => undefined;
}

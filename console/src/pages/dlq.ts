// Dead letters: grouped in SQL by reason, type and queue (paged), the list paged newest first; resurrect by
// selection or by filter and purge by age, always as a preview (an exact or "at least" count and the ids) followed
// by a confirm that acts on exactly the previewed set and reports what changed meanwhile.
import { h, replace, fmtNum, fmtTime, localToIso, isoToLocal } from '../dom';
import { arrivedList, countText, skippedList } from '../bulk';
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

const REASONS = ['exhausted', 'fatal', 'timeout', 'cancelled', 'zombie', 'expired', 'parent_failed', 'skipped'];
const GROUPS_PAGE = 20;
const LIST_PAGE = 50;

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
      const total = countText(preview.matched, preview.count);
      const all = preview.matched?.exact && preview.matched.count === preview.count;
      confirmStep({
        host: confirmHost,
        title: `Resurrect ${preview.count} dead letter${preview.count === 1 ? '' : 's'}?`,
        preview: [
          h(
            'p',
            { 'data-test': 'preview-count' },
            `${total} job${total === '1' ? ' matches' : 's match'} ${describe(f)}. ` +
              (all
                ? `${preview.count === 1 ? 'It goes' : 'They go'} back to hot (pending, attempts reset) and ${preview.count === 1 ? 'its message is' : 'their messages are'} posted.`
                : `The ${fmtNum(preview.count)} listed here (oldest failure first, up to the limit) go back to hot; the rest stay.`),
          ),
          sampleList(preview.ids),
          h(
            'p',
            { class: 'hint' },
            'The confirm acts on exactly these ids: a job that arrives meanwhile is reported, not resurrected.',
          ),
        ],
        confirmLabel: `Resurrect ${preview.count}`,
        onConfirm: async (b) => {
          await busy(b, box, async () => {
            const r = await api('POST', 'dlq/resurrect', { ...f, dryRun: false, ids: preview.ids });
            clear(confirmHost);
            reportResurrect(r, preview.ids.length);
            await refresh();
          });
        },
      });
    });
  });

  function reportResurrect(r: any, previewed: number): void {
    const changed = (r.skipped?.length ?? 0) > 0 || (r.arrivedAfterPreview?.count ?? 0) > 0;
    show(
      box,
      changed ? 'info' : 'ok',
      h(
        'span',
        { 'data-test': 'result' },
        // fromPreview: previewed jobs resurrected; flow children came back with them and are counted apart, so
        // "of the N previewed" never counts a skipped id.
        `Resurrected ${r.fromPreview} job${r.fromPreview === 1 ? '' : 's'} of the ${previewed} previewed${
          r.flowChildren?.length
            ? `, and ${r.flowChildren.length} flow child${r.flowChildren.length === 1 ? '' : 'ren'} with them (${r.count} job${r.count === 1 ? '' : 's'} in all)`
            : ''
        } (${r.posted} message${r.posted === 1 ? '' : 's'} posted): `,
      ),
      sampleList(r.ids),
      skippedList(r.skipped ?? []),
      arrivedList(r.arrivedAfterPreview, 'resurrected'),
    );
  }

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
        title: `Delete ${preview.capped ? '≥ ' : ''}${fmtNum(preview.matched)} dead letter${preview.matched === 1 && !preview.capped ? '' : 's'} for good?`,
        preview: [
          h(
            'p',
            null,
            `${preview.capped ? 'At least ' : ''}${fmtNum(preview.matched)} DLQ job${preview.matched === 1 && !preview.capped ? '' : 's'}${qn ? ` of queue "${qn}"` : ''} failed before ${fmtTime(olderThan)}. Purged rows cannot be resurrected. Dead letters that fail after this preview are not in the set: it can only shrink.`,
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
              ...(preview.capped ? {} : { previewMatched: preview.matched }),
            });
            clear(confirmHost);
            show(
              box,
              'ok',
              `Deleted ${r.deleted} dead letter${r.deleted === 1 ? '' : 's'} in ${r.batches} batch${r.batches === 1 ? '' : 'es'}${r.mayHaveMore ? '; more may remain: purge again' : ''}.` +
                (r.leftMeanwhile
                  ? ` ${r.leftMeanwhile} previewed row${r.leftMeanwhile === 1 ? ' had' : 's had'} left meanwhile (resurrected or purged).`
                  : ''),
            );
            await refresh();
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
      h('h2', { id: 'groups-h' }, 'By reason, type and queue'),
      groupsBox,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'list-h' },
      h('h2', { id: 'list-h' }, 'Dead letters, newest first'),
      listBox,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'rf-h' },
      h('h2', { id: 'rf-h' }, 'Resurrect by filter'),
      h(
        'p',
        { class: 'hint' },
        'Preview first; the confirm resurrects exactly the previewed jobs and reports any that changed or arrived meanwhile (operator role).',
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

  let groupOffset = 0;
  const listStack: (string | undefined)[] = []; // afterIds of the earlier list pages
  let listAfter: string | undefined;

  async function refresh(): Promise<void> {
    await Promise.all([loadGroups(), loadList()]);
  }

  async function loadGroups(): Promise<void> {
    try {
      const [page, stats] = await Promise.all([
        api('GET', `dlq/groups${q({ queue: queue || undefined, offset: groupOffset, limit: GROUPS_PAGE })}`),
        api('GET', 'stats'),
      ]);
      const queues = (stats.queues as any[]).map((x) => x.queue as string);
      replace(
        queueSel,
        h('option', { value: '' }, 'all queues'),
        ...queues.map((n) => h('option', { value: n, ...(n === queue ? { selected: true } : {}) }, n)),
      );
      const items = page.items as any[];
      if (items.length === 0 && groupOffset > 0) {
        groupOffset = 0;
        await loadGroups();
        return;
      }
      const pager = h(
        'div',
        { class: 'pager' },
        groupOffset > 0
          ? h(
              'button',
              {
                type: 'button',
                onclick: () => {
                  groupOffset = Math.max(0, groupOffset - GROUPS_PAGE);
                  void loadGroups();
                },
              },
              '← Larger groups',
            )
          : null,
        h(
          'span',
          { class: 'muted', 'data-test': 'groups-range' },
          items.length
            ? `groups ${fmtNum(groupOffset + 1)}–${fmtNum(groupOffset + items.length)} of ${fmtNum(page.totalGroups)}`
            : '',
        ),
        groupOffset + items.length < page.totalGroups
          ? h(
              'button',
              {
                type: 'button',
                onclick: () => {
                  groupOffset += GROUPS_PAGE;
                  void loadGroups();
                },
              },
              'Smaller groups →',
            )
          : null,
      );
      replace(
        groupsBox,
        items.length === 0
          ? empty(
              queue ? `No dead letters on queue "${queue}".` : 'No dead letters. Jobs that fail for good land here.',
            )
          : [
              table(
                ['reason', 'type', 'queue', 'jobs', 'newest failure', ''],
                items.map((g) => [
                  g.reason,
                  g.type,
                  g.queue,
                  fmtNum(g.jobs),
                  fmtTime(g.newestFailedAt),
                  h(
                    'button',
                    {
                      type: 'button',
                      class: 'small',
                      onclick: () => useGroup({ queue: g.queue, type: g.type, reason: g.reason }),
                    },
                    'Resurrect group…',
                  ),
                ]),
                {
                  caption: `${fmtNum(page.totalJobs)} dead letter${page.totalJobs === 1 ? '' : 's'} in ${fmtNum(page.totalGroups)} group${page.totalGroups === 1 ? '' : 's'}${page.more ? `: the newest ${fmtNum(page.scanRows)} counted, older ones not` : ', counted exactly'}`,
                  className: 'groups-table',
                },
              ),
              pager,
            ],
      );
    } catch (err) {
      replace(groupsBox);
      showError(box, err);
    }
  }

  async function loadList(): Promise<void> {
    try {
      const page = await api(
        'GET',
        `jobs${q({ location: 'dlq', queue: queue || undefined, limit: LIST_PAGE, afterId: listAfter })}`,
      );
      renderList(page.items as any[], page.nextAfterId as string | null);
    } catch (err) {
      replace(listBox);
      showError(box, err);
    }
  }

  function renderList(items: any[], nextAfterId: string | null): void {
    const pager = h(
      'div',
      { class: 'pager' },
      listStack.length
        ? h(
            'button',
            {
              type: 'button',
              onclick: () => {
                listAfter = listStack.pop();
                void loadList();
              },
            },
            '← Newer',
          )
        : null,
      h('span', { class: 'muted' }, `${items.length} on this page`),
      nextAfterId
        ? h(
            'button',
            {
              type: 'button',
              onclick: () => {
                listStack.push(listAfter);
                listAfter = nextAfterId;
                void loadList();
              },
            },
            'Older →',
          )
        : null,
    );
    if (items.length === 0) {
      replace(listBox, empty('Nothing to select.'), listStack.length ? pager : null);
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
            const ids = chosen.map((j) => j.id as string);
            const r = await api('POST', 'dlq/resurrect', { ids, limit: ids.length, dryRun: false });
            clear(confirmHost);
            reportResurrect(r, ids.length);
            await refresh();
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
        caption: listStack.length ? `${items.length} older dead letters` : `The newest ${items.length}`,
        className: 'jobs-table',
      }),
      pager,
    );
  }

  void refresh();
  return () => undefined;
}

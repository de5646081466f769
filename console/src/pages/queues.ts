// Queues: pause/resume and limits (concurrency, attempts, zombie handling, retention), with the API's
// validation messages shown next to the form; lowering a retention that would purge rows asks for confirmation
// with the API's preview of the counts.
import { h, replace, fmtNum, fmtSeconds, fmtAge } from '../dom';
import { api, ApiError } from '../api';
import { auditCard } from './audit';
import {
  badge,
  busy,
  clear,
  confirmStep,
  empty,
  field,
  notice,
  pageHead,
  select,
  show,
  showError,
  table,
  warningLabel,
  type Cleanup,
} from '../ui';

const NUMERIC: [string, string, string][] = [
  ['maxAttempts', 'Max attempts', '1–1000'],
  ['zombieTimeoutSeconds', 'Zombie timeout (s)', 'no heartbeat for this long = zombie'],
  ['archiveRetentionSeconds', 'Archive retention (s)', '≥ 60'],
  ['dlqRetentionSeconds', 'DLQ retention (s)', '≥ 60'],
  ['metricsRetentionSeconds', 'Metrics retention (s)', '≥ 60'],
];

export function queuesPage(main: HTMLElement): Cleanup {
  const box = notice();
  const list = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const editor = h('div', { class: 'confirm-host' });
  replace(main, pageHead('Queues'), box, editor, list);

  const RETENTION: [string, string][] = [
    ['archiveRetentionSeconds', 'archive'],
    ['dlqRetentionSeconds', 'DLQ'],
    ['metricsRetentionSeconds', 'metrics'],
  ];

  function edit(qs: any): void {
    let retentionConfirmed = false;
    const conc = h('input', {
      name: 'maxConcurrency',
      inputmode: 'numeric',
      value: qs.maxConcurrency === null ? '' : String(qs.maxConcurrency),
      placeholder: 'unlimited',
    });
    const inputs = new Map<string, HTMLInputElement>();
    const fields = NUMERIC.map(([k, label, hint]) => {
      const i = h('input', { name: k, inputmode: 'numeric', value: String(qs[k]) });
      inputs.set(k, i);
      return field(label, i, hint);
    });
    const policy = select(
      'zombiePolicy',
      [
        ['retry', 'retry (while attempts remain)'],
        ['dlq', 'dead-letter at once'],
      ],
      qs.zombiePolicy,
    );
    const formBox = notice();
    const confirmHost = h('div', { class: 'confirm-host' });
    const save = h('button', { type: 'submit', class: 'primary' }, 'Save');
    const form = h(
      'form',
      { class: 'filters', 'aria-label': `Limits of ${qs.name}` },
      field('Max concurrency', conc, 'across all hosts; empty = unlimited'),
      ...fields,
      field('Zombie policy', policy),
      h(
        'div',
        { class: 'actions' },
        save,
        h(
          'button',
          {
            type: 'button',
            class: 'ghost',
            onclick: () => {
              clear(editor);
              refocus(`limits-${qs.name}`);
            },
          },
          'Close',
        ),
      ),
    );
    // One save at a time: the retention warning's confirm submits the form itself (requestSubmit), which the disabled
    // Save button does not stop, so a double click on it sent the PATCH twice.
    let saving = false;
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (saving) return;
      const patch: Record<string, unknown> = {};
      const num = (v: string) => (/^-?\d+$/.test(v.trim()) ? Number(v.trim()) : v.trim());
      const c = conc.value.trim() === '' ? null : num(conc.value);
      if (c !== qs.maxConcurrency) patch.maxConcurrency = c;
      for (const [k, i] of inputs) if (String(num(i.value)) !== String(qs[k])) patch[k] = num(i.value);
      if (policy.value !== qs.zombiePolicy) patch.zombiePolicy = policy.value;
      // Nothing changed: nothing to send (the API refuses an empty change, and that refusal was all it showed).
      if (Object.keys(patch).length === 0) {
        show(formBox, 'info', h('span', { 'data-test': 'nothing-to-save' }, 'Nothing to save: no value was changed.'));
        return;
      }
      // Lowering a retention deletes rows at the next maintenance pass, for good: ask first.
      const lowered = RETENTION.filter(([k]) => typeof patch[k] === 'number' && (patch[k] as number) < Number(qs[k]));
      if (lowered.length && !retentionConfirmed) {
        const yes = h(
          'button',
          { type: 'button', class: 'danger', 'data-test': 'confirm-retention' },
          'Lower retention and save',
        );
        const back = h('button', { type: 'button', class: 'ghost' }, 'Back');
        yes.addEventListener('click', () => {
          retentionConfirmed = true;
          form.requestSubmit();
        });
        back.addEventListener('click', () => {
          clear(formBox);
          save.focus();
        });
        replace(
          formBox,
          h(
            'div',
            { class: 'notice info', role: 'group', 'aria-label': 'Confirm lower retention' },
            h(
              'p',
              { 'data-test': 'retention-warning' },
              lowered
                .map(
                  ([k, what]) =>
                    `${what} retention ${fmtSeconds(Number(qs[k]))} → ${fmtSeconds(patch[k] as number)}: ${what === 'metrics' ? 'buckets' : 'rows'} older than ${fmtSeconds(patch[k] as number)} are deleted at the next maintenance pass, for good.`,
                )
                .join(' '),
            ),
            h('div', { class: 'actions' }, yes, back),
          ),
        );
        yes.focus();
        return;
      }
      retentionConfirmed = false;
      // Compare-and-set: the values this form showed. Changed meanwhile (another operator, another instance): the
      // API changes nothing and answers 409 naming the setting and its value now.
      const expected = Object.fromEntries(Object.keys(patch).map((k) => [k, qs[k]]));
      const send = async (body: Record<string, unknown>) => {
        await api('PATCH', `queues/${encodeURIComponent(qs.name)}`, { ...body, expected });
        clear(editor);
        show(box, 'ok', `Queue "${qs.name}" saved: ${Object.keys(patch).join(', ')}.`);
        await load();
        refocus(`limits-${qs.name}`);
      };
      saving = true;
      void busy(save, formBox, async () => {
        for (const i of form.querySelectorAll('[aria-invalid]')) i.removeAttribute('aria-invalid');
        clear(confirmHost);
        try {
          await send(patch);
        } catch (err) {
          // A lowered retention that would purge rows: the API changed nothing and says how many; ask first.
          if (err instanceof ApiError && err.status === 409 && err.body?.preview) {
            const preview = err.body.preview as Record<
              string,
              { from: number; to: number; wouldPurge: number; capped: boolean }
            >;
            confirmStep({
              host: confirmHost,
              title: 'Lower the retention and purge these rows?',
              danger: true,
              preview: [
                h(
                  'ul',
                  { 'data-test': 'retention-preview' },
                  ...Object.entries(preview).map(([target, p]) =>
                    h(
                      'li',
                      null,
                      `${target}: ${fmtSeconds(p.from)} → ${fmtSeconds(p.to)}; the next maintenance pass deletes ${fmtNum(p.wouldPurge)}${p.capped ? '+' : ''} rows`,
                    ),
                  ),
                ),
                h('p', { class: 'hint' }, 'Purged rows cannot be resurrected.'),
              ],
              confirmLabel: 'Lower and purge',
              onConfirm: (button) =>
                busy(button, formBox, () => send({ ...patch, confirmPurge: true })).then(() => undefined),
            });
            return;
          }
          if (err instanceof ApiError && err.field)
            form.querySelector(`[name="${CSS.escape(err.field)}"]`)?.setAttribute('aria-invalid', 'true');
          throw err;
        }
      }).finally(() => {
        saving = false;
      });
    });
    replace(
      editor,
      h(
        'section',
        { class: 'confirm', 'aria-label': `Edit ${qs.name}` },
        h('h3', null, `Limits of "${qs.name}"`),
        formBox,
        form,
        confirmHost,
        h('p', { class: 'hint' }, 'Changing limits needs the operator role.'),
        auditCard(`queue:${qs.name}`, 'Who acted on this queue'),
      ),
    );
    conc.focus();
  }

  // Closing the editor gives focus back to the queue's "Limits…" button (rebuilt by a reload).
  function refocus(test: string): void {
    list.querySelector<HTMLElement>(`[data-test="${CSS.escape(test)}"]`)?.focus();
  }

  async function load(): Promise<void> {
    try {
      const [queues, stats, warnings] = await Promise.all([
        api('GET', 'queues'),
        api('GET', 'stats'),
        api('GET', 'warnings'),
      ]);
      const byName = new Map((stats.queues as any[]).map((s) => [s.queue, s]));
      // The overview's warnings, per queue: the message on hover.
      const warned = new Map<string, HTMLElement[]>();
      for (const w of warnings.items as any[])
        for (const qn of w.queue ? [w.queue] : (w.queues ?? []))
          warned.set(qn, [
            ...(warned.get(qn) ?? []),
            h('span', { title: w.message, 'data-kind': w.kind }, badge(warningLabel(w.kind), 'bad')),
          ]);
      const items = queues.items as any[];
      replace(
        list,
        items.length === 0
          ? empty('No queues yet: a queue is created with its first job.')
          : table(
              [
                'queue',
                'state',
                'pending',
                'DLQ',
                'lag',
                'concurrency',
                'attempts',
                'zombie',
                'retention (archive / DLQ / metrics)',
                '',
              ],
              items.map((qs) => {
                const st = byName.get(qs.name);
                const toggle = h(
                  'button',
                  { type: 'button', class: qs.paused ? 'primary small' : 'small', 'data-test': `toggle-${qs.name}` },
                  qs.paused ? 'Resume' : 'Pause',
                );
                toggle.addEventListener(
                  'click',
                  () =>
                    void busy(toggle, box, async () => {
                      const r = await api(
                        'POST',
                        `queues/${encodeURIComponent(qs.name)}/${qs.paused ? 'resume' : 'pause'}`,
                        {},
                      );
                      show(
                        box,
                        'ok',
                        r.paused
                          ? `Queue "${qs.name}" paused: no new claims until resumed` +
                              (typeof r.inFlight !== 'number'
                                ? '.'
                                : r.inFlight === 0
                                  ? '; no job in flight.'
                                  : `; ${r.inFlight} job${r.inFlight === 1 ? '' : 's'} already claimed run to their end.`)
                          : `Queue "${qs.name}" resumed.`,
                      );
                      await load();
                    }),
                );
                return [
                  qs.name,
                  h(
                    'span',
                    { class: 'badges' },
                    qs.paused ? badge('paused', 'warn') : badge('running', 'ok'),
                    ...(warned.get(qs.name) ?? []),
                  ),
                  fmtNum(st?.pending ?? 0),
                  fmtNum(st?.dlq ?? 0),
                  fmtAge(st?.oldestDueAgeMs ?? null),
                  qs.maxConcurrency === null ? 'unlimited' : fmtNum(qs.maxConcurrency),
                  fmtNum(qs.maxAttempts),
                  `${fmtSeconds(qs.zombieTimeoutSeconds)}, then ${qs.zombiePolicy}`,
                  `${fmtSeconds(qs.archiveRetentionSeconds)} / ${fmtSeconds(qs.dlqRetentionSeconds)} / ${fmtSeconds(qs.metricsRetentionSeconds)}`,
                  h(
                    'div',
                    { class: 'row-actions' },
                    toggle,
                    h(
                      'button',
                      {
                        type: 'button',
                        class: 'small ghost',
                        'data-test': `limits-${qs.name}`,
                        onclick: () => edit(qs),
                      },
                      'Limits…',
                    ),
                  ),
                ];
              }),
              {
                caption: 'Pause, resume and limit changes need the operator role.',
                className: 'queues-table with-actions',
              },
            ),
      );
    } catch (err) {
      replace(list);
      showError(box, err);
    }
  }
  void load();
  return () => undefined;
}

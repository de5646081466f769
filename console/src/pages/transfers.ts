// Transfers: configured transfers (start, pause/resume, schedule, freshness), batches (state in operator words, status, next action), and a
// batch's detail with its journal events as a timeline (resume, reconcile, abandon).
import { h, replace, fmtNum, fmtTime } from '../dom';
import { api, q } from '../api';
import {
  badge,
  busy,
  clear,
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

const STATES = ['extracting', 'staged', 'applying', 'committed', 'failed', 'unresolved'];

export const STATE_WORDS: Record<string, string> = {
  extracting: 'Window reserved; extracting from the source',
  staged: 'Staged and verified on the target; not applied yet',
  applying: 'Applying; outcome not known yet',
  committed: 'Committed on the target',
  failed: 'Failed; will not be retried',
  unresolved: 'Unresolved: the target could not yet say whether it committed',
};

// The server writes times into its texts as ISO UTC ("committed at 2026-12-02T09:15:00.000Z"); shown here in the
// browser's local time like every other time on the page, the UTC instant kept in the tooltip.
const ISO_INSTANT = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z/g;
function localTimes(text: string): (string | HTMLElement)[] {
  const out: (string | HTMLElement)[] = [];
  let last = 0;
  for (const m of text.matchAll(ISO_INSTANT)) {
    out.push(text.slice(last, m.index), h('time', { datetime: m[0], title: m[0] }, fmtTime(m[0])));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

export function statusBadge(b: any): HTMLElement {
  return badge(
    b.status,
    b.status === 'committed' ? 'ok' : b.status === 'unresolved' ? 'warn' : b.state === 'failed' ? 'bad' : 'info',
  );
}

// Age of the last committed window, the freshness the alert watches (transfer-freshness, docs/transfer.md).
export function ageWords(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return 'never';
  if (seconds < 90) return `${seconds} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} days ago`;
}

function freshness(t: any): HTMLElement | string {
  if (!t.lastCommitted) return 'never';
  return h(
    'span',
    { title: `up to ${t.boundary.column ?? 'version'} ${t.lastCommitted.high}`, 'data-test': `fresh-${t.name}` },
    ageWords(t.secondsSinceCommit),
  );
}

// Rows at the source after the last committed window (GET /transfers counts them up to
// KEEL_TRANSFER_ROWS_BEHIND_CAP, a count reused for 30 s): "1,000,000+" when the count stopped at the cap.
export function rowsBehindWords(r: { rows: number; capped: boolean } | null | undefined): string {
  if (!r) return '—';
  if (r.rows === 0) return 'caught up';
  return `${fmtNum(r.rows)}${r.capped ? '+' : ''} rows`;
}

function rowsBehind(t: any): HTMLElement {
  const r = t.rowsBehind;
  return h(
    'span',
    {
      title: r ? `counted at the source at ${r.countedAt}${r.capped ? ' (stopped at the cap)' : ''}` : 'not counted',
      'data-test': `behind-${t.name}`,
    },
    rowsBehindWords(r),
  );
}

// Pause / resume one transfer (operator role): persisted in the journal; the timer, catch-up and the queue steps
// honour it.
function pauseButton(t: any, box: HTMLElement, reload: () => Promise<void>): HTMLElement {
  const b = h(
    'button',
    { type: 'button', class: 'small', 'data-test': `${t.paused ? 'resume' : 'pause'}-${t.name}` },
    t.paused ? 'Resume' : 'Pause',
  );
  b.addEventListener(
    'click',
    () =>
      void busy(b, box, async () => {
        const name = encodeURIComponent(t.name);
        if (t.paused) {
          const r = await api('POST', `transfers/${name}/resume`, {});
          show(
            box,
            'ok',
            `Transfer "${t.name}" resumed${r.openBatch ? `; its open batch ${r.openBatch.batchId.slice(0, 8)} was ${r.openBatch.posted ? 'queued again' : 'not queued (not retryable)'}` : ''}${r.openReplays ? `; open replay batches queued again: ${r.openReplays.filter((x: { posted: boolean }) => x.posted).length} of ${r.openReplays.length}` : ''}.`,
          );
        } else {
          const reason = window.prompt(`Pause transfer "${t.name}": reason (optional)`);
          if (reason === null) return;
          await api('POST', `transfers/${name}/pause`, reason.trim() ? { reason: reason.trim() } : {});
          show(box, 'ok', `Transfer "${t.name}" paused: no new batch, and its open batch stays where it is.`);
        }
        await reload();
      }),
  );
  return b;
}

// Replay a committed range (operator role): bounds asked, the plan previewed (batches and rows covered), confirmed.
function replayButton(t: any, box: HTMLElement): HTMLElement {
  const b = h('button', { type: 'button', class: 'small', 'data-test': `replay-${t.name}` }, 'Replay…');
  b.addEventListener(
    'click',
    () =>
      void busy(b, box, async () => {
        const lowText = window.prompt(
          `Replay "${t.name}": low bound (a committed batch's low; empty = from the beginning)`,
        );
        if (lowText === null) return;
        const high = window.prompt(`Replay "${t.name}": high bound (a committed batch's high)`);
        if (!high || !high.trim()) return;
        const range = { low: lowText.trim() === '' ? null : lowText.trim(), high: high.trim() };
        const p = await api('POST', `transfers/${encodeURIComponent(t.name)}/replay`, { ...range, preview: true });
        const ok = window.confirm(
          `Send (${range.low ?? '−∞'}, ${range.high}] again from the source as it is now: ${p.plan.batches.length} committed batch(es), ${fmtNum(p.plan.rows)} rows, as one new batch. Go on?`,
        );
        if (!ok) return;
        const r = await api('POST', `transfers/${encodeURIComponent(t.name)}/replay`, range);
        show(
          box,
          'ok',
          `Replay batch ${r.batch.batchId} created (${fmtNum(r.batch.rowCount)} rows in the manifest)${r.posted ? ' and queued' : '; its message was not posted: resume it'}. `,
          h('a', { href: `#/transfers/batches/${r.batch.batchId}` }, 'Follow it →'),
        );
      }),
  );
  return b;
}

// Re-baseline a changes transfer (operator role): the preview says what it would do (or why it is refused now),
// then a confirm, then the baseline's first batch is created and queued (catch-up chains its key windows).
function rebaselineButton(t: any, box: HTMLElement, reload: () => Promise<void>): HTMLElement {
  const b = h('button', { type: 'button', class: 'small', 'data-test': `rebaseline-${t.name}` }, 'Re-baseline…');
  b.addEventListener(
    'click',
    () =>
      void busy(b, box, async () => {
        const path = `transfers/${encodeURIComponent(t.name)}/rebaseline`;
        const p = await api('POST', path, { preview: true });
        if (!p.possible) return show(box, 'info', p.effect);
        if (!window.confirm(`Re-baseline "${t.name}"?\n\n${p.effect}`)) return;
        const r = await api('POST', path, {});
        if (!r.started) return show(box, 'info', `Nothing to re-baseline: ${r.message}`);
        show(
          box,
          'ok',
          `Baseline batch ${r.batch.batchId} created for "${t.name}" (${fmtNum(r.batch.rowCount)} rows in the manifest)${r.posted ? ' and queued' : '; its message was not posted: resume it'}. `,
          h('a', { href: `#/transfers/batches/${r.batch.batchId}` }, 'Follow it →'),
        );
        await reload();
      }),
  );
  return b;
}

// Compare key sets (operator role, transfers with keyCompare): the report first (it changes nothing: the keys the
// target holds that the source no longer has, per committed key window); with keyCompare 'apply', a confirm deletes
// them on the target.
function compareKeysButton(t: any, box: HTMLElement): HTMLElement {
  const b = h('button', { type: 'button', class: 'small', 'data-test': `compare-keys-${t.name}` }, 'Compare keys…');
  b.addEventListener(
    'click',
    () =>
      void busy(b, box, async () => {
        const path = `transfers/${encodeURIComponent(t.name)}/compare-keys`;
        const r = await api('POST', path, {});
        const windows = (r.windows as any[]).filter((w) => w.goneAtSource > 0);
        if (r.goneAtSource === 0)
          return show(
            box,
            'ok',
            `"${t.name}": the target holds no key the source lost (${r.windows.length} committed windows compared).`,
          );
        const sample = windows
          .flatMap((w) => w.sample as string[])
          .slice(0, 10)
          .join('; ');
        const found = `"${t.name}": ${fmtNum(r.goneAtSource)} target key(s) gone at the source in ${windows.length} window(s) (e.g. ${sample}).`;
        if (t.keyCompare !== 'apply') return show(box, 'info', `${found} Reported only (keyCompare report).`);
        if (!window.confirm(`${found}\n\nDelete them on the target (one transaction per window)?`)) return;
        const applied = await api('POST', path, { apply: true });
        show(
          box,
          'ok',
          `"${t.name}": ${fmtNum(applied.deleted)} target row(s) deleted (${fmtNum(applied.goneAtSource)} found gone at the source).`,
        );
      }),
  );
  return b;
}

export function transfersPage(main: HTMLElement): Cleanup {
  const p = hashParams();
  const box = notice();
  const transfersBox = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const batchesBox = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const state = select(
    'state',
    [['', 'any state'], ...STATES.map((s) => [s, s] as [string, string])],
    p.get('state') ?? '',
  );
  const transferSel = select('transfer', [['', 'all transfers']], p.get('transfer') ?? '');
  const onFilter = () =>
    go('/transfers', { state: state.value || undefined, transfer: transferSel.value || undefined });
  state.addEventListener('change', onFilter);
  transferSel.addEventListener('change', onFilter);
  const reconcileAll = h('button', { type: 'button', class: 'small' }, 'Reconcile stale batches');
  reconcileAll.addEventListener(
    'click',
    () =>
      void busy(reconcileAll, box, async () => {
        const r = await api('POST', 'transfers/reconcile', {});
        show(
          box,
          'ok',
          r.count === 0
            ? 'No stale in-flight batch to reconcile.'
            : `Reconciled ${r.count} batch${r.count === 1 ? '' : 'es'}: ${(r.items as any[]).map((b) => `${b.batchId.slice(0, 8)} ${b.state}`).join(', ')}.`,
        );
        await loadBatches();
      }),
  );
  replace(
    main,
    pageHead('Transfers', reconcileAll),
    box,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'tr-h' },
      h('h2', { id: 'tr-h' }, 'Configured transfers'),
      transfersBox,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'b-h' },
      h(
        'div',
        { class: 'card-head' },
        h('h2', { id: 'b-h' }, 'Batches'),
        h('div', { class: 'inline-fields' }, field('Transfer', transferSel), field('State', state)),
      ),
      batchesBox,
    ),
  );

  async function loadTransfers(): Promise<void> {
    try {
      const r = await api('GET', 'transfers');
      const items = r.items as any[];
      for (const t of items)
        transferSel.append(
          h('option', { value: t.name, ...(t.name === p.get('transfer') ? { selected: true } : {}) }, t.name),
        );
      replace(
        transfersBox,
        !r.configured || items.length === 0
          ? empty(
              'No transfers are configured (KEEL_TRANSFERS or KEEL_TRANSFERS_FILE; npm start -- --demo and npm run demo configure one).',
            )
          : table(
              [
                'transfer',
                'source',
                'target',
                'boundary',
                'batch size',
                'schedule',
                'running',
                'last commit',
                'rows behind',
                '',
              ],
              items.map((t) => {
                const toggle = pauseButton(t, box, async () => {
                  replace(transfersBox, h('p', { class: 'loading' }, 'Loading…'));
                  transferSel.replaceChildren(h('option', { value: '' }, 'all transfers'));
                  await loadTransfers();
                });
                const start = h(
                  'button',
                  { type: 'button', class: 'primary small', 'data-test': `start-${t.name}` },
                  'Start batch',
                );
                start.addEventListener(
                  'click',
                  () =>
                    void busy(start, box, async () => {
                      const s = await api('POST', `transfers/${encodeURIComponent(t.name)}/start`, {});
                      if (!s.started)
                        show(box, 'info', `Transfer "${t.name}": nothing new to transfer (${s.message}).`);
                      else {
                        show(
                          box,
                          'ok',
                          `Batch ${s.batch.batchId} created for "${t.name}" (${fmtNum(s.batch.rowCount)} rows in the manifest)${s.posted ? ' and queued for staging' : '; its message was not posted: resume it'}. `,
                          h('a', { href: `#/transfers/batches/${s.batch.batchId}` }, 'Follow it →'),
                        );
                        await loadBatches();
                      }
                    }),
                );
                return [
                  t.name,
                  `${t.source.engine} ${t.source.table ?? '(query)'}`,
                  `${t.target.engine} ${t.target.table}`,
                  t.boundary.column ? `${t.boundary.column} (${t.boundary.kind})` : `${t.boundary.kind} (versions)`,
                  fmtNum(t.batchSize),
                  t.schedule ?? 'every timer tick',
                  t.paused
                    ? h(
                        'span',
                        { title: t.pausedReason ?? '' },
                        badge('paused', 'warn'),
                        t.changedBy ? ` by ${t.changedBy}` : '',
                      )
                    : badge('running', 'ok'),
                  freshness(t),
                  rowsBehind(t),
                  h(
                    'div',
                    { class: 'actions' },
                    start,
                    toggle,
                    // A changes transfer cannot replay a range (only each key's latest change is kept): it re-baselines.
                    t.boundary.kind === 'changes' ? rebaselineButton(t, box, loadBatches) : replayButton(t, box),
                    t.keyCompare && t.keyCompare !== 'off' ? compareKeysButton(t, box) : null,
                  ),
                ];
              }),
            ),
      );
    } catch (err) {
      replace(transfersBox);
      showError(box, err);
    }
  }

  async function loadBatches(): Promise<void> {
    try {
      const r = await api(
        'GET',
        `transfers/batches${q({ transfer: p.get('transfer'), state: p.get('state'), afterId: p.get('afterId'), limit: 20 })}`,
      );
      const items = r.items as any[];
      replace(
        batchesBox,
        items.length === 0
          ? empty(
              p.get('transfer') || p.get('state')
                ? 'No batches match these filters.'
                : 'No batches yet: Start batch on a configured transfer above makes one.',
            )
          : table(
              ['batch', 'transfer', 'status', 'state', 'rows', 'created', 'updated'],
              items.map((b) => [
                h('a', { href: `#/transfers/batches/${b.batchId}`, class: 'mono' }, b.batchId.slice(0, 8)),
                b.transfer,
                statusBadge(b),
                STATE_WORDS[b.state] ?? b.state,
                fmtNum(b.appliedCount ?? b.rowCount),
                fmtTime(b.createdAt),
                fmtTime(b.updatedAt),
              ]),
              { className: 'batches-table' },
            ),
        r.nextAfterId
          ? h(
              'div',
              { class: 'pager' },
              h(
                'button',
                {
                  type: 'button',
                  onclick: () =>
                    go('/transfers', {
                      state: p.get('state') ?? undefined,
                      transfer: p.get('transfer') ?? undefined,
                      afterId: r.nextAfterId,
                    }),
                },
                'Older →',
              ),
            )
          : null,
      );
    } catch (err) {
      replace(batchesBox);
      showError(box, err);
    }
  }

  void loadTransfers();
  void loadBatches();
  return () => undefined;
}

export function batchPage(main: HTMLElement, id: string): Cleanup {
  const box = notice();
  const body = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  let timer: number | undefined;
  let stopped = false;
  replace(
    main,
    pageHead(`Batch ${id.slice(0, 8)}`, h('a', { href: '#/transfers', class: 'button ghost' }, '← Transfers')),
    box,
    body,
  );

  // An action under way (resume, reconcile, abandon): the 3 s refresh waits for it. Rebuilt meanwhile, the page
  // showed the action's button enabled again while its call was still out, and a second click sent it twice.
  let acting = false;
  const act = (button: HTMLButtonElement, fn: () => Promise<void>) => {
    if (acting) return;
    acting = true;
    void busy(button, box, fn).finally(() => {
      acting = false;
    });
  };

  // force: the action's own reload, once its call has answered.
  async function load(force = false): Promise<void> {
    window.clearTimeout(timer);
    if (acting && !force) {
      timer = window.setTimeout(() => void load(), 3000);
      return;
    }
    try {
      const b = await api('GET', `transfers/batches/${id}`);
      if (stopped) return;
      const resume = h(
        'button',
        {
          type: 'button',
          class: 'primary',
          disabled: !b.retryable,
          title: b.retryable ? '' : 'Only a retryable batch is resumed',
        },
        'Resume',
      );
      const reconcile = h('button', { type: 'button' }, 'Reconcile now');
      const open = !['committed', 'failed'].includes(b.state);
      const abandon = h(
        'button',
        {
          type: 'button',
          class: 'danger',
          disabled: !open,
          title: open ? '' : 'Only an open batch can be abandoned',
          'data-test': 'abandon',
        },
        'Abandon…',
      );
      // Preview first (what the abandon would do, nothing changed), then a confirm, then the abandon itself.
      abandon.addEventListener('click', () =>
        act(abandon, async () => {
          const reason = window.prompt(`Abandon batch ${id.slice(0, 8)}: why? (recorded on the batch)`);
          if (!reason || !reason.trim()) return;
          const p = await api('POST', `transfers/batches/${id}/abandon`, { reason: reason.trim(), preview: true });
          if (!p.abandonable) return show(box, 'info', p.effect);
          if (!window.confirm(`${p.effect}\n\nAbandon it?`)) return;
          await api('POST', `transfers/batches/${id}/abandon`, { reason: reason.trim() });
          show(box, 'ok', 'Batch abandoned: failed, its window released. Start a new batch to cover it.');
          await load(true);
        }),
      );
      resume.addEventListener('click', () =>
        act(resume, async () => {
          const r = await api('POST', `transfers/batches/${id}/resume`, {});
          show(box, 'ok', `Batch queued again for staging and apply${r.posted ? '' : ' (message not posted)'}.`);
          await load(true);
        }),
      );
      reconcile.addEventListener('click', () =>
        act(reconcile, async () => {
          const r = await api('POST', `transfers/batches/${id}/reconcile`, {});
          show(box, 'ok', `Reconciled: ${STATE_WORDS[r.state] ?? r.state}.`);
          await load(true);
        }),
      );
      const events = b.events as any[];
      replace(
        body,
        h(
          'section',
          { class: `card state-card ${b.status}` },
          h(
            'p',
            { class: 'state-line' },
            statusBadge(b),
            ' ',
            h('strong', { 'data-test': 'state-words' }, STATE_WORDS[b.state] ?? b.state),
          ),
          h('p', { class: 'next-action' }, h('span', { class: 'label' }, 'Next action: '), ...localTimes(b.nextAction)),
          h('div', { class: 'actions' }, resume, reconcile, abandon),
        ),
        h(
          'div',
          { class: 'grid-2' },
          h(
            'section',
            { class: 'card', 'aria-labelledby': 'facts-h' },
            h('h2', { id: 'facts-h' }, 'Batch'),
            kv([
              ['Batch id', h('span', { class: 'mono' }, b.batchId)],
              ['Transfer', b.transfer],
              ['State', b.state],
              ['Attempts', fmtNum(b.attempts)],
              ['Boundary', `${b.boundary.kind}: (${b.boundary.low ?? '−∞'}, ${b.boundary.high}]`],
              ['Rows (manifest)', fmtNum(b.rowCount)],
              ['Rows staged', fmtNum(b.stagedCount)],
              ['Rows applied', fmtNum(b.appliedCount)],
              ['Checksum (manifest)', h('span', { class: 'mono' }, b.checksum ?? '—')],
              ['Checksum (staged)', h('span', { class: 'mono' }, b.stagedChecksum ?? '—')],
              ['Schema hash', h('span', { class: 'mono' }, b.schemaHash ?? '—')],
              ['Reconcile token', h('span', { class: 'mono' }, b.targetReconcileToken ?? '—')],
              ['Last error', b.lastError ? `${b.lastErrorCode ? `[${b.lastErrorCode}] ` : ''}${b.lastError}` : '—'],
            ]),
          ),
          h(
            'section',
            { class: 'card', 'aria-labelledby': 'tl-h' },
            h('h2', { id: 'tl-h' }, `Journal (${events.length} event${events.length === 1 ? '' : 's'})`),
            events.length === 0
              ? empty('No journal events yet.')
              : h(
                  'ol',
                  { class: 'timeline', 'data-test': 'timeline' },
                  ...events.map((e) =>
                    h(
                      'li',
                      { class: `ev ${e.toState ?? ''}` },
                      h('time', { datetime: e.at }, fmtTime(e.at)),
                      h(
                        'div',
                        null,
                        h('strong', { class: 'ev-name' }, e.event),
                        e.fromState || e.toState
                          ? h('span', { class: 'muted' }, ` ${e.fromState ?? '·'} → ${e.toState ?? '·'}`)
                          : null,
                      ),
                      e.detail && Object.keys(e.detail).length
                        ? h('details', null, h('summary', null, 'detail'), pre(e.detail))
                        : null,
                    ),
                  ),
                ),
          ),
        ),
      );
      if (b.state !== 'committed' && b.state !== 'failed' && !stopped)
        timer = window.setTimeout(() => void load(), 3000);
    } catch (err) {
      if (!stopped) showError(box, err);
    }
  }
  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
    clear(box);
  };
}

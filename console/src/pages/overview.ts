// Overview: health, totals, every queue (pending / processing / DLQ, paused, limits, lag) and the metric buckets
// of the last hour or day as a chart, refreshed every 5 s while "Live" is on.
import { h, replace, fmtAge, fmtNum, fmtTime } from '../dom';
import { api } from '../api';
import { badge, empty, notice, pageHead, showError, clear, keepFocus, table, warningLabel, type Cleanup } from '../ui';
import { barChart, legend, slotsOf, type Bucket } from '../chart';

const REFRESH_MS = 5000;

export function overviewPage(main: HTMLElement): Cleanup {
  let windowMinutes = 60;
  let timer: number | undefined;
  let stopped = false;
  const box = notice();
  const body = h('div', { class: 'overview', 'aria-busy': 'true' }, h('p', { class: 'loading' }, 'Loading…'));
  const updated = h('span', { class: 'updated', 'aria-live': 'off' });
  const live = h('input', { type: 'checkbox', id: 'live', checked: true });
  const hour = h('button', { type: 'button', class: 'seg', 'aria-pressed': 'true' }, 'Last hour');
  const day = h('button', { type: 'button', class: 'seg', 'aria-pressed': 'false' }, 'Last day');
  const setWindow = (m: number) => {
    windowMinutes = m;
    hour.setAttribute('aria-pressed', String(m === 60));
    day.setAttribute('aria-pressed', String(m !== 60));
    void refresh();
  };
  hour.addEventListener('click', () => setWindow(60));
  day.addEventListener('click', () => setWindow(24 * 60));
  live.addEventListener('change', () => schedule());

  replace(
    main,
    pageHead('Overview', h('label', { class: 'check inline' }, live, h('span', null, 'Live')), updated),
    box,
    body,
  );
  const chartBox = h('section', { class: 'card chart-card', 'aria-labelledby': 'chart-h' });

  function schedule(): void {
    window.clearTimeout(timer);
    if (!stopped && live.checked) timer = window.setTimeout(() => void refresh(), REFRESH_MS);
  }

  async function refresh(): Promise<void> {
    if (document.hidden && body.getAttribute('aria-busy') === 'false') {
      schedule(); // a hidden tab does not poll; it refreshes when shown again
      return;
    }
    try {
      const [health, stats, queues, metrics, warnings] = await Promise.all([
        api('GET', 'health', undefined, { allow: [503] }),
        api('GET', 'stats'),
        api('GET', 'queues'),
        api('GET', `metrics?windowMinutes=${windowMinutes}`),
        api('GET', 'warnings'),
      ]);
      if (stopped) return;
      clear(box);
      // A refresh rebuilds the page: the control that had keyboard focus gets it back.
      keepFocus(main, () => render(health, stats, queues.items, metrics.buckets as Bucket[], warnings));
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (!stopped) showError(box, err);
    } finally {
      body.setAttribute('aria-busy', 'false');
      schedule();
    }
  }

  function render(health: any, stats: any, settings: any[], buckets: Bucket[], warnings: any): void {
    const byName = new Map(settings.map((q) => [q.name, q]));
    const t = stats.totals;
    const warned = new Map<string, string[]>(); // queue -> its warnings' kinds
    for (const w of warnings.items as any[])
      for (const qn of w.queue ? [w.queue] : (w.queues ?? [])) warned.set(qn, [...(warned.get(qn) ?? []), w.kind]);
    const th = warnings.thresholds;
    const warningsCard = (warnings.items as any[]).length
      ? h(
          'section',
          { class: 'card warnings', 'aria-labelledby': 'warn-h', 'data-test': 'warnings' },
          h('h2', { id: 'warn-h' }, `Needs a look (${(warnings.items as any[]).length})`),
          h(
            'ul',
            null,
            ...(warnings.items as any[]).map((w) =>
              h(
                'li',
                { 'data-kind': w.kind },
                badge(warningLabel(w.kind, true), 'bad'),
                ' ',
                w.message,
                ' ',
                w.kind === 'stale_heartbeat' || w.kind === 'stale_worker'
                  ? h('a', { href: '#/workers' }, 'Workers →')
                  : w.kind === 'dlq_growing'
                    ? h('a', { href: `#/dlq?queue=${encodeURIComponent(w.queue)}` }, 'Dead letters →')
                    : h('a', { href: `#/jobs?queue=${encodeURIComponent(w.queue)}` }, 'Jobs →'),
              ),
            ),
          ),
          h(
            'p',
            { class: 'hint' },
            `Bounds (settings): heartbeat ${fmtAge(th.staleHeartbeatMs)} (KEEL_WARN_STALE_HEARTBEAT_MS), a worker silent ${fmtAge(th.workerSilentMs)} while holding jobs (twice KEEL_WORKER_REFRESH_MS), lag ${fmtAge(th.queueLagMs)} (KEEL_WARN_QUEUE_LAG_MS), ${fmtNum(th.dlqPer15Min)} dead letters in 15 min (KEEL_WARN_DLQ_PER_15_MIN).`,
          ),
        )
      : null;
    const healthCard = h(
      'section',
      { class: 'card health', 'aria-label': 'Health' },
      h('h2', null, 'Health'),
      h(
        'ul',
        { class: 'checks' },
        h(
          'li',
          null,
          'Store ',
          health.checks?.store ? badge('reachable', 'ok') : badge('unreachable', 'bad'),
          ` ${health.engine ?? ''}`,
        ),
        h(
          'li',
          null,
          'Storage queues ',
          health.checks?.storage ? badge('reachable', 'ok') : badge('unreachable', 'bad'),
        ),
        h(
          'li',
          null,
          'Transfers ',
          badge(health.transfers ?? 'unknown', health.transfers === 'configured' ? 'info' : 'muted'),
        ),
        h('li', { class: 'muted' }, `worker ${health.workerId ?? '—'} · v${health.version ?? '?'}`),
      ),
    );
    const totals = h(
      'section',
      { class: 'card totals', 'aria-label': 'Totals' },
      h('h2', null, 'All queues'),
      h('p', { class: 'hint' }, 'Now: pending, processing, in DLQ. All time (since install, never purged): the rest.'),
      h(
        'dl',
        { class: 'figures' },
        ...(
          [
            ['pending', t.pending],
            ['processing', t.fetched + t.processing],
            ['in DLQ', t.dlq],
            ['succeeded', t.succeeded],
            ['failed', t.failed],
            ['retried', t.retried],
            ['zombie', t.zombie],
            ['resurrected', t.resurrected],
          ] as [string, number][]
        ).map(([k, v]) =>
          h(
            'div',
            null,
            h('dt', null, ['pending', 'processing', 'in DLQ'].includes(k) ? k : `${k} (all time)`),
            h('dd', { 'data-total': k }, fmtNum(v)),
          ),
        ),
      ),
    );
    const rows = (stats.queues as any[]).map((q) => {
      const st = byName.get(q.queue);
      return [
        h('a', { href: `#/jobs?queue=${encodeURIComponent(q.queue)}` }, q.queue),
        h(
          'span',
          { class: 'badges' },
          st?.paused ? badge('paused', 'warn') : badge('running', 'ok'),
          ...(warned.get(q.queue) ?? []).map((k) => badge(warningLabel(k), 'bad')),
        ),
        fmtNum(q.pending),
        q.dueExact ? fmtNum(q.due) : `≥ ${fmtNum(q.due)}`,
        fmtNum(q.fetched + q.processing),
        q.dlq > 0 ? h('a', { href: `#/dlq?queue=${encodeURIComponent(q.queue)}` }, fmtNum(q.dlq)) : '0',
        fmtAge(q.oldestDueAgeMs),
        st ? (st.maxConcurrency === null ? 'unlimited' : fmtNum(st.maxConcurrency)) : '—',
        st ? fmtNum(st.maxAttempts) : '—',
        fmtNum(q.succeeded),
        fmtNum(q.failed),
        fmtNum(q.retried),
      ];
    });
    const queuesCard = h(
      'section',
      { class: 'card', 'aria-labelledby': 'queues-h' },
      h('h2', { id: 'queues-h' }, 'Queues'),
      rows.length
        ? table(
            [
              'queue',
              'state',
              'pending',
              'due',
              'processing',
              'DLQ',
              'lag',
              'concurrency',
              'attempts',
              'succeeded (all time)',
              'failed (all time)',
              'retried (all time)',
            ],
            rows,
            {
              caption:
                'Counters are exact: they move in the same transaction as the jobs. Succeeded, failed and retried count since install; a purge does not lower them.',
              className: 'queues-table',
            },
          )
        : empty('No queues yet: a queue appears with its first job (POST /api/ops/jobs, or npm run demo).'),
    );
    const slotMinutes = windowMinutes <= 60 ? 1 : 15;
    const slots = slotsOf(buckets, windowMinutes, slotMinutes);
    const reasons = new Map<string, number>();
    for (const b of buckets) if (b.outcome === 'failed') reasons.set(b.reason, (reasons.get(b.reason) ?? 0) + b.count);
    const label = `${windowMinutes === 60 ? 'Last hour' : 'Last day'}, per ${slotMinutes} min`;
    replace(
      chartBox,
      h(
        'div',
        { class: 'card-head' },
        h('h2', { id: 'chart-h' }, `Outcomes — ${label}`),
        h('div', { class: 'segs', role: 'group', 'aria-label': 'Chart window' }, hour, day),
      ),
      buckets.length === 0
        ? empty(`No job finished in the ${windowMinutes === 60 ? 'last hour' : 'last day'}.`)
        : [barChart(slots, `Jobs succeeded, failed and zombie, ${label}`, windowMinutes), legend(slots, reasons)],
      h(
        'p',
        { class: 'hint' },
        `From the per-minute metric buckets (GET /api/ops/metrics). Retries are counted per queue (table above), not bucketed. ${fmtTime(new Date().toISOString())}`,
      ),
    );
    replace(body, warningsCard, h('div', { class: 'grid-2' }, healthCard, totals), chartBox, queuesCard);
  }

  const onVisible = () => {
    if (!document.hidden && live.checked) void refresh();
  };
  document.addEventListener('visibilitychange', onVisible);
  void refresh();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
}

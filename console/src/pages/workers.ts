// Workers: the processors holding leases on hot jobs, read from the rows' lease holders (GET /workers): jobs held,
// oldest and newest sign of life (heartbeat, else start, else claim), earliest lease expiry; a stale heartbeat is
// flagged against KEEL_WARN_STALE_HEARTBEAT_MS. Refreshed every 5 s.
import { h, replace, fmtAge, fmtNum, fmtTime } from '../dom';
import { api, q } from '../api';
import { badge, clear, empty, keepFocus, notice, pageHead, showError, table, type Cleanup } from '../ui';

const REFRESH_MS = 5000;

export function workersPage(main: HTMLElement): Cleanup {
  let stopped = false;
  let timer: number | undefined;
  const box = notice();
  const list = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const hint = h('p', { class: 'hint' });
  replace(main, pageHead('Workers'), hint, box, list);

  async function load(): Promise<void> {
    try {
      const r = await api('GET', 'workers');
      if (stopped) return;
      clear(box);
      const t = r.thresholds;
      hint.textContent =
        `Workers that hold hot jobs now (fetched or processing), from the jobs' lease holders; an idle worker holds nothing and is not listed. ` +
        `A heartbeat older than ${fmtAge(t.staleHeartbeatMs)} is stale (KEEL_WARN_STALE_HEARTBEAT_MS); rescue moves its jobs once the queue's zombie timeout passes.`;
      const items = r.items as any[];
      // The refresh rebuilds the table: the focused control keeps the focus.
      keepFocus(main, () =>
        replace(
          list,
          items.length === 0
            ? empty('No worker holds a job right now.')
            : table(
                [
                  'worker',
                  'jobs held',
                  'processing',
                  'queues',
                  'oldest heartbeat',
                  'newest heartbeat',
                  'lease expires',
                  '',
                ],
                items.map((w) => [
                  h(
                    'span',
                    null,
                    h('code', null, w.workerId),
                    w.workerId === r.thisWorker ? h('span', { class: 'muted' }, ' (this instance)') : null,
                  ),
                  h('a', { href: `#/jobs${q({ location: 'hot', state: 'processing' })}` }, fmtNum(w.jobsHeld)),
                  fmtNum(w.processing),
                  (w.queues as string[]).join(', '),
                  h(
                    'span',
                    { title: w.oldestHeartbeatAt ?? '' },
                    w.heartbeatAgeMs === null ? '—' : `${fmtAge(w.heartbeatAgeMs)} ago`,
                  ),
                  fmtTime(w.newestHeartbeatAt),
                  fmtTime(w.earliestLeaseExpiresAt),
                  w.stale ? badge('stale heartbeat', 'bad') : badge('live', 'ok'),
                ]),
                {
                  caption: `${items.length} worker${items.length === 1 ? '' : 's'} holding jobs`,
                  className: 'workers-table',
                },
              ),
        ),
      );
    } catch (err) {
      if (!stopped) showError(box, err);
    } finally {
      if (!stopped) timer = window.setTimeout(() => void load(), REFRESH_MS);
    }
  }

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

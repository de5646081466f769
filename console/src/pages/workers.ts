// Workers: the job processors (GET /workers). Every worker of the registry (keel.workers: host, instance, app version
// and build, queues served, concurrency, started, last seen) and every lease holder (jobs held, oldest sign of life,
// earliest lease expiry), joined by worker id: a live worker holding nothing is listed as idle; one not seen for
// twice KEEL_WORKER_REFRESH_MS is silent; a lease holder with no registry row is "not registered". The versions the
// live workers run are summed up at the top (two at once: a deployment under way, or an instance left behind). A
// stale heartbeat is flagged against KEEL_WARN_STALE_HEARTBEAT_MS. Refreshed every 5 s.
import { h, replace, fmtAge, fmtNum, fmtTime } from '../dom';
import { api, q } from '../api';
import { badge, clear, empty, keepFocus, notice, pageHead, showError, table, type Cleanup } from '../ui';

const REFRESH_MS = 5000;

function versionText(appVersion: string | null, buildId: string | null): string {
  if (!appVersion) return '—';
  return buildId ? `${appVersion} (${buildId})` : appVersion;
}

function stateBadge(w: any): HTMLElement {
  if (w.status === 'unregistered') return badge('not registered', 'muted');
  if (w.status === 'silent') return badge(w.idle ? 'silent' : 'silent, holds jobs', w.idle ? 'warn' : 'bad');
  return w.idle ? badge('idle', 'info') : badge('working', 'ok');
}

export function workersPage(main: HTMLElement): Cleanup {
  let stopped = false;
  let timer: number | undefined;
  const box = notice();
  const summary = h('div', { 'data-test': 'workers-summary' });
  const list = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  const hint = h('p', { class: 'hint' });
  replace(main, pageHead('Workers'), hint, box, summary, list);

  async function load(): Promise<void> {
    try {
      const r = await api('GET', 'workers');
      if (stopped) return;
      clear(box);
      const t = r.thresholds;
      hint.textContent =
        `The job processors: each registers when it starts working and reports again at most every ${fmtAge(t.workerSilentMs / 2)} while it works (KEEL_WORKER_REFRESH_MS), ` +
        `and leaves on a graceful stop. Not seen for ${fmtAge(t.workerSilentMs)}: silent (it may be gone, or idle on an instance no timer runs on); rows go after ${fmtAge(t.workerRetentionMs)} (KEEL_WORKER_RETENTION_MS). ` +
        `Jobs held are read from the jobs' leases now; a heartbeat older than ${fmtAge(t.staleHeartbeatMs)} is stale (KEEL_WARN_STALE_HEARTBEAT_MS). ` +
        `Done: as of each worker's last report (its last seen), not live.`;
      const items = r.items as any[];
      const versions = r.versions as { appVersion: string; buildId: string | null; workers: number }[];
      const c = r.counts;
      // The refresh rebuilds the page's body: the focused control keeps the focus.
      keepFocus(main, () => {
        replace(
          summary,
          h(
            'p',
            { 'data-test': 'worker-counts' },
            `${fmtNum(c.live)} live (${fmtNum(c.idle)} idle) · ${fmtNum(c.silent)} silent · ${fmtNum(c.unregistered)} not registered`,
          ),
          h(
            'p',
            { 'data-test': 'worker-versions' },
            'Versions live: ',
            versions.length === 0
              ? '—'
              : h(
                  'span',
                  null,
                  ...versions.flatMap((v, i) => [
                    i > 0 ? ', ' : '',
                    h('code', null, versionText(v.appVersion, v.buildId)),
                    ` × ${fmtNum(v.workers)}`,
                  ]),
                ),
            versions.length > 1 ? [' ', badge('mixed versions', 'warn')] : null,
          ),
        );
        replace(
          list,
          items.length === 0
            ? empty(
                'No worker has registered or holds a job. A processor registers at its first job, queue message or timer pass.',
              )
            : table(
                [
                  'worker',
                  'state',
                  'version',
                  'host',
                  'serves',
                  'concurrency',
                  'jobs held',
                  'held in',
                  'oldest heartbeat',
                  'last seen',
                  'started',
                  'done',
                ],
                items.map((w) => [
                  h(
                    'span',
                    { 'data-worker': w.workerId },
                    h('code', null, w.workerId),
                    w.workerId === r.thisWorker ? h('span', { class: 'muted' }, ' (this instance)') : null,
                  ),
                  h('span', { class: 'badges' }, stateBadge(w), w.stale ? badge('stale heartbeat', 'bad') : null),
                  versionText(w.appVersion, w.buildId),
                  w.host === null
                    ? '—'
                    : h(
                        'span',
                        { title: w.instanceId ? `instance ${w.instanceId}, pid ${w.pid}` : `pid ${w.pid}` },
                        w.host,
                        w.instanceId ? h('span', { class: 'muted' }, ` · ${String(w.instanceId).slice(0, 12)}`) : null,
                      ),
                  w.status === 'unregistered'
                    ? '—'
                    : w.queuesServed === null
                      ? 'all queues'
                      : w.queuesServed.join(', '),
                  w.concurrency === null ? '—' : fmtNum(w.concurrency),
                  w.jobsHeld > 0
                    ? h(
                        'a',
                        { href: `#/jobs${q({ location: 'hot', state: 'processing' })}` },
                        `${fmtNum(w.jobsHeld)} (${fmtNum(w.processing)} processing)`,
                      )
                    : '0',
                  (w.queues as string[]).join(', ') || '—',
                  h(
                    'span',
                    { title: w.oldestHeartbeatAt ?? '' },
                    w.heartbeatAgeMs === null ? '—' : `${fmtAge(w.heartbeatAgeMs)} ago`,
                  ),
                  h(
                    'span',
                    { title: w.lastSeenAt ?? '' },
                    w.lastSeenAgeMs === null ? '—' : `${fmtAge(w.lastSeenAgeMs)} ago`,
                  ),
                  fmtTime(w.startedAt),
                  // The count is the worker's own, written with its registry row (at most every
                  // KEEL_WORKER_REFRESH_MS, 5 min by default), not live: say as of when, or it reads as stuck.
                  w.jobsDone === null
                    ? '—'
                    : h(
                        'span',
                        {
                          title: `jobs it finished since it started, as of its last report (${w.lastSeenAt ?? '?'}); reported at most every ${fmtAge(t.workerSilentMs / 2)}, so it may have done more since`,
                        },
                        fmtNum(w.jobsDone),
                        w.lastSeenAgeMs === null
                          ? null
                          : h('span', { class: 'muted' }, ` as of ${fmtAge(w.lastSeenAgeMs)} ago`),
                      ),
                ]),
                {
                  caption: `${items.length} worker${items.length === 1 ? '' : 's'}: lease holders first, then the idle`,
                  className: 'workers-table',
                },
              ),
        );
      });
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

// Schedules: the recurring jobs declared in handlers/ (GET /schedules): cron and time zone, the job it makes, the
// missed-tick policy, next and last tick in local time, the jobs it made (searches by its tag), pause and resume
// (operator role).
import { h, replace, fmtTime } from '../dom';
import { api, q } from '../api';
import { badge, busy, empty, notice, pageHead, show, showError, table, type Cleanup } from '../ui';

// A date as local time, with the UTC instant on hover (schedules are declared in a time zone, tick in UTC).
function when(v: string | null): HTMLElement | string {
  if (!v) return '—';
  return h('time', { datetime: v, title: `${v} (UTC)` }, fmtTime(v));
}

// Ticks that passed while no scheduler ran (shared/jobs/define.ts): skip them, run the latest once, or one job per
// missed tick (the latest maxCatchUp).
function missedPolicy(s: any): string {
  if (s.missed === 'catchUp') return `catch up: one job each, the latest ${s.maxCatchUp}`;
  if (s.missed === 'once') return 'once: one job for the latest';
  return 'skip: the next tick runs on time';
}

export function schedulesPage(main: HTMLElement): Cleanup {
  const box = notice();
  const list = h('div', null, h('p', { class: 'loading' }, 'Loading…'));
  replace(
    main,
    pageHead('Schedules'),
    h(
      'p',
      { class: 'hint' },
      'Recurring jobs declared with defineSchedule in handlers/. Each tick is enqueued once, whatever the number of instances; its jobs carry the tag schedule:<name>. Pausing is kept in the database (operator role).',
    ),
    box,
    list,
  );

  async function load(): Promise<void> {
    try {
      const r = await api('GET', 'schedules');
      const items = r.items as any[];
      const undeclared = r.undeclared as any[];
      replace(
        list,
        items.length === 0
          ? empty('No schedules are declared (defineSchedule in handlers/).')
          : table(
              [
                'name',
                'cron',
                'time zone',
                'job',
                'missed ticks',
                'state',
                'next tick',
                'last tick',
                'jobs it made',
                '',
              ],
              items.map((s) => {
                const tag = `schedule:${s.name}`;
                const toggle = h(
                  'button',
                  { type: 'button', class: 'small', 'data-test': `toggle-schedule-${s.name}` },
                  s.state === 'paused' ? 'Resume' : 'Pause',
                );
                toggle.addEventListener('click', () => {
                  const action = s.state === 'paused' ? 'resume' : 'pause';
                  void busy(toggle, box, async () => {
                    await api('POST', `schedules/${encodeURIComponent(s.name)}/${action}`, {});
                    show(box, 'ok', `Schedule "${s.name}" ${action === 'pause' ? 'paused' : 'resumed'}.`);
                    await load();
                  });
                });
                return [
                  h('strong', null, s.name),
                  h('code', null, s.cron),
                  s.timeZone,
                  `${s.type} → ${s.queue}`,
                  missedPolicy(s),
                  badge(s.state, s.state === 'paused' ? 'warn' : 'ok'),
                  s.state === 'paused' ? 'paused' : when(s.nextTick),
                  when(s.lastTick),
                  h(
                    'span',
                    { class: 'links', 'data-test': `made-${s.name}` },
                    s.lastJobId ? [h('a', { href: `#/jobs/${s.lastJobId}` }, `last: ${s.lastJobId}`), ' · '] : null,
                    h('a', { href: `#/jobs${q({ location: 'hot', tag })}` }, 'hot'),
                    ' · ',
                    h('a', { href: `#/jobs${q({ location: 'archive', tag })}` }, 'archive'),
                    ' · ',
                    h('a', { href: `#/jobs${q({ location: 'dlq', tag })}` }, 'DLQ'),
                  ),
                  toggle,
                ];
              }),
              { caption: `${items.length} schedule${items.length === 1 ? '' : 's'}`, className: 'schedules-table' },
            ),
        undeclared.length
          ? h(
              'section',
              { class: 'card' },
              h('h2', null, 'No longer declared'),
              h('p', { class: 'hint' }, 'State kept in the database for schedules the code no longer declares.'),
              table(
                ['name', 'state', 'last tick'],
                undeclared.map((u) => [u.name, u.paused ? 'paused' : 'active', when(u.lastTick)]),
              ),
            )
          : null,
      );
    } catch (err) {
      replace(list);
      showError(box, err);
    }
  }

  void load();
  return () => undefined;
}

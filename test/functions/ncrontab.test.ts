// NCRONTAB, as the Functions host reads a timer schedule: a day matches only when both the day-of-month and the
// day-of-week fields match it (NCrontab's CrontabSchedule), not either one as in Vixie cron. Every place that fires or
// validates a schedule — the local host's timers, the KEEL_*_SCHEDULE settings, a transfer's schedule and
// keyCompareSchedule, defineSchedule — reads it the same way, and refuses what NCrontab refuses (Quartz's L, W, #, ?,
// a day-of-week 7), naming the field. 2026-12-01 is a Tuesday, 2026-12-07 a Monday, 2027-02-01 a Monday.
import { QueueServiceClient } from '@azure/storage-queue';
import { describe, expect, it } from 'vitest';
import { startLocalHost } from '../../dev/localHost.js';
import { ncrontab } from '../../shared/app/ncrontab.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { keyCompareDue, scheduleDue } from '../../shared/app/transferSchedule.js';
import { parseSettings } from '../../shared/config/settings.js';
import { defineSchedule } from '../../shared/jobs/define.js';
import { nextTick, planTicks } from '../../shared/jobs/scheduler.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';

const FIRST_MONDAYS_9 = '0 0 9 1 * 1'; // 09:00 on a 1st that is a Monday

describe('NCRONTAB day matching', () => {
  it('a day must match both the day of month and the day of week', () => {
    const runs = ncrontab(FIRST_MONDAYS_9, 'UTC')
      .nextN(2, new Date('2026-12-01T00:00:00Z'))
      .map((d) => d.toISOString());
    expect(runs).toEqual(['2027-02-01T09:00:00.000Z', '2027-03-01T09:00:00.000Z']);
  });

  it('a recurring schedule (defineSchedule) ticks on such a day only, in its time zone too', () => {
    const def = defineSchedule('first-mondays', { cron: FIRST_MONDAYS_9, type: 't' });
    expect(nextTick(def, new Date('2026-12-01T00:00:00Z'))?.toISOString()).toBe('2027-02-01T09:00:00.000Z');
    // The pass on the Monday 2026-12-07 (not a 1st) after a tick handled on 2026-11-30 has nothing due.
    const state = { lastTick: new Date('2026-11-30T12:00:00Z'), resumedAt: null };
    expect(planTicks(def, state, new Date('2026-12-07T09:00:30Z')).enqueue).toEqual([]);
    expect(planTicks(def, state, new Date('2027-02-01T09:00:30Z')).enqueue).toEqual([new Date('2027-02-01T09:00:00Z')]);
    const paris = defineSchedule('paris', { cron: FIRST_MONDAYS_9, type: 't', timeZone: 'Europe/Paris' });
    expect(nextTick(paris, new Date('2026-12-01T00:00:00Z'))?.toISOString()).toBe('2027-02-01T08:00:00.000Z');
  });

  it("a transfer's schedule and keyCompareSchedule are due on such a day only", () => {
    const hourly = '0 0 * * * *'; // the transfer timer: a comparison is due at the first tick after an occurrence
    // A Monday that is not the 1st, and a 1st that is not a Monday: not due.
    expect(keyCompareDue(FIRST_MONDAYS_9, hourly, new Date('2026-12-07T09:00:00.200Z'))).toBe(false);
    expect(keyCompareDue(FIRST_MONDAYS_9, hourly, new Date('2026-12-01T09:00:00.200Z'))).toBe(false);
    expect(keyCompareDue(FIRST_MONDAYS_9, hourly, new Date('2027-02-01T09:00:00.200Z'))).toBe(true);
    expect(scheduleDue(FIRST_MONDAYS_9, '2026-11-30T12:00:00Z', new Date('2026-12-07T10:00:00Z'))).toBe(false);
    expect(scheduleDue(FIRST_MONDAYS_9, '2026-11-30T12:00:00Z', new Date('2027-02-01T10:00:00Z'))).toBe(true);
  });

  it("the local host's timer schedules its next occurrence on such a day", async () => {
    const settings = parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused',
      KEEL_TRANSFER_SCHEDULE: FIRST_MONDAYS_9,
    });
    const nexts: string[] = [];
    const host = await startLocalHost({
      definitions: [
        {
          name: 'transferTimer',
          kind: 'timer',
          scheduleSetting: 'KEEL_TRANSFER_SCHEDULE',
          runOnStartup: true, // one run now, whose scheduleStatus.next is the schedule's next occurrence
          handler: async (timer) => void nexts.push(timer.scheduleStatus.next),
        },
      ],
      settings,
      hostConfig: hostConfigFrom({ version: '2.0' }),
      queueService: QueueServiceClient.fromConnectionString('UseDevelopmentStorage=true'), // unused: no locks, no queues
      timerLocks: false,
      opsKey: 'k'.repeat(32),
      port: 0,
      log: () => undefined,
    });
    try {
      for (let i = 0; i < 100 && nexts.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    } finally {
      await host.stop();
    }
    expect(nexts).toHaveLength(1);
    const next = new Date(nexts[0]!); // the host's local time zone, as Azure's WEBSITE_TIME_ZONE default (UTC)
    expect([next.getDate(), next.getDay(), next.getHours()]).toEqual([1, 1, 9]);
  });
});

describe('NCRONTAB grammar: what Azure refuses is refused everywhere, naming the field', () => {
  // Quartz and Vixie extensions a permissive parser (croner, used before) takes and NCrontab does not (the Functions host would not start the timer).
  const refused: [string, string][] = [
    ['0 0 0 L * *', 'day field'],
    ['0 0 0 15W * *', 'day field'],
    ['0 0 0 ? * *', 'day field'],
    ['0 0 0 * * 5#2', 'day-of-week field'],
    ['0 0 0 * * 5L', 'day-of-week field'],
    ['0 0 0 * * 7', 'day-of-week field'],
    ['0 0 0 * * 0-7', 'day-of-week field'],
    ['60 * * * * *', 'second field'],
    ['0 0 24 * * *', 'hour field'],
    ['0 0 0 * 13 *', 'month field'],
    ['0 0 0 * * * 2026', '7 fields'],
    ['0 0 * * *', '5 fields'],
  ];

  it('the parser', () => {
    for (const [cron, field] of refused) expect(() => ncrontab(cron), cron).toThrow(field);
    // What NCrontab takes: names by prefix in any case, reversed ranges (swapped), n/step, lists.
    const ok = ['0 0 9 * * Mon-Fri', '0 0 9 * jan,JUL sun', '0 0 0 * * 5-2', '5/20 * * * * *', '0 0 0 1,15 * *'];
    for (const cron of ok) expect(() => ncrontab(cron), cron).not.toThrow();
    expect(ncrontab('5/20 * * * * *', 'UTC').nextN(3, new Date('2026-12-01T00:00:00Z'))).toEqual(
      ['05', '25', '45'].map((s) => new Date(`2026-12-01T00:00:${s}Z`)),
    );
    expect(ncrontab('0 0 0 30 2 *', 'UTC').next(new Date('2026-12-01T00:00:00Z'))).toBeNull();
  });

  it('defineSchedule', () => {
    for (const [cron, field] of refused)
      expect(() => defineSchedule('s', { cron, type: 't' }), cron).toThrow(
        new RegExp(`schedule "s": cron .*${field.replace(/[-]/g, '\\-')}`),
      );
  });

  it('the timer settings, naming the setting', () => {
    for (const [cron, field] of refused) {
      const settings = () =>
        parseSettings({ KEEL_PG_URL: 'postgres://u@127.0.0.1:1/d', KEEL_MAINTENANCE_SCHEDULE: cron });
      expect(settings, cron).toThrow('KEEL_MAINTENANCE_SCHEDULE');
      expect(settings, cron).toThrow(field);
    }
  });

  it("a transfer's schedule and keyCompareSchedule, naming the option", () => {
    const transfer = (extra: Record<string, unknown>) => () =>
      parseTransfers(
        [
          {
            name: 'orders',
            source: { engine: 'postgres', connectionSetting: 'S', table: 'public.orders' },
            target: { engine: 'postgres', connectionSetting: 'T', table: 'public.orders' },
            keyColumns: ['id'],
            boundary: { kind: 'key', column: 'id' },
            columns: [{ source: 'id', target: 'id' }],
            keyCompare: 'report',
            ...extra,
          },
        ],
        transferEngineRules(),
      );
    expect(transfer({ schedule: FIRST_MONDAYS_9, keyCompareSchedule: FIRST_MONDAYS_9 })).not.toThrow();
    for (const [cron, field] of refused) {
      expect(transfer({ schedule: cron }), cron).toThrow(/schedule/);
      expect(transfer({ schedule: cron }), cron).toThrow(field);
      expect(transfer({ keyCompareSchedule: cron }), cron).toThrow(/keyCompareSchedule/);
    }
  });
});

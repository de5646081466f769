// NCRONTAB, as the Functions host reads a timer schedule: a day matches only when both the day-of-month and the
// day-of-week fields match it (NCrontab's CrontabSchedule), not either one as in Vixie cron (croner's default). The
// local host's timers and the schedules the docs call NCRONTAB (a transfer's schedule and keyCompareSchedule) follow
// the host's rule. 2026-12-01 is a Tuesday, 2026-12-07 a Monday, 2027-02-01 a Monday.
import { QueueServiceClient } from '@azure/storage-queue';
import { describe, expect, it } from 'vitest';
import { startLocalHost } from '../../dev/localHost.js';
import { ncrontab } from '../../shared/app/ncrontab.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { keyCompareDue, scheduleDue } from '../../shared/app/transferSchedule.js';
import { parseSettings } from '../../shared/config/settings.js';

const FIRST_MONDAYS_9 = '0 0 9 1 * 1'; // 09:00 on a 1st that is a Monday

describe('NCRONTAB day matching', () => {
  it('a day must match both the day of month and the day of week', () => {
    const runs = ncrontab(FIRST_MONDAYS_9, { paused: true, timezone: 'UTC' })
      .nextRuns(2, new Date('2026-12-01T00:00:00Z'))
      .map((d) => d.toISOString());
    expect(runs).toEqual(['2027-02-01T09:00:00.000Z', '2027-03-01T09:00:00.000Z']);
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

// The Functions host's timer schedules are NCRONTAB (six fields, seconds first), which matches a day only when both
// the day-of-month and the day-of-week fields match it ("0 0 9 1 * 1": 09:00 on a 1st that is a Monday). croner
// defaults to the Vixie-cron rule instead (either field: every 1st and every Monday), so every schedule the docs
// call NCRONTAB — the timer functions on the local host, a transfer's `schedule` and `keyCompareSchedule` — is read
// through this one constructor.
import { Cron, type CronCallback, type CronOptions } from 'croner';

export function ncrontab(expression: string, opts?: Omit<CronOptions, 'mode' | 'domAndDow' | 'legacyMode'>): Cron;
export function ncrontab(
  expression: string,
  opts: Omit<CronOptions, 'mode' | 'domAndDow' | 'legacyMode'>,
  fn: CronCallback,
): Cron;
export function ncrontab(
  expression: string,
  opts: Omit<CronOptions, 'mode' | 'domAndDow' | 'legacyMode'> = {},
  fn?: CronCallback,
): Cron {
  const options: CronOptions = { ...opts, mode: '6-part', domAndDow: true };
  return fn ? new Cron(expression, options, fn) : new Cron(expression, options);
}
